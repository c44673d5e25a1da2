import CaptureBackend
import Synchronization

/// A product that a package product makes of an input's raw frames (the H.264 of
/// `CaptureCodecs`): consumers that ask for equal products (the same `key`) share one stage, so
/// each frame is encoded once for all of them. The core knows no codec: the product brings the
/// stage it runs on.
package struct EncodedProduct: Hashable, Sendable {
    /// Says what is made, with every setting that changes the bytes (codec, size, rate, ...).
    package let key: String
    /// Starts the stage for this product on one running input (capture thread).
    package let makeStage: @Sendable (EncodedStageOutlet) -> any EncodedStage

    package init(key: String, makeStage: @escaping @Sendable (EncodedStageOutlet) -> any EncodedStage) {
        self.key = key
        self.makeStage = makeStage
    }

    package static func == (a: Self, b: Self) -> Bool { a.key == b.key }
    package func hash(into h: inout Hasher) { h.combine(key) }
}

/// The stage that makes an `EncodedProduct` of one running input's raw frames (a camera's) or
/// buffers (a microphone's; a stage takes one of the two). The input's thread makes it on first
/// use, feeds it and shuts it down; its results go out through its `EncodedStageOutlet`, usually
/// from a thread of its own.
package protocol EncodedStage: AnyObject, Sendable {
    /// A raw frame (a frame lease) to encode; `keyFrame`: make it a key frame (a consumer joined
    /// or asked for one); `keepsEveryFrame`: a consumer (a file) wants every frame, so frames
    /// the stage is behind on wait (copied, so the camera's buffers go back) rather than the
    /// newest winning. Capture thread, under the input's route lock: return quickly, and keep
    /// the frame past the call only with a hold (`heldFrame()`) or a copy. Frames the stage does
    /// not encode it reports through the outlet, each once.
    func submit(_ sample: SampleBuffer, keyFrame: Bool, keepsEveryFrame: Bool)
    /// Frames the camera lost after the frames submitted so far: the stage reports it to its
    /// consumers once, after what it delivers of those frames, so that a consumer's reports
    /// stay in frame order (the input does not report it to them). Capture thread, under the
    /// input's route lock: return quickly.
    func submitDrop(_ drop: DroppedFrames)
    /// A microphone's buffer to encode, after `drop`: the samples the microphone lost just
    /// before it, which the stage reports to its consumers once, in order with what it delivers
    /// (the input does not report it to them). Reader thread, under the input's route lock:
    /// return quickly; the sample is the stage's to keep.
    func submitAudio(_ sample: SampleBuffer, drop: DroppedFrames?, keepsEveryFrame: Bool)
    /// Finishes the encode under way and stops; frames still waiting are reported lost (an
    /// audio stage encodes what waits, and its encoder's tail). The input's thread, never under
    /// the route lock.
    func shutdown()
}

extension EncodedStage {
    /// A stage of audio takes no frames.
    package func submit(_ sample: SampleBuffer, keyFrame: Bool, keepsEveryFrame: Bool) {}
    /// A stage of audio takes no camera's losses.
    package func submitDrop(_ drop: DroppedFrames) {}
    /// A stage of video takes no audio.
    package func submitAudio(_ sample: SampleBuffer, drop: DroppedFrames?, keepsEveryFrame: Bool) {}
}

/// Where a stage delivers: the consumers of its product on its input, as the route table has
/// them now. Thread-safe.
package struct EncodedStageOutlet: Sendable {
    let product: EncodedProduct
    let routes: RouteTable
    let encodes: EncodeCounter
    /// The input's nominal frame interval (what the device was set to; a microphone's: 1/30 s,
    /// unused).
    package let frameInterval: FrameInterval

    /// Calls `body` with each consumer of the product whose connection is enabled, in the order
    /// they were added, under the input's route lock: a consumer removed is never called after
    /// its removal returned. Call it in frame order, and never from inside `submit`.
    package func forEachConsumer(_ body: (any FrameConsumer, CaptureConnection) -> Void) {
        routes.withRoutes { routes in
            for r in routes where r.connection.isEnabled && r.subscription.encoded == product {
                if let c = (r.output as? FrameConsumerPort)?.consumer { body(c, r.connection) }
            }
        }
    }

    /// Frames the stage lost (it fell behind, or an encode failed), to every consumer of the product.
    package func drop(_ drop: DroppedFrames) {
        forEachConsumer { c, connection in c.consumeDrop(drop, from: connection) }
    }

    /// Counts one encode (`CaptureSession.stageEncodes`: encodes per frame for tests and benchmarks).
    package func countEncode() { encodes.count.add(1, ordering: .relaxed) }
}

/// One running input's stage for a product, as the input's thread keeps it.
struct EncodedStageEntry {
    let product: EncodedProduct
    let stage: any EncodedStage
    /// The last frame fed (for shutting down an idle stage) and the routes' generation then (a
    /// change may have brought a consumer that needs a key frame).
    var lastFed: UInt64 = 0
    var generation: UInt64
    /// The ports of the product as of `generation`, and whether one keeps every frame.
    var consumers: [ObjectIdentifier] = []
    var keepsEveryFrame = false

    /// Notes who consumes the product when the routes changed since it last looked (`generation`
    /// is the table's now), or a connection was turned off or on; true when a consumer joined (a
    /// route added, or its connection enabled again: a video stage starts it at a key frame).
    /// Allocates only on a change.
    mutating func noteConsumers(_ routes: [Route], generation: UInt64) -> Bool {
        if self.generation == generation {
            var enabled = 0
            var same = true
            for r in routes where r.connection.isEnabled && r.subscription.encoded == product {
                enabled += 1
                if !consumers.contains(ObjectIdentifier(r.output)) {
                    same = false
                    break
                }
            }
            if same && enabled == consumers.count { return false }
        }
        self.generation = generation
        var ports: [ObjectIdentifier] = []
        var every = false
        for r in routes where r.connection.isEnabled && r.subscription.encoded == product {
            ports.append(ObjectIdentifier(r.output))
            if (r.output as? FrameConsumerPort)?.keepsEveryFrame == true { every = true }
        }
        let joined = ports.contains { !consumers.contains($0) }
        consumers = ports
        keepsEveryFrame = every
        return joined
    }
}
