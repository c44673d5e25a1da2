// How a camera command learns that its session ended under it (an unplug, a runtime error).
import Capture
import Foundation

/// What ended a session under the tool: its first unplug or runtime error, in the words the tool
/// prints. Fed by a session's events (installed before the start); `onEnd` runs once, at the first.
package final class SessionWatch: @unchecked Sendable {
    private let lock = NSLock()
    private var first: CaptureError?
    private let onEnd: @Sendable () -> Void
    package init(onEnd: @escaping @Sendable () -> Void = {}) { self.onEnd = onEnd }

    /// The error that ended the session, if one did.
    package var error: CaptureError? { lock.withLock { first } }

    package func watch(_ session: CaptureSession) { session.addEventHandler { [self] event in handle(event) } }

    package func handle(_ event: CaptureSession.Event) {
        let e: CaptureError
        switch event {
        case .deviceDisconnected(let d):
            e = CaptureError(.disconnected, "\(d.localizedName) (\(d.path)) was disconnected; plug it back in and run again")
        case .runtimeError(let error) where error.code != .disconnected:
            e = error
        default:
            return
        }
        let isFirst = lock.withLock {
            defer { if first == nil { first = e } }
            return first == nil
        }
        if isFirst { onEnd() }
    }
}
