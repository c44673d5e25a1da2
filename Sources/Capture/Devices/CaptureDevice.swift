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

    // MARK: Formats

    /// Every format the device offers, largest first. Empty when the device cannot be opened.
    public var formats: [Format] {
        (try? loadFormats()) ?? []
    }

    func loadFormats() throws(CaptureError) -> [Format] {
        if let f = state.withLock({ $0.formats }) { return f }
        let src = try source()
        let list = try fromBackend { () throws(BackendError) in try src.formats() }.map(Format.init).sorted { a, b in
            let pa = a.dimensions.width * a.dimensions.height, pb = b.dimensions.width * b.dimensions.height
            if pa != pb { return pa > pb }
            let ra = PresetResolver.rank(a.pixelFormat, preferred: nil), rb = PresetResolver.rank(b.pixelFormat, preferred: nil)
            if ra != rb { return ra < rb }
            if a.pixelFormat != b.pixelFormat { return a.pixelFormat.rawValue < b.pixelFormat.rawValue }
            return a.maxFrameRate > b.maxFrameRate
        }
        state.withLock { $0.formats = list }
        return list
    }

    /// The best format at `dimensions`: `pixelFormat` if given, else the one stills and video
    /// handle best (YUYV and the other raw YUV formats first, then MJPEG, then RGB and grey).
    /// Nil when the device has no such size (or no format the library can encode at it).
    public func bestFormat(for dimensions: VideoDimensions, pixelFormat: PixelFormat? = nil) -> Format? {
        formats.filter { f in
            f.dimensions == dimensions
                && (pixelFormat.map { $0 == f.pixelFormat }
                    ?? (PresetResolver.rank(f.pixelFormat, preferred: nil) < PresetResolver.pixelFormatRank.count))
        }.first
    }

    /// The format the device uses now; nil when the device cannot be opened.
    ///
    /// Assignable inside the configuration lock, as AVFoundation's `activeFormat`, with the
    /// effect of `setActiveFormat(_:)`: without the lock, or with nil or a format not in
    /// `formats`, the assignment traps (AVFoundation raises an exception); `setActiveFormat(_:)`
    /// throws instead. A running session that cannot restart in the new format keeps the old
    /// one and posts `.configurationRejected`.
    public var activeFormat: Format? {
        get {
            if let f = state.withLock({ $0.activeFormat }) { return f }
            guard let src = try? source(), let cur = try? src.currentFormat() else { return nil }
            return formats.first { $0.pixelFormat == cur.pixelFormat && $0.dimensions == cur.dimensions }
        }
        set {
            let known = try? loadFormats()
            assign(
                "activeFormat", newValue.map { "\($0)" } ?? "nil", readable: known != nil,
                supported: newValue.map { known?.contains($0) == true } ?? false, check: "formats", reportsFault: false
            ) { () throws(CaptureError) in
                if let newValue { try setActiveFormat(newValue) }
            }
        }
    }

    /// The shortest frame duration, the inverse of the highest frame rate: the rate the camera
    /// runs at (a V4L2 camera has one). Nil when the device cannot be opened.
    ///
    /// Assignable inside the configuration lock, as AVFoundation's, with the effect of
    /// `setActiveVideoMinFrameDuration(_:)`; nil (AVFoundation's `CMTime.invalid`) goes back to
    /// the default, the active format's highest rate (and a format chosen later runs at its own
    /// highest rate). Without the lock, or with a duration the
    /// active format's `videoSupportedFrameRateRanges` do not contain, the assignment traps.
    public var activeVideoMinFrameDuration: FrameInterval? {
        get {
            if let d = state.withLock({ $0.minFrameDuration }) { return d }
            return try? source().frameInterval()
        }
        set {
            let format = activeFormat
            let wanted = newValue ?? format.flatMap(Self.defaultMinFrameDuration)
            assign(
                "activeVideoMinFrameDuration", newValue.map { "\($0)" } ?? "nil", readable: format != nil,
                supported: wanted.map { format?.supports($0) == true } ?? false,
                check: "activeFormat.videoSupportedFrameRateRanges", reportsFault: false
            ) { () throws(CaptureError) in
                guard let wanted else { return }
                try setActiveVideoMinFrameDuration(wanted)
                // The default is no wish: a later format or preset runs at its own highest rate.
                if newValue == nil { state.withLock { $0.minFrameDuration = nil } }
            }
        }
    }

    /// The longest frame duration, the inverse of the lowest frame rate, as AVFoundation's
    /// `activeVideoMaxFrameDuration`. A V4L2 camera runs at one rate, so the default is
    /// `activeVideoMinFrameDuration`; a longer value is kept and read back (an app's "no
    /// slower than" limit), but frames still come at `activeVideoMinFrameDuration`; a shorter
    /// one raises the rate to it, so that the minimum never exceeds the maximum. Nil when the
    /// device cannot be opened.
    ///
    /// Assignable inside the configuration lock, with the effect of
    /// `setActiveVideoMaxFrameDuration(_:)`; nil goes back to the default. Without the lock, or
    /// with a duration the active format's `videoSupportedFrameRateRanges` do not contain, the
    /// assignment traps.
    public var activeVideoMaxFrameDuration: FrameInterval? {
        get {
            guard let minimum = activeVideoMinFrameDuration else { return nil }
            // A limit the format no longer has (a new format or preset) is dropped, as a new
            // preset resets it in AVFoundation.
            guard let kept = state.withLock({ $0.maxFrameDuration }), !(kept < minimum),
                activeFormat?.supports(kept) ?? true
            else { return minimum }
            return kept
        }
        set {
            let format = activeFormat
            assign(
                "activeVideoMaxFrameDuration", newValue.map { "\($0)" } ?? "nil", readable: format != nil,
                supported: newValue.map { format?.supports($0) == true } ?? true,
                check: "activeFormat.videoSupportedFrameRateRanges", reportsFault: false
            ) { () throws(CaptureError) in try setActiveVideoMaxFrameDuration(newValue) }
        }
    }

    /// The default `activeVideoMinFrameDuration` of `format`: its highest rate.
    static func defaultMinFrameDuration(_ format: Format) -> FrameInterval? {
        format.videoSupportedFrameRateRanges.map(\.minFrameDuration).min()
    }

    // MARK: Configuration

    /// Takes the configuration lock, as AVFoundation's. Needed before assigning a setting
    /// (`focusMode`, `activeFormat`, `activeVideoMinFrameDuration`...) or calling a `set…` method
    /// (`setActiveFormat`, `setValue(_:for:)`...). Throws when the device is gone.
    public func lockForConfiguration() throws(CaptureError) {
        _ = try source()
        state.withLock { $0.lockCount += 1 }
    }

    /// Gives the configuration lock back.
    public func unlockForConfiguration() {
        state.withLock { $0.lockCount = max(0, $0.lockCount - 1) }
    }

    func requireLock(_ what: String) throws(CaptureError) {
        guard state.withLock({ $0.lockCount > 0 }) else {
            throw CaptureError(.invalidState, "\(what) needs the configuration lock: call lockForConfiguration() first")
        }
    }

    /// Makes `format` the active format. A running session restarts the stream in the new
    /// format; if the device refuses, the previous format stays and the error is thrown.
    public func setActiveFormat(_ format: Format) throws(CaptureError) {
        try requireLock("setActiveFormat")
        guard try loadFormats().contains(format) else {
            throw CaptureError(.unsupportedFormat, "\(format) is not one of \(localizedName)'s formats: pick one from `formats`")
        }
        if let session = owner {
            try session.deviceWantsFormat(self, format: format, interval: nil)
        } else {
            _ = try applyFormat(format)
        }
    }

    /// Sets the frame duration (e.g. `FrameInterval(framesPerSecond: 30)`). It must be within one
    /// of the active format's ranges. A running session sets the new rate on the stream
    /// (restarting it where the driver cannot change it while streaming). A longer
    /// `activeVideoMaxFrameDuration` stays; a shorter one becomes this one.
    public func setActiveVideoMinFrameDuration(_ interval: FrameInterval) throws(CaptureError) {
        try requireLock("setActiveVideoMinFrameDuration")
        if let f = activeFormat, !f.supports(interval) {
            throw CaptureError(
                .unsupportedFormat,
                "\(interval) is outside \(f)'s frame rates: choose from videoSupportedFrameRateRanges")
        }
        if let session = owner {
            try session.deviceWantsFormat(self, format: nil, interval: interval)
        } else {
            _ = try applyInterval(interval)
        }
        state.withLock { st in
            if let max = st.maxFrameDuration, max < interval { st.maxFrameDuration = nil }
        }
    }

    /// Sets the longest frame duration (see `activeVideoMaxFrameDuration`); nil goes back to the
    /// default. It must be within one of the active format's ranges. A duration shorter than
    /// `activeVideoMinFrameDuration` sets that too (the camera then runs at it, as through
    /// `setActiveVideoMinFrameDuration(_:)`); a longer one changes no frame. Needs the
    /// configuration lock; throws `.unsupportedFormat` outside the ranges.
    public func setActiveVideoMaxFrameDuration(_ interval: FrameInterval?) throws(CaptureError) {
        try requireLock("setActiveVideoMaxFrameDuration")
        guard let interval else {
            state.withLock { $0.maxFrameDuration = nil }
            return
        }
        if let f = activeFormat, !f.supports(interval) {
            throw CaptureError(
                .unsupportedFormat,
                "\(interval) is outside \(f)'s frame rates: choose from videoSupportedFrameRateRanges")
        }
        if let minimum = activeVideoMinFrameDuration, interval < minimum {
            try setActiveVideoMinFrameDuration(interval)
        }
        state.withLock { $0.maxFrameDuration = interval }
    }

    /// Sets the format on the source; returns what the driver applied. Throws when the driver
    /// picked another pixel format or size.
    @discardableResult
    func applyFormat(_ format: Format) throws(CaptureError) -> ActiveFormat {
        let src = try source()
        // S_FMT fails with EBUSY while buffers of an earlier stream are still held: skip it
        // when the driver already has the format.
        if let current = try? src.currentFormat(), current.pixelFormat == format.pixelFormat,
            current.dimensions == format.dimensions
        {
            state.withLock { $0.activeFormat = format }
            return current
        }
        let applied = try fromBackend { () throws(BackendError) in
            try src.setFormat(pixelFormat: format.pixelFormat, width: format.dimensions.width, height: format.dimensions.height)
        }
        guard applied.pixelFormat == format.pixelFormat, applied.dimensions == format.dimensions else {
            throw CaptureError(
                .unsupportedFormat,
                "\(localizedName) cannot capture \(format.pixelFormat) \(format.dimensions); the driver offered \(applied.pixelFormat) \(applied.dimensions)"
            )
        }
        state.withLock { $0.activeFormat = format }
        return applied
    }

    @discardableResult
    func applyInterval(_ interval: FrameInterval) throws(CaptureError) -> FrameInterval {
        let src = try source()
        let applied = try fromBackend { () throws(BackendError) in try src.setFrameInterval(interval) }
        state.withLock { $0.minFrameDuration = applied }
        return applied
    }

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
