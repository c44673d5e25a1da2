import CaptureBackend

/// A consumer of frames inside the package (the preview, the server): the input's route table
/// calls it directly, with no queue and no backlog of the library's in between.
///
/// Both methods run under the input's route lock, on its capture thread or on a JPEG stage's
/// encoder thread, in frame order: return quickly and never wait for anything that may wait for
/// the session (its configuration, start or stop). A sample is valid for the call only: keep it
/// with `heldFrame()` (a hold on the driver buffer) or copy what you need.
package protocol FrameConsumer: AnyObject, Sendable {
    /// A good frame: the camera's (raw, or an MJPEG camera's JPEG made complete) or, when the
    /// port asks for JPEG, the JPEG the input's stage made of it once for every consumer.
    func consume(_ sample: SampleBuffer, from connection: CaptureConnection)
    /// Frames lost before this consumer (by the camera, or by a JPEG stage that fell behind).
    func consumeDrop(_ drop: DroppedFrames, from connection: CaptureConnection)
}

/// A `FrameConsumer`'s place in a session's graph: it gets a connection per camera (the preview
/// layer's `connection` is one), beside the app's outputs and not among `outputs`. What it takes
/// is fixed when it is made, so the routes never ask. It holds its consumer weakly: the consumer
/// owns the port, and frames to a consumer that is gone are dropped. Thread-safe.
package final class FrameConsumerPort: CaptureOutput, @unchecked Sendable {
    private weak let consumer: (any FrameConsumer)?
    private let fixedSubscription: FrameSubscription
    private let showsOrientation: Bool

    /// A port for `consumer`: raw frames, or JPEG at `jpegQuality` (the camera's subsampling, one
    /// encoder thread unless an app's output at that quality asked for more). `showsOrientation`:
    /// the consumer applies its connection's turn and mirroring itself (the preview draws them),
    /// so the connection says it supports them; frames are never turned for it.
    package init(_ consumer: any FrameConsumer, jpegQuality: Int? = nil, showsOrientation: Bool = false) {
        self.consumer = consumer
        fixedSubscription = CaptureVideoDataOutput.subscription(
            of: .init(jpeg: jpegQuality.map { .init(quality: $0) }))
        self.showsOrientation = showsOrientation
        super.init(frameConsumer: true)
    }

    override var acceptedMediaTypes: Set<MediaType> { [.video] }
    override var supportsOrientation: Bool { showsOrientation }
    override var subscription: FrameSubscription { fixedSubscription }

    override func handleFrame(_ sample: SampleBuffer, connection: CaptureConnection) {
        consumer?.consume(sample, from: connection)
    }
    override func handleEncodedFrame(_ jpeg: SampleBuffer, connection: CaptureConnection) {
        consumer?.consume(jpeg, from: connection)
    }
    override func handleDrop(_ drop: DroppedFrames, connection: CaptureConnection) {
        consumer?.consumeDrop(drop, from: connection)
    }
}
