import CaptureBackend
import CaptureSystem
import Foundation

/// Why frames did not reach a video data output.
public enum DropReason: String, Sendable, Hashable, CaseIterable {
    /// The delegate was still busy with an earlier frame (`alwaysDiscardsLateVideoFrames`).
    case frameWasLate
    /// Every driver buffer was held by the app, so the device had nowhere to write.
    case outOfBuffers
    /// The device skipped frames (a gap in its sequence numbers).
    case discontinuity
    /// The device delivered a damaged frame (driver error flag, bad size, truncated JPEG).
    case corrupt
}

/// A hosting output's part in joining and leaving a session (`CaptureOutput.hosting`).
package struct OutputHosting: Sendable {
    /// After the session added the output's ports.
    package var joined: @Sendable (CaptureSession) -> Void
    /// After the session removed them.
    package var left: @Sendable (CaptureSession) -> Void
    package init(joined: @escaping @Sendable (CaptureSession) -> Void, left: @escaping @Sendable (CaptureSession) -> Void) {
        self.joined = joined
        self.left = left
    }
}

/// Frames that were not delivered, as `captureOutput(_:didDrop:from:)` reports them.
public struct DroppedFrames: Sendable, Hashable, CustomStringConvertible {
    public var reason: DropReason
    /// How many frames were lost.
    public var count: Int
    /// The sequence number of the first lost frame, where known.
    public var sequenceNumber: UInt64?
    /// When the drop was noticed, on the monotonic clock.
    public var time: CaptureTime
    public init(reason: DropReason, count: Int, sequenceNumber: UInt64?, time: CaptureTime = .now()) {
        self.reason = reason
        self.count = count
        self.sequenceNumber = sequenceNumber
        self.time = time
    }
    public var description: String { "\(count) dropped (\(reason.rawValue))" }
}

/// A destination for captured media, as `AVCaptureOutput`. Use one of its subclasses: the core's
/// photo, still image, video data and audio data outputs, and the products' movie file
/// (`CaptureRecording`) and metadata (`CaptureVision`) outputs. (Open so that those products'
/// outputs can be outputs too; it has no initializer outside this package.)
///
/// Thread-safe. Connections are made by the session when a matching input is present.
open class CaptureOutput: @unchecked Sendable {
    private let outputState = Locked(OutputState())
    struct OutputState {
        weak var session: CaptureSession?
        var connections: [CaptureConnection] = []
        var hosting: OutputHosting?
    }

    /// For an output of another product of this package (movie file, metadata): the consumer
    /// ports it takes frames through, which the session adds and removes with it; empty for the
    /// core's outputs and for a port itself.
    package let hostedPorts: [FrameConsumerPort]

    init() { hostedPorts = [] }

    /// An output that takes its frames through `ports` (at least one); see `hosting`.
    package init(hosting ports: [FrameConsumerPort]) {
        precondition(!ports.isEmpty, "a hosting output needs a port")
        hostedPorts = ports
    }

    /// What a hosting output does when a session takes it in or lets it go, once its ports are
    /// added or removed (outside the session's lock).
    package var hosting: OutputHosting? {
        get { outputState.withLock { $0.hosting } }
        set { outputState.withLock { $0.hosting = newValue } }
    }

    /// Whether the output takes its frames through ports of its own (`init(hosting:)`).
    var isHosting: Bool { !hostedPorts.isEmpty }

    /// A consumer's port inside the package (preview, server, recorder; `FrameConsumerPort`):
    /// not in the session's `outputs`, and exempt from the one-output-per-kind rule.
    var isConsumerPort: Bool { self is FrameConsumerPort }

    /// The session the output belongs to.
    public var session: CaptureSession? { isHosting ? hostedPorts[0].session : outputState.withLock { $0.session } }
    /// The output's connections, one per connected input.
    public var connections: [CaptureConnection] {
        isHosting ? hostedPorts.flatMap(\.connections) : outputState.withLock { $0.connections }
    }
    /// The first connection carrying `mediaType`, or nil (e.g. before an input is added).
    public func connection(with mediaType: MediaType) -> CaptureConnection? {
        connections.first { $0.mediaType == mediaType }
    }

    func attach(to session: CaptureSession?) { outputState.withLock { $0.session = session } }
    func setConnections(_ list: [CaptureConnection]) { outputState.withLock { $0.connections = list } }

    // MARK: Hooks for subclasses (called by the session's capture threads)

    /// Media types the output accepts.
    var acceptedMediaTypes: Set<MediaType> { [] }
    /// Whether connections to this output apply orientation and mirroring.
    var supportsOrientation: Bool { false }
    /// Pixel format the output would like the device to deliver, if any.
    var preferredPixelFormat: PixelFormat? { nil }
    /// What the output takes of its input's frames; read when routes are built (a commit, or
    /// `subscriptionChanged()`), never per frame.
    var subscription: FrameSubscription { FrameSubscription() }

    /// Tells the session that `subscription` changed (e.g. new `videoSettings`): the capture
    /// threads take it for their next frame. Never call it from a hook that runs under a route
    /// lock (`handleFrame`, `handleEncodedFrame`, `handleDrop`, `handleAudio`).
    func subscriptionChanged() { session?.refreshRoutes(of: self) }

    /// A JPEG this output can take instead of a raw frame when the input makes it for another
    /// output anyway (a pending still at the stream's quality); nil: never. Asked only while the
    /// subscription's `stills` says a capture waits.
    var acceptsSharedJPEG: JPEGProduct? { nil }

    /// A good frame from `connection`'s input. Must return quickly: it runs on the capture thread.
    /// Keeping `sample` keeps its driver buffer.
    func handleFrame(_ sample: SampleBuffer, connection: CaptureConnection) {}
    /// A frame's JPEG from the input's JPEG stage (`subscription.jpeg` or `acceptsSharedJPEG`), in
    /// frame order, on an encoder thread. Must return quickly; the same sample may go to other
    /// outputs too.
    func handleEncodedFrame(_ jpeg: SampleBuffer, connection: CaptureConnection) {}
    /// Frames lost on `connection`'s input.
    func handleDrop(_ drop: DroppedFrames, connection: CaptureConnection) {}
    /// An audio buffer from `connection`'s input.
    func handleAudio(_ sample: SampleBuffer, connection: CaptureConnection) {}
    /// The input failed (disconnect, fatal driver error) or the session stopped.
    func inputDidStop(_ connection: CaptureConnection, error: CaptureError?) {}
    /// `connection` is gone while the output stays (its input was removed, e.g. a camera toggle).
    func connectionRemoved(_ connection: CaptureConnection) {}
}
