#if canImport(Glibc)
import Glibc
#endif

/// A C `errno` value with Swift names for the ones the V4L2 layer meets.
///
/// An open set: any value the kernel returns is representable.
struct Errno: RawRepresentable, Error, Hashable, Sendable, CustomStringConvertible {
    var rawValue: Int32
    init(rawValue: Int32) { self.rawValue = rawValue }

    /// The calling thread's current `errno`.
    static var current: Errno { Errno(rawValue: Glibc.errno) }

    /// The call was interrupted by a signal; retry it. (`EINTR`)
    static let interrupted = Errno(rawValue: EINTR)
    /// A non-blocking call has nothing to do yet. (`EAGAIN`)
    static let wouldBlock = Errno(rawValue: EAGAIN)
    /// No such file or directory. (`ENOENT`)
    static let noSuchFileOrDirectory = Errno(rawValue: ENOENT)
    /// The device is gone or was never there. (`ENODEV`)
    static let noSuchDevice = Errno(rawValue: ENODEV)
    /// No such device or address. (`ENXIO`)
    static let noSuchDeviceOrAddress = Errno(rawValue: ENXIO)
    /// The device or resource is in use. (`EBUSY`)
    static let resourceBusy = Errno(rawValue: EBUSY)
    /// Access denied by file permissions. (`EACCES`)
    static let permissionDenied = Errno(rawValue: EACCES)
    /// The operation is not permitted. (`EPERM`)
    static let notPermitted = Errno(rawValue: EPERM)
    /// An argument is invalid, or the driver refused the request. (`EINVAL`)
    static let invalidArgument = Errno(rawValue: EINVAL)
    /// The descriptor does not support this ioctl. (`ENOTTY`)
    static let inappropriateIoctl = Errno(rawValue: ENOTTY)
    /// A hardware or driver I/O error. (`EIO`)
    static let ioError = Errno(rawValue: EIO)
    /// No space left (for V4L2 `STREAMON`: not enough USB bandwidth). (`ENOSPC`)
    static let noSpace = Errno(rawValue: ENOSPC)
    /// A value is out of range. (`ERANGE`)
    static let outOfRange = Errno(rawValue: ERANGE)
    /// Out of memory. (`ENOMEM`)
    static let noMemory = Errno(rawValue: ENOMEM)
    /// Not a valid descriptor: a programming error. (`EBADF`)
    static let badFileDescriptor = Errno(rawValue: EBADF)
    /// A bad address was passed: a programming error. (`EFAULT`)
    static let badAddress = Errno(rawValue: EFAULT)
    /// The ioctl exists but the device has no such feature or value. (`ENODATA`)
    static let noData = Errno(rawValue: ENODATA)
    /// Too many open files. (`EMFILE`)
    static let tooManyOpenFiles = Errno(rawValue: EMFILE)
    /// Is a directory. (`EISDIR`)
    static let isDirectory = Errno(rawValue: EISDIR)

    /// The C name of the value, e.g. `EINVAL`, or `errno N` for values without a name here.
    var name: String {
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
        default: "errno \(rawValue)"
        }
    }

    var description: String { "\(name) (\(String(cString: strerror(rawValue))))" }
}

/// A system call that failed: its name and errno, and no words for the user (the caller, who
/// knows what it was doing, chooses those).
struct SystemCallError: Error, Hashable, Sendable, CustomStringConvertible {
    var operation: String
    var errno: Errno
    var description: String { "\(operation): \(errno)" }
}

extension Result where Failure == Errno {
    /// The errno of a failure, nil on success.
    var errno: Errno? { if case .failure(let e) = self { e } else { nil } }
}

extension Syscall {
    /// `poll(2)` on `fds` through the funnel (EINTR retried with the same timeout; callers that
    /// keep a deadline re-check it). Returns the number of ready descriptors.
    static func poll(_ fds: inout [pollfd], timeoutMilliseconds: Int32) -> Result<Int32, SystemCallError> {
        fds.withUnsafeMutableBufferPointer { b in
            Syscall.run("poll", mock: nil, failure: -1) { Glibc.poll(b.baseAddress, nfds_t(b.count), timeoutMilliseconds) }
        }.mapError { SystemCallError(operation: "poll", errno: $0) }
    }
}
