import CaptureBackend
import Foundation
import Synchronization

/// A source of media for a session, as `AVCaptureInput`. Use `CaptureDeviceInput`.
public class CaptureInput: @unchecked Sendable {
    /// The media types this input provides.
    public var mediaTypes: [MediaType] { [] }
    init() {}
}

/// Feeds a session from a camera or microphone, as `AVCaptureDeviceInput`.
///
/// Creating it opens the device, so errors show up here: no such device, not a capture device,
/// busy (another process streams it), permission denied, disconnected. A camera another process
/// takes later, or a microphone another process opens before the session starts it, interrupts
/// the session instead (`CaptureSession.isInterrupted`).
public final class CaptureDeviceInput: CaptureInput, @unchecked Sendable, CustomStringConvertible {
    /// The device this input reads.
    public let device: CaptureDevice
    /// Whether the app holds every buffer of the running camera, so the device has nowhere to
    /// write (kept current by the capture thread, at least every 100 ms).
    let appHoldsEveryBuffer = Atomic<Bool>(false)

    /// Opens `device` for capture.
    public init(device: CaptureDevice) throws(CaptureError) {
        self.device = device
        super.init()
        if device.mediaType == .video {
            let source = try device.source()
            // Fails with .deviceBusy when another process owns the stream.
            try fromBackend { () throws(BackendError) in try source.checkAvailable() }
        } else {
            try CaptureDeviceInput.checkAudioDevice(device)
        }
    }

    /// The Objective-C spelling: `[AVCaptureDeviceInput deviceInputWithDevice:error:]`.
    public static func deviceInput(with device: CaptureDevice) throws(CaptureError) -> CaptureDeviceInput {
        try CaptureDeviceInput(device: device)
    }

    public override var mediaTypes: [MediaType] { [device.mediaType] }
    public var description: String { "CaptureDeviceInput(\(device))" }
}
