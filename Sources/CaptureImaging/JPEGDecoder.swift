import CaptureBackend
import Foundation
internal import CTurboJPEG

/// Decodes JPEG images and MJPEG frames with TurboJPEG, treating the bytes as hostile.
///
/// The header is read first and the pixel count capped before any image memory is touched;
/// TurboJPEG runs with `TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS`, so a damaged frame is an
/// error (`.corruptFrame`), not a silently grey picture, and a scan bomb cannot spin.
/// One decoder per thread: not safe to use from two threads at once.
public final class JPEGDecoder {
    /// The pixel layouts `decode` can write.
    public enum PixelLayout: Sendable, Hashable, CaseIterable {
        /// R, G, B bytes.
        case rgb
        /// B, G, R bytes.
        case bgr
        /// R, G, B, A (A = 255).
        case rgba
        /// B, G, R, A (A = 255): AVFoundation's 32BGRA.
        case bgra
        /// Luma only.
        case grey

        public var bytesPerPixel: Int {
            switch self {
            case .rgb, .bgr: 3
            case .rgba, .bgra: 4
            case .grey: 1
            }
        }

        package var turboJPEGFormat: Int32 {
            switch self {
            case .rgb: Int32(TJPF_RGB.rawValue)
            case .bgr: Int32(TJPF_BGR.rawValue)
            case .rgba: Int32(TJPF_RGBA.rawValue)
            case .bgra: Int32(TJPF_BGRA.rawValue)
            case .grey: Int32(TJPF_GRAY.rawValue)
            }
        }
    }

    /// What a JPEG's header says.
    public struct Header: Sendable, Hashable {
        public var width: Int
        public var height: Int
        /// nil for layouts TurboJPEG knows but this library does not name (4:4:0, 4:1:1).
        public var subsampling: ChromaSubsampling?
        /// TurboJPEG's `TJSAMP_*` value, for the layouts `subsampling` does not name.
        public var turboJPEGSubsampling: Int
    }

    /// The largest image (width × height) this decoder accepts; bigger headers are rejected
    /// before any memory is allocated for them.
    public var maximumPixelCount: Int

    private var handle: tjhandle?
    private var planeStorage: [UInt8] = []
    private static let flags = Int32(TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS)

    public init(maximumPixelCount: Int = 8192 * 8192) {
        self.maximumPixelCount = maximumPixelCount
    }

    deinit {
        if let handle { tjDestroy(handle) }
    }

    private func tj() throws(CaptureError) -> tjhandle {
        if let handle { return handle }
        guard let h = tjInitDecompress() else { throw CaptureError(.ioError, "cannot create a TurboJPEG decompressor") }
        handle = h
        return h
    }

    private func failure(_ handle: tjhandle, _ call: String) -> CaptureError {
        let message = String(cString: tjGetErrorStr2(handle))
        let kind = tjGetErrorCode(handle) == Int32(TJERR_WARNING.rawValue) ? "damaged" : "unreadable"
        return CaptureError(.corruptFrame, "JPEG \(kind): \(message)", operation: call)
    }

    /// Reads the header. Throws `.corruptFrame` for bytes that are not a JPEG or claim more
    /// pixels than `maximumPixelCount`.
    public func readHeader(_ jpeg: UnsafeRawBufferPointer) throws(CaptureError) -> Header {
        guard let base = jpeg.baseAddress, jpeg.count >= 4 else { throw CaptureError(.corruptFrame, "JPEG: too short") }
        let h = try tj()
        var width: Int32 = 0, height: Int32 = 0, sub: Int32 = 0, colorspace: Int32 = 0
        guard
            tjDecompressHeader3(
                h, base.assumingMemoryBound(to: UInt8.self), UInt(jpeg.count),
                &width, &height, &sub, &colorspace) == 0
        else {
            throw failure(h, "tjDecompressHeader3")
        }
        guard width > 0, height > 0, Int(width) * Int(height) <= maximumPixelCount else {
            throw CaptureError(.corruptFrame, "JPEG: \(width)x\(height) is larger than the \(maximumPixelCount)-pixel limit")
        }
        return Header(
            width: Int(width), height: Int(height), subsampling: ChromaSubsampling(turboJPEGValue: sub),
            turboJPEGSubsampling: Int(sub))
    }

    /// Decodes into `output`, rows `bytesPerLine` apart (0: width × bytes per pixel).
    /// Throws `.invalidArgument` when `output` is too small, `.corruptFrame` for damaged input.
    @discardableResult
    public func decode(
        _ jpeg: UnsafeRawBufferPointer, as layout: PixelLayout, into output: UnsafeMutableRawBufferPointer,
        bytesPerLine: Int = 0
    ) throws(CaptureError) -> Header {
        let header = try readHeader(jpeg)
        let row = header.width * layout.bytesPerPixel
        let pitch = bytesPerLine == 0 ? row : bytesPerLine
        guard pitch >= row, let out = output.baseAddress,
            output.count >= pitch * (header.height - 1) + row
        else {
            throw CaptureError(.invalidArgument, "output buffer too small for \(header.width)x\(header.height)")
        }
        let h = try tj()
        guard
            tjDecompress2(
                h, jpeg.baseAddress!.assumingMemoryBound(to: UInt8.self), UInt(jpeg.count),
                out.assumingMemoryBound(to: UInt8.self), Int32(header.width), Int32(pitch),
                Int32(header.height), layout.turboJPEGFormat, Self.flags) == 0
        else {
            throw failure(h, "tjDecompress2")
        }
        return header
    }

    /// Decodes into a new array, rows without padding.
    public func decode(_ jpeg: UnsafeRawBufferPointer, as layout: PixelLayout) throws(CaptureError) -> (header: Header, pixels: [UInt8]) {
        let header = try readHeader(jpeg)
        var pixels = [UInt8](repeating: 0, count: header.width * header.height * layout.bytesPerPixel)
        let result = pixels.withUnsafeMutableBytes { out in
            Result { () throws(CaptureError) in try decode(jpeg, as: layout, into: out) }
        }
        _ = try result.get()
        return (header, pixels)
    }

    /// Decodes `Data` (or any contiguous bytes) into a new array.
    public func decode(_ jpeg: some ContiguousBytes, as layout: PixelLayout) throws(CaptureError) -> (header: Header, pixels: [UInt8]) {
        let result = jpeg.withUnsafeBytes { raw in
            Result { () throws(CaptureError) in try decode(raw, as: layout) }
        }
        return try result.get()
    }

    /// Decodes to full-range YUV planes in the JPEG's own subsampling (4:2:0, 4:2:2 or grey) and
    /// hands them to `body` as an `ImageBuffer` (YU12, 422P or GREY), valid only during the call.
    /// The plane memory is reused from call to call.
    package func decodeToPlanes<R>(
        _ jpeg: UnsafeRawBufferPointer,
        _ body: (ImageBuffer) throws(CaptureError) -> R
    ) throws(CaptureError) -> R {
        let header = try readHeader(jpeg)
        let format: PixelFormat
        switch header.subsampling {
        case .s420: format = .yuv420
        case .s422: format = .yuv422p
        case .grey: format = .grey
        default:
            throw CaptureError(.unsupportedFormat, "JPEG chroma layout \(header.turboJPEGSubsampling) cannot be converted to YUV frames")
        }
        let sub = Int32(header.turboJPEGSubsampling)
        let w = Int32(header.width), hgt = Int32(header.height)
        let planes = format == .grey ? 1 : 3
        var strides: [Int32] = [0, 0, 0]
        var sizes = [0, 0, 0]
        for i in 0..<planes {
            strides[i] = tjPlaneWidth(Int32(i), w, sub)
            sizes[i] = Int(strides[i]) * Int(tjPlaneHeight(Int32(i), hgt, sub))
        }
        let total = sizes.reduce(0, +)
        if planeStorage.count < total { planeStorage = [UInt8](repeating: 0, count: total) }
        let h = try tj()
        let result = planeStorage.withUnsafeMutableBytes { storage -> Result<R, CaptureError> in
            let base = storage.baseAddress!.assumingMemoryBound(to: UInt8.self)
            var pointers: [UnsafeMutablePointer<UInt8>?] = [base, base + sizes[0], base + sizes[0] + sizes[1]]
            let status = pointers.withUnsafeMutableBufferPointer { p in
                strides.withUnsafeMutableBufferPointer { s in
                    tjDecompressToYUVPlanes(
                        h, jpeg.baseAddress!.assumingMemoryBound(to: UInt8.self), UInt(jpeg.count),
                        p.baseAddress, w, s.baseAddress, hgt, Self.flags)
                }
            }
            guard status == 0 else { return .failure(failure(h, "tjDecompressToYUVPlanes")) }
            var image = ImageBuffer(
                pixelFormat: format, width: header.width, height: header.height, colorRange: .full,
                plane0: PlaneView(base: UnsafeRawPointer(base), count: sizes[0], bytesPerLine: Int(strides[0])))
            if planes == 3 {
                image.planeCount = 3
                image.plane1 = PlaneView(base: UnsafeRawPointer(base + sizes[0]), count: sizes[1], bytesPerLine: Int(strides[1]))
                image.plane2 = PlaneView(
                    base: UnsafeRawPointer(base + sizes[0] + sizes[1]), count: sizes[2],
                    bytesPerLine: Int(strides[2]))
            }
            return Result { () throws(CaptureError) in try body(image) }
        }
        return try result.get()
    }
}
