import CaptureBackend
import CaptureSystem

/// The list of installed virtual cameras. `shared` is the one device discovery reads; tests
/// of the list's rules use their own instance so they do not disturb other tests.
package final class VirtualCameraRegistry: Sendable {
    package static let shared = VirtualCameraRegistry()

    package init() {}

    private let list = Locked<[VirtualCamera]>([])
    private let observers = Locked<[@Sendable () -> Void]>([])

    package var cameras: [VirtualCamera] { list.withLock { $0 } }

    package func install(_ camera: VirtualCamera) {
        let changed = list.withLock { list -> Bool in
            if list.contains(where: { $0 === camera }) { return false }
            list.removeAll { $0.uniqueID == camera.uniqueID }
            list.append(camera)
            return true
        }
        if changed { notify() }
    }

    package func uninstall(_ camera: VirtualCamera) {
        let changed = list.withLock { list -> Bool in
            let before = list.count
            list.removeAll { $0 === camera }
            return list.count != before
        }
        if changed { notify() }
    }

    package func installDefaultPair() -> (front: VirtualCamera, back: VirtualCamera) {
        let (pair, changed) = list.withLock { list -> ((VirtualCamera, VirtualCamera), Bool) in
            var changed = false
            func camera(_ name: String, _ position: DevicePosition) -> VirtualCamera {
                if let c = list.first(where: { $0.name == name }) { return c }
                let c = VirtualCamera(name: name, position: position)
                c.label = position == .front ? "FRONT" : "BACK"
                list.append(c)
                changed = true
                return c
            }
            return ((camera("Virtual Front Camera", .front), camera("Virtual Back Camera", .back)), changed)
        }
        if changed { notify() }
        return (front: pair.0, back: pair.1)
    }

    package func addObserver(_ observer: @escaping @Sendable () -> Void) {
        observers.withLock { $0.append(observer) }
    }

    private let connectionObservers = Locked<[@Sendable (VirtualCamera, Bool) -> Void]>([])

    /// Calls `observer` (on the thread that made the change) when a camera is unplugged
    /// (`false`) or plugged back in (`true`).
    package func addConnectionObserver(_ observer: @escaping @Sendable (VirtualCamera, Bool) -> Void) {
        connectionObservers.withLock { $0.append(observer) }
    }

    /// `camera` was unplugged or plugged back in.
    package func connectionChanged(_ camera: VirtualCamera, connected: Bool) {
        for o in connectionObservers.withLock({ $0 }) { o(camera, connected) }
    }

    private func notify() {
        // Outside the lock: an observer may read the list.
        for o in observers.withLock({ $0 }) { o() }
    }
}
