import Foundation

/// How the still output turns a frame into JPEG bytes (the imaging layer does the work).
enum StillEncoding {
    static func makeEncoder(_ settings: CaptureStillImageOutput.OutputSettings, for format: PixelFormat) throws(CaptureError) -> JPEGEncoder {
        guard JPEGEncoder.canEncode(format) else {
            throw CaptureError(.unsupportedFormat, "stills cannot be made from \(format) frames: choose another device format (YUYV, NV12, MJPEG...)")
        }
        return JPEGEncoder(quality: settings.quality, subsampling: settings.subsampling)
    }

    static func encode(_ image: ImageBuffer, with encoder: JPEGEncoder, exif: EXIFInfo?) throws(CaptureError) -> Data {
        try encoder.encodeData(image, exif: exif)
    }

    /// MJPEG: the camera's bytes, with Huffman tables added when missing and EXIF when asked.
    static func passThrough(_ image: ImageBuffer, exif: EXIFInfo?) throws(CaptureError) -> Data {
        var out: [UInt8] = []
        try MJPEG.makeStill(image.plane0.bytes, exif: exif, into: &out)
        return Data(out)
    }
}
