// Signals that end a command cleanly (its file finished, its summary printed) instead of the
// default action, which ends the process at once.
import CaptureSystem
import Foundation

/// Runs `action` once on the first of `signals` (taken from their default action, which would
/// end the process without finishing its file).
package final class SignalStop: @unchecked Sendable {
    private let lock = NSLock()
    private var sources: [DispatchSourceSignal] = []
    private var didFire = false

    package init(_ signals: [Int32], action: @escaping @Sendable () -> Void) {
        // Held first: one already pending comes when they are unblocked.
        ProcessSignals.holdForDispatch(signals)
        ProcessSignals.unblock(signals)
        sources = signals.map { sig in
            let source = DispatchSource.makeSignalSource(signal: sig, queue: .global())
            source.setEventHandler { [self] in
                let first = lock.withLock {
                    defer { didFire = true }
                    return !didFire
                }
                if first { action() }
            }
            source.resume()
            return source
        }
    }

    /// Whether a signal came.
    package var fired: Bool { lock.withLock { didFire } }

    /// Stops listening (the signals stay Dispatch's, taken by no one: the process is ending).
    package func cancel() { for s in sources { s.cancel() } }
}
