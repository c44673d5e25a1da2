import CaptureVirtual
import CaptureSystem
import Foundation

extension CaptureDevice {
    /// The object for an installed virtual camera.
    static func virtualDevice(_ camera: VirtualCamera) -> CaptureDevice {
        canonical {
            CaptureDevice(
                info: camera.info, mediaType: .video, deviceType: .virtual, virtualCamera: camera,
                opener: { () throws(CaptureError) -> any VideoSource in try camera.makeSource() })
        }
    }
}

/// Posts `CaptureDevice.wasConnectedNotification` / `wasDisconnectedNotification` for virtual
/// cameras as AVFoundation posts them for any camera, with no `DeviceMonitor` started: when one
/// is installed or uninstalled and when it is `disconnect()`ed or `reconnect()`ed, on the thread
/// that made the change. Set up by the first device lookup (`CaptureDevice.devices(for:)` and
/// everything built on it); the cameras installed then are the baseline, announced by nobody.
/// `announce(connected:)` keeps it to one notification per change per device object, however
/// many monitors also saw it.
final class VirtualDeviceAnnouncer: Sendable {
    static let shared = VirtualDeviceAnnouncer()

    /// The installed cameras' objects by unique ID, as of the last change.
    private let known = Locked<[String: CaptureDevice]>([:])

    private init() {
        // Observers first, so no change falls between the baseline and them.
        VirtualCamera.addInstallationObserver { [unowned self] in installationChanged() }
        VirtualCamera.addConnectionObserver { [unowned self] camera, connected in
            let device = known.withLock { $0[camera.uniqueID] }
            guard let device, device.virtualCamera === camera else { return }
            device.announce(connected: connected)
        }
        let baseline = Self.installed()
        known.withLock { $0 = baseline }
    }

    private static func installed() -> [String: CaptureDevice] {
        Dictionary(
            VirtualCamera.installed.map { ($0.uniqueID, CaptureDevice.virtualDevice($0)) }, uniquingKeysWith: { a, _ in a })
    }

    /// The list changed: what left is disconnected, what came (and is plugged in) connected.
    /// The notifications go out after the lock: an observer may install or uninstall cameras.
    private func installationChanged() {
        let now = Self.installed()
        let (gone, came) = known.withLock { known -> ([CaptureDevice], [CaptureDevice]) in
            defer { known = now }
            return (
                known.filter { now[$0.key] !== $0.value }.map(\.value).sorted { $0.uniqueID < $1.uniqueID },
                now.filter { known[$0.key] !== $0.value }.map(\.value).sorted { $0.uniqueID < $1.uniqueID }
            )
        }
        for d in gone { d.announce(connected: false) }
        for d in came where d.virtualCamera?.isConnected == true { d.announce(connected: true) }
    }
}
