import CaptureVirtual
import CaptureBackend
import CaptureSystem
import Foundation

extension CaptureSession {
    /// Something that happened to a session, as AVFoundation's session notifications.
    public enum Event: Sendable, CustomStringConvertible {
        /// `startRunning` succeeded (`AVCaptureSessionDidStartRunning`).
        case didStartRunning
        /// The session stopped, by request or because its inputs failed (`DidStopRunning`).
        case didStopRunning
        /// An error stopped the session or an input (`AVCaptureSessionRuntimeError`).
        case runtimeError(CaptureError)
        /// A device was unplugged or its driver went away; its input stopped.
        case deviceDisconnected(CaptureDevice)
        /// A device delivered nothing for `duration`, longer than its frame interval allows.
        case deviceStalled(CaptureDevice, duration: Duration)
        /// A stalled device delivers again.
        case deviceResumed(CaptureDevice)
        /// Frames were lost on a device's stream (also reported to video data outputs).
        case framesDropped(CaptureDevice, DroppedFrames)
        /// A configuration change was refused (an input or preset the session cannot take, or a
        /// device that rejected the new format): the previous configuration stays and a running
        /// session keeps running. `commitConfiguration()` returns the same error as `.rejected`.
        case configurationRejected(CaptureError)
        /// A device of the running session cannot deliver for now, for `reason`
        /// (`AVCaptureSessionWasInterrupted`); `isInterrupted` is true until every device's
        /// `interruptionEnded`. Not an error: the session resumes the device by itself.
        case wasInterrupted(CaptureDevice, reason: InterruptionReason)
        /// The device delivers again (`AVCaptureSessionInterruptionEnded`).
        case interruptionEnded(CaptureDevice)

        public var description: String {
            switch self {
            case .didStartRunning: "didStartRunning"
            case .didStopRunning: "didStopRunning"
            case .runtimeError(let e): "runtimeError(\(e))"
            case .deviceDisconnected(let d): "deviceDisconnected(\(d.localizedName))"
            case .deviceStalled(let d, let t): "deviceStalled(\(d.localizedName), \(t))"
            case .deviceResumed(let d): "deviceResumed(\(d.localizedName))"
            case .framesDropped(let d, let f): "framesDropped(\(d.localizedName), \(f))"
            case .configurationRejected(let e): "configurationRejected(\(e))"
            case .wasInterrupted(let d, let r): "wasInterrupted(\(d.localizedName), \(r.rawValue))"
            case .interruptionEnded(let d): "interruptionEnded(\(d.localizedName))"
            }
        }
    }

    /// Why a device was interrupted, as `AVCaptureSession.InterruptionReason`.
    public enum InterruptionReason: String, Sendable, Hashable, CaseIterable {
        /// Another process (or another session) streams from the camera, so it cannot start
        /// (`EBUSY`). The session tries again every quarter second and resumes the camera when
        /// the other client lets go (as AVFoundation resumes when the interruption ends).
        case videoDeviceInUseByAnotherClient
        /// Another process (or another session) holds the microphone's ALSA device, so it
        /// cannot be opened (`EBUSY` from `snd_pcm_open`: a `hw:` device takes one client per
        /// subdevice). The session tries again every quarter second and starts the microphone
        /// when the other client lets go.
        case audioDeviceInUseByAnotherClient
        /// The camera stopped delivering frames for much longer than its frame interval (a hung
        /// camera or driver); it ends with the next frame. Linux only: AVFoundation has no such
        /// reason.
        case videoDeviceStalled
        /// The same for a microphone that delivers nothing.
        case audioDeviceStalled
    }

    /// What `commitConfiguration()` did, in the spirit of libcamera's Valid/Adjusted/Invalid.
    public enum ConfigurationResult: Sendable, Equatable {
        /// Everything asked for is in effect.
        case applied
        /// In effect, with the changes listed (e.g. the driver chose another frame rate).
        case adjusted([String])
        /// Nothing changed: the previous configuration is still in effect.
        case rejected(CaptureError)

        public var isRejected: Bool { if case .rejected = self { true } else { false } }
    }
}

/// Fans session events out to handlers, async streams and `NotificationCenter.default`.
/// Thread-safe.
final class EventHub: Sendable {
    private struct State {
        var handlers: [UUID: @Sendable (CaptureSession.Event) -> Void] = [:]
        var streams: [UUID: AsyncStream<CaptureSession.Event>.Continuation] = [:]
        /// The session the notifications name (weak: the session owns its hub).
        weak var session: CaptureSession?
    }
    private let state = Locked(State())
    private let queue = DispatchQueue(label: "swift-capture.session-events")
    // Tells a wait issued from a hub's own queue (a handler or observer) not to wait for itself.
    private static let queueKey = DispatchSpecificKey<ObjectIdentifier>()

    init() { queue.setSpecific(key: Self.queueKey, value: ObjectIdentifier(self)) }

    /// Returns once everything posted before has been delivered, or after `timeout` (an observer
    /// may be slow); at once when called from this hub's own queue.
    func waitUntilDelivered(timeout: Duration) {
        if DispatchQueue.getSpecific(key: Self.queueKey) == ObjectIdentifier(self) { return }
        let done = DispatchSemaphore(value: 0)
        queue.async { done.signal() }
        let ns = timeout.components.seconds * 1_000_000_000 + timeout.components.attoseconds / 1_000_000_000
        _ = done.wait(timeout: .now() + .nanoseconds(Int(ns)))
    }

    /// Names `session` as the `object` of the notifications posted from now on.
    func setSession(_ session: CaptureSession) { state.withLock { $0.session = session } }

    func post(_ event: CaptureSession.Event) {
        let (handlers, streams, session) = state.withLock { (Array($0.handlers.values), Array($0.streams.values), $0.session) }
        for s in streams { s.yield(event) }
        // A notification goes out on the same queue as the handlers, after them: one order for
        // both, and an observer never runs on a capture thread or inside the session's lock.
        // The session is not held until then: a session let go after stopRunning() must free
        // its camera at once for the next session (a stopped session still holds it). One let
        // go meanwhile is posted with no object; nobody holds it to compare with.
        let notifies = session != nil && event.notification != nil
        if !handlers.isEmpty || notifies {
            queue.async { [weak session] in
                for h in handlers { h(event) }
                if notifies, let n = event.notification {
                    NotificationCenter.default.post(name: n.name, object: session, userInfo: n.userInfo)
                }
            }
        }
    }

    func addHandler(_ h: @escaping @Sendable (CaptureSession.Event) -> Void) -> UUID {
        let id = UUID()
        state.withLock { $0.handlers[id] = h }
        return id
    }
    func removeHandler(_ id: UUID) { _ = state.withLock { $0.handlers.removeValue(forKey: id) } }

    func stream() -> AsyncStream<CaptureSession.Event> {
        let id = UUID()
        let (stream, cont) = AsyncStream<CaptureSession.Event>.makeStream(bufferingPolicy: .bufferingNewest(256))
        state.withLock { $0.streams[id] = cont }
        cont.onTermination = { [weak self] _ in _ = self?.state.withLock { $0.streams.removeValue(forKey: id) } }
        return stream
    }
}

extension CaptureSession {
    // MARK: Events

    /// A new stream of the session's events (each call gets its own stream).
    public func events() -> AsyncStream<Event> { hub.stream() }

    /// Calls `handler` (on a private serial queue) for every event; returns a token for
    /// `removeEventHandler`.
    @discardableResult
    public func addEventHandler(_ handler: @escaping @Sendable (Event) -> Void) -> UUID { hub.addHandler(handler) }
    /// Stops calling the handler `token` names.
    public func removeEventHandler(_ token: UUID) { hub.removeHandler(token) }
}
