// Following the camera: offline when it goes, and (`reattachesCamera`) put back in the session
// when it comes back.
import Capture
import Foundation

extension CaptureStreamServer {
    func sessionEvent(_ event: CaptureSession.Event) {
        switch event {
        case .deviceDisconnected(let device):
            // Its settings now: a camera plugged in again is a new object.
            let gone = MissingCamera(device: device, format: device.activeFormat, interval: device.activeVideoMinFrameDuration)
            let at = CaptureTime.now()
            // On the server's queue, with its ticks. A frame captured before the camera went and
            // published after this is refused by `publish` (it must not bring the server back online).
            queue.async { [self] in
                lock.withLock {
                    offline = true
                    wentAt = at
                    // Streams end at their next part boundary.
                    resumeWaitingLocked(now: .now(), force: true)
                    if configuration.reattachesCamera, device.mediaType == .video, !stopping, daemon != nil {
                        watchForLocked(gone)
                    }
                }
            }
        default:
            break
        }
    }

    // MARK: Reattach (on the action queue)

    /// Starts looking for `gone` every half second. Under `lock`.
    private func watchForLocked(_ gone: MissingCamera) {
        missing = gone
        guard reattachTimer == nil else { return }
        let t = DispatchSource.makeTimerSource(queue: actions)
        t.schedule(deadline: .now() + 0.5, repeating: 0.5)
        t.setEventHandler { [weak self] in self?.tryReattach() }
        reattachTimer = t
        t.resume()
    }

    /// Puts the missing camera back in the session if it is there again; else tries again at
    /// the next tick. Gives up when the app replaced or removed its input meanwhile.
    private func tryReattach() {
        let gone: MissingCamera? = lock.withLock {
            guard let m = missing, !stopping else { return nil }
            pendingWork.enter()
            return m
        }
        guard let gone else { return }
        defer { pendingWork.leave() }
        // The input that went (or the one an attempt that failed to start put in its place).
        guard let old = session.inputs.lazy.compactMap({ $0 as? CaptureDeviceInput }).first(where: { gone.matches($0.device) }) else {
            // Somebody else changed the session's camera (the web app's toggle, the app).
            return finishReattach(gone)
        }
        let cameras = CaptureDevice.devices(for: .video).filter(\.isConnected)
        guard let device = cameras.first(where: { $0.uniqueID == gone.uniqueID }) ?? cameras.first(where: gone.matches) else { return }
        do throws(CaptureError) {
            try device.lockForConfiguration()
            defer { device.unlockForConfiguration() }
            // The format only when the session does not choose it by its preset.
            if session.sessionPreset == .inputPriority, let f = gone.format,
                let same = device.formats.first(where: { $0.pixelFormat == f.pixelFormat && $0.dimensions == f.dimensions })
            {
                try device.setActiveFormat(same)
            }
            if let i = gone.interval, device.activeFormat?.supports(i) ?? false {
                try device.setActiveVideoMinFrameDuration(i)
            }
            // A camera plugged in again starts at its defaults: the controls set on it before
            // (the web app's sliders, the app) are put back, in the order they were set. One the
            // camera refuses now (inactive under an automatic mode) is left as it is.
            for (id, value) in gone.controls { try? device.setValue(value, for: id) }
            let input = try CaptureDeviceInput(device: device)
            session.beginConfiguration()
            session.removeInput(old)
            session.addInput(input)
            if case .rejected(let e) = session.commitConfiguration() { throw e }
            if !session.isRunning { try session.start() }
        } catch {
            // Not ready yet (still enumerating, busy): the next tick tries again.
            return
        }
        finishReattach(gone)
    }

    /// Stops looking for `gone` (unless another camera went meanwhile).
    private func finishReattach(_ gone: MissingCamera) {
        lock.withLock {
            guard missing === gone else { return }
            missing = nil
            reattachTimer?.cancel()
            reattachTimer = nil
        }
    }
}

/// A camera that went away, what identifies it when it is back, and the settings it had.
final class MissingCamera: Sendable {
    let device: CaptureDevice
    let uniqueID: String
    let path: String
    let name: String
    let format: CaptureDevice.Format?
    let interval: FrameInterval?
    /// The control values set on it, to put back (see `CaptureDevice.controlValuesSet`).
    let controls: [(id: CaptureDevice.ControlID, value: Int64)]

    init(device: CaptureDevice, format: CaptureDevice.Format?, interval: FrameInterval?) {
        self.device = device
        controls = device.controlValuesSet
        uniqueID = device.uniqueID
        path = device.path
        name = device.localizedName
        self.format = format
        self.interval = interval
    }

    /// Whether `other` is this camera: the same object, the same `uniqueID`, or the same path and name.
    func matches(_ other: CaptureDevice) -> Bool {
        other === device || other.uniqueID == uniqueID || (other.path == path && other.localizedName == name)
    }
}
