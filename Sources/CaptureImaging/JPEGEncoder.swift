import CaptureBackend
import Foundation
internal import CJPEGShim

/// Encodes camera frames (YUYV, NV12, YU12, RGB, GREY... as the driver delivers them) to JFIF JPEG.
///
/// The frame is read in place: a few rows at a time are deinterleaved (and expanded from the
/// camera's limited range to JPEG's full range) into small cache-resident stripes that go
/// straight to libjpeg-turbo's raw-data interface. After the first frame of a size, encoding
/// allocates nothing: the output buffer is sized for the worst case and reused.
///
/// One encoder per thread: it is not safe to use from two threads at once. The bytes `encode`
/// returns belong to the encoder and stay valid until its next `encode` and while the encoder
/// lives (keep a reference, or use `encodeData`, which copies).
public final class JPEGEncoder {
    /// Quality 1...100 (libjpeg's scale; 85 is a good default for photos).
    public var quality: Int {
        didSet { quality = min(100, max(1, quality)) }
    }
    /// The chroma subsampling of the output; nil keeps the source's (4:2:2 for YUYV, 4:2:0 for
    /// NV12/YU12, 4:4:4 for RGB, grey for GREY).
    public var subsampling: ChromaSubsampling?

    private var handle: OpaquePointer?
    private var exifPayload: [UInt8] = []

    public init(quality: Int = 85, subsampling: ChromaSubsampling? = nil) {
        self.quality = min(100, max(1, quality))
        self.subsampling = subsampling
        exifPayload.reserveCapacity(1024)
    }

    deinit { cv4l2_jpeg_encoder_destroy(handle) }

    /// The subsampling a frame of `format` is written with.
    public func outputSubsampling(for format: PixelFormat) -> ChromaSubsampling? {
        guard let layout = try? ImageLayout.nativeSubsampling(of: format) else { return nil }
        return subsampling ?? layout
    }

    /// Whether frames of `format` can be encoded (MJPEG is passed through, not encoded).
    public static func canEncode(_ format: PixelFormat) -> Bool { ImageLayout.supports(format) }

    /// Encodes `image`. With `exif`, an Exif APP1 segment follows SOI (and no JFIF APP0 is
    /// written, as the Exif standard wants).
    ///
    /// Throws `.unsupportedFormat` for formats it cannot read, `.invalidArgument` for impossible
    /// sizes and strides, `.corruptFrame` when a plane holds fewer bytes than the format needs.
    package func encode(_ image: ImageBuffer, exif: EXIFInfo? = nil) throws(CaptureError) -> UnsafeRawBufferPointer {
        let layout = try ImageLayout(image)
        return try encode(layout, exif: exif)
    }

    /// `encode(_:exif:)` copied into a `Data`.
    package func encodeData(_ image: ImageBuffer, exif: EXIFInfo? = nil) throws(CaptureError) -> Data {
        Data(try encode(image, exif: exif))
    }

    /// Encodes a frame held in one block of memory, laid out as V4L2 lays out single-planar
    /// formats (for NV12 and YU12 the chroma planes follow the luma plane; `NM12`/`YM12` are
    /// taken as their single-planar twins). `bytesPerLine` 0 means rows without padding.
    /// The returned bytes stay valid until the next `encode`.
    public func encode(
        _ bytes: UnsafeRawBufferPointer, pixelFormat: PixelFormat, width: Int, height: Int,
        bytesPerLine: Int = 0, colorRange: ColorRange = .limited,
        exif: EXIFInfo? = nil
    ) throws(CaptureError) -> UnsafeRawBufferPointer {
        let image = ImageBuffer(
            pixelFormat: pixelFormat, width: width, height: height, colorRange: colorRange,
            plane0: PlaneView(base: bytes.baseAddress, count: bytes.count, bytesPerLine: bytesPerLine))
        return try encode(image, exif: exif)
    }

    /// `encode(_:pixelFormat:width:height:bytesPerLine:colorRange:exif:)` copied into a `Data`.
    public func encodeData(
        _ bytes: UnsafeRawBufferPointer, pixelFormat: PixelFormat, width: Int, height: Int,
        bytesPerLine: Int = 0, colorRange: ColorRange = .limited,
        exif: EXIFInfo? = nil
    ) throws(CaptureError) -> Data {
        Data(
            try encode(
                bytes, pixelFormat: pixelFormat, width: width, height: height, bytesPerLine: bytesPerLine,
                colorRange: colorRange, exif: exif))
    }

    /// The bytes `encode(_:into:)` needs for `image` (its worst case); 0 for images it cannot encode.
    package func encodedSizeBound(for image: ImageBuffer) -> Int {
        guard let layout = try? ImageLayout(image) else { return 0 }
        let sampling = subsampling ?? layout.nativeSubsampling
        return cv4l2_jpeg_bound(Int32(image.width), Int32(image.height), sampling.turboJPEGValue, 0)
    }

    /// Encodes `image` straight into `destination` (at least `encodedSizeBound(for:)` bytes), so
    /// that the JPEG needs no copy to reach whoever hands it out. Returns its length.
    package func encode(_ image: ImageBuffer, into destination: UnsafeMutableRawBufferPointer) throws(CaptureError) -> Int {
        let layout = try ImageLayout(image)
        try makeHandle()
        let sampling = subsampling ?? layout.nativeSubsampling
        var shim = layout.shimImage
        var count = 0
        let status = cv4l2_jpeg_encode_into(
            handle, &shim, Int32(quality), sampling.turboJPEGValue, nil, 0, 1,
            destination.baseAddress?.assumingMemoryBound(to: UInt8.self),
            destination.count, &count)
        guard status == 0 else { throw failure() }
        return count
    }

    /// Times the encoder asked the system for memory so far; constant in steady state.
    public var allocationCount: UInt64 { handle.map { cv4l2_jpeg_encoder_allocation_count($0) } ?? 0 }

    private func encode(_ layout: ImageLayout, exif: EXIFInfo?) throws(CaptureError) -> UnsafeRawBufferPointer {
        try makeHandle()
        let sampling = subsampling ?? layout.nativeSubsampling
        var image = layout.shimImage
        exifPayload.removeAll(keepingCapacity: true)
        if let exif { exif.appendPayload(to: &exifPayload, pixelWidth: layout.width, pixelHeight: layout.height) }
        guard exifPayload.count <= 65533 else { throw CaptureError(.invalidArgument, "EXIF data too long") }
        var out: UnsafePointer<UInt8>?
        var count = 0
        let status = exifPayload.withUnsafeBytes { app1 in
            cv4l2_jpeg_encode(
                handle, &image, Int32(quality), sampling.turboJPEGValue, app1.baseAddress, app1.count,
                exif == nil ? 1 : 0, &out, &count)
        }
        guard status == 0, let out else { throw failure() }
        return UnsafeRawBufferPointer(start: out, count: count)
    }

    private func makeHandle() throws(CaptureError) {
        guard handle == nil else { return }
        handle = cv4l2_jpeg_encoder_create()
        guard handle != nil else { throw CaptureError(.ioError, "out of memory creating a JPEG encoder") }
    }

    private func failure() -> CaptureError {
        let message = String(cString: cv4l2_jpeg_encoder_message(handle))
        return CaptureError(.ioError, "JPEG encoding failed: \(message)", operation: "jpeg_write_raw_data")
    }
}
