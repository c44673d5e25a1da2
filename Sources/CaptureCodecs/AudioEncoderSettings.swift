import Capture

/// What an audio stage makes of a microphone's buffers: every setting that changes the bytes.
/// Consumers that ask for equal settings on one microphone share one encoder (`product`).
package struct AudioEncoderSettings: Hashable, Sendable {
    package enum Codec: String, Hashable, Sendable {
        /// AAC-LC, FFmpeg's native encoder, in frames of 1024 samples.
        case aac
        /// Opus (libopus where this FFmpeg has it, else FFmpeg's own), in frames of 20 ms.
        case opus
        /// 16-bit little-endian PCM, in packets of 20 ms (no encoder delay).
        case pcm
    }

    package var codec: Codec
    /// Bits per second; nil: 64 kb/s per channel. (PCM has none.)
    package var bitRate: Int?
    /// Samples per second; nil: the microphone's. The stage does not resample: a rate the
    /// microphone does not give fails the stage, with words.
    package var sampleRate: Int?
    /// Channels; nil: the microphone's (Opus: at most two). A mono microphone fills every
    /// channel; a microphone's channels beyond these are left out.
    package var channels: Int?

    package init(codec: Codec = .aac, bitRate: Int? = nil, sampleRate: Int? = nil, channels: Int? = nil) {
        self.codec = codec
        self.bitRate = codec == .pcm ? nil : bitRate
        self.sampleRate = sampleRate
        self.channels = channels.map { max(1, $0) }
    }

    /// The product consumers subscribe to (an audio port's `FrameConsumerPort.encodedProduct`).
    package var product: EncodedProduct {
        let rate = sampleRate.map(String.init) ?? "input", ch = channels.map(String.init) ?? "input"
        return EncodedProduct(key: "audio \(codec.rawValue) \(bitRate.map(String.init) ?? "default") \(rate) \(ch)") { outlet in
            AudioEncodeStage(settings: self, outlet: outlet)
        }
    }
}

/// A consumer of an audio stage's packets (the recorder, the streaming paths). Called on the
/// stage's thread, in order, under the microphone's route lock: return quickly. A packet is
/// valid for the call only unless the consumer takes a hold on it (`hold()`, then `letGo()`);
/// a consumer bounds what it holds. Losses (the microphone's, or the stage's when it fell
/// behind) come to `consumeDrop`, each once, counted in samples, in order with the packets.
package protocol AudioPacketConsumer: FrameConsumer {
    func consumeAudioPacket(_ packet: AudioPacket, from connection: CaptureConnection)
    /// The stage cannot encode (no such encoder, a format it refuses): no packets will come.
    func audioStageFailed(_ error: AudioStageError, from connection: CaptureConnection)
}

extension AudioPacketConsumer {
    /// Frames never come to an audio consumer.
    package func consume(_ sample: SampleBuffer, from connection: CaptureConnection) {}
}

/// Why an audio stage makes nothing, with what to do.
package struct AudioStageError: Error, Sendable {
    package enum Code: Sendable {
        /// This FFmpeg has no such encoder, or it refuses the microphone's format.
        case unsupportedCodec
        /// The encoder failed.
        case encoderFailed
    }
    package let code: Code
    package let message: String
}
