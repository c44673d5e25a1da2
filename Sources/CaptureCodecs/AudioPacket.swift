import Capture
import Foundation

/// What an audio stage's encoder makes, the same for all its packets: what a muxer puts in its
/// header. Immutable; any thread.
package final class AudioStreamFormat: Sendable {
    package let codec: AudioEncoderSettings.Codec
    /// FFmpeg's encoder (`aac`, `libopus`, `opus`, `pcm_s16le`).
    package let encoderName: String
    package let sampleRate: Int
    package let channels: Int
    /// Samples per packet (the last one before a stop may be shorter).
    package let frameSize: Int
    /// Samples the encoder puts before the first captured one (AAC's priming, Opus's pre-skip).
    package let initialPadding: Int
    /// Bits per second (0 for PCM).
    package let bitRate: Int
    /// The codec's setup for a muxer: AAC's AudioSpecificConfig, Opus's OpusHead (empty for PCM).
    package let extradata: Data
    /// One packet of `frameSize` samples of silence in this stream (as the encoder makes it in
    /// steady state): what a consumer puts where it has no packets (a file's gap), so that its
    /// time line keeps no hole.
    package let silence: Data

    init(
        codec: AudioEncoderSettings.Codec, encoderName: String, sampleRate: Int, channels: Int, frameSize: Int,
        initialPadding: Int, bitRate: Int, extradata: Data, silence: Data
    ) {
        self.codec = codec
        self.encoderName = encoderName
        self.sampleRate = sampleRate
        self.channels = channels
        self.frameSize = frameSize
        self.initialPadding = initialPadding
        self.bitRate = bitRate
        self.extradata = extradata
        self.silence = silence
    }

    /// Whether packets of `other` can go on a stream set up for this one (a new stage of the
    /// same settings makes equal packets).
    package func isCompatible(with other: AudioStreamFormat) -> Bool {
        other === self
            || (codec == other.codec && sampleRate == other.sampleRate && channels == other.channels && frameSize == other.frameSize
                && extradata == other.extradata)
    }
}

/// One encoded audio frame and when its samples were captured. Shared by every consumer of its
/// stage; reused by the stage once its last holder let go (explicit holds, no copies). The
/// bytes and properties are fixed while anyone holds it.
package final class AudioPacket: HeldBytes, @unchecked Sendable {
    /// Where its first sample lies on the stage's time line, in samples (the encoder's padding
    /// before the first captured sample makes the first packets' negative). Packets follow each
    /// other without gaps or overlaps; samples the microphone lost are silence in it.
    package private(set) var pts: Int64 = 0
    /// Samples it decodes to.
    package private(set) var duration = 0
    /// The capture time of its first sample (the stage's time line mapped onto the capture clock).
    package private(set) var presentationTimeStamp = CaptureTime(nanoseconds: 0)
    /// The stage's stream: codec, rate, channels, extradata.
    package private(set) var format: AudioStreamFormat?

    /// When its samples end on the capture clock.
    package var endTime: CaptureTime {
        let rate = UInt64(max(1, format?.sampleRate ?? 1))
        return CaptureTime(nanoseconds: presentationTimeStamp.nanoseconds &+ UInt64(duration) * 1_000_000_000 / rate)
    }

    /// Refills a free packet (the stage's, before it hands it out).
    func fill(_ bytes: UnsafeRawBufferPointer, pts: Int64, duration: Int, time: CaptureTime, format: AudioStreamFormat) {
        store(bytes)
        self.pts = pts
        self.duration = duration
        presentationTimeStamp = time
        if self.format !== format { self.format = format }
    }
}
