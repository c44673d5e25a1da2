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

    /// Adds `output` without connecting it to any input (`addOutputWithNoConnections`). A movie
    /// file or metadata output, which takes its frames through ports of its own, is added as
    /// `addOutput` adds it, connected to every camera (and microphone).
    public func addOutputWithNoConnections(_ output: CaptureOutput) {
        if output.isHosting { return addOutput(output) }
        addOutputWithoutLinks(output)
    }

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

// The links behind `CaptureMultiCamSession`'s connection calls (the session's lock and staged
// graph are the base class's).
extension CaptureSession {
    // MARK: Multi-camera connections

    /// Multi-camera: each output's connections are the links made for it. An output added with
    /// `addOutput` (or a frame consumer) is linked, per media type, to the first input added with
    /// `addInput` that feeds no output of its kind yet (a second video data output goes to the
    /// second camera); outputs and inputs added without connections only get the links the app
    /// adds. Called with `lock` held.
    func rebuildLinks(inputs: [CaptureInput], outputs: [CaptureOutput]) {
        stagedLinks.removeAll { l in
            !inputs.contains { $0 === l.input } || !outputs.contains { $0 === l.output }
        }
        for o in outputs where automaticOutputs.contains(ObjectIdentifier(o)) {
            for m in o.acceptedMediaTypes where !stagedLinks.contains(where: { $0.output === o && $0.mediaType == m }) {
                let free = inputs.first { i in
                    i.mediaTypes.contains(m) && !unlinkedInputs.contains(ObjectIdentifier(i))
                        && !stagedLinks.contains { l in
                            guard l.input === i, l.mediaType == m, let other = l.output else { return false }
                            return type(of: other) == type(of: o) && other.isConsumerPort == o.isConsumerPort
                        }
                }
                if let free { stagedLinks.append(CaptureConnection(input: free, output: o, mediaType: m)) }
            }
        }
        var list: [CaptureConnection] = []
        for o in outputs {
            let mine = stagedLinks.filter { $0.output === o }
            o.setConnections(mine)
            list += mine
        }
        allConnections = list
    }

    func addInputWithoutLinks(_ input: CaptureInput) {
        change {
            if let why = checkAdd(input) { refuse(why); return }
            stagedInputs.append(input)
            unlinkedInputs.insert(ObjectIdentifier(input))
        }
    }

    func addOutputWithoutLinks(_ output: CaptureOutput) {
        change {
            guard canAddOutput(output) else { return }
            stagedOutputs.append(output)
            automaticOutputs.remove(ObjectIdentifier(output))
            output.attach(to: self)
        }
    }

    func canAddLink(_ c: CaptureConnection) -> Bool {
        lock.withLock {
            guard isMultiCam, let o = c.output, stagedInputs.contains(where: { $0 === c.input }),
                stagedOutputs.contains(where: { $0 === o }),
                c.input.mediaTypes.contains(c.mediaType), o.acceptedMediaTypes.contains(c.mediaType)
            else { return false }
            // An output takes one connection per media type, as in AVFoundation.
            return !stagedLinks.contains { $0 === c || ($0.output === o && $0.mediaType == c.mediaType) }
        }
    }

    func addLink(_ c: CaptureConnection) {
        change {
            guard canAddLink(c) else { return }
            stagedLinks.append(c)
        }
    }

    func removeLink(_ c: CaptureConnection) {
        change {
            stagedLinks.removeAll { $0 === c }
            // Removed by hand: the output is not linked again automatically.
            if let o = c.output { automaticOutputs.remove(ObjectIdentifier(o)) }
        }
    }
}
