#if canImport(Glibc)
import Glibc
#endif
internal import CLinux

/// An open descriptor, closed exactly once: when the last owner (device, buffer pool)
/// lets go. There is no early `close`, so a stale number can never reach another file.
///
/// Thread-safe: the kernel serialises ioctls on one descriptor; this class holds no mutable state.
package final class FileDescriptor: Sendable {
    package let rawValue: Int32
    /// The path it was opened from, for messages.
    package let path: String
    /// The fault injector bound when it was opened (debug builds), used for every later call.
    package let mock: SyscallMock?

    private init(rawValue: Int32, path: String, mock: SyscallMock?) {
        self.rawValue = rawValue
        self.path = path
        self.mock = mock
    }

    /// Takes ownership of `rawValue`, a descriptor received from elsewhere (a D-Bus reply); it
    /// is closed when the returned object goes. `path` names it in messages.
    package static func adopting(_ rawValue: Int32, path: String) -> FileDescriptor {
        FileDescriptor(rawValue: rawValue, path: path, mock: nil)
    }

    /// Opens `path` read-write, non-blocking and close-on-exec (so child processes never
    /// inherit a camera), or the failed call.
    package static func opening(_ path: String) -> Result<FileDescriptor, SystemCallError> {
        #if DEBUG
        let mock = SyscallMock.current
        #else
        let mock: SyscallMock? = nil
        #endif
        return Syscall.run("open", mock: mock, failure: -1) { Glibc.open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC) }
            .map { FileDescriptor(rawValue: $0, path: path, mock: mock) }
            .mapError { SystemCallError(operation: "open", errno: $0) }
    }

    /// A non-blocking, close-on-exec eventfd bound to the current fault injector (debug builds),
    /// or the failed call.
    package static func makeInjectableEventFD() -> Result<FileDescriptor, SystemCallError> {
        #if DEBUG
        let mock = SyscallMock.current
        #else
        let mock: SyscallMock? = nil
        #endif
        return Syscall.run("eventfd", mock: mock, failure: -1, { eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC)) })
            .map { FileDescriptor(rawValue: $0, path: "eventfd", mock: mock) }
            .mapError { SystemCallError(operation: "eventfd", errno: $0) }
    }

    /// A non-blocking, close-on-exec eventfd, or the failed call for the caller to put in words.
    package static func makeEventFD() -> Result<FileDescriptor, SystemCallError> {
        Syscall.run("eventfd", mock: nil, failure: -1, { eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC)) })
            .map { FileDescriptor(rawValue: $0, path: "eventfd", mock: nil) }
            .mapError { SystemCallError(operation: "eventfd", errno: $0) }
    }

    /// A non-blocking, close-on-exec inotify descriptor watching `directory` for `mask`.
    package static func inotify(watching directory: String, mask: UInt32) -> Result<FileDescriptor, SystemCallError> {
        let opened = Syscall.run("inotify_init1", mock: nil, failure: -1) { inotify_init1(Int32(IN_CLOEXEC) | Int32(IN_NONBLOCK)) }
        guard case .success(let fd) = opened else {
            return .failure(SystemCallError(operation: "inotify_init1", errno: opened.errno!))
        }
        let watcher = FileDescriptor(rawValue: fd, path: directory, mock: nil)
        if case .failure(let e) = Syscall.run("inotify_add_watch", mock: nil, failure: -1, { inotify_add_watch(fd, directory, mask) }) {
            return .failure(SystemCallError(operation: "inotify_add_watch", errno: e))
        }
        return .success(watcher)
    }

    /// Reads what is there into `buffer` (EINTR retried); 0 at end of file.
    package func read(into buffer: UnsafeMutableRawBufferPointer) -> Result<Int, SystemCallError> {
        Syscall.run("read", mock: mock, failure: -1) { Glibc.read(rawValue, buffer.baseAddress, buffer.count) }
            .mapError { SystemCallError(operation: "read", errno: $0) }
    }

    /// Adds one to an eventfd's counter (makes it readable).
    package func signal() {
        var one: UInt64 = 1
        _ = Syscall.run("write", mock: mock, failure: -1) { Glibc.write(rawValue, &one, 8) }
    }

    /// Resets an eventfd's counter; returns whether it was signalled.
    @discardableResult
    package func drain() -> Bool {
        var value: UInt64 = 0
        if case .success = Syscall.run("read", mock: mock, failure: -1, { Glibc.read(rawValue, &value, 8) }) { return value > 0 }
        return false
    }

    deinit {
        // Not retried on EINTR: Linux has closed the descriptor either way.
        _ = Syscall.run("close", mock: mock, failure: -1, retryOnInterrupt: false) { Glibc.close(rawValue) }
    }

    /// Whether the descriptor is a character device (a V4L2 node is one), or the failed call.
    package func characterDevice() -> Result<Bool, SystemCallError> {
        var st = stat()
        return Syscall.run("fstat", mock: mock, failure: -1, { fstat(rawValue, &st) })
            .map { _ in (st.st_mode & S_IFMT) == S_IFCHR }
            .mapError { SystemCallError(operation: "fstat", errno: $0) }
    }

    /// ioctl through the funnel; returns the errno on failure (EINTR already retried).
    @inline(__always)
    package func ioctlErrno(_ request: IoctlRequest, _ arg: UnsafeMutableRawPointer) -> Errno? {
        switch Syscall.run(request.name, mock: mock, failure: -1, { Glibc.ioctl(rawValue, request.code, arg) }) {
        case .success: return nil
        case .failure(let e): return e
        }
    }

    /// Runs a shim helper through the funnel; returns the errno instead of throwing.
    package func callErrno(_ operation: String, _ body: () -> Int32) -> Errno? {
        if case .failure(let e) = Syscall.run(operation, mock: mock, failure: -1, body) { return e }
        return nil
    }

    /// Maps `length` bytes at `offset` shared, read-write (V4L2 `MMAP` buffers), or the failed call.
    package func mapping(length: Int, offset: Int) -> Result<UnsafeMutableRawPointer, SystemCallError> {
        Syscall.run("mmap", mock: mock, failure: MAP_FAILED) {
            mmap(nil, length, PROT_READ | PROT_WRITE, MAP_SHARED, rawValue, off_t(offset))
        }
        .map { $0! }
        .mapError { SystemCallError(operation: "mmap", errno: $0) }
    }

    /// Unmaps a mapping made by `map`. Failure here means a bookkeeping bug, so it is only traced.
    package func unmap(_ base: UnsafeMutableRawPointer, length: Int) {
        _ = Syscall.run("munmap", mock: mock, failure: -1) { munmap(base, length) }
    }

    /// Waits for events on this descriptor and `other` (an eventfd, or -1). Returns the revents
    /// of both, or (0, 0) on timeout; or the failed call.
    package func waiting(events: Int16, other: Int32, timeoutMilliseconds: Int32) -> Result<(Int16, Int16), SystemCallError> {
        var fds = (pollfd(fd: rawValue, events: events, revents: 0), pollfd(fd: other, events: Int16(POLLIN), revents: 0))
        let r = withUnsafeMutableBytes(of: &fds) { raw in
            Syscall.run("poll", mock: mock, failure: -1) {
                Glibc.poll(raw.baseAddress!.assumingMemoryBound(to: pollfd.self), other >= 0 ? 2 : 1, timeoutMilliseconds)
            }
        }
        return r.map { n in n == 0 ? (0, 0) : (fds.0.revents, fds.1.revents) }
            .mapError { SystemCallError(operation: "poll", errno: $0) }
    }
}
