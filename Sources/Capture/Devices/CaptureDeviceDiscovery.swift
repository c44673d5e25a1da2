// Finding devices: one object per device (the registry), the lookups, the discovery session
// and the availability shortcuts.
import CaptureVirtual
import CaptureV4L2
import CaptureBackend
import CaptureSystem
import Foundation

extension CaptureDevice {
    // MARK: Discovery

    private static let registry = Locked([String: CaptureDevice]())

    /// Returns the registered object for `info`, so one device is always one object.
    static func canonical(_ make: () -> CaptureDevice) -> CaptureDevice {
        let fresh = make()
        return registry.withLock { reg in
            // A camera a session found unplugged and that is listed again was plugged back in:
            // a new object (its old one keeps saying `isConnected == false`).
            if let old = reg[fresh.uniqueID], old.path == fresh.path, old.localizedName == fresh.localizedName,
                old.isVirtual == fresh.isVirtual, !old.state.withLock({ $0.disconnected })
            {
                return old
            }
            reg[fresh.uniqueID] = fresh
            return fresh
        }
    }

    /// Drops V4L2 cameras that a scan no longer finds: their cached node, formats and settings
    /// belong to a device that is gone (a reloaded driver starts afresh), so a camera that comes
    /// back is a new object.
    private static func forgetVanished(present: Set<String>) {
        let gone: [CaptureDevice] = registry.withLock { reg in
            // A device in a session stays: its session reports the unplug itself.
            let ids = reg.filter {
                $0.value.mediaType == .video && !$0.value.isVirtual && !present.contains($0.key) && $0.value.owner == nil
            }.map(\.key)
            return ids.compactMap { reg.removeValue(forKey: $0) }
        }
        for d in gone { d.dropSource() }
    }

    /// Every device that captures `mediaType`: V4L2 cameras (by node number), then installed
    /// virtual cameras; for audio, ALSA capture devices with the default first.
    public static func devices(for mediaType: MediaType) -> [CaptureDevice] {
        switch mediaType {
        case .video:
            // From the first lookup on, virtual cameras coming and going are announced.
            _ = VirtualDeviceAnnouncer.shared
            let v4l2 = V4L2Discovery.captureDevices().map(camera)
            forgetVanished(present: Set(v4l2.map(\.uniqueID)))
            return v4l2 + VirtualCamera.installed.map(virtualDevice)
        case .audio:
            return audioDevices()
        }
    }

    /// The object for a V4L2 camera found by discovery.
    private static func camera(_ info: SourceInfo) -> CaptureDevice {
        canonical {
            CaptureDevice(
                info: info, mediaType: .video,
                deviceType: .external,
                opener: { () throws(CaptureError) -> any VideoSource in
                    try fromBackend { () throws(BackendError) in try V4L2Discovery.open(info) }
                })
        }
    }

    /// The camera at a V4L2 node path (`/dev/video2`), opened once to check that it is one (as
    /// `audioDevice(named:)` does for ALSA names).
    ///
    /// Throws `.noSuchDevice` when nothing is at the path, `.notACaptureDevice` for a file or a
    /// node that cannot capture video, `.permissionDenied` when the user may not open it.
    public static func videoDevice(atPath path: String) throws(CaptureError) -> CaptureDevice {
        let info = try fromBackend { () throws(BackendError) in try V4L2Discovery.open(path: path).info }
        return devices(for: .video).first { $0.uniqueID == info.uniqueID } ?? camera(info)
    }

    /// The first device for `mediaType` (for video: a back camera first, then any).
    public static func `default`(for mediaType: MediaType) -> CaptureDevice? {
        let all = devices(for: mediaType)
        if mediaType == .video { return all.first { $0.position == .back } ?? all.first }
        return all.first
    }

    /// The first device of `deviceType` for `mediaType` at `position` (`.unspecified` matches any).
    public static func `default`(_ deviceType: DeviceType, for mediaType: MediaType?, position: Position) -> CaptureDevice? {
        DiscoverySession(deviceTypes: [deviceType], mediaType: mediaType, position: position).devices.first
    }

    /// The device with `uniqueID` or path, if present.
    public static func device(withUniqueID id: String) -> CaptureDevice? {
        (devices(for: .video) + devices(for: .audio)).first { $0.uniqueID == id || $0.path == id }
    }

    /// Finds devices by type, media type and position, as `AVCaptureDevice.DiscoverySession`.
    public struct DiscoverySession: Sendable {
        public var deviceTypes: [DeviceType]
        public var mediaType: MediaType?
        public var position: Position
        public init(deviceTypes: [DeviceType] = DeviceType.allCases, mediaType: MediaType?, position: Position = .unspecified) {
            self.deviceTypes = deviceTypes
            self.mediaType = mediaType
            self.position = position
        }
        /// The matching devices, found now.
        public var devices: [CaptureDevice] {
            let media = mediaType.map { [$0] } ?? MediaType.allCases
            return media.flatMap { CaptureDevice.devices(for: $0) }.filter {
                $0.matches(deviceTypes) && (position == .unspecified || $0.position == position)
            }
        }
    }

    // MARK: Availability (seed 003)

    /// Whether any camera is present.
    public static var isCameraAvailable: Bool { !devices(for: .video).isEmpty }
    /// Whether a camera facing `position` is present.
    public static func isCameraAvailable(position: Position) -> Bool {
        devices(for: .video).contains { $0.position == position }
    }
    /// Whether a front camera is present.
    public static var isFrontCameraAvailable: Bool { isCameraAvailable(position: .front) }
    /// Whether a back (rear) camera is present.
    public static var isRearCameraAvailable: Bool { isCameraAvailable(position: .back) }
    /// Whether more than one camera is present (so toggling makes sense).
    public static var hasMultipleCameras: Bool { devices(for: .video).count > 1 }
}
