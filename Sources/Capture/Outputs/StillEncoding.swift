import CaptureImaging
import CaptureBackend
import Foundation

/// How the still output turns a frame into JPEG bytes (the imaging layer does the work).
package enum StillEncoding {
    static func makeEncoder(_ settings: CaptureStillImageOutput.OutputSettings, for format: PixelFormat) throws(CaptureError) -> JPEGEncoder {
        guard JPEGEncoder.canEncode(format) else {
            throw CaptureError(.unsupportedFormat, "stills cannot be made from \(format) frames: choose another device format (YUYV, NV12, MJPEG...)")
        }
        return JPEGEncoder(quality: settings.quality, subsampling: settings.subsampling)
    }

    /// The JPEG of `image`, borrowed by `take` (`scratch` holds an MJPEG frame's rewrite,
    /// `encoder` is made on first use). Allocates nothing in steady state.
    package static func still<R>(_ image: ImageBuffer, encoder: inout JPEGEncoder?, settings: CaptureStillImageOutput.OutputSettings,
                         exif: EXIFInfo?, scratch: inout [UInt8], _ take: (UnsafeRawBufferPointer) -> R) throws(CaptureError) -> R {
        if image.pixelFormat.isCompressed { return try still(jpeg: image.plane0.bytes, exif: exif, scratch: &scratch, take) }
        if encoder == nil { encoder = try makeEncoder(settings, for: image.pixelFormat) }
        return take(try encoder!.encode(image, exif: exif))
    }

    /// The still of a JPEG made elsewhere (an MJPEG camera's frame, the input's JPEG stage): the
    /// same bytes with `exif` in place of theirs, in `scratch`, borrowed by `take`.
    package static func still<R>(jpeg: UnsafeRawBufferPointer, exif: EXIFInfo?, scratch: inout [UInt8],
                         _ take: (UnsafeRawBufferPointer) -> R) throws(CaptureError) -> R {
        _ = try MJPEG.makeStill(jpeg, exif: exif, into: &scratch)
        return scratch.withUnsafeBytes(take)
    }
}
