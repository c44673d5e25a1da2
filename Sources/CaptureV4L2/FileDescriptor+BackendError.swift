// The descriptor calls of the V4L2 backend, throwing the system layer's failed calls as
// `BackendError`s of the video device (no words here: the object model's mapper chooses them).
import CaptureBackend
import CaptureSystem

extension BackendError {
    /// A failed call on the camera at `path`.
    static func video(_ call: SystemCallError, _ path: String) -> BackendError { BackendError(call, device: path, kind: .video) }
    /// A failed ioctl (or shim call) `operation` on the camera at `path`.
    static func video(_ errno: Errno, _ operation: String, _ path: String) -> BackendError {
        video(SystemCallError(operation: operation, errno: errno), path)
    }
    /// A condition found on the camera at `path` by `operation`.
    static func video(_ failure: Failure, _ path: String, operation: String?, errno: Errno? = nil) -> BackendError {
        BackendError(failure, device: path, kind: .video, operation: operation, errno: errno)
    }
}

extension FileDescriptor {
    /// Opens `path` read-write, non-blocking and close-on-exec.
    package static func open(_ path: String) throws(BackendError) -> FileDescriptor {
        try opening(path).mapError { BackendError.video($0, path) }.get()
    }

    /// A non-blocking, close-on-exec eventfd (wakes a thread waiting in `poll`) for the camera at `device`.
    package static func eventFD(for device: String = "eventfd") throws(BackendError) -> FileDescriptor {
        try makeInjectableEventFD().mapError { BackendError.video($0, device) }.get()
    }

    /// Whether the descriptor is a character device (a V4L2 node is one).
    package func isCharacterDevice() throws(BackendError) -> Bool {
        try characterDevice().mapError { BackendError.video($0, path) }.get()
    }

    /// ioctl on a value in place; throws the failed call.
    @inline(__always)
    package func ioctl<T>(_ request: IoctlRequest, _ value: inout T) throws(BackendError) {
        let e = withUnsafeMutablePointer(to: &value) { ioctlErrno(request, $0) }
        if let e { throw BackendError.video(e, request.name, path) }
    }

    /// ioctl that may report "would block" (`EAGAIN`) as `false` instead of an error.
    @inline(__always)
    package func ioctlUnlessWouldBlock<T>(_ request: IoctlRequest, _ value: inout T) throws(BackendError) -> Bool {
        let e = withUnsafeMutablePointer(to: &value) { ioctlErrno(request, $0) }
        guard let e else { return true }
        if e == .wouldBlock { return false }
        throw BackendError.video(e, request.name, path)
    }

    /// Runs a shim helper that does its own ioctl (extended controls) through the funnel.
    package func call(_ operation: String, _ body: () -> Int32) throws(BackendError) {
        if let e = callErrno(operation, body) { throw BackendError.video(e, operation, path) }
    }

    /// Maps `length` bytes at `offset` shared, read-write (V4L2 `MMAP` buffers).
    package func map(length: Int, offset: Int) throws(BackendError) -> UnsafeMutableRawPointer {
        try mapping(length: length, offset: offset).mapError { BackendError.video($0, path) }.get()
    }

    /// Waits for events on this descriptor and `other` (an eventfd, or -1). Returns the revents
    /// of both, or (0, 0) on timeout. `device` names the camera in the error (this descriptor
    /// may be one of its eventfds).
    package func poll(
        events: Int16, other: Int32, timeoutMilliseconds: Int32,
        device: String? = nil
    ) throws(BackendError) -> (Int16, Int16) {
        try waiting(events: events, other: other, timeoutMilliseconds: timeoutMilliseconds)
            .mapError { BackendError.video($0, device ?? path) }.get()
    }
}
