import CaptureBackend
#if canImport(Glibc)
import Glibc
#endif

/// A mutex with one condition variable whose timed waits run on `CLOCK_MONOTONIC`, so a wall
/// clock change never stretches or cuts a frame wait. Used by the virtual camera's stream: the
/// producer thread, the capture thread and buffer recycling all meet here.
///
/// Not recursive: never call back into code that takes the same lock while holding it.
package final class StreamCondition: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let cond: UnsafeMutablePointer<pthread_cond_t>

    package init() {
        mutex = .allocate(capacity: 1)
        cond = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
        var attr = pthread_condattr_t()
        pthread_condattr_init(&attr)
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC)
        pthread_cond_init(cond, &attr)
        pthread_condattr_destroy(&attr)
    }

    deinit {
        pthread_cond_destroy(cond)
        pthread_mutex_destroy(mutex)
        cond.deallocate()
        mutex.deallocate()
    }

    package func lock() { pthread_mutex_lock(mutex) }
    package func unlock() { pthread_mutex_unlock(mutex) }

    package func withLock<R, E: Error>(_ body: () throws(E) -> R) throws(E) -> R {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body()
    }

    /// Wakes every waiter. Call with or without the lock held.
    package func broadcast() { pthread_cond_broadcast(cond) }

    /// Wakes every waiter after a change made under another lock, one a waiter reads while it
    /// holds this one (the camera's stall or connection, read at the producer's tick): taken
    /// first, this lock keeps the wake-up from falling between that read and the wait, where it
    /// was lost (a resumed camera then stayed silent for ever). Not with this lock held.
    package func broadcastAfterChange() { withLock { _ = pthread_cond_broadcast(cond) } }

    /// Waits (lock held) until signalled or until the monotonic `deadline`; spurious wake-ups
    /// are possible, so callers re-check their condition. Returns false once the deadline passed.
    @discardableResult
    package func wait(until deadline: CaptureTime) -> Bool {
        var ts = timespec()
        ts.tv_sec = Int(deadline.nanoseconds / 1_000_000_000)
        ts.tv_nsec = Int(deadline.nanoseconds % 1_000_000_000)
        return pthread_cond_timedwait(cond, mutex, &ts) != ETIMEDOUT
    }

    /// Waits (lock held) until signalled, without a deadline.
    package func wait() { pthread_cond_wait(cond, mutex) }
}

extension StreamCondition {
    /// `time` moved by `duration` (negative durations move it back), saturating at 0.
    package static func time(_ time: CaptureTime, plus duration: Duration) -> CaptureTime {
        let (s, a) = duration.components
        let ns = s &* 1_000_000_000 &+ a / 1_000_000_000
        if ns >= 0 { return CaptureTime(nanoseconds: time.nanoseconds &+ UInt64(ns)) }
        let back = UInt64(-ns)
        return CaptureTime(nanoseconds: time.nanoseconds > back ? time.nanoseconds - back : 0)
    }
}
