import Capture
import CaptureSystem
import Foundation

// The movie output in its session: joining, leaving, its events and its release.
extension CaptureMovieFileOutput {
    /// The session the output is in was released while recording: the recording ends as
    /// `stopRecording()` ends it.
    fileprivate func sessionReleased() {
        guard isRecording else { return }
        stopRecording()
    }

    /// Watches the session from inside its event handler: released with the session's
    /// handlers, so when the session is (and not when `removeOutput` disarmed it).
    var sessionWatch: SessionWatch? {
        get { locked { $0.sessionWatch } }
        set { locked { $0.sessionWatch = newValue } }
    }

    /// The session stopped or lost its camera: a recording under way ends with what it has.
    func sessionEvent(_ event: CaptureSession.Event) {
        switch event {
        case .didStopRunning:
            queue.async { [self] in
                finish(error: RecordingError(.sessionStopped, "the session stopped; the file holds what was recorded until then"))
            }
        case .deviceDisconnected(let d):
            queue.async { [self] in
                finish(
                    error: RecordingError(
                        .sessionStopped, "\(d.localizedName) was disconnected; the file holds what was recorded until then"))
            }
        default:
            break
        }
    }
}

// Added and removed as any output (`CaptureSession.addOutput`, through its ports); then:
extension CaptureMovieFileOutput {
    /// In a session: it ends a recording when the session stops or its camera goes away, or
    /// when the session is released while recording.
    func joined(_ session: CaptureSession) {
        let watch = SessionWatch(self)
        sessionWatch = watch
        eventToken = session.addEventHandler { [weak self] event in
            withExtendedLifetime(watch) { self?.sessionEvent(event) }
        }
    }

    /// Out of its session: a recording under way ends as if the session stopped.
    func left(_ session: CaptureSession) {
        sessionWatch?.disarm()
        if let token = eventToken { session.removeEventHandler(token) }
        eventToken = nil
        queue.async { [self] in finish(error: RecordingError(.sessionStopped, "the movie output was removed from its session")) }
    }
}

/// Held by the movie output's session event handler, so released with the session's handlers:
/// then, unless `removeOutput` disarmed it first, the session is gone and a recording under way
/// is finished as a stop.
final class SessionWatch: @unchecked Sendable {
    private let lock = NSLock()
    private weak var output: CaptureMovieFileOutput?
    private var armed = true
    init(_ output: CaptureMovieFileOutput) { self.output = output }
    func disarm() { lock.withLock { armed = false } }
    deinit {
        if armed { output?.sessionReleased() }
    }
}
