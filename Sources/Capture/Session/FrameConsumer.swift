import CaptureBackend
import CaptureSystem
import Synchronization

/// A consumer of frames inside the package (the preview, the server): the input's route table
/// calls it directly, with no queue and no backlog of the library's in between.
///
/// Both methods run under the input's route lock, on its capture thread or on a JPEG stage's
/// encoder thread, in frame order: return quickly and never wait for anything that may wait for
/// the session (its configuration, start or stop). A sample is valid for the call only: keep it
/// with `heldFrame()` or `hold()` (a hold on the driver buffer, or on a JPEG slot) or copy what you need.
package protocol FrameConsumer: AnyObject, Sendable {
    /// A good frame: the camera's (raw, or an MJPEG camera's JPEG made complete) or, when the
    /// port asks for JPEG, the JPEG the input's stage made of it once for every consumer.
    func consume(_ sample: SampleBuffer, from connection: CaptureConnection)
    /// Frames lost before this consumer (by the camera, or by a JPEG stage that fell behind).
    func consumeDrop(_ drop: DroppedFrames, from connection: CaptureConnection)
    /// A microphone's buffer, for a consumer whose port takes audio (on the input's reader
    /// thread, under its route lock). The sample is the consumer's to keep.
    func consumeAudio(_ sample: SampleBuffer, from connection: CaptureConnection)
}

extension FrameConsumer {
    /// Video consumers take no audio.
    package func consumeAudio(_ sample: SampleBuffer, from connection: CaptureConnection) {}
}

/// A `FrameConsumer`'s place in a session's graph: it gets a connection per camera (the preview
/// layer's `connection` is one), beside the app's outputs and not among `outputs`. What it takes
/// is fixed when it is made, or set with `encodedProduct`, so the routes never ask per frame. It
/// holds its consumer weakly: the consumer owns the port, and frames to a consumer that is gone
/// are dropped. Thread-safe.
package final class FrameConsumerPort: CaptureOutput, @unchecked Sendable {
    package private(set) weak var consumer: (any FrameConsumer)?
    private let fixedSubscription: FrameSubscription
    private let showsOrientation: Bool
    /// What the port connects to: cameras, or microphones (an audio port).
    private let media: MediaType
    /// What the port takes instead of `fixedSubscription`, when set.
    private let wish = Locked<FrameSubscription?>(nil)
    private let keyFrameWanted = Atomic<Bool>(false)

    /// A port for `consumer`: raw frames, or JPEG at `jpegQuality` (the camera's subsampling, one
    /// encoder thread unless an app's output at that quality asked for more). `showsOrientation`:
    /// the consumer applies its connection's turn and mirroring itself (the preview draws them),
    /// so the connection says it supports them; frames are never turned for it.
    package init(_ consumer: any FrameConsumer, jpegQuality: Int? = nil, showsOrientation: Bool = false) {
        self.consumer = consumer
        keepsEveryFrame = false
        fixedSubscription = CaptureVideoDataOutput.subscription(
            of: .init(jpeg: jpegQuality.map { .init(quality: $0) }))
        self.showsOrientation = showsOrientation
        media = .video
        super.init()
    }

    /// A port for `consumer`'s audio: a connection per microphone, each buffer to
    /// `consumeAudio`, each loss to `consumeDrop`.
    package init(audioFor consumer: any FrameConsumer) {
        self.consumer = consumer
        keepsEveryFrame = false
        fixedSubscription = FrameSubscription()
        showsOrientation = false
        media = .audio
        super.init()
    }

    /// A port for the encoded audio (AAC, Opus) of a connection per microphone: it takes nothing
    /// until `encodedProduct` is set, then the packets of the product's stage, which the
    /// microphone's reader feeds once per buffer for every consumer of the product; losses come
    /// to `consumeDrop` from the stage, each once. `keepsEveryFrame`: the consumer wants every
    /// packet (a file), so the stage waits longer for its encoder before it loses audio.
    package init(audioEncodedFor consumer: any FrameConsumer, keepsEveryFrame: Bool = false) {
        self.consumer = consumer
        self.keepsEveryFrame = keepsEveryFrame
        fixedSubscription = FrameSubscription(off: true)
        showsOrientation = false
        media = .audio
        super.init()
    }

    /// Whether the consumer wants every frame (every packet) of its encoded product (a file):
    /// the product's stage then keeps what it is behind on instead of the newest winning.
    package let keepsEveryFrame: Bool

    /// A port that takes nothing until `encodedProduct` or `jpegQuality` is set.
    package init(encodedFor consumer: any FrameConsumer, keepsEveryFrame: Bool = false) {
        self.consumer = consumer
        self.keepsEveryFrame = keepsEveryFrame
        fixedSubscription = FrameSubscription(off: true)
        showsOrientation = false
        media = .video
        super.init()
    }

    /// The encoded product (H.264; AAC or Opus for an audio port) the consumer takes instead of
    /// frames or buffers, or nil for what the port was made with. Taken from the next frame
    /// (buffer) on; each consumer that joins a video product's stage starts with a key frame. Setting it replaces a `jpegQuality` set. Never set it from `consume`.
    package var encodedProduct: EncodedProduct? {
        get { wish.withLock { $0?.encoded } }
        set { take(newValue.map { FrameSubscription(encoded: $0) }) }
    }

    /// The quality of the JPEG the consumer takes (the input's JPEG stage's, or an MJPEG camera's
    /// completed frames), or nil for what the port was made with. Setting it replaces an
    /// `encodedProduct` set. Never set it from `consume`.
    package var jpegQuality: Int? {
        get { wish.withLock { $0?.jpeg?.quality } }
        set { take(newValue.map { CaptureVideoDataOutput.subscription(of: .init(jpeg: .init(quality: $0))) }) }
    }

    private func take(_ subscription: FrameSubscription?) {
        guard
            wish.withLock({ w in
                defer { w = subscription }; return w != subscription
            })
        else { return }
        subscriptionChanged()
    }

    /// Asks the stage of `encodedProduct` for a key frame soon (the consumer lost units, or
    /// resumes after a pause). Any thread, also from `consume`.
    package func requestKeyFrame() { keyFrameWanted.store(true, ordering: .releasing) }
    /// Whether a key frame was asked for since the last call. Capture thread.
    func takeKeyFrameRequest() -> Bool {
        keyFrameWanted.load(ordering: .acquiring) && keyFrameWanted.exchange(false, ordering: .acquiringAndReleasing)
    }

    override var acceptedMediaTypes: Set<MediaType> { [media] }
    override var supportsOrientation: Bool { showsOrientation }
    override var subscription: FrameSubscription { wish.withLock { $0 } ?? fixedSubscription }

    override func handleFrame(_ sample: SampleBuffer, connection: CaptureConnection) {
        consumer?.consume(sample, from: connection)
    }
    override func handleEncodedFrame(_ jpeg: SampleBuffer, connection: CaptureConnection) {
        consumer?.consume(jpeg, from: connection)
    }
    override func handleDrop(_ drop: DroppedFrames, connection: CaptureConnection) {
        consumer?.consumeDrop(drop, from: connection)
    }
    override func handleAudio(_ sample: SampleBuffer, connection: CaptureConnection) {
        consumer?.consumeAudio(sample, from: connection)
    }
}
