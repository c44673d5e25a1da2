#if canImport(Glibc)
import Glibc
#endif

/// A value guarded by a POSIX mutex: `withLock` runs its closure with exclusive access to it.
///
/// The same shape as `Synchronization.Mutex` (`Locked(value)`, `withLock { value in ... }`), built
/// on `pthread_mutex_t` so that ThreadSanitizer sees the order it imposes. On Linux `Mutex` parks
/// on a futex inside the uninstrumented standard library, which TSan does not model: every access
/// `Mutex` orders looks like a race to it (the probe in `scripts/sanitize thread` shows this), and
/// real races drown among them. TSan intercepts `pthread_mutex_lock`/`unlock`.
///
/// The mutex lives in its own heap allocation, so its address never changes (POSIX does not allow
/// a mutex to move). The fast path is one uncontended atomic exchange inside glibc, as with
/// `Mutex`; the value sits in the object, so a `Locked` costs one allocation for the object and
/// one for the mutex, once.
///
/// Thread-safe; any thread may call `withLock`. Not recursive: calling `withLock` again from inside
/// its closure deadlocks. Keep closures short and never call user code from inside one. Give a
/// lock that guards no state of its own a small value anyway (`Locked(0)`): ThreadSanitizer
/// reported the exclusive access to a zero-sized value as a race between two holders.
package final class Locked<Value: ~Copyable>: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private var value: Value

    package init(_ initialValue: consuming sending Value) {
        mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        let status = pthread_mutex_init(mutex, nil)
        precondition(status == 0, "pthread_mutex_init failed: \(status)")
        value = initialValue
    }

    deinit {
        let status = pthread_mutex_destroy(mutex)
        assert(status == 0, "pthread_mutex_destroy failed (still locked?): \(status)")
        mutex.deinitialize(count: 1)
        mutex.deallocate()
    }

    /// Runs `body` with the value while holding the mutex, and returns what it returns.
    package func withLock<Result: ~Copyable, E: Error>(
        _ body: (inout sending Value) throws(E) -> sending Result
    ) throws(E) -> sending Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}
