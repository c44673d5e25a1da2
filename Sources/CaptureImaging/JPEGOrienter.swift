import CaptureBackend
internal import CTurboJPEG

extension EXIFOrientation {
    /// Whether showing the picture this way swaps its width and height (5-8: a quarter turn).
    public var swapsDimensions: Bool { rawValue >= 5 }
}

/// Turns a JPEG's pixels the way an EXIF orientation says, so that it shows upright with
/// orientation 1 in any viewer.
///
/// Where the JPEG's size allows it the turn is TurboJPEG's lossless transform (`tjTransform`,
/// DCT coefficients moved, nothing re-encoded): always for a transpose (orientation 5), and for
/// the other turns when the edges the turn moves to the top or left are whole MCUs (8 or 16
/// pixels, by subsampling; e.g. 1280x720 4:2:2 for every turn). Otherwise (1366x768 mirrored or
/// turned 180°/270°, 1920x1080 4:2:0 turned 90°) a lossless turn would have to drop the partial
/// MCU at that edge (`TJXOPT_TRIM`, a smaller picture); instead the image is decoded to its YUV
/// planes, the planes turned, and encoded again at `quality`: the full size, one more encode.
/// The result has no APP segments (the caller writes its EXIF). `encodeTurned` does the same
/// for a raw frame before its encode, which costs no more than the encode itself.
///
/// One per thread: not safe to use from two threads at once. Buffers are kept from call to call.
package final class JPEGOrienter {
    private var transformer: tjhandle?
    private var compressor: tjhandle?
    private var output: UnsafeMutablePointer<UInt8>?
    private var outputCapacity = 0
    private var planes: [UInt8] = []
    private var turnedPlanes: [UInt8] = []
    /// Whether the last `orient` was lossless (for tests and the bench).
    package private(set) var lastWasLossless = false

    package init() {}

    deinit {
        if let transformer { tjDestroy(transformer) }
        if let compressor { tjDestroy(compressor) }
        if let output { tjFree(output) }
    }

    private static let flags = Int32(TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS | TJFLAG_NOREALLOC)

    private func failure(_ handle: tjhandle, _ call: String) -> CaptureError {
        let message = String(cString: tjGetErrorStr2(handle))
        let kind = tjGetErrorCode(handle) == Int32(TJERR_WARNING.rawValue) ? "damaged" : "unreadable"
        return CaptureError(.corruptFrame, "JPEG \(kind): \(message)", operation: call)
    }

    /// MCU width and height of a `TJSAMP_*` value.
    private static func mcu(_ sub: Int32) -> (w: Int, h: Int) {
        switch UInt32(sub) {
        case TJSAMP_422.rawValue: (16, 8)
        case TJSAMP_420.rawValue: (16, 16)
        case TJSAMP_440.rawValue: (8, 16)
        case TJSAMP_411.rawValue: (32, 8)
        default: (8, 8)
        }
    }

    /// The subsampling of the picture turned a quarter (4:2:2 becomes 4:4:0); nil for 4:1:1,
    /// which has no turned form.
    private static func transposed(_ sub: Int32) -> Int32? {
        switch UInt32(sub) {
        case TJSAMP_422.rawValue: Int32(TJSAMP_440.rawValue)
        case TJSAMP_440.rawValue: Int32(TJSAMP_422.rawValue)
        case TJSAMP_411.rawValue: nil
        default: sub
        }
    }

    private static func operation(_ o: EXIFOrientation) -> TJXOP {
        switch o {
        case .up: TJXOP_NONE
        case .upMirrored: TJXOP_HFLIP
        case .down: TJXOP_ROT180
        case .downMirrored: TJXOP_VFLIP
        case .leftMirrored: TJXOP_TRANSPOSE
        case .right: TJXOP_ROT90
        case .rightMirrored: TJXOP_TRANSVERSE
        case .left: TJXOP_ROT270
        }
    }

    /// Whether `o` can be done losslessly on a `width`x`height` image with MCUs of `mcu`.
    package static func isPerfect(_ o: EXIFOrientation, width: Int, height: Int, mcu: (w: Int, h: Int)) -> Bool {
        let wholeW = width % mcu.w == 0, wholeH = height % mcu.h == 0
        switch o {
        case .up, .leftMirrored: return true
        case .upMirrored, .left: return wholeW
        case .downMirrored, .right: return wholeH
        case .down, .rightMirrored: return wholeW && wholeH
        }
    }

    private func reserveOutput(_ bytes: Int) {
        guard bytes > outputCapacity else { return }
        if let output { tjFree(output) }
        output = tjAlloc(Int32(bytes))
        outputCapacity = output == nil ? 0 : bytes
    }

    /// `jpeg` turned as `orientation` says, borrowed until the next call. Throws
    /// `.corruptFrame` for a JPEG TurboJPEG cannot read.
    package func orient(_ jpeg: UnsafeRawBufferPointer, _ orientation: EXIFOrientation, quality: Int) throws(CaptureError)
        -> UnsafeRawBufferPointer
    {
        guard let src = jpeg.baseAddress?.assumingMemoryBound(to: UInt8.self), jpeg.count >= 4 else {
            throw CaptureError(.corruptFrame, "JPEG: too short")
        }
        if transformer == nil { transformer = tjInitTransform() }
        guard let tj = transformer else { throw CaptureError(.ioError, "cannot create a TurboJPEG transformer") }
        var width: Int32 = 0, height: Int32 = 0, sub: Int32 = 0, colorspace: Int32 = 0
        guard tjDecompressHeader3(tj, src, UInt(jpeg.count), &width, &height, &sub, &colorspace) == 0 else {
            throw failure(tj, "tjDecompressHeader3")
        }
        guard width > 0, height > 0, Int(width) * Int(height) <= 8192 * 8192 else {
            throw CaptureError(.corruptFrame, "JPEG: \(width)x\(height) is not a size a camera makes")
        }
        let (w, h) = (Int(width), Int(height))
        let swaps = orientation.swapsDimensions
        // Worst case for any subsampling at the turned size (4:4:4), so the buffer never grows inside TurboJPEG.
        reserveOutput(Int(tjBufSize(swaps ? height : width, swaps ? width : height, Int32(TJSAMP_444.rawValue))))
        guard let out = output else { throw CaptureError(.ioError, "out of memory for a \(w)x\(h) JPEG") }
        let perfect = Self.isPerfect(orientation, width: w, height: h, mcu: Self.mcu(sub))
        let turnedSub = swaps ? Self.transposed(sub) : sub
        if perfect || turnedSub == nil || sub < 0 {
            var t = tjtransform()
            t.op = Int32(Self.operation(orientation).rawValue)
            // 4:1:1 (no turned planes) or an unknown layout: trim the partial MCUs, the only way left.
            t.options = Int32(TJXOPT_COPYNONE) | (perfect ? Int32(TJXOPT_PERFECT) : Int32(TJXOPT_TRIM))
            var dst: UnsafeMutablePointer<UInt8>? = out
            var size = UInt(outputCapacity)
            guard tjTransform(tj, src, UInt(jpeg.count), 1, &dst, &size, &t, Self.flags) == 0 else {
                throw failure(tj, "tjTransform")
            }
            lastWasLossless = perfect
            return UnsafeRawBufferPointer(start: dst, count: Int(size))
        }
        return try turnPlanes(
            src, jpeg.count, width: width, height: height, sub: sub, turnedSub: turnedSub!,
            orientation: orientation, quality: quality, into: out)
    }

    /// Decodes to YUV planes, turns each, encodes again at `quality`.
    private func turnPlanes(
        _ src: UnsafePointer<UInt8>, _ count: Int, width: Int32, height: Int32, sub: Int32, turnedSub: Int32,
        orientation: EXIFOrientation, quality: Int,
        into out: UnsafeMutablePointer<UInt8>
    ) throws(CaptureError) -> UnsafeRawBufferPointer {
        let tj = transformer!
        if compressor == nil { compressor = tjInitCompress() }
        guard let cj = compressor else { throw CaptureError(.ioError, "cannot create a TurboJPEG compressor") }
        let swaps = orientation.swapsDimensions
        let (tw, th) = swaps ? (height, width) : (width, height)
        let count0 = sub == Int32(TJSAMP_GRAY.rawValue) ? 1 : 3
        var srcStride: [Int32] = [0, 0, 0], dstStride: [Int32] = [0, 0, 0]
        var srcSize = [0, 0, 0], dstSize = [0, 0, 0]
        for i in 0..<count0 {
            srcStride[i] = tjPlaneWidth(Int32(i), width, sub)
            srcSize[i] = Int(srcStride[i]) * Int(tjPlaneHeight(Int32(i), height, sub))
            dstStride[i] = tjPlaneWidth(Int32(i), tw, turnedSub)
            dstSize[i] = Int(dstStride[i]) * Int(tjPlaneHeight(Int32(i), th, turnedSub))
        }
        let srcTotal = srcSize.reduce(0, +), dstTotal = dstSize.reduce(0, +)
        if planes.count < srcTotal { planes = [UInt8](repeating: 0, count: srcTotal) }
        if turnedPlanes.count < dstTotal { turnedPlanes = [UInt8](repeating: 0, count: dstTotal) }
        var size = UInt(outputCapacity)
        var dst: UnsafeMutablePointer<UInt8>? = out
        let status: Result<Void, CaptureError> = planes.withUnsafeMutableBufferPointer { sp in
            turnedPlanes.withUnsafeMutableBufferPointer { dp in
                let s0 = sp.baseAddress!, d0 = dp.baseAddress!
                var sPtr: [UnsafeMutablePointer<UInt8>?] = [s0, s0 + srcSize[0], s0 + srcSize[0] + srcSize[1]]
                let dPtr: [UnsafeMutablePointer<UInt8>?] = [d0, d0 + dstSize[0], d0 + dstSize[0] + dstSize[1]]
                let decoded = sPtr.withUnsafeMutableBufferPointer { p in
                    srcStride.withUnsafeMutableBufferPointer { st in
                        tjDecompressToYUVPlanes(
                            tj, src, UInt(count), p.baseAddress, width, st.baseAddress, height,
                            Self.flags & ~Int32(TJFLAG_NOREALLOC))
                    }
                }
                guard decoded == 0 else { return .failure(failure(tj, "tjDecompressToYUVPlanes")) }
                // Real extents of each plane (luma: the picture; chroma: rounded up by the factor).
                let (mw, mh) = Self.mcu(sub)
                let hs = Int(mw) / 8, vs = Int(mh) / 8
                for i in 0..<count0 {
                    let rw = i == 0 ? Int(width) : (Int(width) + hs - 1) / hs
                    let rh = i == 0 ? Int(height) : (Int(height) + vs - 1) / vs
                    Self.turn(
                        UnsafePointer(sPtr[i]!), stride: Int(srcStride[i]), width: rw, height: rh,
                        into: dPtr[i]!, stride: Int(dstStride[i]), orientation)
                }
                var constPtr: [UnsafePointer<UInt8>?] = dPtr.map { $0.map { UnsafePointer($0) } }
                let encoded = constPtr.withUnsafeMutableBufferPointer { p in
                    dstStride.withUnsafeMutableBufferPointer { st in
                        tjCompressFromYUVPlanes(
                            cj, p.baseAddress, tw, st.baseAddress, th, turnedSub, &dst, &size,
                            Int32(max(1, min(100, quality))), Int32(TJFLAG_NOREALLOC))
                    }
                }
                guard encoded == 0 else { return .failure(failure(cj, "tjCompressFromYUVPlanes")) }
                return .success(())
            }
        }
        try status.get()
        lastWasLossless = false
        return UnsafeRawBufferPointer(start: dst, count: Int(size))
    }

    /// Writes the `width`x`height` plane at `src` turned as `o` says into `dst`.
    package static func turn(
        _ src: UnsafePointer<UInt8>, stride ss: Int, width w: Int, height h: Int,
        into dst: UnsafeMutablePointer<UInt8>, stride ds: Int, _ o: EXIFOrientation
    ) {
        turn(src, stride: ss, step: 1, width: w, height: h, into: dst, stride: ds, o, map: nil)
    }

    /// The same for samples `step` bytes apart (packed and semi-planar YUV), each passed through
    /// `map` (a 256-entry table: the limited-to-full range expansion) when given.
    static func turn(
        _ src: UnsafePointer<UInt8>, stride ss: Int, step: Int, width w: Int, height h: Int,
        into dst: UnsafeMutablePointer<UInt8>, stride ds: Int, _ o: EXIFOrientation,
        map: UnsafePointer<UInt8>?
    ) {
        let (dw, dh) = o.swapsDimensions ? (h, w) : (w, h)
        // Where dest (0, y) and the steps along a dest row and down the dest rows come from.
        let rowStep: Int, colStep: Int, origin: Int
        switch o {
        case .up: (origin, colStep, rowStep) = (0, step, ss)
        case .upMirrored: (origin, colStep, rowStep) = ((w - 1) * step, -step, ss)
        case .down: (origin, colStep, rowStep) = ((h - 1) * ss + (w - 1) * step, -step, -ss)
        case .downMirrored: (origin, colStep, rowStep) = ((h - 1) * ss, step, -ss)
        case .leftMirrored: (origin, colStep, rowStep) = (0, ss, step)
        case .right: (origin, colStep, rowStep) = ((h - 1) * ss, -ss, step)
        case .rightMirrored: (origin, colStep, rowStep) = ((h - 1) * ss + (w - 1) * step, -ss, -step)
        case .left: (origin, colStep, rowStep) = ((w - 1) * step, ss, -step)
        }
        for y in 0..<dh {
            let row = dst + y * ds
            var at = src + origin + y * rowStep
            if let map {
                for x in 0..<dw { row[x] = map[Int(at.pointee)]; at += colStep }
            } else {
                for x in 0..<dw { row[x] = at.pointee; at += colStep }
            }
        }
    }

    // Limited (video) range to JFIF's full range, as the encoder expands it.
    private static let lumaExpansion: [UInt8] = (0..<256).map { v in UInt8(max(0, min(255, ((Double(v) - 16) * 255 / 219).rounded()))) }
    private static let chromaExpansion: [UInt8] = (0..<256).map { v in
        UInt8(max(0, min(255, ((Double(v) - 128) * 255 / 224 + 128).rounded())))
    }

    /// A raw YUV or grey frame encoded already turned: its planes turned (and expanded to full
    /// range) straight into TurboJPEG's planar input, one encode in the frame's own subsampling
    /// (4:2:2 turned a quarter is 4:4:0). Borrowed until the next call. Nil for formats it does
    /// not read (RGB): encode, then `orient`.
    package func encodeTurned(_ image: ImageBuffer, _ o: EXIFOrientation, quality: Int) throws(CaptureError) -> UnsafeRawBufferPointer? {
        let layout = try ImageLayout(image)
        let w = layout.width, h = layout.height
        // (pointer, stride, step) of Y, Cb, Cr in the source.
        var src: [(UnsafePointer<UInt8>, Int, Int)] = []
        func at(_ p: UnsafeRawPointer?, _ offset: Int) -> UnsafePointer<UInt8> { (p! + offset).assumingMemoryBound(to: UInt8.self) }
        switch layout.kind {
        case .packed422(let y0, _, let cb, let cr):
            src = [(at(layout.y, y0), layout.yStride, 2), (at(layout.y, cb), layout.yStride, 4), (at(layout.y, cr), layout.yStride, 4)]
        case .semiPlanar(let cbFirst):
            src = [
                (at(layout.y, 0), layout.yStride, 1), (at(layout.cb, cbFirst ? 0 : 1), layout.cbStride, 2),
                (at(layout.cb, cbFirst ? 1 : 0), layout.cbStride, 2),
            ]
        case .planar:
            src = [(at(layout.y, 0), layout.yStride, 1), (at(layout.cb, 0), layout.cbStride, 1), (at(layout.cr, 0), layout.crStride, 1)]
        case .grey:
            src = [(at(layout.y, 0), layout.yStride, 1)]
        case .rgb24, .bgr24, .bgrx32:
            return nil
        }
        let sub: Int32
        switch layout.nativeSubsampling {
        case .s420: sub = Int32(TJSAMP_420.rawValue)
        case .s422: sub = Int32(TJSAMP_422.rawValue)
        case .grey: sub = Int32(TJSAMP_GRAY.rawValue)
        default: return nil
        }
        let swaps = o.swapsDimensions
        let turnedSub = swaps ? Self.transposed(sub)! : sub
        let (tw, th) = swaps ? (Int32(h), Int32(w)) : (Int32(w), Int32(h))
        if compressor == nil { compressor = tjInitCompress() }
        guard let cj = compressor else { throw CaptureError(.ioError, "cannot create a TurboJPEG compressor") }
        reserveOutput(Int(tjBufSize(tw, th, Int32(TJSAMP_444.rawValue))))
        guard let out = output else { throw CaptureError(.ioError, "out of memory for a \(w)x\(h) JPEG") }
        var strides: [Int32] = [0, 0, 0]
        var sizes = [0, 0, 0]
        for i in 0..<src.count {
            strides[i] = tjPlaneWidth(Int32(i), tw, turnedSub)
            sizes[i] = Int(strides[i]) * Int(tjPlaneHeight(Int32(i), th, turnedSub))
        }
        let total = sizes.reduce(0, +)
        if turnedPlanes.count < total { turnedPlanes = [UInt8](repeating: 0, count: total) }
        let expand = layout.colorRange == .limited
        var size = UInt(outputCapacity)
        var dst: UnsafeMutablePointer<UInt8>? = out
        let status: Int32 = turnedPlanes.withUnsafeMutableBufferPointer { dp in
            Self.lumaExpansion.withUnsafeBufferPointer { luma in
                Self.chromaExpansion.withUnsafeBufferPointer { chroma in
                    let d0 = dp.baseAddress!
                    let planes: [UnsafeMutablePointer<UInt8>] = [d0, d0 + sizes[0], d0 + sizes[0] + sizes[1]]
                    for i in 0..<src.count {
                        let (p, stride, step) = src[i]
                        Self.turn(
                            p, stride: stride, step: step, width: i == 0 ? w : layout.chromaWidth,
                            height: i == 0 ? h : layout.chromaHeight, into: planes[i], stride: Int(strides[i]), o,
                            map: expand ? (i == 0 ? luma.baseAddress : chroma.baseAddress) : nil)
                    }
                    var input: [UnsafePointer<UInt8>?] = planes.map { UnsafePointer($0) }
                    return input.withUnsafeMutableBufferPointer { ip in
                        strides.withUnsafeMutableBufferPointer { st in
                            tjCompressFromYUVPlanes(
                                cj, ip.baseAddress, tw, st.baseAddress, th, turnedSub, &dst, &size,
                                Int32(max(1, min(100, quality))), Int32(TJFLAG_NOREALLOC))
                        }
                    }
                }
            }
        }
        guard status == 0 else { throw failure(cj, "tjCompressFromYUVPlanes") }
        lastWasLossless = false
        return UnsafeRawBufferPointer(start: dst, count: Int(size))
    }
}
