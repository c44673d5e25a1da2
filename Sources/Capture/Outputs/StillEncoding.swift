import Foundation

/// How the still output turns a frame into JPEG bytes (the imaging layer does the work).
enum StillEncoding {
    static func makeEncoder(_ settings: CaptureStillImageOutput.OutputSettings, for format: PixelFormat) throws(CaptureError) -> JPEGEncoder {
        guard JPEGEncoder.canEncode(format) else {
            throw CaptureError(.unsupportedFormat, "stills cannot be made from \(format) frames: choose another device format (YUYV, NV12, MJPEG...)")
        }
        return JPEGEncoder(quality: settings.quality, subsampling: settings.subsampling)
    }

    /// What the still output hands out: the JPEG of `image`, in `buffer`'s storage (which is
    /// reused; `scratch` holds an MJPEG frame's rewrite). Allocates nothing in steady state
    /// unless the app still holds the previous still's bytes, which are then copied on write.
    static func still(_ image: ImageBuffer, encoder: inout JPEGEncoder?, settings: CaptureStillImageOutput.OutputSettings,
                      exif: EXIFInfo?, scratch: inout [UInt8], buffer: inout Data) throws(CaptureError) -> Data {
        if image.pixelFormat.isCompressed {
            _ = try MJPEG.makeStill(image.plane0.bytes, exif: exif, into: &scratch)
            return scratch.withUnsafeBytes { store($0, in: &buffer) }
        }
        if encoder == nil { encoder = try makeEncoder(settings, for: image.pixelFormat) }
        return store(try encoder!.encode(image, exif: exif), in: &buffer)
    }

    /// Copies `jpeg` to the start of `buffer` and returns that part (sharing the storage).
    /// `buffer` keeps its whole length as capacity and only grows.
    static func store(_ jpeg: UnsafeRawBufferPointer, in buffer: inout Data) -> Data {
        if buffer.count < jpeg.count { buffer = Data(count: max(jpeg.count, buffer.count * 2)) }
        buffer.withUnsafeMutableBytes { UnsafeMutableRawBufferPointer(rebasing: $0[0..<jpeg.count]).copyMemory(from: jpeg) }
        return buffer[0..<jpeg.count]
    }
}
