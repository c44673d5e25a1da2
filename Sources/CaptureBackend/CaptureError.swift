#if canImport(Glibc)
import Glibc
#endif

/// An error from the capture stack, with a message that says what to do about it.
///
/// `code` is the kind of failure to switch on; `message` is for people; `errno` and `operation`
/// say which system call failed, where one did.
public struct CaptureError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The kinds of failure a caller can meet.
    public enum Code: String, Sendable, Hashable, CaseIterable {
        /// No device exists at the path or with the ID given.
        case noSuchDevice
        /// The device exists but cannot capture video (output-only, metadata, VBI, radio...).
        case notACaptureDevice
        /// Another process or session is using the device.
        case deviceBusy
        /// The user may not open the device or write the file.
        case permissionDenied
        /// The device cannot deliver the pixel format, size or rate asked for.
        case unsupportedFormat
        /// The device went away (unplugged, driver unbound) while in use.
        case disconnected
        /// The driver failed a request it should have served.
        case driverError
        /// A frame's bytes are damaged, truncated or not what they claim to be.
        case corruptFrame
        /// The disk is full.
        case diskFull
        /// The file system is read-only.
        case readOnlyFileSystem
        /// The call is not valid in the object's current state (e.g. adding an input twice).
        case invalidState
        /// An argument is out of range or malformed.
        case invalidArgument
        /// Nothing arrived within the time the device's frame interval allows.
        case timedOut
        /// The session or output was stopped while the request waited.
        case cancelled
        /// An I/O error not covered above.
        case ioError
    }

    public var code: Code
    public var message: String
    /// The C `errno` behind the failure, when a system call failed.
    public var errno: Int32?
    /// The system call or library function that failed (e.g. `VIDIOC_S_FMT`, `open`).
    public var operation: String?

    public init(_ code: Code, _ message: String, errno: Int32? = nil, operation: String? = nil) {
        self.code = code
        self.message = message
        self.errno = errno
        self.operation = operation
    }

    public var description: String {
        var s = "\(code.rawValue): \(message)"
        if let operation {
            s += " [\(operation)"
            if let errno { s += ": \(String(cString: strerror(errno))) (errno \(errno))" }
            s += "]"
        }
        return s
    }
}
