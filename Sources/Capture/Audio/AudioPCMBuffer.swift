import Foundation

/// The format of captured audio.
public struct AudioFormat: Sendable, Hashable, CustomStringConvertible {
    /// How one sample is stored.
    public enum SampleFormat: String, Sendable, Hashable {
        /// Signed 16-bit little-endian integers.
        case s16
        /// Signed 32-bit little-endian integers.
        case s32
        /// 32-bit little-endian floats in -1...1.
        case float32
        /// Bytes per sample.
        public var bytesPerSample: Int {
            switch self {
            case .s16: 2
            case .s32, .float32: 4
            }
        }
    }
    public var sampleRate: Int
    public var channelCount: Int
    public var sampleFormat: SampleFormat
    /// Channels alternate sample by sample (ALSA interleaved access).
    public var isInterleaved: Bool
    public init(sampleRate: Int, channelCount: Int, sampleFormat: SampleFormat, isInterleaved: Bool = true) {
        self.sampleRate = sampleRate
        self.channelCount = channelCount
        self.sampleFormat = sampleFormat
        self.isInterleaved = isInterleaved
    }
    /// Bytes per frame (one sample of every channel).
    public var bytesPerFrame: Int { sampleFormat.bytesPerSample * channelCount }
    public var description: String {
        "\(sampleRate) Hz, \(channelCount) ch, \(sampleFormat.rawValue)\(isInterleaved ? "" : " planar")"
    }
}

/// A block of captured PCM audio: `frameCount` frames in `format`, owned by this object.
public final class AudioPCMBuffer: @unchecked Sendable {
    public let format: AudioFormat
    /// Frames (samples per channel) in this buffer.
    public let frameCount: Int
    /// The interleaved sample bytes.
    public let data: Data

    init(format: AudioFormat, frameCount: Int, data: Data) {
        self.format = format
        self.frameCount = frameCount
        self.data = data
    }
}
