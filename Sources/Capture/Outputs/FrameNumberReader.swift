import CaptureVirtual
import CaptureImaging
import CaptureBackend
import Foundation
internal import CTurboJPEG

// Reading the frame counter back out of the pixels, so a test can tell which frame it got
// (a still is fresh, frames arrive in order, none is repeated) without trusting metadata.

extension VirtualCamera {
    /// The frame number (the camera's sequence number) drawn into a virtual camera frame, or
    /// nil if the frame is not one of the virtual camera's or is too damaged to read.
    /// Works for every raw format the camera offers and for MJPEG.
    public static func frameNumber(in sample: SampleBuffer) -> UInt32? {
        sample.withVideoImage { image in image.flatMap { read(readPatternCounter, in: $0) } }
    }

    /// The frame number drawn into a JPEG photo of a virtual camera frame (e.g. a still from
    /// `CaptureStillImageOutput`), or nil if it cannot be read.
    public static func frameNumber(inJPEG jpeg: Data) -> UInt32? {
        jpeg.withUnsafeBytes { read(readPatternCounter, inJPEG: $0) }
    }

    /// The time code (capture time in milliseconds since the Unix epoch, modulo 2^32) drawn into
    /// a frame of a camera that ``showsTimeCode``, or nil if it cannot be read (another camera's
    /// frame, one narrower than 512 pixels, a damaged one). Every raw format and MJPEG.
    public static func timeCode(in sample: SampleBuffer) -> UInt32? {
        sample.withVideoImage { image in image.flatMap { read(readPatternTimeCode, in: $0) } }
    }

    /// The time code drawn into a JPEG of such a frame (a still, a served JPEG), or nil.
    public static func timeCode(inJPEG jpeg: Data) -> UInt32? {
        jpeg.withUnsafeBytes { read(readPatternTimeCode, inJPEG: $0) }
    }

    /// What `reader` reads from the picture's luma.
    private typealias PatternReader = (PatternGeometry, (Int, Int) -> UInt8?) -> UInt32?

    static func frameNumber(in image: ImageBuffer) -> UInt32? { read(readPatternCounter, in: image) }

    private static func read(_ reader: PatternReader, in image: ImageBuffer) -> UInt32? {
        let bytes = image.plane0.bytes
        if image.pixelFormat.isCompressed { return read(reader, inJPEG: bytes) }
        guard let layout = PatternLayout(image.pixelFormat) else { return nil }
        let g = PatternGeometry(width: image.width, height: image.height)
        return reader(g) { x, y in
            patternLuma(bytes, layout: layout, width: image.width, height: image.height, x: x, y: y)
        }
    }

    private static func read(_ reader: PatternReader, inJPEG bytes: UnsafeRawBufferPointer) -> UInt32? {
        guard bytes.count > 4, let base = bytes.baseAddress, let tj = tjInitDecompress() else { return nil }
        defer { tjDestroy(tj) }
        var w: Int32 = 0, h: Int32 = 0, sub: Int32 = 0, cs: Int32 = 0
        let src = base.assumingMemoryBound(to: UInt8.self)
        guard tjDecompressHeader3(tj, src, UInt(bytes.count), &w, &h, &sub, &cs) == 0,
            w >= 64, h >= 64, w <= 8192, h <= 8192
        else { return nil }
        // Only the top rows are needed; decoding the whole picture to grey is simplest.
        var grey = [UInt8](repeating: 0, count: Int(w) * Int(h))
        let rc = grey.withUnsafeMutableBufferPointer { out in
            tjDecompress2(tj, src, UInt(bytes.count), out.baseAddress, w, w, h, Int32(TJPF_GRAY.rawValue), 0)
        }
        guard rc == 0 else { return nil }
        let g = PatternGeometry(width: Int(w), height: Int(h))
        return grey.withUnsafeBytes { buf in
            reader(g) { x, y in patternLuma(buf, layout: .grey, width: Int(w), height: Int(h), x: x, y: y) }
        }
    }
}
