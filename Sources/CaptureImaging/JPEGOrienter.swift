import CaptureBackend
internal import CV4L2Shim

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
/// The result has no APP segments (the caller writes its EXIF).
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
    package func orient(_ jpeg: UnsafeRawBufferPointer, _ orientation: EXIFOrientation, quality: Int) throws(CaptureError) -> UnsafeRawBufferPointer {
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
        return try turnPlanes(src, jpeg.count, width: width, height: height, sub: sub, turnedSub: turnedSub!,
                              orientation: orientation, quality: quality, into: out)
    }

    /// Decodes to YUV planes, turns each, encodes again at `quality`.
    private func turnPlanes(_ src: UnsafePointer<UInt8>, _ count: Int, width: Int32, height: Int32, sub: Int32, turnedSub: Int32,
                            orientation: EXIFOrientation, quality: Int,
                            into out: UnsafeMutablePointer<UInt8>) throws(CaptureError) -> UnsafeRawBufferPointer {
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
                        tjDecompressToYUVPlanes(tj, src, UInt(count), p.baseAddress, width, st.baseAddress, height,
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
                    Self.turn(sPtr[i]!, stride: Int(srcStride[i]), width: rw, height: rh,
                              into: dPtr[i]!, stride: Int(dstStride[i]), orientation)
                }
                var constPtr: [UnsafePointer<UInt8>?] = dPtr.map { $0.map { UnsafePointer($0) } }
                let encoded = constPtr.withUnsafeMutableBufferPointer { p in
                    dstStride.withUnsafeMutableBufferPointer { st in
                        tjCompressFromYUVPlanes(cj, p.baseAddress, tw, st.baseAddress, th, turnedSub, &dst, &size,
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
    package static func turn(_ src: UnsafePointer<UInt8>, stride ss: Int, width w: Int, height h: Int,
                             into dst: UnsafeMutablePointer<UInt8>, stride ds: Int, _ o: EXIFOrientation) {
        let (dw, dh) = o.swapsDimensions ? (h, w) : (w, h)
        for y in 0..<dh {
            let row = dst + y * ds
            switch o {
            case .up: for x in 0..<dw { row[x] = src[y * ss + x] }
            case .upMirrored: for x in 0..<dw { row[x] = src[y * ss + (w - 1 - x)] }
            case .down: for x in 0..<dw { row[x] = src[(h - 1 - y) * ss + (w - 1 - x)] }
            case .downMirrored: for x in 0..<dw { row[x] = src[(h - 1 - y) * ss + x] }
            case .leftMirrored: for x in 0..<dw { row[x] = src[x * ss + y] }
            case .right: for x in 0..<dw { row[x] = src[(h - 1 - x) * ss + y] }
            case .rightMirrored: for x in 0..<dw { row[x] = src[(h - 1 - x) * ss + (w - 1 - y)] }
            case .left: for x in 0..<dw { row[x] = src[x * ss + (w - 1 - y)] }
            }
        }
    }
}
