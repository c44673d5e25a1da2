import CaptureImaging
import CaptureBackend
import CaptureSystem
import Foundation
import Synchronization

/// Runs one input while the session runs (a video pipeline or an audio reader).
protocol InputRunner: AnyObject, Sendable {
    var input: CaptureDeviceInput { get }
    /// Starts capturing; on failure nothing stays started.
    func start() throws(CaptureError)
    /// Stops and waits until the runner's thread has ended. Idempotent.
    func stop()
    /// The connections frames go to (replaced when the session's graph changes). Returns once no
    /// call into an output left out of `connections` is running, and none will start.
    func setConnections(_ connections: [CaptureConnection])
}

/// Coordinates the flow from inputs to outputs, as `AVCaptureSession`.
///
/// Add inputs and outputs (inside `beginConfiguration()`/`commitConfiguration()` to change
/// several at once), then `startRunning()`. Thread-safe: configuration, start and stop may be
/// called from any thread (they block while the devices change); they must not be called from
/// inside a delegate callback that the same call would wait for. One camera at a time; for
/// several at once use `CaptureMultiCamSession`.
public class CaptureSession: @unchecked Sendable {
    // The state lives here (stored properties must); the work is in extensions by concern:
    // CaptureSession+Graph, +Configuration, +Running, the multi-camera links in
    // CaptureMultiCamSession.swift, the event API in SessionEvents.swift.
    let lock = NSRecursiveLock()
    // Guarded by `lock`:
    var stagedInputs: [CaptureInput] = []
    var stagedOutputs: [CaptureOutput] = []
    /// Outputs of the other products (movie file, metadata) that take frames through consumer
    /// ports in `stagedOutputs`: listed in `outputs`, held as AVFoundation's session holds its outputs.
    var hostedOutputs: [CaptureOutput] = []
    var stagedPreset: Preset = .high
    var appliedInputs: [CaptureInput] = []
    var appliedOutputs: [CaptureOutput] = []
    var appliedPreset: Preset = .high
    var allConnections: [CaptureConnection] = []
    /// The connections of the applied graph (the capture threads' routes), for telling outputs
    /// which of theirs a commit took away.
    var appliedConnections: [CaptureConnection] = []
    var configurationDepth = 0
    /// The first call refused inside the current transaction (an input or preset the session
    /// cannot take); the outermost commit then rejects the whole transaction with it.
    var refusal: CaptureError?
    /// Why the last camera `canAddInput` or `addInput` refused was refused, for `start()`'s
    /// error when the session has no camera.
    var cameraRefusal: CaptureError?
    var runners: [ObjectIdentifier: any InputRunner] = [:]
    /// Format and interval each video input runs (or will run) with.
    var plans: [ObjectIdentifier: VideoPlan] = [:]
    /// What each device reported before the current transaction set its format or duration, for
    /// undoing them if the transaction is rejected.
    var formatsBeforeTransaction: [ObjectIdentifier: (device: CaptureDevice, format: CaptureDevice.Format?, interval: FrameInterval?)] = [:]

    let running = Atomic<Bool>(false)
    /// The inputs interrupted now and why; capture threads change it (a stall) without the
    /// session's lock.
    let interruptions = Locked<[ObjectIdentifier: (device: CaptureDevice, reason: InterruptionReason)]>([:])
    let hub = EventHub()
    /// Serialises reactions to failures reported from capture threads.
    let controlQueue = DispatchQueue(label: "swift-capture.session-control")

    /// Inputs with a retry pending (guarded by `lock`), so one interruption has one retry chain.
    var resumeScheduled: Set<ObjectIdentifier> = []

    struct VideoPlan: Equatable {
        var format: CaptureDevice.Format
        var interval: FrameInterval?
    }

    /// A multi-camera session: several video inputs, connections made one by one.
    let isMultiCam: Bool
    // Multi-camera sessions only, guarded by `lock`: the connections (staged, and as last
    // applied), the outputs connected automatically, and the inputs added without connections.
    var stagedLinks: [CaptureConnection] = []
    var appliedLinks: [CaptureConnection] = []
    var automaticOutputs: Set<ObjectIdentifier> = []
    var unlinkedInputs: Set<ObjectIdentifier> = []

    /// An empty session for one camera (and one microphone).
    public init() {
        isMultiCam = false
        hub.setSession(self)
    }
    init(multiCam: Bool) {
        isMultiCam = multiCam
        hub.setSession(self)
    }

    deinit {
        for r in runners.values { r.stop() }
        for case let i as CaptureDeviceInput in appliedInputs { i.device.setOwner(nil) }
        // Outputs the app still holds are left detached: pending work ends with `.cancelled`,
        // and they can join another session.
        let cancelled = CaptureError(.cancelled, "the session was released")
        for o in appliedOutputs {
            for c in o.connections { o.inputDidStop(c, error: cancelled) }
        }
        for o in appliedOutputs + stagedOutputs {
            o.setConnections([])
            o.attach(to: nil)
        }
    }
}
