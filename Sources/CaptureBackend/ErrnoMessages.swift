import CaptureSystem

// The one place an errno from the system layer becomes a `CaptureError` with words for the user.
extension CaptureError {
    /// Turns an errno from `operation` on the device at `path` into a typed error with a message
    /// that says what to do.
    package init(_ errno: Errno, operation: String, path: String) {
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

extension CaptureError {
    /// A failed call of the system layer on the device at `path`, in the table's words.
    package init(_ failure: SystemCallError, path: String) { self.init(failure.errno, operation: failure.operation, path: path) }
}
