import Foundation

// The user-info keys are global constants named as AVFoundation's without `AV`, as port code
// spells them (hence the lint exceptions).

// swift-format-ignore: AlwaysUseLowerCamelCase
/// The key of a `CaptureSession.runtimeErrorNotification`'s user info holding the
/// ``CaptureError``, as `AVCaptureSessionErrorKey`.
public let CaptureSessionErrorKey = "CaptureSessionErrorKey"

// swift-format-ignore: AlwaysUseLowerCamelCase
/// The key of a `CaptureSession.wasInterruptedNotification`'s user info holding the
/// interruption's reason, as `AVCaptureSessionInterruptionReasonKey`: the
/// `CaptureSession.InterruptionReason`'s `rawValue` (a `String`, where AVFoundation has a number),
/// so `InterruptionReason(rawValue:)` reads it back.
public let CaptureSessionInterruptionReasonKey = "CaptureSessionInterruptionReasonKey"

// swift-format-ignore: AlwaysUseLowerCamelCase
/// The key of a `wasInterruptedNotification`'s and an `interruptionEndedNotification`'s user
/// info holding the ``CaptureDevice`` the interruption is about. Linux only: a session here is
/// interrupted one device at a time.
public let CaptureSessionInterruptedDeviceKey = "CaptureSessionInterruptedDeviceKey"

extension CaptureSession {
    /// Posted when an error stops the session or one of its inputs, as
    /// `AVCaptureSessionRuntimeErrorNotification`; the ``CaptureError`` is under
    /// ``CaptureSessionErrorKey``. Posted on the session's private event queue (the one
    /// `addEventHandler` handlers run on), in the order events happen, never on the caller's
    /// thread, so an observer may start or stop the session.
    public static let runtimeErrorNotification = Notification.Name("CaptureSessionRuntimeErrorNotification")
    /// Posted when the session starts running, as `AVCaptureSessionDidStartRunningNotification`
    /// (on the session's event queue, as `runtimeErrorNotification`).
    public static let didStartRunningNotification = Notification.Name("CaptureSessionDidStartRunningNotification")
    /// Posted when the session stops, by request or because its inputs failed, as
    /// `AVCaptureSessionDidStopRunningNotification` (on the session's event queue).
    public static let didStopRunningNotification = Notification.Name("CaptureSessionDidStopRunningNotification")
    /// Posted when a device of the running session cannot deliver for now, as
    /// `AVCaptureSessionWasInterruptedNotification`; the reason's raw value is under
    /// ``CaptureSessionInterruptionReasonKey``, the device under
    /// ``CaptureSessionInterruptedDeviceKey`` (on the session's event queue).
    public static let wasInterruptedNotification = Notification.Name("CaptureSessionWasInterruptedNotification")
    /// Posted when an interrupted device delivers again, as
    /// `AVCaptureSessionInterruptionEndedNotification`; the device is under
    /// ``CaptureSessionInterruptedDeviceKey`` (on the session's event queue).
    public static let interruptionEndedNotification = Notification.Name("CaptureSessionInterruptionEndedNotification")
}

extension CaptureSession.Event {
    /// The notification this event is posted as, if it has one: its name and user info.
    /// (Built on the queue that posts it: `Notification` is not `Sendable`.)
    var notification: (name: Notification.Name, userInfo: [AnyHashable: Any]?)? {
        switch self {
        case .didStartRunning: (CaptureSession.didStartRunningNotification, nil)
        case .didStopRunning: (CaptureSession.didStopRunningNotification, nil)
        case .runtimeError(let e): (CaptureSession.runtimeErrorNotification, [CaptureSessionErrorKey: e])
        case .wasInterrupted(let d, let r):
            (
                CaptureSession.wasInterruptedNotification,
                [CaptureSessionInterruptionReasonKey: r.rawValue, CaptureSessionInterruptedDeviceKey: d]
            )
        case .interruptionEnded(let d): (CaptureSession.interruptionEndedNotification, [CaptureSessionInterruptedDeviceKey: d])
        case .deviceDisconnected, .deviceStalled, .deviceResumed, .framesDropped, .configurationRejected: nil
        }
    }
}
