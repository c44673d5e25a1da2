// The descriptor calls of the V4L2 backend, with the system layer's failed calls put into words
// (`CaptureError(_:path:)`, the one errno table in CaptureBackend).
import CaptureBackend
import CaptureSystem

extension FileDescriptor {
    /// Opens `path` read-write, non-blocking and close-on-exec.
    package static func open(_ path: String) throws(CaptureError) -> FileDescriptor {
        try opening(path).mapError { CaptureError($0, path: path) }.get()
    }

    /// A non-blocking, close-on-exec eventfd (used to wake a thread waiting in `poll`).
    package static func eventFD() throws(CaptureError) -> FileDescriptor {
        try makeInjectableEventFD().mapError { CaptureError($0, path: "eventfd") }.get()
    }

    /// Whether the descriptor is a character device (a V4L2 node is one).
    package func isCharacterDevice() throws(CaptureError) -> Bool {
        try characterDevice().mapError { CaptureError($0, path: path) }.get()
    }

    /// ioctl on a value in place; throws the typed error.
    @inline(__always)
    package func ioctl<T>(_ request: IoctlRequest, _ value: inout T) throws(CaptureError) {
        let e = withUnsafeMutablePointer(to: &value) { ioctlErrno(request, $0) }
        if let e { throw CaptureError(e, operation: request.name, path: path) }
    }

    /// ioctl that may report "would block" (`EAGAIN`) as `false` instead of an error.
    @inline(__always)
    package func ioctlUnlessWouldBlock<T>(_ request: IoctlRequest, _ value: inout T) throws(CaptureError) -> Bool {
        let e = withUnsafeMutablePointer(to: &value) { ioctlErrno(request, $0) }
        guard let e else { return true }
        if e == .wouldBlock { return false }
        throw CaptureError(e, operation: request.name, path: path)
    }

    /// Runs a shim helper that does its own ioctl (extended controls) through the funnel.
    package func call(_ operation: String, _ body: () -> Int32) throws(CaptureError) {
        if let e = callErrno(operation, body) { throw CaptureError(e, operation: operation, path: path) }
    }

    /// Maps `length` bytes at `offset` shared, read-write (V4L2 `MMAP` buffers).
    package func map(length: Int, offset: Int) throws(CaptureError) -> UnsafeMutableRawPointer {
        try mapping(length: length, offset: offset).mapError { CaptureError($0, path: path) }.get()
    }

    /// Waits for events on this descriptor and `other` (an eventfd, or -1). Returns the revents
    /// of both, or (0, 0) on timeout.
    package func poll(events: Int16, other: Int32, timeoutMilliseconds: Int32) throws(CaptureError) -> (Int16, Int16) {
        try waiting(events: events, other: other, timeoutMilliseconds: timeoutMilliseconds)
            .mapError { CaptureError($0, path: path) }.get()
    }
}
