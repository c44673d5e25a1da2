import CaptureVirtual
import CaptureImaging
import CaptureV4L2
import CaptureALSA
import CaptureBackend
import CaptureSystem
import Foundation

/// A camera or microphone, as AVFoundation's `AVCaptureDevice`.
///
/// Find devices with `devices(for:)`, `default(for:)`, `default(_:for:position:)` or a
/// `DiscoverySession`. The same physical device is always the same object. Thread-safe: any
/// thread may read properties; configuration needs `lockForConfiguration()`.
public final class CaptureDevice: Sendable, Hashable, CustomStringConvertible {
    public typealias Position = DevicePosition

    /// The kind of device, as `AVCaptureDevice.DeviceType`.
    public enum DeviceType: String, Sendable, Hashable, CaseIterable {
        /// A camera built into the machine (a platform or CSI camera, or any camera with a
        /// known front/back orientation).
        case builtInWideAngleCamera
        /// A camera on an external bus (USB webcams).
        case external
        /// The library's in-process virtual camera. A lookup for `.virtual` finds every virtual
        /// camera, but one facing front or back reports `.builtInWideAngleCamera` as its
        /// `deviceType`, so the lookups apps make for built-in cameras find the virtual pair
        /// (`isVirtual` tells it apart).
        case virtual
        /// A microphone or other audio capture device.
        case microphone
    }

    let info: SourceInfo
    /// What the device captures.
    public let mediaType: MediaType
    /// The kind of device: a camera facing front or back (a V4L2 camera by its orientation
    /// control, a fixed USB port or a position override; a virtual camera by its position) is
    /// built in; other V4L2 cameras are external, other virtual cameras `.virtual`.
    public var deviceType: DeviceType {
        guard baseType == .external || baseType == .virtual else { return baseType }
        return position == .front || position == .back ? .builtInWideAngleCamera : baseType
    }

    /// Whether a lookup for `types` finds this device: by `deviceType`, and every virtual camera
    /// for `.virtual` (a virtual front or back camera reports `.builtInWideAngleCamera`).
    func matches(_ types: [DeviceType]) -> Bool {
        types.contains(deviceType) || (isVirtual && types.contains(.virtual))
    }
    private let baseType: DeviceType
    private let opener: @Sendable () throws(CaptureError) -> any VideoSource
    let virtualCamera: VirtualCamera?
    /// Backend data for non-video devices (the audio layer keeps its ALSA descriptor here).
    let payload: (any Sendable)?

    struct State {
        var source: (any VideoSource)?
        var formats: [Format]?
        var lockCount = 0
        var activeFormat: Format?
        var minFrameDuration: FrameInterval?
        /// The longest frame duration asked for (nil: the default, the rate in use).
        var maxFrameDuration: FrameInterval?
        /// The exposure mode last set, to tell `.locked` from `.custom` (both are V4L2's manual).
        var manualExposureMode: ExposureMode = .locked
        weak var owner: CaptureSession?
        /// A session saw the device go away (its node may stay, as after a vivid `disconnect`).
        var disconnected = false
        /// What the last connection notification said (nil: none posted; devices listed at
        /// start count as connected without one).
        var announcedConnected: Bool?
        /// Control values set through this object, the last set last (see `controlValuesSet`).
        var controlsSet: [(id: ControlID, value: Int64)] = []
    }
    let state = Locked(State())

    init(
        info: SourceInfo, mediaType: MediaType, deviceType: DeviceType, virtualCamera: VirtualCamera? = nil,
        payload: (any Sendable)? = nil,
        opener: @escaping @Sendable () throws(CaptureError) -> any VideoSource
    ) {
        self.info = info
        self.mediaType = mediaType
        baseType = deviceType
        self.virtualCamera = virtualCamera
        self.payload = payload
        self.opener = opener
    }

    /// Makes an audio device; `payload` is what the audio layer needs to open it.
    convenience init(audioInfo: SourceInfo, payload: any Sendable) {
        self.init(
            info: audioInfo, mediaType: .audio, deviceType: .microphone, payload: payload,
            opener: { () throws(CaptureError) -> any VideoSource in
                throw CaptureError(.notACaptureDevice, "\(audioInfo.name) is an audio device: it has no video")
            })
    }

    /// A stable identifier: the same camera on the same port has the same ID across runs.
    public var uniqueID: String { info.uniqueID }
    /// A name for people, from the driver (V4L2 `card`).
    public var localizedName: String { info.name }
    /// Which way the camera faces: a position override (`CAPTURE_DEVICE_POSITIONS`, or the
    /// file `~/.config/swift-capture/positions`; see `DevicePositionOverrides`) when one names
    /// this device, else the device's orientation control, else `.front` for a USB camera on a
    /// fixed port (the built-in webcam) and `.external` for other USB cameras.
    public var position: Position {
        DevicePositionOverrides.current.position(uniqueID: info.uniqueID, path: info.path) ?? info.position
    }
    /// Who made the device, as `AVCaptureDevice.manufacturer`: a USB camera's manufacturer
    /// string (sysfs), else the driver's name; `swift-capture` for the virtual camera.
    public var manufacturer: String {
        if isVirtual { return "swift-capture" }
        let node = (path as NSString).lastPathComponent
        // The V4L2 node's device is the USB interface; its parent, the USB device, names its maker.
        if path.hasPrefix("/dev/video"),
            let m = try? String(contentsOfFile: "/sys/class/video4linux/\(node)/device/../manufacturer", encoding: .utf8)
        {
            let t = m.trimmingCharacters(in: .whitespacesAndNewlines)
            if !t.isEmpty { return t }
        }
        return info.driver
    }
    /// The driver's name (V4L2 `driver`), or `virtual`.
    public var modelID: String { info.driver }
    /// Where the device lives: `/dev/videoN`, an ALSA name, or `virtual:NAME`.
    public var path: String { info.path }
    /// The bus the device is on (V4L2 `bus_info`).
    public var busInfo: String { info.busInfo }
    /// Whether the device is the library's virtual camera.
    public var isVirtual: Bool { virtualCamera != nil }

    /// Whether the device captures `mediaType`.
    public func hasMediaType(_ mediaType: MediaType) -> Bool { self.mediaType == mediaType }

    public var description: String { "\(localizedName) (\(path), \(position.rawValue))" }
    public static func == (a: CaptureDevice, b: CaptureDevice) -> Bool { a === b }
    public func hash(into h: inout Hasher) { h.combine(uniqueID) }

    // MARK: Opened source

    /// The device's opened source, opening it on first use. It stays open while the device
    /// object lives (and closes after a disconnect): a frame the app still holds from an earlier
    /// session owns the driver's buffers on this descriptor, and a second descriptor could not
    /// stream until that frame is released.
    func source() throws(CaptureError) -> any VideoSource {
        if let s = state.withLock({ $0.source }) { return s }
        let s = try opener()
        return state.withLock { st in
            if let existing = st.source { return existing }
            st.source = s
            return s
        }
    }

    var owner: CaptureSession? {
        state.withLock { $0.owner }
    }
    func setOwner(_ s: CaptureSession?) { state.withLock { $0.owner = s } }

    // MARK: Controls

    /// The device's controls (brightness, exposure, white balance, focus, zoom... as the driver offers).
    public func controls() throws(CaptureError) -> [Control] {
        let src = try source()
        return try fromBackend { () throws(BackendError) in try src.controls() }.map(Control.init)
    }

    /// The control with `id`, if the device has it.
    public func control(_ id: ControlID) -> Control? {
        (try? controls())?.first { $0.id == id }
    }

    /// The current value of a control.
    public func value(of id: ControlID) throws(CaptureError) -> Int64 {
        let src = try source()
        return try fromBackend { () throws(BackendError) in try src.controlValue(id.rawValue) }
    }

    /// Sets a control. Needs the configuration lock.
    public func setValue(_ value: Int64, for id: ControlID) throws(CaptureError) {
        try requireLock("setValue(_:for:)")
        let src = try source()
        try fromBackend { () throws(BackendError) in try src.setControlValue(id.rawValue, value) }
        state.withLock { st in
            st.controlsSet.removeAll { $0.id == id }
            st.controlsSet.append((id, value))
        }
    }

    /// The control values set through this object, in the order they were last set (so that a
    /// mode comes before the value it allows, as it was set): what a camera plugged in again,
    /// which starts at its defaults, needs to be put back as it was. Any thread.
    package var controlValuesSet: [(id: ControlID, value: Int64)] { state.withLock { $0.controlsSet } }
}

extension CaptureDevice {
    /// Posted on `NotificationCenter.default` (on the thread that noticed, `object` the device,
    /// no user info) when a camera appears, as `AVCaptureDeviceWasConnectedNotification`: a
    /// virtual camera installed or `reconnect()`ed (once any device lookup has run), a V4L2 camera
    /// seen by a started `DeviceMonitor`; once per change per device object.
    public static let wasConnectedNotification = Notification.Name("CaptureDeviceWasConnectedNotification")
    /// Posted (as `wasConnectedNotification`) when a device goes away, as
    /// `AVCaptureDeviceWasDisconnectedNotification`: a running session's input finds it unplugged,
    /// a virtual camera is uninstalled or `disconnect()`ed, or a started `DeviceMonitor` sees it
    /// leave the list; once per change per device object.
    public static let wasDisconnectedNotification = Notification.Name("CaptureDeviceWasDisconnectedNotification")

    /// Whether the device is present and usable, as `AVCaptureDevice.isConnected`: false once a
    /// session found it unplugged (also when its V4L2 node stays, as after vivid's `disconnect`),
    /// when its node is gone, or when a virtual camera is disconnected or uninstalled. A camera
    /// plugged in again is a new device object (a virtual camera keeps its object).
    public var isConnected: Bool {
        if let cam = virtualCamera {
            return cam.isConnected && VirtualCamera.installed.contains { $0 === cam }
        }
        if state.withLock({ $0.disconnected }) { return false }
        guard mediaType == .video, path.hasPrefix("/") else { return true }
        return FileManager.default.fileExists(atPath: path)
    }

    /// A session found the device unplugged: `isConnected` turns false and the notification goes out.
    func markDisconnected() {
        if virtualCamera == nil { state.withLock { $0.disconnected = true } }
        announce(connected: false)
    }

    /// Posts `wasConnectedNotification` or `wasDisconnectedNotification` unless the last one
    /// posted for this device said the same.
    func announce(connected: Bool) {
        let post = state.withLock { st -> Bool in
            guard st.announcedConnected != connected else { return false }
            // A device never announced counts as connected: no disconnect posted twice,
            // no connect for a device listed from the start.
            if st.announcedConnected == nil && connected { st.announcedConnected = true; return true }
            st.announcedConnected = connected
            return true
        }
        guard post else { return }
        NotificationCenter.default.post(
            name: connected ? Self.wasConnectedNotification : Self.wasDisconnectedNotification,
            object: self)
    }

    /// Forgets the opened source (after a disconnect), so the descriptor closes once the last
    /// frame is released and a reconnected device is opened afresh.
    func dropSource() {
        state.withLock {
            $0.source = nil; $0.formats = nil
        }
    }
}
