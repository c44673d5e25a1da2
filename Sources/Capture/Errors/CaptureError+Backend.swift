// The one place a backend's failure becomes a `CaptureError` with words for the user: one errno
// table for every backend (the device kind picks the nouns and the advice where a camera and a
// microphone differ) and the words for each condition a backend reports. Everything the object
// model gets from a backend comes through here.
import CaptureBackend
import CaptureSystem

extension CaptureError {
    /// A backend's failure in words that say what to do; `errno` and `operation` carried over.
    package init(_ e: BackendError) {
        if case .described(let error) = e.failure {
            self = error
            return
        }
        let (code, message) = Self.words(e.failure, opening: e.duringOpen, Words(device: e.device, kind: e.kind))
        self.init(code, message, errno: e.errno?.rawValue, operation: e.operation)
    }

    /// How a message names the device: a camera by its path, a microphone by its ALSA name.
    private struct Words {
        var device: String
        var kind: BackendError.DeviceKind
        var isVideo: Bool { kind == .video }
        /// Mid-sentence: "/dev/video0", "the ALSA device 'hw:1,0'".
        var noun: String { isVideo ? device : "the ALSA device '\(device)'" }
        /// At the start of a sentence: "/dev/video0", "The ALSA device 'hw:1,0'".
        var leadingNoun: String { isVideo ? device : "The ALSA device '\(device)'" }
        /// The group that owns the device nodes on Debian and most distributions.
        var group: String { isVideo ? "video" : "audio" }
        var noSuchDevice: String {
            isVideo
                ? "No device at \(device). Check that the camera is connected and the path is right (ls /dev/video*)."
                : "No ALSA capture device '\(device)'. List them with `capture devices`."
        }
    }

    /// The merged errno table.
    private static func words(_ errno: Errno, operation op: String, opening: Bool, _ w: Words) -> (Code, String) {
        if op == "poll" {
            return (
                .driverError,
                "Waiting for \(w.isVideo ? "frames" : "audio") from \(w.noun) failed (\(errno.name)). Stop and start the session again."
            )
        }
        switch errno {
        case .noSuchFileOrDirectory:
            return (.noSuchDevice, w.noSuchDevice)
        case .noSuchDevice, .noSuchDeviceOrAddress:
            if opening {
                return (
                    .noSuchDevice,
                    w.isVideo
                        ? "\(w.device) exists but has no device behind it (driver not loaded, or the camera was unplugged)."
                        : w.noSuchDevice
                )
            }
            return (
                .disconnected,
                w.isVideo
                    ? "The device at \(w.device) was disconnected. Reconnect it and open it again."
                    : "\(w.leadingNoun) was disconnected. Reconnect it and open it again."
            )
        case .resourceBusy:
            return (
                .deviceBusy,
                w.isVideo
                    ? "\(w.device) is in use by another process or stream. Close the other application (fuser \(w.device) shows it)."
                    : "\(w.leadingNoun) is in use by another stream. Close it or pick another subdevice."
            )
        case .permissionDenied, .notPermitted:
            if op == "VIDIOC_S_EXT_CTRLS" || op == "VIDIOC_S_CTRL" {
                return (.invalidArgument, "The control cannot be set on \(w.noun) (read-only or not settable now).")
            }
            return (
                .permissionDenied,
                "No permission to use \(w.noun). Add the user to the group that owns it (usually '\(w.group)') and log in again."
            )
        case .invalidArgument where opening && !w.isVideo:
            return (.noSuchDevice, "'\(w.device)' is not an ALSA capture device name (e.g. hw:CARD=Loopback,DEV=1 or hw:1,0).")
        case .invalidArgument where op == "VIDIOC_S_FMT" || op == "VIDIOC_TRY_FMT":
            return (.unsupportedFormat, "\(w.leadingNoun) does not support the requested pixel format or size.")
        case .invalidArgument where op == "VIDIOC_S_PARM":
            return (.unsupportedFormat, "\(w.leadingNoun) does not support the requested frame interval.")
        case .invalidArgument where op == "VIDIOC_S_EXT_CTRLS" || op == "VIDIOC_G_EXT_CTRLS":
            return (.invalidArgument, "\(w.leadingNoun) has no such control, or the value is not valid for it.")
        case .invalidArgument where op.hasPrefix("snd_pcm_hw_params") || op.hasPrefix("snd_pcm_sw_params"):
            return (.unsupportedFormat, "\(w.leadingNoun) does not support the requested audio configuration (\(op) refused it).")
        case .invalidArgument:
            return (
                .driverError, "The driver of \(w.noun) refused \(op). Stop and start the stream again; if it persists, reopen the device."
            )
        case .outOfRange:
            return (.invalidArgument, "The value is out of the control's range on \(w.noun).")
        case .inappropriateIoctl where op == "VIDIOC_QUERYCAP":
            return (.notACaptureDevice, "\(w.device) is not a video4linux device.")
        case .inappropriateIoctl:
            return (.driverError, "The driver of \(w.noun) does not support \(op).")
        case .ioError:
            // A device's I/O error is the driver failing, for cameras and microphones alike.
            return (.driverError, "The driver of \(w.noun) reported an I/O error in \(op). The stream must be stopped and started again.")
        case .noSpace where op == "VIDIOC_STREAMON":
            return (
                .deviceBusy,
                "Not enough USB bandwidth to stream from \(w.device). Use a smaller size, a lower frame rate or a compressed format (MJPEG), or move cameras to different USB controllers."
            )
        case .noMemory:
            return (.driverError, "Out of memory for \(op) on \(w.noun)." + (w.isVideo ? " Ask for fewer or smaller buffers." : ""))
        case .isDirectory:
            return (.notACaptureDevice, "\(w.device) is a directory, not a device node.")
        case .tooManyOpenFiles:
            return (.ioError, "The process has too many open files to open \(w.noun).")
        case .brokenPipe:
            return (.driverError, "\(w.leadingNoun) overran (xrun) in \(op). Stop and start the session again.")
        case .suspended:
            return (.driverError, "\(w.leadingNoun) was suspended (\(op)). Stop and start the session again.")
        case .badState:
            return (.invalidState, "\(op) found \(w.noun) in the wrong state. Stop and start the session again.")
        default:
            return (.ioError, "\(op) on \(w.noun) failed.")
        }
    }

    /// The words for each condition a backend reports.
    private static func words(_ failure: BackendError.Failure, opening: Bool, _ w: Words) -> (Code, String) {
        switch failure {
        case .system(let call):
            return words(call.errno, operation: call.operation, opening: opening, w)
        case .described(let error):
            return (error.code, error.message)
        case .notADeviceNode:
            return (.notACaptureDevice, "\(w.device) is not a device node.")
        case .notACamera(let card, let nodeKind):
            return (.notACaptureDevice, "\(w.device) (\(card)) is a \(nodeKind) node, not a camera.")
        case .noLongerConnected(let name, let uniqueID):
            return (.noSuchDevice, "The camera \(name) (\(uniqueID)) is no longer connected.")
        case .emptyDeviceName:
            return (.noSuchDevice, "An empty ALSA device name was given. List the devices with `capture devices`.")
        case .noHandle:
            return (.driverError, "snd_pcm_open gave no handle for '\(w.device)'.")
        case .formatNotOffered(let format, let offered):
            return (
                .unsupportedFormat,
                "\(w.device) does not offer \(format); it offers \(offered.map(\.description).joined(separator: ", "))."
            )
        case .noFrameInterval:
            return (.unsupportedFormat, "\(w.device) does not report a frame interval.")
        case .frameIntervalNotSettable:
            return (.unsupportedFormat, "\(w.device) does not let the frame interval be set.")
        case .noSuchInput(let index):
            return (.invalidArgument, "\(w.device) has no input \(index).")
        case .noSuchControl(let id):
            return (.invalidArgument, "\(w.leadingNoun) has no control 0x\(String(id, radix: 16)).")
        case .valueOutOfRange(let value, let id):
            return (.invalidArgument, "\(value) does not fit the 32-bit control 0x\(String(id, radix: 16)).")
        case .noInterleavedAccess:
            return (.unsupportedFormat, "\(w.leadingNoun) offers no interleaved read access.")
        case .interleavedOnly:
            return (.unsupportedFormat, "ALSA capture here is interleaved only; ask for an interleaved format.")
        case .invalidConfiguration(let request):
            return (.invalidArgument, "Bad audio configuration \(request): rate, channels and sizes must be positive, buffer >= period.")
        case .sampleFormatNotOffered(let format, let offered):
            let offers = offered.isEmpty ? "none the library reads (s16, s32, float32)" : offered.map(\.rawValue).joined(separator: ", ")
            return (
                .unsupportedFormat,
                "'\(w.device)' cannot capture \(format.rawValue); it offers \(offers). A plughw: name or 'default' converts."
            )
        case .alreadyStreaming:
            return (.invalidState, "\(w.leadingNoun) is already streaming.")
        case .notStreaming:
            return (
                .invalidState,
                w.isVideo
                    ? "\(w.device) is not streaming."
                    : "Audio capture on '\(w.device)' is not running: call start() first."
            )
        case .previousStreamHeld:
            return (
                .deviceBusy,
                "Frames from the previous stream of \(w.device) are still held and its driver cannot release buffers in use. Release them, then start again."
            )
        case .noBuffersGranted:
            return (.driverError, "The driver of \(w.noun) granted no buffers.")
        case .planeCountMismatch(let reported, let expected):
            return (.driverError, "The driver of \(w.noun) reports \(reported) planes, the format \(expected).")
        case .bufferNotHeld(let index):
            return (.driverError, "The driver of \(w.noun) returned buffer \(index), which it does not hold.")
        case .noPollDescriptors:
            return (.driverError, "\(w.leadingNoun) has no poll descriptors. Stop and start the session again.")
        }
    }
}

/// Runs a backend call from the object model; its failure comes out as a `CaptureError`.
@inline(__always)
func fromBackend<T: ~Copyable>(_ body: () throws(BackendError) -> T) throws(CaptureError) -> T {
    do { return try body() } catch { throw CaptureError(error) }
}
