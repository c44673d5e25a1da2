// What a backend (V4L2, ALSA, the virtual devices) throws: the facts of a failure and no words
// for the user. The object model turns it into a `CaptureError` with a message, in one table for
// every backend (`CaptureError(_: BackendError)` in the `Capture` target).
import CaptureSystem

/// A failed backend call or a condition a backend found, on one device.
///
/// Prose-free: `failure` holds the call and errno, or a typed condition with its data;
/// `description` is one technical line for logs. Immutable; any thread.
package struct BackendError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Which kind of device failed; it picks the words where cameras and microphones differ.
    package enum DeviceKind: String, Sendable, Hashable {
        case video, audio
    }

    /// What went wrong.
    package enum Failure: Sendable, Equatable {
        /// A system call or alsa-lib call failed (alsa-lib's negative result as its errno).
        case system(SystemCallError)

        // Opening.
        /// The path is not a character device (a regular file, a FIFO...).
        case notADeviceNode
        /// A V4L2 node that cannot capture video; `nodeKind` names what it is ("video output").
        case notACamera(card: String, nodeKind: String)
        /// A discovered camera whose unique ID no node has any more.
        case noLongerConnected(name: String, uniqueID: String)
        /// An empty ALSA device name.
        case emptyDeviceName
        /// `snd_pcm_open` succeeded without giving a handle.
        case noHandle

        // Formats and controls.
        /// The node does not list the pixel format; `offered` is what it lists.
        case formatNotOffered(PixelFormat, offered: [PixelFormat])
        /// The driver reports no frame interval.
        case noFrameInterval
        /// The driver does not let the frame interval be set (no `V4L2_CAP_TIMEPERFRAME`).
        case frameIntervalNotSettable
        /// `VIDIOC_S_INPUT` refused the input index.
        case noSuchInput(Int)
        /// The device has no control with this ID.
        case noSuchControl(UInt32)
        /// The value does not fit the control (a 32-bit control given a wider value).
        case valueOutOfRange(Int64, control: UInt32)
        /// The PCM offers no interleaved read access.
        case noInterleavedAccess
        /// A non-interleaved format was asked of a backend that reads interleaved only.
        case interleavedOnly
        /// A configuration with a non-positive rate, channel count or size, or buffer < period.
        case invalidConfiguration(AudioConfiguration)
        /// The PCM cannot capture the sample format; `offered` is what it can.
        case sampleFormatNotOffered(AudioFormat.SampleFormat, offered: [AudioFormat.SampleFormat])

        // Streaming.
        /// `startStreaming` on a source that streams.
        case alreadyStreaming
        /// A frame or buffer was asked of a source that does not stream.
        case notStreaming
        /// `REQBUFS 0` failed (EBUSY) while frames of the previous stream are still held.
        case previousStreamHeld
        /// `REQBUFS` granted no buffers.
        case noBuffersGranted
        /// `QUERYBUF` reports fewer planes than the format has.
        case planeCountMismatch(reported: Int, expected: Int)
        /// `DQBUF` returned a buffer index the driver does not hold.
        case bufferNotHeld(Int)
        /// The PCM has no descriptors to poll.
        case noPollDescriptors

        /// An in-process backend's own error, already in words (the virtual camera and
        /// microphone: their conditions, such as injected faults, are theirs to describe and
        /// the public API documents them). Never used by a backend that talks to a driver.
        case described(CaptureError)
    }

    /// The device's path (`/dev/video0`), ALSA name (`hw:1,0`) or virtual ID.
    package var device: String
    package var kind: DeviceKind
    package var failure: Failure
    /// The call that failed or found the condition (`VIDIOC_S_FMT`, `snd_pcm_open`), if any.
    package var operation: String?
    /// The errno behind the failure, if a call returned one.
    package var errno: Errno?

    /// A condition found by (or during) `operation`.
    package init(_ failure: Failure, device: String, kind: DeviceKind, operation: String? = nil, errno: Errno? = nil) {
        self.failure = failure
        self.device = device
        self.kind = kind
        self.operation = operation
        self.errno = errno
    }

    /// A failed call.
    package init(_ call: SystemCallError, device: String, kind: DeviceKind) {
        self.init(.system(call), device: device, kind: kind, operation: call.operation, errno: call.errno)
    }

    /// Whether the call was the one opening the device: there a vanished device reads as
    /// missing; later the same errno means it went away.
    package var duringOpen: Bool { operation == "open" || operation == "snd_pcm_open" }

    /// One line for logs: call, errno, device (or the condition and its data).
    package var description: String {
        let what: String
        switch failure {
        case .system(let call): what = "\(call.operation): \(call.errno.name)"
        case .described(let error): what = "\(error)"
        default: what = "\(failure)" + (operation.map { " [\($0)\(errno.map { ": \($0.name)" } ?? "")]" } ?? "")
        }
        return "\(what) on \(kind.rawValue) device \(device)"
    }
}

extension BackendError {
    /// Runs `body` of an in-process backend, wrapping its `CaptureError` as `.described`.
    package static func describing<T: ~Copyable>(
        device: String, kind: DeviceKind,
        _ body: () throws(CaptureError) -> T
    ) throws(BackendError) -> T {
        do { return try body() } catch { throw BackendError(.described(error), device: device, kind: kind) }
    }
}
