// Signal dispositions and masks, through the funnel: a command taking its stop signals from
// their default action, and a writer keeping a reader's going away from ending the process.
#if canImport(Glibc)
import Glibc
#endif

package enum ProcessSignals {
    /// Sets `signals` to be ignored by the process (a Dispatch signal source still sees them),
    /// or the first failed call (`EINVAL` for a signal that cannot be ignored).
    @discardableResult
    package static func ignore(_ signals: [Int32]) -> Result<Void, SystemCallError> {
        let failed = unsafeBitCast(SIG_ERR, to: Int.self)
        for sig in signals {
            let done = Syscall.run("signal", mock: nil, failure: Int32(-1)) {
                signal(sig, SIG_IGN).map { unsafeBitCast($0, to: Int.self) } == failed ? -1 : 0
            }
            if case .failure(let e) = done { return .failure(SystemCallError(operation: "signal", errno: e)) }
        }
        return .success(())
    }

    /// Waits up to `timeout` seconds until each of `signals` has a handler (is neither ignored
    /// nor at its default action); true when all have. Dispatch installs its own handler for a
    /// signal when it registers the first signal source for it, later, on its manager thread;
    /// until then a signal that `ignore` set aside is lost. A command that says it is ready for
    /// its signals waits for this first.
    package static func waitForHandlers(_ signals: [Int32], timeout: Double = 2) -> Bool {
        var waited = 0.0
        while true {
            let unhandled = signals.contains { sig in
                var action = sigaction()
                guard sigaction(sig, nil, &action) == 0 else { return false }
                // SIG_DFL is 0 and SIG_IGN 1.
                return UInt(bitPattern: unsafeBitCast(action.__sigaction_handler.sa_handler, to: Int.self)) <= 1
            }
            if !unhandled { return true }
            if waited >= timeout { return false }
            usleep(1_000)
            waited += 0.001
        }
    }

    /// Lets `signals` reach the calling thread (a parent that spawned the process from a thread
    /// blocking them, as Dispatch's threads do, would otherwise leave them pending for ever).
    package static func unblock(_ signals: [Int32]) {
        var set = signalSet(signals)
        // pthread_sigmask returns its error rather than setting errno, and fails only on a bad
        // `how`: nothing to report.
        _ = pthread_sigmask(SIG_UNBLOCK, &set, nil)
    }

    /// Runs `body` (a write) with SIGPIPE blocked on the calling thread, and takes back a SIGPIPE
    /// it raised: a reader that went away is the `EPIPE` `body` returns, not a signal that ends
    /// the process. A SIGPIPE pending before is left pending.
    package static func withBrokenPipeBlocked<T>(_ body: () -> Result<T, Errno>) -> Result<T, Errno> {
        var pipeSet = signalSet([SIGPIPE]), old = sigset_t(), pendingBefore = sigset_t()
        _ = pthread_sigmask(SIG_BLOCK, &pipeSet, &old)
        _ = sigpending(&pendingBefore)
        let wasPending = sigismember(&pendingBefore, SIGPIPE) == 1
        let result = body()
        if case .failure(.brokenPipe) = result, !wasPending {
            var zero = timespec(tv_sec: 0, tv_nsec: 0)
            _ = sigtimedwait(&pipeSet, nil, &zero)
        }
        _ = pthread_sigmask(SIG_SETMASK, &old, nil)
        return result
    }

    private static func signalSet(_ signals: [Int32]) -> sigset_t {
        var set = sigset_t()
        sigemptyset(&set)
        for sig in signals { sigaddset(&set, sig) }
        return set
    }
}
