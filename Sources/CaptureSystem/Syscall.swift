// The one funnel every system call of the library goes through: EINTR is retried here, and the
// errno is read at once and returned typed (`Errno`, `SystemCallError`) with the call's name; the
// caller, who knows what it was doing, puts it into words. In debug builds a `SyscallMock` can
// record the calls and force errnos.
#if canImport(Glibc)
import Glibc
#endif

/// An ioctl request code with the name errors and traces use.
package struct IoctlRequest: Sendable, Hashable {
    package var code: UInt
    package var name: String

    package init(code: UInt, name: String) {
        self.code = code
        self.name = name
    }

}

/// The funnel. Every call returns the errno instead of reading a global later.
package enum Syscall {
    /// Runs `body` (a C call that reports failure with `failure` and `errno`), retrying `EINTR`
    /// unless `retryOnInterrupt` is false (`close` must not be retried on Linux).
    @inline(__always)
    package static func run<T: Equatable>(
        _ operation: String, mock: SyscallMock?, failure: T, retryOnInterrupt: Bool = true, _ body: () -> T
    ) -> Result<T, Errno> {
        perform(operation, mock: mock, failure: failure, retryOnInterrupt: retryOnInterrupt, badDescriptorIsOutcome: false, body)
    }

    /// As `run`, for a call on a descriptor that another thread may close meanwhile (a file a
    /// stop closes while a write waits): `EBADF` is then an outcome the caller reports, not a
    /// programming error. (By then the number may name a file opened since: keeping that from
    /// happening is the caller's.)
    @inline(__always)
    package static func runOnSharedDescriptor<T: Equatable>(_ operation: String, failure: T, _ body: () -> T) -> Result<T, Errno> {
        perform(operation, mock: nil, failure: failure, retryOnInterrupt: true, badDescriptorIsOutcome: true, body)
    }

    @inline(__always)
    private static func perform<T: Equatable>(
        _ operation: String, mock: SyscallMock?, failure: T, retryOnInterrupt: Bool, badDescriptorIsOutcome: Bool, _ body: () -> T
    ) -> Result<T, Errno> {
        while true {
            #if DEBUG
            if let mock, let forced = mock.intercept(operation) {
                if forced == .interrupted && retryOnInterrupt { continue }
                return .failure(forced)
            }
            #endif
            let value = body()
            if value != failure { return .success(value) }
            let e = Errno.current
            if e == .interrupted && retryOnInterrupt { continue }
            // Programming errors, not conditions to recover from (as swift-nio does).
            precondition(
                (e != .badFileDescriptor || badDescriptorIsOutcome) && e != .badAddress, "\(operation) failed with \(e)")
            return .failure(e)
        }
    }
}

#if DEBUG
/// Test-only syscall recorder and fault injector (compiled into debug builds only).
///
/// Bind one with `SyscallMock.$current.withValue(mock) { ... }`: `open` consults it, and every
/// descriptor opened meanwhile keeps it for all later calls on that descriptor, from any thread.
/// Other descriptors (other tests running in parallel) are not affected.
package final class SyscallMock: Sendable {
    @TaskLocal static package var current: SyscallMock?

    private struct Rule {
        package var operation: String
        package var firstCall: Int
        package var remaining: Int
        package var errno: Errno
    }
    private struct State {
        package var calls: [String: Int] = [:]
        package var rules: [Rule] = []
        package var trace: [String] = []
    }
    private let state = Locked(State())

    package init() {}

    /// Makes calls `call`, `call + 1`... (`times` of them, counted from 1 per operation name) of
    /// `operation` (e.g. `"VIDIOC_REQBUFS"`, `"open"`, `"mmap"`) fail with `errno` without
    /// reaching the kernel.
    package func fail(_ operation: String, with errno: Errno, onCall call: Int = 1, times: Int = 1) {
        state.withLock { s in
            let next = (s.calls[operation] ?? 0) + call
            s.rules.append(Rule(operation: operation, firstCall: next, remaining: times, errno: errno))
        }
    }

    /// Every call so far, in order, by operation name (forced failures included).
    package var trace: [String] { state.withLock { $0.trace } }

    /// How many times `operation` was attempted.
    package func callCount(_ operation: String) -> Int { state.withLock { $0.calls[operation] ?? 0 } }

    /// Records a call; returns the errno to force, if a rule says so.
    fileprivate func intercept(_ operation: String) -> Errno? {
        state.withLock { s in
            let n = (s.calls[operation] ?? 0) + 1
            s.calls[operation] = n
            s.trace.append(operation)
            guard let i = s.rules.firstIndex(where: { $0.operation == operation && n >= $0.firstCall && $0.remaining > 0 })
            else { return nil }
            s.rules[i].remaining -= 1
            return s.rules[i].errno
        }
    }
}
#else
/// Release builds have no fault injector; the funnel's parameter is always nil.
package typealias SyscallMock = Never
#endif
