// Signal dispositions and masks, through the funnel: a command keeping its stop signals for
// Dispatch, and a writer keeping a reader's going away from ending the process.
#if canImport(Glibc)
import Glibc
#endif

package enum ProcessSignals {
    /// Keeps each of `signals` for a Dispatch signal source about to be made, or returns the first
    /// failed call (`EINVAL` for a signal that cannot be caught, such as SIGKILL). Dispatch takes a
    /// signal through a signalfd and installs its own handler later, on its manager thread, once
    /// the source is registered; until then this handler blocks a signal on the thread it reached
    /// and sends it to the process again, where it stays pending (every thread has it blocked in
    /// the end) until Dispatch's signalfd reads it. So a signal that comes at once neither takes
    /// its default action (the end of the process) nor is lost, as an ignored one would be.
    @discardableResult
    package static func holdForDispatch(_ signals: [Int32]) -> Result<Void, SystemCallError> {
        for sig in signals {
            var action = sigaction()
            action.__sigaction_handler.sa_handler = blockAndResend
            action.sa_flags = SA_RESTART
            sigemptyset(&action.sa_mask)
            let done = Syscall.run("sigaction", mock: nil, failure: Int32(-1)) { sigaction(sig, &action, nil) }
            if case .failure(let e) = done { return .failure(SystemCallError(operation: "sigaction", errno: e)) }
        }
        return .success(())
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

    /// The handler of `holdForDispatch` (async-signal-safe: no allocation, three system calls).
    private static let blockAndResend: @convention(c) (Int32) -> Void = { sig in
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, sig)
        _ = pthread_sigmask(SIG_BLOCK, &set, nil)
        _ = kill(getpid(), sig)
    }

    private static func signalSet(_ signals: [Int32]) -> sigset_t {
        var set = sigset_t()
        sigemptyset(&set)
        for sig in signals { sigaddset(&set, sig) }
        return set
    }
}
