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

/// The stage that makes an `EncodedProduct` of one running input's raw frames. The capture
/// thread makes it on first use, feeds it and shuts it down; its results go out through its
/// `EncodedStageOutlet`, usually from a thread of its own.
package protocol EncodedStage: AnyObject, Sendable {
    /// A raw frame (a frame lease) to encode; `keyFrame`: make it a key frame (a consumer joined
    /// or asked for one); `keepsEveryFrame`: a consumer (a file) wants every frame, so frames
    /// the stage is behind on wait (copied, so the camera's buffers go back) rather than the
    /// newest winning. Capture thread, under the input's route lock: return quickly, and keep
    /// the frame past the call only with a hold (`heldFrame()`) or a copy. Frames the stage does
    /// not encode it reports through the outlet, each once.
    func submit(_ sample: SampleBuffer, keyFrame: Bool, keepsEveryFrame: Bool)
    /// Finishes the encode under way and stops; frames still waiting are reported lost. Capture
    /// thread, never under the route lock.
    func shutdown()
}

/// Where a stage delivers: the consumers of its product on its input, as the route table has
/// them now. Thread-safe.
package struct EncodedStageOutlet: Sendable {
    let product: EncodedProduct
    let routes: RouteTable
    let encodes: EncodeCounter
    /// The input's nominal frame interval (what the device was set to).
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

/// One running input's stage for a product, as the capture thread keeps it.
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
}
