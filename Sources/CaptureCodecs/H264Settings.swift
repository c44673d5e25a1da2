import Capture

/// What an H.264 stage makes: every setting that changes the bytes. Consumers that ask for equal
/// settings on one input share one encoder (`product`); the size, rate and pixel layout are the
/// input's.
package struct H264Settings: Hashable, Sendable {
    package enum RateControl: Hashable, Sendable {
        /// Constant quality (x264's CRF, 0...51; lower is better).
        case quality(Int)
        /// Bits per second.
        case bitrate(Int)
    }

    /// FFmpeg's encoder: `libx264` (software) or `h264_v4l2m2m` (a V4L2 memory-to-memory encoder).
    package var encoder: String
    /// x264's preset (`ultrafast` ... `veryslow`).
    package var preset: String
    package var rateControl: RateControl
    /// Frames from one key frame to the next (a consumer that joins, or asks, gets one sooner).
    package var keyFrameInterval: Int

    package init(
        encoder: String = "libx264", preset: String = "veryfast", rateControl: RateControl = .quality(23), keyFrameInterval: Int = 30
    ) {
        self.encoder = encoder
        self.preset = preset
        self.rateControl = rateControl
        self.keyFrameInterval = max(1, keyFrameInterval)
    }

    /// The product consumers subscribe to (`FrameConsumerPort.encodedProduct`).
    package var product: EncodedProduct {
        EncodedProduct(key: "h264 \(encoder) \(preset) \(rateControl) \(keyFrameInterval)") { outlet in
            H264Stage(settings: self, outlet: outlet)
        }
    }
}

/// A consumer of an H.264 stage's access units (the recorder, the browser paths). Called on the
/// stage's encoder thread, in frame order, under the input's route lock: return quickly. A unit
/// is valid for the call only unless the consumer takes a hold on it (`hold()`, then `letGo()`),
/// which is how a consumer queues units without a copy; a consumer bounds what it holds.
package protocol H264Consumer: FrameConsumer {
    func consume(_ unit: H264AccessUnit, from connection: CaptureConnection)
    /// The stage could not encode (no such encoder, a size it refuses): no units will come.
    func h264StageFailed(_ error: H264StageError, from connection: CaptureConnection)
}

extension H264Consumer {
    /// Frames never come to an H.264 consumer, only units.
    package func consume(_ sample: SampleBuffer, from connection: CaptureConnection) {}
}

/// Why an H.264 stage makes nothing, with what to do.
package struct H264StageError: Error, Sendable {
    package enum Code: Sendable {
        /// This FFmpeg has no such encoder, or it cannot be opened here.
        case unsupportedCodec
        /// The encoder refused the frames or failed.
        case encoderFailed
    }
    package let code: Code
    package let message: String
}
