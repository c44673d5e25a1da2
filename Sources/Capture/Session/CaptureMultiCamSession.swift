import CaptureBackend
import Foundation

/// A session that runs several cameras at once, as `AVCaptureMultiCamSession`.
///
/// Add each camera with `addInput` and its outputs with `addOutput`: an output is connected to
/// the first camera that feeds no output of its kind yet, so adding camera A, camera B and then
/// two video data outputs gives A's frames to the first and B's to the second. For other
/// layouts, add with `addInputWithNoConnections` / `addOutputWithNoConnections` and connect
/// with `addConnection(CaptureConnection(input:output:))`. Each connection carries only its
/// input's frames. Every frame's `presentationTimeStamp` is on the one monotonic capture clock
/// (`CaptureTime`), so frames of different cameras taken together can be paired by time.
///
/// The session preset applies to every camera. When the cameras share a USB bus that cannot
/// carry them all (`ENOSPC` from `STREAMON`), starting fails with `.deviceBusy` whose
/// `isInsufficientBandwidth` is true and whose message names the cameras and the size: choose a
/// smaller preset or a compressed format, or spread the cameras over USB controllers.
/// Thread-safe, as `CaptureSession`.
public final class CaptureMultiCamSession: CaptureSession, @unchecked Sendable {
    /// Whether this system can run several cameras at once: true on Linux, where each camera
    /// streams on its own; whether the bus can carry them is known only when they start.
    public static var isMultiCamSupported: Bool { true }

    /// An empty multi-camera session.
    public override init() { super.init(multiCam: true) }

    /// Adds `input` without connecting it to any output (`addInputWithNoConnections`); refused as
    /// `addInput` refuses (a `.configurationRejected` event, and the commit says `.rejected`).
    public func addInputWithNoConnections(_ input: CaptureInput) { addInputWithoutLinks(input) }

    /// Adds `output` without connecting it to any input (`addOutputWithNoConnections`).
    public func addOutputWithNoConnections(_ output: CaptureOutput) { addOutputWithoutLinks(output) }

    /// Whether `connection` can be added: its input and output are in the session, both carry
    /// its media type, and the output has no other connection for that media type.
    public func canAddConnection(_ connection: CaptureConnection) -> Bool { canAddLink(connection) }

    /// Adds `connection`; does nothing if `canAddConnection` says no.
    public func addConnection(_ connection: CaptureConnection) { addLink(connection) }

    /// Removes `connection`; its output gets no more frames from its input.
    public func removeConnection(_ connection: CaptureConnection) { removeLink(connection) }
}

extension CaptureError {
    /// Whether the bus cannot carry the stream (V4L2 `STREAMON` answered `ENOSPC`: not enough
    /// USB bandwidth for this camera beside the others on its controller).
    public var isInsufficientBandwidth: Bool { errno == ENOSPC && operation == "VIDIOC_STREAMON" }
}
