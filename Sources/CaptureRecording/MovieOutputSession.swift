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

extension CaptureSession {
    /// Whether `output` can be added: it is in no other session (movie outputs are frame
    /// consumers, so any number may be added beside the app's outputs).
    public func canAddOutput(_ output: CaptureMovieFileOutput) -> Bool {
        output.port.session == nil || output.port.session === self
    }

    /// Adds a movie file output, as `addOutput` does for AVFoundation's: it joins the session as
    /// a frame consumer (not listed in `outputs`), gets a connection to the camera, and ends a
    /// recording when the session stops or its camera goes away. Does nothing if
    /// `canAddOutput(output)` is false.
    public func addOutput(_ output: CaptureMovieFileOutput) {
        guard output.port.session == nil, addFrameConsumer(output.port) else { return }
        addFrameConsumer(output.audioPort)
        let watch = SessionWatch(output)
        output.sessionWatch = watch
        output.eventToken = addEventHandler { [weak output] event in
            withExtendedLifetime(watch) { output?.sessionEvent(event) }
        }
    }

    /// Removes a movie file output; a recording under way ends as if the session stopped.
    public func removeOutput(_ output: CaptureMovieFileOutput) {
        guard output.port.session === self else { return }
        output.sessionWatch?.disarm()
        if let token = output.eventToken { removeEventHandler(token) }
        output.eventToken = nil
        removeFrameConsumer(output.port)
        removeFrameConsumer(output.audioPort)
        output.queue.async { output.finish(error: RecordingError(.sessionStopped, "the movie output was removed from its session")) }
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
