import CaptureImaging
import CaptureBackend
import Foundation

/// How a still (or photo) honours its connection's `videoOrientation` and `isVideoMirrored`.
public enum StillOrientationMode: String, Sendable, Hashable, CaseIterable {
    /// The default: the pixels are turned and mirrored, and the EXIF orientation says 1 (up), so
    /// every viewer shows it upright. Raw YUV frames are turned before their one encode; JPEG
    /// frames (MJPEG, a shared JPEG) get TurboJPEG's lossless transform where their size is whole
    /// MCUs (about 25 ms at 1280x720: it redoes the entropy coding), else their planes are
    /// turned and encoded once more.
    case rotatePixels
    /// The pixels stay as the sensor made them; the EXIF orientation tag (2-8) tells viewers
    /// how to show them. Cheapest; viewers that ignore EXIF show the sensor's picture.
    case exifOnly
}

/// How the still output turns a frame into JPEG bytes (the imaging layer does the work).
package enum StillEncoding {
    static func makeEncoder(_ settings: CaptureStillImageOutput.OutputSettings, for format: PixelFormat) throws(CaptureError) -> JPEGEncoder
    {
        guard JPEGEncoder.canEncode(format) else {
            throw CaptureError(
                .unsupportedFormat, "stills cannot be made from \(format) frames: choose another device format (YUYV, NV12, MJPEG...)")
        }
        return JPEGEncoder(quality: settings.quality, subsampling: settings.subsampling)
    }

    /// The JPEG of `image`, borrowed by `take` (`scratch` holds an MJPEG frame's rewrite,
    /// `encoder` is made on first use). Allocates nothing in steady state.
    package static func still<R>(
        _ image: ImageBuffer, encoder: inout JPEGEncoder?, settings: CaptureStillImageOutput.OutputSettings,
        exif: EXIFInfo?, turn: Turn? = nil, scratch: inout [UInt8], _ take: (UnsafeRawBufferPointer) -> R
    ) throws(CaptureError) -> R {
        if image.pixelFormat.isCompressed { return try still(jpeg: image.plane0.bytes, exif: exif, turn: turn, scratch: &scratch, take) }
        if encoder == nil { encoder = try makeEncoder(settings, for: image.pixelFormat) }
        guard let turn else { return take(try encoder!.encode(image, exif: exif)) }
        // Raw YUV in its own subsampling: the planes turned before the one encode (cheaper than
        // encoding and then transforming the JPEG, which redoes the entropy coding).
        if settings.subsampling == nil || settings.subsampling == encoder!.outputSubsampling(for: image.pixelFormat),
            let turned = try turn.orienter.encodeTurned(image, turn.orientation, quality: settings.quality)
        {
            _ = try MJPEG.makeStill(turned, exif: exif, into: &scratch)
            return scratch.withUnsafeBytes(take)
        }
        return try still(jpeg: try encoder!.encode(image, exif: nil), exif: exif, turn: turn, scratch: &scratch, take)
    }

    /// A turn of the pixels: how, with which transformer, at what quality if it must re-encode.
    package struct Turn {
        var orientation: EXIFOrientation
        var orienter: JPEGOrienter
        var quality: Int
    }

    /// The still of a JPEG made elsewhere (an MJPEG camera's frame, the input's JPEG stage): the
    /// same bytes with `exif` in place of theirs, in `scratch`, borrowed by `take`.
    package static func still<R>(
        jpeg: UnsafeRawBufferPointer, exif: EXIFInfo?, turn: Turn? = nil, scratch: inout [UInt8],
        _ take: (UnsafeRawBufferPointer) -> R
    ) throws(CaptureError) -> R {
        let source = try turn.map { t throws(CaptureError) in try t.orienter.orient(jpeg, t.orientation, quality: t.quality) } ?? jpeg
        _ = try MJPEG.makeStill(source, exif: exif, into: &scratch)
        return scratch.withUnsafeBytes(take)
    }
}
