#if canImport(Glibc)
import Glibc
#endif
internal import CV4L2Shim

/// An open device descriptor, closed exactly once: when the last owner (device, buffer pool)
/// lets go. There is no early `close`, so a stale number can never reach another file.
///
/// Thread-safe: the kernel serialises ioctls on one descriptor; this class holds no mutable state.
final class FileDescriptor: Sendable {
    let rawValue: Int32
    /// The path it was opened from, for messages.
    let path: String
    /// The fault injector bound when it was opened (debug builds), used for every later call.
    let mock: SyscallMock?

    private init(rawValue: Int32, path: String, mock: SyscallMock?) {
        self.rawValue = rawValue
        self.path = path
        self.mock = mock
    }

    /// Opens `path` read-write, non-blocking and close-on-exec (so child processes never
    /// inherit a camera).
    static func open(_ path: String) throws(CaptureError) -> FileDescriptor {
        #if DEBUG
        let mock = SyscallMock.current
        #else
        let mock: SyscallMock? = nil
        #endif
        let result = Syscall.run("open", mock: mock, failure: -1) {
            cv4l2_open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC)
        }
        switch result {
        case .success(let fd): return FileDescriptor(rawValue: fd, path: path, mock: mock)
        case .failure(let e): throw CaptureError(e, operation: "open", path: path)
        }
    }

    /// A non-blocking, close-on-exec eventfd (used to wake a thread waiting in `poll`).
    static func eventFD() throws(CaptureError) -> FileDescriptor {
        #if DEBUG
        let mock = SyscallMock.current
        #else
        let mock: SyscallMock? = nil
        #endif
        switch Syscall.run("eventfd", mock: mock, failure: -1, { eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC)) }) {
        case .success(let fd): return FileDescriptor(rawValue: fd, path: "eventfd", mock: mock)
        case .failure(let e): throw CaptureError(e, operation: "eventfd", path: "eventfd")
        }
    }

    /// A non-blocking, close-on-exec eventfd, or the failed call for the caller to put in words.
    static func makeEventFD() -> Result<FileDescriptor, SystemCallError> {
        Syscall.run("eventfd", mock: nil, failure: -1, { eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC)) })
            .map { FileDescriptor(rawValue: $0, path: "eventfd", mock: nil) }
            .mapError { SystemCallError(operation: "eventfd", errno: $0) }
    }

    /// A non-blocking, close-on-exec inotify descriptor watching `directory` for `mask`.
    static func inotify(watching directory: String, mask: UInt32) -> Result<FileDescriptor, SystemCallError> {
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
    func read(into buffer: UnsafeMutableRawBufferPointer) -> Result<Int, SystemCallError> {
        Syscall.run("read", mock: mock, failure: -1) { Glibc.read(rawValue, buffer.baseAddress, buffer.count) }
            .mapError { SystemCallError(operation: "read", errno: $0) }
    }

    /// Adds one to an eventfd's counter (makes it readable).
    func signal() {
        var one: UInt64 = 1
        _ = Syscall.run("write", mock: mock, failure: -1) { Glibc.write(rawValue, &one, 8) }
    }

    /// Resets an eventfd's counter; returns whether it was signalled.
    @discardableResult
    func drain() -> Bool {
        var value: UInt64 = 0
        if case .success = Syscall.run("read", mock: mock, failure: -1, { Glibc.read(rawValue, &value, 8) }) { return value > 0 }
        return false
    }

    deinit {
        // Not retried on EINTR: Linux has closed the descriptor either way.
        _ = Syscall.run("close", mock: mock, failure: -1, retryOnInterrupt: false) { Glibc.close(rawValue) }
    }

    /// Whether the descriptor is a character device (a V4L2 node is one).
    func isCharacterDevice() throws(CaptureError) -> Bool {
        var st = stat()
        switch Syscall.run("fstat", mock: mock, failure: -1, { fstat(rawValue, &st) }) {
        case .success: return (st.st_mode & S_IFMT) == S_IFCHR
        case .failure(let e): throw CaptureError(e, operation: "fstat", path: path)
        }
    }

    /// ioctl through the funnel; returns the errno on failure (EINTR already retried).
    @inline(__always)
    func ioctlErrno(_ request: IoctlRequest, _ arg: UnsafeMutableRawPointer) -> Errno? {
        switch Syscall.run(request.name, mock: mock, failure: -1, { cv4l2_ioctl(rawValue, request.code, arg) }) {
        case .success: return nil
        case .failure(let e): return e
        }
    }

    /// ioctl on a value in place; throws the typed error.
    @inline(__always)
    func ioctl<T>(_ request: IoctlRequest, _ value: inout T) throws(CaptureError) {
        let e = withUnsafeMutablePointer(to: &value) { ioctlErrno(request, $0) }
        if let e { throw CaptureError(e, operation: request.name, path: path) }
    }

    /// ioctl that may report "would block" (`EAGAIN`) as `false` instead of an error.
    @inline(__always)
    func ioctlUnlessWouldBlock<T>(_ request: IoctlRequest, _ value: inout T) throws(CaptureError) -> Bool {
        let e = withUnsafeMutablePointer(to: &value) { ioctlErrno(request, $0) }
        guard let e else { return true }
        if e == .wouldBlock { return false }
        throw CaptureError(e, operation: request.name, path: path)
    }

    /// Runs a shim helper that does its own ioctl (extended controls) through the funnel.
    func call(_ operation: String, _ body: () -> Int32) throws(CaptureError) {
        if case .failure(let e) = Syscall.run(operation, mock: mock, failure: -1, body) {
            throw CaptureError(e, operation: operation, path: path)
        }
    }

    /// Runs a shim helper through the funnel; returns the errno instead of throwing.
    func callErrno(_ operation: String, _ body: () -> Int32) -> Errno? {
        if case .failure(let e) = Syscall.run(operation, mock: mock, failure: -1, body) { return e }
        return nil
    }

    /// Maps `length` bytes at `offset` shared, read-write (V4L2 `MMAP` buffers).
    func map(length: Int, offset: Int) throws(CaptureError) -> UnsafeMutableRawPointer {
        let r = Syscall.run("mmap", mock: mock, failure: MAP_FAILED) {
            mmap(nil, length, PROT_READ | PROT_WRITE, MAP_SHARED, rawValue, off_t(offset))
        }
        switch r {
        case .success(let p): return p!
        case .failure(let e): throw CaptureError(e, operation: "mmap", path: path)
        }
    }

    /// Unmaps a mapping made by `map`. Failure here means a bookkeeping bug, so it is only traced.
    func unmap(_ base: UnsafeMutableRawPointer, length: Int) {
        _ = Syscall.run("munmap", mock: mock, failure: -1) { munmap(base, length) }
    }

    /// Waits for events on this descriptor and `other` (an eventfd, or -1). Returns the revents
    /// of both, or (0, 0) on timeout.
    func poll(events: Int16, other: Int32, timeoutMilliseconds: Int32) throws(CaptureError) -> (Int16, Int16) {
        var fds = (pollfd(fd: rawValue, events: events, revents: 0), pollfd(fd: other, events: Int16(POLLIN), revents: 0))
        let r = withUnsafeMutableBytes(of: &fds) { raw in
            Syscall.run("poll", mock: mock, failure: -1) {
                Glibc.poll(raw.baseAddress!.assumingMemoryBound(to: pollfd.self), other >= 0 ? 2 : 1, timeoutMilliseconds)
            }
        }
        switch r {
        case .success(let n): return n == 0 ? (0, 0) : (fds.0.revents, fds.1.revents)
        case .failure(let e): throw CaptureError(e, operation: "poll", path: path)
        }
    }
}
