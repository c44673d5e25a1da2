import CaptureBackend
import CaptureImaging

/// A video sample's pixels plane by plane, as `CVPixelBuffer` shows them: what
/// `CMSampleBufferGetImageBuffer` and `CVPixelBufferGetBaseAddressOfPlane` code needs.
///
/// Planes are the format's colour planes, wherever the driver put them (V4L2 delivers NV12 and
/// I420 in one buffer; here they are two and three planes): NV12/NV21/NV16/NV61 have luma and
/// interleaved chroma (plane 1's width counts chroma pairs, in the format's order); I420, YV12
/// and 4:2:2 planar have luma, Cb and Cr, in that order whatever the memory order (as
/// `kCVPixelFormatType_420YpCbCr8Planar`). Packed formats (YUYV, RGB, grey) are not planar:
/// ``planeCount`` is 0 there, as `CVPixelBufferGetPlaneCount`, and ``baseAddress`` and
/// ``bytesPerRow`` describe the picture.
///
/// No lock is needed (`CVPixelBufferLockBaseAddress` has nothing to do here): the addresses stay
/// valid, read-only, while this value or its sample buffer is held, since it holds the sample
/// and so the driver buffer. Any thread.
public struct PixelBuffer: @unchecked Sendable {
    /// One colour plane.
    public struct Plane: Sendable, Hashable {
        /// Samples per row (chroma pairs in an interleaved chroma plane).
        public let width: Int
        public let height: Int
        public let bytesPerRow: Int
        /// Offset of the plane's first byte from ``PixelBuffer/baseAddress``.
        public let offset: Int
        /// Bytes from the first row to the end of the last row's samples.
        public let byteCount: Int
    }

    // Keeps the driver buffer out for as long as the addresses are used.
    private let sample: SampleBuffer
    private let base: UnsafeRawPointer
    public let pixelFormat: PixelFormat
    public let width: Int
    public let height: Int
    public let colorRange: ColorRange
    /// The colour planes (one entry, the whole picture, for a packed format).
    public let planes: [Plane]
    /// Whether the format has separate colour planes (`CVPixelBufferIsPlanar`).
    public let isPlanar: Bool

    /// The planes of `sample`'s picture, checked against the bytes the driver delivered; nil for
    /// audio, compressed frames (MJPEG, JPEG stills) and frames too short for their format.
    init?(_ sample: SampleBuffer) {
        guard let image = sample.videoImage, !image.pixelFormat.isCompressed, let base0 = image.plane0.base else { return nil }
        self.sample = sample
        base = base0
        pixelFormat = image.pixelFormat
        width = image.width
        height = image.height
        colorRange = image.colorRange
        func plane(_ p: UnsafeRawPointer?, width: Int, height: Int, stride: Int, rowBytes: Int) -> Plane? {
            guard let p else { return nil }
            return Plane(
                width: width, height: height, bytesPerRow: stride, offset: p - base0,
                byteCount: stride * (height - 1) + rowBytes)
        }
        guard let layout = try? ImageLayout(image) else {
            // A format the imaging layer does not read: the first memory plane as it is.
            isPlanar = false
            planes = [Plane(width: width, height: height, bytesPerRow: image.plane0.bytesPerLine, offset: 0, byteCount: image.plane0.count)]
            return
        }
        let w = layout.width, h = layout.height, cw = layout.chromaWidth, ch = layout.chromaHeight
        var list: [Plane?]
        switch layout.kind {
        case .semiPlanar:
            list = [
                plane(layout.y, width: w, height: h, stride: layout.yStride, rowBytes: w),
                plane(layout.cb, width: cw, height: ch, stride: layout.cbStride, rowBytes: 2 * cw),
            ]
        case .planar:
            list = [
                plane(layout.y, width: w, height: h, stride: layout.yStride, rowBytes: w),
                plane(layout.cb, width: cw, height: ch, stride: layout.cbStride, rowBytes: cw),
                plane(layout.cr, width: cw, height: ch, stride: layout.crStride, rowBytes: cw),
            ]
        case .packed422:
            list = [plane(layout.y, width: w, height: h, stride: layout.yStride, rowBytes: 4 * cw)]
        case .grey:
            list = [plane(layout.y, width: w, height: h, stride: layout.yStride, rowBytes: w)]
        case .rgb24, .bgr24:
            list = [plane(layout.y, width: w, height: h, stride: layout.yStride, rowBytes: 3 * w)]
        case .bgrx32:
            list = [plane(layout.y, width: w, height: h, stride: layout.yStride, rowBytes: 4 * w)]
        }
        let found = list.compactMap { $0 }
        guard found.count == list.count else { return nil }
        planes = found
        isPlanar = found.count > 1
    }

    /// Colour planes: 0 for a packed format, as `CVPixelBufferGetPlaneCount`.
    public var planeCount: Int { isPlanar ? planes.count : 0 }
    /// The first byte of the picture (of plane 0 for a planar format).
    public var baseAddress: UnsafeRawPointer { base }
    /// Bytes per row of the picture (of plane 0 for a planar format).
    public var bytesPerRow: Int { planes[0].bytesPerRow }
    /// Bytes from the first plane's first byte to the end of the last plane.
    public var dataSize: Int { planes.map { $0.offset + $0.byteCount }.max() ?? 0 }

    /// Plane `i`'s width in samples (plane 0 of a packed format: the picture's); 0 past the last
    /// plane, as CoreVideo.
    public func widthOfPlane(_ i: Int) -> Int { planeOrNil(i)?.width ?? 0 }
    /// Plane `i`'s height in rows; 0 past the last plane.
    public func heightOfPlane(_ i: Int) -> Int { planeOrNil(i)?.height ?? 0 }
    /// Plane `i`'s bytes per row; 0 past the last plane.
    public func bytesPerRowOfPlane(_ i: Int) -> Int { planeOrNil(i)?.bytesPerRow ?? 0 }
    /// Plane `i`'s first byte; nil past the last plane.
    public func baseAddressOfPlane(_ i: Int) -> UnsafeRawPointer? { planeOrNil(i).map { base + $0.offset } }

    /// Calls `body` with plane `i`'s bytes (from its first row to the end of its last row's
    /// samples); an empty buffer past the last plane.
    public func withUnsafeBytes<R>(ofPlane i: Int, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        defer { withExtendedLifetime(sample) {} }
        guard let p = planeOrNil(i) else { return try body(UnsafeRawBufferPointer(start: nil, count: 0)) }
        return try body(UnsafeRawBufferPointer(start: base + p.offset, count: p.byteCount))
    }

    private func planeOrNil(_ i: Int) -> Plane? { i >= 0 && i < planes.count ? planes[i] : nil }
}

extension SampleBuffer {
    /// The pixels plane by plane (`CMSampleBuffer.imageBuffer`); nil for audio, MJPEG frames
    /// and JPEG stills (read those with `withUnsafeBytes` or `jpegData`).
    public var imageBuffer: PixelBuffer? { PixelBuffer(self) }
}
