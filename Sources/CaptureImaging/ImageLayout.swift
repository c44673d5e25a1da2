import CaptureBackend
internal import CJPEGShim

/// Where each colour plane of an uncompressed image lies, derived from the V4L2 format rules and
/// checked against the bytes the planes really hold. Everything that reads pixels (the JPEG
/// encoder, the colour converter) goes through this, so no reader trusts a size it did not check.
package struct ImageLayout {
    package enum Kind: Equatable {
        /// 4:2:2 packed; byte offsets of Y0, Y1, Cb, Cr in each 4-byte group.
        case packed422(y0: Int, y1: Int, cb: Int, cr: Int)
        /// Y plane and one interleaved chroma plane; `cbFirst` false for NV21/NV61.
        case semiPlanar(cbFirst: Bool)
        /// Y, Cb, Cr planes.
        case planar
        case grey
        case rgb24, bgr24, bgrx32
    }

    package var kind: Kind
    package var width: Int
    package var height: Int
    /// Whether chroma has half the rows of luma (4:2:0).
    package var chromaHalfHeight: Bool
    package var colorRange: ColorRange
    // Planes as checked: for packed/RGB/grey only `y` is used; for semi-planar `y` and `cb`.
    package var y: UnsafeRawPointer?
    package var yStride: Int
    package var cb: UnsafeRawPointer?
    package var cbStride: Int
    package var cr: UnsafeRawPointer?
    package var crStride: Int

    /// Chroma samples per row (always half the luma width, rounded up, for the YUV formats here).
    package var chromaWidth: Int { (width + 1) / 2 }
    package var chromaHeight: Int { chromaHalfHeight ? (height + 1) / 2 : height }

    package var isYUV: Bool {
        switch kind {
        case .packed422, .semiPlanar, .planar: true
        default: false
        }
    }

    /// The chroma layout the source has, the natural JPEG subsampling for it.
    package var nativeSubsampling: ChromaSubsampling {
        switch kind {
        case .packed422: .s422
        case .semiPlanar, .planar: chromaHalfHeight ? .s420 : .s422
        case .grey: .grey
        case .rgb24, .bgr24, .bgrx32: .s444
        }
    }

    /// The largest side a frame may have: JPEG's limit, and far beyond any camera.
    package static let maximumDimension = 65500

    /// The formats this layout understands.
    package static func supports(_ format: PixelFormat) -> Bool {
        (try? kind(of: format)) != nil
    }

    /// The subsampling that keeps a format's own chroma resolution.
    package static func nativeSubsampling(of format: PixelFormat) throws(CaptureError) -> ChromaSubsampling {
        let (kind, half) = try kind(of: format)
        switch kind {
        case .packed422: return .s422
        case .semiPlanar, .planar: return half ? .s420 : .s422
        case .grey: return .grey
        case .rgb24, .bgr24, .bgrx32: return .s444
        }
    }

    private static func kind(of format: PixelFormat) throws(CaptureError) -> (Kind, halfHeight: Bool) {
        switch format {
        case .yuyv: (.packed422(y0: 0, y1: 2, cb: 1, cr: 3), false)
        case .uyvy: (.packed422(y0: 1, y1: 3, cb: 0, cr: 2), false)
        case .yvyu: (.packed422(y0: 0, y1: 2, cb: 3, cr: 1), false)
        case .vyuy: (.packed422(y0: 1, y1: 3, cb: 2, cr: 0), false)
        case .nv12, .nv12m: (.semiPlanar(cbFirst: true), true)
        case .nv21, .nv21m: (.semiPlanar(cbFirst: false), true)
        case .nv16: (.semiPlanar(cbFirst: true), false)
        case .nv61: (.semiPlanar(cbFirst: false), false)
        case .yuv420, .yvu420, .yuv420m: (.planar, true)
        case .yuv422p: (.planar, false)
        case .grey: (.grey, false)
        case .rgb24: (.rgb24, false)
        case .bgr24: (.bgr24, false)
        case .xbgr32, PixelFormatConverter.bgra32: (.bgrx32, false)
        default:
            throw CaptureError(.unsupportedFormat, "cannot read \(format) frames as uncompressed pixels")
        }
    }

    /// Derives and checks the layout of `image`. Throws `.invalidArgument` for sizes that make no
    /// sense (zero, huge, strides shorter than a row) and `.corruptFrame` when a plane holds
    /// fewer bytes than the format needs.
    package init(_ image: ImageBuffer) throws(CaptureError) {
        let (kind, half) = try Self.kind(of: image.pixelFormat)
        let w = image.width, h = image.height
        guard w > 0, h > 0, w <= Self.maximumDimension, h <= Self.maximumDimension else {
            throw CaptureError(.invalidArgument, "frame size \(w)x\(h) is out of range")
        }
        self.kind = kind
        width = w
        height = h
        chromaHalfHeight = half
        colorRange = image.colorRange
        y = nil; cb = nil; cr = nil
        yStride = 0; cbStride = 0; crStride = 0

        let p0 = image.plane0
        let cw = (w + 1) / 2
        let ch = half ? (h + 1) / 2 : h
        switch kind {
        case .packed422, .grey, .rgb24, .bgr24, .bgrx32:
            let bytesPerPixel: Int
            switch kind {
            case .grey: bytesPerPixel = 1
            case .rgb24, .bgr24: bytesPerPixel = 3
            case .bgrx32: bytesPerPixel = 4
            default: bytesPerPixel = 0
            }
            let rowBytes = bytesPerPixel == 0 ? cw * 4 : w * bytesPerPixel
            yStride = try Self.stride(p0.bytesPerLine, rowBytes: rowBytes, plane: 0)
            try Self.check(p0, offset: 0, rows: h, stride: yStride, rowBytes: rowBytes, plane: 0)
            y = p0.base
        case .semiPlanar:
            yStride = try Self.stride(p0.bytesPerLine, rowBytes: w, plane: 0)
            try Self.check(p0, offset: 0, rows: h, stride: yStride, rowBytes: w, plane: 0)
            y = p0.base
            if image.planeCount >= 2 {
                let p1 = image.plane1
                cbStride = try Self.stride(p1.bytesPerLine == 0 ? yStride : p1.bytesPerLine, rowBytes: 2 * cw, plane: 1)
                try Self.check(p1, offset: 0, rows: ch, stride: cbStride, rowBytes: 2 * cw, plane: 1)
                cb = p1.base
            } else {
                // V4L2: the chroma plane follows the luma plane with the same bytes per line.
                let offset = try Self.product(yStride, h)
                cbStride = max(yStride, 2 * cw)
                try Self.check(p0, offset: offset, rows: ch, stride: cbStride, rowBytes: 2 * cw, plane: 0)
                cb = p0.base.map { $0 + offset }
            }
        case .planar:
            yStride = try Self.stride(p0.bytesPerLine, rowBytes: w, plane: 0)
            try Self.check(p0, offset: 0, rows: h, stride: yStride, rowBytes: w, plane: 0)
            y = p0.base
            let crFirst = image.pixelFormat == .yvu420
            if image.planeCount >= 3 {
                let p1 = image.plane1, p2 = image.plane2
                let fallback = (yStride + 1) / 2
                cbStride = try Self.stride(p1.bytesPerLine == 0 ? fallback : p1.bytesPerLine, rowBytes: cw, plane: 1)
                crStride = try Self.stride(p2.bytesPerLine == 0 ? fallback : p2.bytesPerLine, rowBytes: cw, plane: 2)
                try Self.check(p1, offset: 0, rows: ch, stride: cbStride, rowBytes: cw, plane: 1)
                try Self.check(p2, offset: 0, rows: ch, stride: crStride, rowBytes: cw, plane: 2)
                cb = p1.base
                cr = p2.base
            } else {
                // V4L2: two chroma planes of half the bytes per line follow the luma plane.
                let cs = max((yStride + 1) / 2, cw)
                let first = try Self.product(yStride, h)
                let second = try Self.sum(first, try Self.product(cs, ch))
                try Self.check(p0, offset: first, rows: ch, stride: cs, rowBytes: cw, plane: 0)
                try Self.check(p0, offset: second, rows: ch, stride: cs, rowBytes: cw, plane: 0)
                let a = p0.base.map { $0 + first }, b = p0.base.map { $0 + second }
                cb = crFirst ? b : a
                cr = crFirst ? a : b
                cbStride = cs
                crStride = cs
            }
        }
    }

    private static func product(_ a: Int, _ b: Int) throws(CaptureError) -> Int {
        let (r, overflow) = a.multipliedReportingOverflow(by: b)
        guard !overflow else { throw CaptureError(.invalidArgument, "frame size overflows") }
        return r
    }

    private static func sum(_ a: Int, _ b: Int) throws(CaptureError) -> Int {
        let (r, overflow) = a.addingReportingOverflow(b)
        guard !overflow else { throw CaptureError(.invalidArgument, "frame size overflows") }
        return r
    }

    private static func stride(_ bytesPerLine: Int, rowBytes: Int, plane: Int) throws(CaptureError) -> Int {
        // 0 means "tightly packed", as V4L2 allows for some formats.
        let s = bytesPerLine == 0 ? rowBytes : bytesPerLine
        guard s >= rowBytes, s <= 1 << 30 else {
            throw CaptureError(.invalidArgument, "plane \(plane): \(bytesPerLine) bytes per line cannot hold a row of \(rowBytes) bytes")
        }
        return s
    }

    /// The last row only needs its pixels, not its padding (drivers differ on `bytesused`).
    private static func check(
        _ plane: PlaneView, offset: Int, rows: Int, stride: Int, rowBytes: Int,
        plane index: Int
    ) throws(CaptureError) {
        let need = try sum(offset, try sum(try product(stride, rows - 1), rowBytes))
        guard plane.count >= need, plane.count >= 0 else {
            throw CaptureError(.corruptFrame, "plane \(index) holds \(plane.count) bytes; the format needs \(need)")
        }
        guard plane.base != nil else {
            throw CaptureError(.corruptFrame, "plane \(index) has no memory")
        }
    }

    /// The description the C encoder takes.
    var shimImage: cv4l2_jpeg_image {
        var im = cv4l2_jpeg_image()
        im.width = Int32(width)
        im.height = Int32(height)
        im.limited_range = colorRange == .limited ? 1 : 0
        im.chroma_vshift = chromaHalfHeight ? 1 : 0
        im.plane0 = y?.assumingMemoryBound(to: UInt8.self)
        im.stride0 = yStride
        switch kind {
        case .packed422(let y0, let y1, let cbOffset, let crOffset):
            im.layout = Int32(CV4L2_JPEG_PACKED422.rawValue)
            im.y0_offset = Int32(y0); im.y1_offset = Int32(y1)
            im.cb_offset = Int32(cbOffset); im.cr_offset = Int32(crOffset)
        case .semiPlanar(let cbFirst):
            im.layout = Int32(CV4L2_JPEG_SEMIPLANAR.rawValue)
            im.plane1 = cb?.assumingMemoryBound(to: UInt8.self)
            im.stride1 = cbStride
            im.cb_offset = cbFirst ? 0 : 1
            im.cr_offset = cbFirst ? 1 : 0
        case .planar:
            im.layout = Int32(CV4L2_JPEG_PLANAR.rawValue)
            im.plane1 = cb?.assumingMemoryBound(to: UInt8.self)
            im.plane2 = cr?.assumingMemoryBound(to: UInt8.self)
            im.stride1 = cbStride
            im.stride2 = crStride
        case .grey:
            im.layout = Int32(CV4L2_JPEG_GREY.rawValue)
        case .rgb24:
            im.layout = Int32(CV4L2_JPEG_RGB24.rawValue)
            im.limited_range = 0
        case .bgr24:
            im.layout = Int32(CV4L2_JPEG_BGR24.rawValue)
            im.limited_range = 0
        case .bgrx32:
            im.layout = Int32(CV4L2_JPEG_BGRX32.rawValue)
            im.limited_range = 0
        }
        return im
    }
}
