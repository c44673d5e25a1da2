import CaptureBackend
import CaptureImaging

// What an app asks of a video data output's frames (`videoSettings`).
extension CaptureVideoDataOutput {
    /// What the app asks of the frames.
    public struct VideoSettings: Sendable, Hashable {
        /// The pixel format wanted; nil takes what the device delivers. The session chooses a
        /// device format with this pixel format where the device has one; otherwise frames are
        /// converted (to `.bgra32`, `.xbgr32`, `.nv12` or `.yuyv`, from any camera format
        /// including MJPEG) on the delegate's queue, into buffers the output owns.
        public var pixelFormat: PixelFormat?
        /// When set, every frame is delivered as JPEG (`pixelFormat` `.jpeg`, bytes through
        /// `withUnsafeBytes` or `jpegData`): raw frames are encoded on `JPEGSettings.threads`
        /// encoder threads, in order, and MJPEG frames pass through (Huffman tables inserted
        /// where missing, once per frame for every consumer that wants JPEG). `pixelFormat` is then ignored. A frame is encoded once for every
        /// consumer of the session that wants the same quality and subsampling (a still at that
        /// quality takes the same JPEG, with its own EXIF).
        public var jpeg: JPEGSettings?
        public init(pixelFormat: PixelFormat? = nil, jpeg: JPEGSettings? = nil) {
            self.pixelFormat = pixelFormat
            self.jpeg = jpeg
        }
    }

    /// JPEG delivery (`VideoSettings.jpeg`).
    public struct JPEGSettings: Sendable, Hashable {
        /// JPEG quality from 1 to 100.
        public var quality: Int
        /// Chroma subsampling; nil keeps the camera's (4:2:2 for YUYV, 4:2:0 for NV12).
        public var subsampling: ChromaSubsampling?
        /// Encoder threads (the first consumer of a quality sets them for all). When they fall
        /// behind, the newest frame wins and the frames it replaced are reported as `.frameWasLate`.
        public var threads: Int
        public init(quality: Int = 85, subsampling: ChromaSubsampling? = nil, threads: Int = 1) {
            self.quality = quality
            self.subsampling = subsampling
            self.threads = threads
        }
    }
}
