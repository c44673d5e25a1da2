import Foundation

/// One captured sample: a video frame or a block of audio, with its timing.
///
/// A video sample buffer is a zero-copy view of the driver's buffer: while you hold it, that
/// buffer stays out of the driver's queue (as in AVFoundation). Release it promptly; a caller
/// that keeps every buffer sees drops with reason `.outOfBuffers`. Safe to pass between threads.
public final class SampleBuffer: @unchecked Sendable {
    enum Content {
        case video(FrameBuffer, ActiveFormat)
        case audio(AudioPCMBuffer)
        case jpeg(Data, VideoDimensions)
    }
    let content: Content

    /// `.video` or `.audio`.
    public let mediaType: MediaType
    /// When the sample was captured, on the monotonic clock shared by video and audio.
    public let presentationTimeStamp: CaptureTime
    /// The driver's frame sequence number (video), or the running frame count of the first
    /// audio frame in this buffer (audio).
    public let sequenceNumber: UInt64

    init(frame: FrameBuffer, format: ActiveFormat) {
        content = .video(frame, format)
        mediaType = .video
        presentationTimeStamp = frame.metadata.timestamp
        sequenceNumber = UInt64(frame.metadata.sequence)
    }

    init(jpeg: Data, dimensions: VideoDimensions, metadata: FrameMetadata) {
        content = .jpeg(jpeg, dimensions)
        mediaType = .video
        presentationTimeStamp = metadata.timestamp
        sequenceNumber = UInt64(metadata.sequence)
    }

    init(audio: AudioPCMBuffer, timestamp: CaptureTime, firstFrame: UInt64) {
        content = .audio(audio)
        mediaType = .audio
        presentationTimeStamp = timestamp
        sequenceNumber = firstFrame
    }

    // MARK: Video

    /// Pixel format of a video sample; nil for audio.
    public var pixelFormat: PixelFormat? {
        switch content {
        case .video(let f, _): return f.image.pixelFormat
        case .jpeg: return .jpeg
        case .audio: return nil
        }
    }
    /// Dimensions of a video sample; nil for audio.
    public var dimensions: VideoDimensions? {
        switch content {
        case .video(let f, _): return VideoDimensions(width: f.image.width, height: f.image.height)
        case .jpeg(_, let d): return d
        case .audio: return nil
        }
    }
    /// Number of planes (1 for packed and single-buffer formats).
    public var planeCount: Int {
        switch content {
        case .video(let f, _): return f.image.planeCount
        case .jpeg: return 1
        case .audio: return 0
        }
    }
    /// Bytes per row of a plane (0 for compressed formats).
    public func bytesPerRow(plane: Int = 0) -> Int {
        if case .video(let f, _) = content, plane < f.image.planeCount { return f.image.plane(plane).bytesPerLine }
        return 0
    }
    /// Whether the pixels use the full 0-255 range.
    public var colorRange: ColorRange? {
        if case .video(let f, _) = content { return f.image.colorRange }
        return nil
    }

    /// Calls `body` with the bytes of one plane, straight from the driver's buffer (no copy).
    /// The pointer is valid only inside `body`.
    public func withUnsafeBytes<R>(plane: Int = 0, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        switch content {
        case .video(let f, _):
            return try withExtendedLifetime(f) {
                try body(plane < f.image.planeCount ? f.image.plane(plane).bytes : UnsafeRawBufferPointer(start: nil, count: 0))
            }
        case .audio(let a):
            return try a.data.withUnsafeBytes(body)
        case .jpeg(let d, _):
            return try d.withUnsafeBytes(body)
        }
    }

    /// A copy of the bytes of one plane (video) or of the samples (audio).
    public func data(plane: Int = 0) -> Data { withUnsafeBytes(plane: plane) { Data($0) } }

    /// The JPEG bytes of a still taken by `CaptureStillImageOutput`; nil for other samples.
    public var jpegData: Data? {
        if case .jpeg(let d, _) = content { return d }
        return nil
    }

    // MARK: Audio

    /// The audio of an audio sample; nil for video.
    public var audioBuffer: AudioPCMBuffer? {
        if case .audio(let a) = content { return a }
        return nil
    }

    var frameBuffer: FrameBuffer? {
        if case .video(let f, _) = content { return f }
        return nil
    }
}

/// The kind of media a device captures or an output accepts.
public enum MediaType: String, Sendable, Hashable, CaseIterable {
    case video
    case audio
}
