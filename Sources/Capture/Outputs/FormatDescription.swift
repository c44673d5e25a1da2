import CaptureBackend

/// What a sample holds, as `CMFormatDescription` says it: the media type and its format.
public struct FormatDescription: Sendable, Hashable, CustomStringConvertible {
    public let mediaType: MediaType
    /// The format's four-character code, as `mediaSubType`: the pixel format's (`NV12`, `MJPG`,
    /// `JPEG` for a still) or `lpcm` for audio.
    public let mediaSubType: String
    /// Video: the pixel format; nil for audio.
    public let pixelFormat: PixelFormat?
    /// Video: the picture's size; nil for audio.
    public let dimensions: VideoDimensions?
    /// Audio: rate, channels and sample format; nil for video.
    public let audioFormat: AudioFormat?

    public var description: String {
        if let audioFormat { return "\(mediaType.rawValue) \(mediaSubType) \(audioFormat)" }
        return "\(mediaType.rawValue) \(mediaSubType) \(dimensions.map { "\($0)" } ?? "")"
    }
}

extension SampleBuffer {
    /// The sample's format (`CMSampleBuffer.formatDescription`).
    public var formatDescription: FormatDescription? {
        if let audio = audioBuffer {
            return FormatDescription(mediaType: .audio, mediaSubType: "lpcm", pixelFormat: nil, dimensions: nil, audioFormat: audio.format)
        }
        guard let pixelFormat, let dimensions else { return nil }
        return FormatDescription(
            mediaType: .video, mediaSubType: pixelFormat.description, pixelFormat: pixelFormat, dimensions: dimensions,
            audioFormat: nil)
    }

    /// How long the sample lasts (`CMSampleBuffer.duration`): a frame's interval at the rate
    /// the camera runs at, an audio buffer's frames over its rate; nil when unknown (a still).
    public var duration: Duration? {
        if let audio = audioBuffer {
            guard audio.format.sampleRate > 0 else { return nil }
            return .nanoseconds(Int64(audio.frameCount) * 1_000_000_000 / Int64(audio.format.sampleRate))
        }
        guard let interval = videoFormat?.frameInterval, interval.denominator > 0 else { return nil }
        return .nanoseconds(Int64(interval.numerator) * 1_000_000_000 / Int64(interval.denominator))
    }

    /// Samples in the buffer (`CMSampleBuffer.numSamples`): audio frames for audio (one per
    /// channel set), 1 for a video frame.
    public var numSamples: Int {
        if let audio = audioBuffer { return audio.frameCount }
        return pixelFormat == nil ? 0 : 1
    }
}
