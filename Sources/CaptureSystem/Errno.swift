#if canImport(Glibc)
import Glibc
#endif

/// A C `errno` value with Swift names for the ones the V4L2 layer meets.
///
/// An open set: any value the kernel returns is representable.
package struct Errno: RawRepresentable, Error, Hashable, Sendable, CustomStringConvertible {
    package var rawValue: Int32
    package init(rawValue: Int32) { self.rawValue = rawValue }

    /// The calling thread's current `errno`.
    package static var current: Errno { Errno(rawValue: Glibc.errno) }

    /// The call was interrupted by a signal; retry it. (`EINTR`)
    package static let interrupted = Errno(rawValue: EINTR)
    /// A non-blocking call has nothing to do yet. (`EAGAIN`)
    package static let wouldBlock = Errno(rawValue: EAGAIN)
    /// No such file or directory. (`ENOENT`)
    package static let noSuchFileOrDirectory = Errno(rawValue: ENOENT)
    /// The device is gone or was never there. (`ENODEV`)
    package static let noSuchDevice = Errno(rawValue: ENODEV)
    /// No such device or address. (`ENXIO`)
    package static let noSuchDeviceOrAddress = Errno(rawValue: ENXIO)
    /// The device or resource is in use. (`EBUSY`)
    package static let resourceBusy = Errno(rawValue: EBUSY)
    /// Access denied by file permissions. (`EACCES`)
    package static let permissionDenied = Errno(rawValue: EACCES)
    /// The operation is not permitted. (`EPERM`)
    package static let notPermitted = Errno(rawValue: EPERM)
    /// An argument is invalid, or the driver refused the request. (`EINVAL`)
    package static let invalidArgument = Errno(rawValue: EINVAL)
    /// The descriptor does not support this ioctl. (`ENOTTY`)
    package static let inappropriateIoctl = Errno(rawValue: ENOTTY)
    /// A hardware or driver I/O error. (`EIO`)
    package static let ioError = Errno(rawValue: EIO)
    /// No space left (for V4L2 `STREAMON`: not enough USB bandwidth). (`ENOSPC`)
    package static let noSpace = Errno(rawValue: ENOSPC)
    /// A value is out of range. (`ERANGE`)
    package static let outOfRange = Errno(rawValue: ERANGE)
    /// Out of memory. (`ENOMEM`)
    package static let noMemory = Errno(rawValue: ENOMEM)
    /// Not a valid descriptor: a programming error. (`EBADF`)
    package static let badFileDescriptor = Errno(rawValue: EBADF)
    /// A bad address was passed: a programming error. (`EFAULT`)
    package static let badAddress = Errno(rawValue: EFAULT)
    /// The ioctl exists but the device has no such feature or value. (`ENODATA`)
    package static let noData = Errno(rawValue: ENODATA)
    /// Too many open files. (`EMFILE`)
    package static let tooManyOpenFiles = Errno(rawValue: EMFILE)
    /// Is a directory. (`EISDIR`)
    package static let isDirectory = Errno(rawValue: EISDIR)
    /// Broken pipe; for an ALSA capture stream: an overrun (xrun). (`EPIPE`)
    package static let brokenPipe = Errno(rawValue: EPIPE)
    /// Streams pipe error; for an ALSA stream: the device was suspended. (`ESTRPIPE`)
    package static let suspended = Errno(rawValue: ESTRPIPE)
    /// A descriptor in the wrong state; for an ALSA stream: the PCM is not in a state for the call. (`EBADFD`)
    package static let badState = Errno(rawValue: EBADFD)

    /// The C name of the value, e.g. `EINVAL`, or `errno N` for values without a name here.
    package var name: String {
        switch rawValue {
        case EINTR: "EINTR"
        case EAGAIN: "EAGAIN"
        case ENOENT: "ENOENT"
        case ENODEV: "ENODEV"
        case ENXIO: "ENXIO"
        case EBUSY: "EBUSY"
        case EACCES: "EACCES"
        case EPERM: "EPERM"
        case EINVAL: "EINVAL"
        case ENOTTY: "ENOTTY"
        case EIO: "EIO"
        case ENOSPC: "ENOSPC"
        case ERANGE: "ERANGE"
        case ENOMEM: "ENOMEM"
        case EBADF: "EBADF"
        case EFAULT: "EFAULT"
        case ENODATA: "ENODATA"
        case EMFILE: "EMFILE"
        case EISDIR: "EISDIR"
        case EPIPE: "EPIPE"
        case ESTRPIPE: "ESTRPIPE"
        case EBADFD: "EBADFD"
        default: "errno \(rawValue)"
        }
    }

    package var description: String { "\(name) (\(String(cString: strerror(rawValue))))" }
}

/// A system call that failed: its name and errno, and no words for the user (the caller, who
/// knows what it was doing, chooses those).
package struct SystemCallError: Error, Hashable, Sendable, CustomStringConvertible {
    package var operation: String
    package var errno: Errno
    package init(operation: String, errno: Errno) {
        self.operation = operation
        self.errno = errno
    }
    package var description: String { "\(operation): \(errno)" }
}

extension Result where Failure == Errno {
    /// The errno of a failure, nil on success.
    var errno: Errno? { if case .failure(let e) = self { e } else { nil } }
}

extension Syscall {
    /// `poll(2)` on `fds` through the funnel (EINTR retried with the same timeout; callers that
    /// keep a deadline re-check it). Returns the number of ready descriptors.
    package static func poll(_ fds: inout [pollfd], timeoutMilliseconds: Int32) -> Result<Int32, SystemCallError> {
        fds.withUnsafeMutableBufferPointer { b in
            Syscall.run("poll", mock: nil, failure: -1) { Glibc.poll(b.baseAddress, nfds_t(b.count), timeoutMilliseconds) }
        }.mapError { SystemCallError(operation: "poll", errno: $0) }
    }
}
