// The one funnel every V4L2-layer system call goes through: EINTR is retried here, EAGAIN is
// "would block" for the caller to handle, and every other errno becomes a `CaptureError` that
// names the call. In debug builds a `SyscallMock` can record the calls and force errnos.
#if canImport(Glibc)
import Glibc
#endif
internal import CV4L2Shim
#if DEBUG
#endif

/// An ioctl request code with the name errors and traces use.
struct IoctlRequest: Sendable, Hashable {
    var code: UInt
    var name: String

    static let queryCapability = IoctlRequest(code: CV4L2_VIDIOC_QUERYCAP, name: "VIDIOC_QUERYCAP")
    static let enumerateFormat = IoctlRequest(code: CV4L2_VIDIOC_ENUM_FMT, name: "VIDIOC_ENUM_FMT")
    static let getFormat = IoctlRequest(code: CV4L2_VIDIOC_G_FMT, name: "VIDIOC_G_FMT")
    static let setFormat = IoctlRequest(code: CV4L2_VIDIOC_S_FMT, name: "VIDIOC_S_FMT")
    static let tryFormat = IoctlRequest(code: CV4L2_VIDIOC_TRY_FMT, name: "VIDIOC_TRY_FMT")
    static let enumerateFrameSizes = IoctlRequest(code: CV4L2_VIDIOC_ENUM_FRAMESIZES, name: "VIDIOC_ENUM_FRAMESIZES")
    static let enumerateFrameIntervals = IoctlRequest(
        code: CV4L2_VIDIOC_ENUM_FRAMEINTERVALS, name: "VIDIOC_ENUM_FRAMEINTERVALS")
    static let getParameters = IoctlRequest(code: CV4L2_VIDIOC_G_PARM, name: "VIDIOC_G_PARM")
    static let setParameters = IoctlRequest(code: CV4L2_VIDIOC_S_PARM, name: "VIDIOC_S_PARM")
    static let enumerateInput = IoctlRequest(code: CV4L2_VIDIOC_ENUMINPUT, name: "VIDIOC_ENUMINPUT")
    static let getInput = IoctlRequest(code: CV4L2_VIDIOC_G_INPUT, name: "VIDIOC_G_INPUT")
    static let setInput = IoctlRequest(code: CV4L2_VIDIOC_S_INPUT, name: "VIDIOC_S_INPUT")
    static let queryExtendedControl = IoctlRequest(code: CV4L2_VIDIOC_QUERY_EXT_CTRL, name: "VIDIOC_QUERY_EXT_CTRL")
    static let queryMenu = IoctlRequest(code: CV4L2_VIDIOC_QUERYMENU, name: "VIDIOC_QUERYMENU")
    static let requestBuffers = IoctlRequest(code: CV4L2_VIDIOC_REQBUFS, name: "VIDIOC_REQBUFS")
    static let queryBuffer = IoctlRequest(code: CV4L2_VIDIOC_QUERYBUF, name: "VIDIOC_QUERYBUF")
    static let queueBuffer = IoctlRequest(code: CV4L2_VIDIOC_QBUF, name: "VIDIOC_QBUF")
    static let dequeueBuffer = IoctlRequest(code: CV4L2_VIDIOC_DQBUF, name: "VIDIOC_DQBUF")
    static let streamOn = IoctlRequest(code: CV4L2_VIDIOC_STREAMON, name: "VIDIOC_STREAMON")
    static let streamOff = IoctlRequest(code: CV4L2_VIDIOC_STREAMOFF, name: "VIDIOC_STREAMOFF")
}

/// The funnel. Every call returns the errno instead of reading a global later.
enum Syscall {
    /// Runs `body` (a C call that reports failure with `failure` and `errno`), retrying `EINTR`
    /// unless `retryOnInterrupt` is false (`close` must not be retried on Linux).
    @inline(__always)
    static func run<T: Equatable>(
        _ operation: String, mock: SyscallMock?, failure: T, retryOnInterrupt: Bool = true, _ body: () -> T
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
            precondition(e != .badFileDescriptor && e != .badAddress, "\(operation) failed with \(e)")
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
final class SyscallMock: Sendable {
    @TaskLocal static var current: SyscallMock?

    private struct Rule {
        var operation: String
        var firstCall: Int
        var remaining: Int
        var errno: Errno
    }
    private struct State {
        var calls: [String: Int] = [:]
        var rules: [Rule] = []
        var trace: [String] = []
    }
    private let state = Locked(State())

    init() {}

    /// Makes calls `call`, `call + 1`... (`times` of them, counted from 1 per operation name) of
    /// `operation` (e.g. `"VIDIOC_REQBUFS"`, `"open"`, `"mmap"`) fail with `errno` without
    /// reaching the kernel.
    func fail(_ operation: String, with errno: Errno, onCall call: Int = 1, times: Int = 1) {
        state.withLock { s in
            let next = (s.calls[operation] ?? 0) + call
            s.rules.append(Rule(operation: operation, firstCall: next, remaining: times, errno: errno))
        }
    }

    /// Every call so far, in order, by operation name (forced failures included).
    var trace: [String] { state.withLock { $0.trace } }

    /// How many times `operation` was attempted.
    func callCount(_ operation: String) -> Int { state.withLock { $0.calls[operation] ?? 0 } }

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
typealias SyscallMock = Never
#endif

extension CaptureError {
    /// Turns an errno from `operation` on the device at `path` into a typed error with a message
    /// that says what to do.
    init(_ errno: Errno, operation: String, path: String) {
        let code: Code
        let message: String
        switch errno {
        case .noSuchFileOrDirectory:
            code = .noSuchDevice
            message = "No device at \(path). Check that the camera is connected and the path is right (ls /dev/video*)."
        case .noSuchDevice, .noSuchDeviceOrAddress:
            if operation == "open" {
                code = .noSuchDevice
                message = "\(path) exists but has no device behind it (driver not loaded, or the camera was unplugged)."
            } else {
                code = .disconnected
                message = "The device at \(path) was disconnected. Reconnect it and open it again."
            }
        case .resourceBusy:
            code = .deviceBusy
            message = "\(path) is in use by another process or stream. Close the other application (fuser \(path) shows it)."
        case .permissionDenied, .notPermitted:
            if operation == "VIDIOC_S_EXT_CTRLS" || operation == "VIDIOC_S_CTRL" {
                code = .invalidArgument
                message = "The control cannot be set on \(path) (read-only or not settable now)."
            } else {
                code = .permissionDenied
                message = "No permission to use \(path). Add the user to the group that owns it (usually 'video') and log in again."
            }
        case .invalidArgument where operation == "VIDIOC_S_FMT" || operation == "VIDIOC_TRY_FMT":
            code = .unsupportedFormat
            message = "\(path) does not support the requested pixel format or size."
        case .invalidArgument where operation == "VIDIOC_S_PARM":
            code = .unsupportedFormat
            message = "\(path) does not support the requested frame interval."
        case .invalidArgument where operation == "VIDIOC_S_EXT_CTRLS" || operation == "VIDIOC_G_EXT_CTRLS":
            code = .invalidArgument
            message = "\(path) has no such control, or the value is not valid for it."
        case .outOfRange:
            code = .invalidArgument
            message = "The value is out of the control's range on \(path)."
        case .invalidArgument:
            code = .driverError
            message = "The driver of \(path) refused \(operation). Stop and start the stream again; if it persists, reopen the device."
        case .inappropriateIoctl where operation == "VIDIOC_QUERYCAP":
            code = .notACaptureDevice
            message = "\(path) is not a video4linux device."
        case .inappropriateIoctl:
            code = .driverError
            message = "The driver of \(path) does not support \(operation)."
        case .ioError:
            code = .driverError
            message = "The driver of \(path) reported an I/O error in \(operation). The stream must be stopped and started again."
        case .noSpace where operation == "VIDIOC_STREAMON":
            code = .deviceBusy
            message = "Not enough USB bandwidth to stream from \(path). Use a smaller size, a lower frame rate or a compressed format (MJPEG), or move cameras to different USB controllers."
        case .noMemory:
            code = .driverError
            message = "Out of memory for \(operation) on \(path). Ask for fewer or smaller buffers."
        case .isDirectory:
            code = .notACaptureDevice
            message = "\(path) is a directory, not a device node."
        case .tooManyOpenFiles:
            code = .ioError
            message = "The process has too many open files to open \(path)."
        default:
            code = .ioError
            message = "\(operation) on \(path) failed."
        }
        self.init(code, message, errno: errno.rawValue, operation: operation)
    }
}
