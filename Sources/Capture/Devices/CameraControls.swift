import CaptureBackend
import Foundation

// Typed camera controls, as AVCaptureDevice names them, over the device's V4L2 controls:
//   focus        FOCUS_AUTO (continuous), AUTO_FOCUS_START (one shot), FOCUS_ABSOLUTE (lens position)
//   exposure     EXPOSURE_AUTO (manual / auto / aperture priority), EXPOSURE_ABSOLUTE (100 µs),
//                AUTOGAIN, GAIN or ISO_SENSITIVITY (+ ISO_SENSITIVITY_AUTO), AUTO_EXPOSURE_BIAS
//   white bal.   AUTO_WHITE_BALANCE, DO_WHITE_BALANCE (one shot), WHITE_BALANCE_TEMPERATURE
//   zoom         ZOOM_ABSOLUTE;  torch  FLASH_LED_MODE (torch item), FLASH_TORCH_INTENSITY (level)
//   points of interest: none (V4L2 has no standard control for a focus or metering point)
// BRIGHTNESS is not used as a fallback for the exposure bias: it offsets the picture after the
// exposure, it is not an exposure target, so it stays a generic control (`setValue(_:for:)`).

extension CaptureDevice {
    /// How the lens focuses, as `AVCaptureDevice.FocusMode`.
    public enum FocusMode: Int, Sendable, Hashable, CaseIterable, CustomStringConvertible {
        /// The lens stays where it is (`FOCUS_AUTO` off).
        case locked = 0
        /// Focuses once, then locks (`AUTO_FOCUS_START`).
        case autoFocus = 1
        /// Keeps focusing (`FOCUS_AUTO` on).
        case continuousAutoFocus = 2
        public var description: String { ["locked", "autoFocus", "continuousAutoFocus"][rawValue] }
    }

    /// How exposure is chosen, as `AVCaptureDevice.ExposureMode`.
    public enum ExposureMode: Int, Sendable, Hashable, CaseIterable, CustomStringConvertible {
        /// Exposure time and gain stay as they are (V4L2 manual exposure, automatic gain off).
        case locked = 0
        /// The camera adjusts exposure (V4L2 auto or aperture priority, automatic gain on).
        case continuousAutoExposure = 2
        /// The app's exposure time and ISO (`setExposureModeCustom(duration:iso:)`).
        case custom = 3
        public var description: String {
            switch self {
            case .locked: "locked"
            case .continuousAutoExposure: "continuousAutoExposure"
            case .custom: "custom"
            }
        }
    }

    /// How white balance is chosen, as `AVCaptureDevice.WhiteBalanceMode`.
    public enum WhiteBalanceMode: Int, Sendable, Hashable, CaseIterable, CustomStringConvertible {
        /// The colour temperature stays as it is (`AUTO_WHITE_BALANCE` off).
        case locked = 0
        /// Balances once, then locks (`DO_WHITE_BALANCE`).
        case autoWhiteBalance = 1
        /// Keeps balancing (`AUTO_WHITE_BALANCE` on).
        case continuousAutoWhiteBalance = 2
        public var description: String { ["locked", "autoWhiteBalance", "continuousAutoWhiteBalance"][rawValue] }
    }

    /// The torch (a continuous light), as `AVCaptureDevice.TorchMode`.
    public enum TorchMode: Int, Sendable, Hashable, CaseIterable, CustomStringConvertible {
        case off = 0
        case on = 1
        /// On when dark: V4L2 has no such mode, so no camera here supports it.
        case auto = 2
        public var description: String { ["off", "on", "auto"][rawValue] }
    }

    /// `setFocusModeLocked(lensPosition:)` keeps the lens where it is, as `AVCaptureLensPositionCurrent`.
    public static let currentLensPosition: Float = -1
    /// `setExposureModeCustom(duration:iso:)` keeps the exposure time, as `AVCaptureExposureDurationCurrent`.
    public static let currentExposureDuration: Duration = .zero
    /// `setExposureModeCustom(duration:iso:)` keeps the ISO, as `AVCaptureISOCurrent`.
    public static let currentISO: Float = 0

    // MARK: Reading the device's controls

    /// The device's controls by ID, read now (empty when it cannot be opened).
    func controlTable() -> [ControlID: Control] {
        var table: [ControlID: Control] = [:]
        for c in (try? controls()) ?? [] where !c.isReadOnly { table[c.id] = c }
        return table
    }

    func menuHas(_ c: Control?, _ value: Int64) -> Bool {
        c?.menuItems.contains { $0.value == value } ?? false
    }

    func unsupported(_ what: String, check: String) -> CaptureError {
        CaptureError(.invalidArgument, "\(localizedName) does not support \(what): check \(check) first")
    }

    /// Sets controls in order, under the configuration lock `what` names.
    func apply(_ what: String, _ values: [(ControlID, Int64)]) throws(CaptureError) {
        try requireLock(what)
        for (id, v) in values { try setValue(v, for: id) }
    }

    // V4L2_FLASH_LED_MODE_* menu values.
    private static let ledNone: Int64 = 0, ledTorch: Int64 = 2

    // MARK: Focus

    /// Whether the device can focus in `mode`: `.continuousAutoFocus` and `.locked` need
    /// `FOCUS_AUTO` (or, for `.locked`, a lens position control); `.autoFocus` needs `AUTO_FOCUS_START`.
    public func isFocusModeSupported(_ mode: FocusMode) -> Bool {
        let t = controlTable()
        switch mode {
        case .locked: return t[.focusAutomatic] != nil || t[.focusPosition] != nil
        case .autoFocus: return t[.focusOnce] != nil
        case .continuousAutoFocus: return t[.focusAutomatic] != nil
        }
    }

    /// The focus mode: `.continuousAutoFocus` while `FOCUS_AUTO` is on, else `.locked`.
    ///
    /// Assignable between `lockForConfiguration()` and `unlockForConfiguration()`, as in
    /// AVFoundation: without the lock, or with a mode `isFocusModeSupported(_:)` denies, the
    /// assignment traps (AVFoundation raises an exception); `setFocusMode(_:)` throws instead.
    public var focusMode: FocusMode {
        get {
            guard control(.focusAutomatic) != nil, let v = try? value(of: .focusAutomatic) else { return .locked }
            return v != 0 ? .continuousAutoFocus : .locked
        }
        set {
            assign(
                "focusMode", ".\(newValue)", readable: controlsReadable, supported: isFocusModeSupported(newValue),
                check: "isFocusModeSupported(_:)"
            ) { () throws(CaptureError) in try setFocusMode(newValue) }
        }
    }

    /// Sets the focus mode. Needs the configuration lock; throws `.invalidArgument` for a mode
    /// `isFocusModeSupported(_:)` denies.
    public func setFocusMode(_ mode: FocusMode) throws(CaptureError) {
        try requireLock("setFocusMode(_:)")
        guard isFocusModeSupported(mode) else { throw unsupported("focus mode \(mode)", check: "isFocusModeSupported(_:)") }
        let hasAuto = control(.focusAutomatic) != nil
        switch mode {
        case .locked: if hasAuto { try apply("setFocusMode(_:)", [(.focusAutomatic, 0)]) }
        case .autoFocus: try apply("setFocusMode(_:)", (hasAuto ? [(.focusAutomatic, 0)] : []) + [(.focusOnce, 1)])
        case .continuousAutoFocus: try apply("setFocusMode(_:)", [(.focusAutomatic, 1)])
        }
    }

    /// Whether `setFocusModeLocked(lensPosition:)` can move the lens (`FOCUS_ABSOLUTE`).
    public var isLockingFocusWithCustomLensPositionSupported: Bool { control(.focusPosition) != nil }

    /// Where the lens is, from 0 (nearest) to 1 (farthest), over `FOCUS_ABSOLUTE`'s range.
    /// NaN when the device has no lens position control.
    public var lensPosition: Float {
        guard let c = control(.focusPosition), let v = try? value(of: .focusPosition) else { return .nan }
        return c.maximum > c.minimum ? Float(v - c.minimum) / Float(c.maximum - c.minimum) : 0
    }

    /// Locks focus with the lens at `lensPosition` (0...1, or `currentLensPosition` to keep it).
    /// Needs the configuration lock; throws `.invalidArgument` without a lens position control
    /// or for a position outside 0...1.
    public func setFocusModeLocked(lensPosition: Float) throws(CaptureError) {
        try requireLock("setFocusModeLocked(lensPosition:)")
        guard let c = control(.focusPosition) else {
            throw unsupported("a custom lens position", check: "isLockingFocusWithCustomLensPositionSupported")
        }
        var values: [(ControlID, Int64)] = control(.focusAutomatic) != nil ? [(.focusAutomatic, 0)] : []
        if lensPosition != Self.currentLensPosition {
            guard (0...1).contains(lensPosition) else {
                throw CaptureError(.invalidArgument, "lens position \(lensPosition) is outside 0...1")
            }
            values.append((.focusPosition, c.minimum + Int64((Float(c.maximum - c.minimum) * lensPosition).rounded())))
        }
        try apply("setFocusModeLocked(lensPosition:)", values)
    }

    // MARK: White balance

    /// Whether the device can balance white in `mode` (`AUTO_WHITE_BALANCE` for continuous and
    /// locked, `DO_WHITE_BALANCE` for one shot).
    public func isWhiteBalanceModeSupported(_ mode: WhiteBalanceMode) -> Bool {
        let t = controlTable()
        switch mode {
        case .locked: return t[.whiteBalanceAutomatic] != nil || t[.whiteBalanceTemperature] != nil
        case .autoWhiteBalance: return t[.whiteBalanceOnce] != nil
        case .continuousAutoWhiteBalance: return t[.whiteBalanceAutomatic] != nil
        }
    }

    /// The white balance mode: continuous while `AUTO_WHITE_BALANCE` is on, else locked.
    ///
    /// Assignable inside the configuration lock, as in AVFoundation: without the lock, or with
    /// a mode `isWhiteBalanceModeSupported(_:)` denies, the assignment traps;
    /// `setWhiteBalanceMode(_:)` throws instead.
    public var whiteBalanceMode: WhiteBalanceMode {
        get {
            guard control(.whiteBalanceAutomatic) != nil, let v = try? value(of: .whiteBalanceAutomatic) else { return .locked }
            return v != 0 ? .continuousAutoWhiteBalance : .locked
        }
        set {
            assign(
                "whiteBalanceMode", ".\(newValue)", readable: controlsReadable,
                supported: isWhiteBalanceModeSupported(newValue), check: "isWhiteBalanceModeSupported(_:)"
            ) { () throws(CaptureError) in try setWhiteBalanceMode(newValue) }
        }
    }

    /// Sets the white balance mode. Needs the configuration lock; throws `.invalidArgument` for
    /// a mode `isWhiteBalanceModeSupported(_:)` denies.
    public func setWhiteBalanceMode(_ mode: WhiteBalanceMode) throws(CaptureError) {
        try requireLock("setWhiteBalanceMode(_:)")
        guard isWhiteBalanceModeSupported(mode) else {
            throw unsupported("white balance mode \(mode)", check: "isWhiteBalanceModeSupported(_:)")
        }
        let hasAuto = control(.whiteBalanceAutomatic) != nil
        switch mode {
        case .locked: if hasAuto { try apply("setWhiteBalanceMode(_:)", [(.whiteBalanceAutomatic, 0)]) }
        case .autoWhiteBalance:
            try apply("setWhiteBalanceMode(_:)", (hasAuto ? [(.whiteBalanceAutomatic, 0)] : []) + [(.whiteBalanceOnce, 1)])
        case .continuousAutoWhiteBalance: try apply("setWhiteBalanceMode(_:)", [(.whiteBalanceAutomatic, 1)])
        }
    }

    /// The colour temperature in kelvin (`WHITE_BALANCE_TEMPERATURE`); nil without that control.
    public var whiteBalanceTemperature: Float? {
        guard control(.whiteBalanceTemperature) != nil, let v = try? value(of: .whiteBalanceTemperature) else { return nil }
        return Float(v)
    }
    /// The range `setWhiteBalanceModeLocked(temperature:)` takes; nil without the control.
    public var whiteBalanceTemperatureRange: ClosedRange<Float>? {
        control(.whiteBalanceTemperature).map { Float($0.minimum)...Float($0.maximum) }
    }

    /// Locks white balance at `temperature` kelvin. Needs the configuration lock; throws
    /// `.invalidArgument` without a temperature control or outside `whiteBalanceTemperatureRange`.
    public func setWhiteBalanceModeLocked(temperature: Float) throws(CaptureError) {
        try requireLock("setWhiteBalanceModeLocked(temperature:)")
        guard control(.whiteBalanceTemperature) != nil, let range = whiteBalanceTemperatureRange else {
            throw unsupported("a white balance temperature (no WHITE_BALANCE_TEMPERATURE control)", check: "whiteBalanceTemperature != nil")
        }
        guard range.contains(temperature) else {
            throw CaptureError(
                .invalidArgument,
                "white balance temperature \(temperature) K is outside \(localizedName)'s \(range.lowerBound)...\(range.upperBound) K")
        }
        let auto: [(ControlID, Int64)] = control(.whiteBalanceAutomatic) != nil ? [(.whiteBalanceAutomatic, 0)] : []
        try apply("setWhiteBalanceModeLocked(temperature:)", auto + [(.whiteBalanceTemperature, Int64(temperature.rounded()))])
    }

    // MARK: Zoom

    // `ZOOM_ABSOLUTE` has no standard unit. Most UVC cameras count from 100 (= 1×), so a range
    // that starts above 0 is read as "minimum = 1×"; a range from 0 counts hundredths above 1×.
    private func zoomUnit(_ c: Control) -> Double { c.minimum > 0 ? Double(c.minimum) : 100 }
    private func zoomFactor(_ v: Int64, _ c: Control) -> Double { (Double(v - c.minimum) + zoomUnit(c)) / zoomUnit(c) }

    /// The smallest zoom factor (1, also without a zoom control).
    public var minAvailableVideoZoomFactor: Double { 1 }
    /// The largest zoom factor `ZOOM_ABSOLUTE` reaches (1 without a zoom control).
    public var maxAvailableVideoZoomFactor: Double { control(.zoom).map { zoomFactor($0.maximum, $0) } ?? 1 }

    /// The zoom factor (1 without a zoom control).
    ///
    /// Assignable inside the configuration lock, as in AVFoundation: without the lock, or
    /// outside `minAvailableVideoZoomFactor...maxAvailableVideoZoomFactor`, the assignment traps
    /// (AVFoundation raises a range exception); `setVideoZoomFactor(_:)` throws instead.
    public var videoZoomFactor: Double {
        get {
            guard let c = control(.zoom), let v = try? value(of: .zoom) else { return 1 }
            return zoomFactor(v, c)
        }
        set {
            assign(
                "videoZoomFactor", "\(newValue)", readable: controlsReadable,
                supported: (minAvailableVideoZoomFactor...maxAvailableVideoZoomFactor).contains(newValue),
                check: "minAvailableVideoZoomFactor...maxAvailableVideoZoomFactor"
            ) { () throws(CaptureError) in try setVideoZoomFactor(newValue) }
        }
    }

    /// Zooms to `factor` (the nearest step the device has). Needs the configuration lock;
    /// throws `.invalidArgument` outside `minAvailableVideoZoomFactor...maxAvailableVideoZoomFactor`.
    public func setVideoZoomFactor(_ factor: Double) throws(CaptureError) {
        try requireLock("setVideoZoomFactor(_:)")
        guard (minAvailableVideoZoomFactor...maxAvailableVideoZoomFactor).contains(factor) else {
            throw CaptureError(
                .invalidArgument,
                "zoom factor \(factor) is outside \(localizedName)'s \(minAvailableVideoZoomFactor)...\(maxAvailableVideoZoomFactor)")
        }
        guard let c = control(.zoom) else { return }  // 1× on a camera without zoom: nothing to do
        try apply("setVideoZoomFactor(_:)", [(.zoom, c.minimum + Int64(((factor - 1) * zoomUnit(c)).rounded()))])
    }

    // MARK: Torch

    /// Whether the device has a torch (`FLASH_LED_MODE` with its torch item).
    public var hasTorch: Bool { menuHas(control(.flashLEDMode), Self.ledTorch) }

    /// Whether the torch can be in `mode` (`.off` and `.on` with a torch; `.auto` never: V4L2 has
    /// no automatic torch).
    public func isTorchModeSupported(_ mode: TorchMode) -> Bool { hasTorch && mode != .auto }

    /// The torch mode (`.off` without a torch).
    ///
    /// Assignable inside the configuration lock, as in AVFoundation: without the lock, or with
    /// a mode `isTorchModeSupported(_:)` denies, the assignment traps; `setTorchMode(_:)` throws
    /// instead. `.on` lights the torch at its full level.
    public var torchMode: TorchMode {
        get {
            guard hasTorch, let v = try? value(of: .flashLEDMode) else { return .off }
            return v == Self.ledTorch ? .on : .off
        }
        set {
            assign(
                "torchMode", ".\(newValue)", readable: controlsReadable, supported: isTorchModeSupported(newValue),
                check: "isTorchModeSupported(_:)"
            ) { () throws(CaptureError) in try setTorchMode(newValue) }
        }
    }

    /// Whether the torch is on.
    public var isTorchActive: Bool { torchMode == .on }

    /// Whether the torch can be turned on now, as `AVCaptureDevice.isTorchAvailable` (a V4L2
    /// torch never reports overheating, so: whether the device has one).
    public var isTorchAvailable: Bool { hasTorch }

    /// `setTorchModeOn(level:)` lights the torch as bright as it goes, as
    /// `AVCaptureDevice.maxAvailableTorchLevel`.
    public static let maxAvailableTorchLevel: Float = .greatestFiniteMagnitude

    /// The torch's brightness from 0 (off) to 1 (full), as `AVCaptureDevice.torchLevel`: the
    /// `FLASH_TORCH_INTENSITY` value over its maximum, or 1 while a torch without that control
    /// is on.
    public var torchLevel: Float {
        guard torchMode == .on else { return 0 }
        guard let c = control(.flashTorchIntensity), c.maximum > 0, let v = try? value(of: .flashTorchIntensity) else { return 1 }
        return Float(v) / Float(c.maximum)
    }

    /// Turns the torch on or off. Needs the configuration lock; throws `.invalidArgument` for a
    /// mode `isTorchModeSupported(_:)` denies. `.on` sets `FLASH_TORCH_INTENSITY`, where the
    /// device has it, to its maximum (as AVFoundation sets the full level).
    public func setTorchMode(_ mode: TorchMode) throws(CaptureError) {
        try requireLock("setTorchMode(_:)")
        guard isTorchModeSupported(mode) else { throw unsupported("torch mode \(mode)", check: "isTorchModeSupported(_:)") }
        var values: [(ControlID, Int64)] = []
        if mode == .on, let c = control(.flashTorchIntensity) { values.append((.flashTorchIntensity, c.maximum)) }
        try apply("setTorchMode(_:)", values + [(.flashLEDMode, mode == .on ? Self.ledTorch : Self.ledNone)])
    }

    /// Lights the torch at `level` (more than 0, at most 1, or `maxAvailableTorchLevel`), as
    /// `AVCaptureDevice.setTorchModeOn(level:)`: `FLASH_TORCH_INTENSITY` at that fraction of its
    /// maximum (at least its minimum); a torch without that control has one brightness, so any
    /// level lights it fully (`torchLevel` reads 1). Needs the configuration lock; throws
    /// `.invalidArgument` without a torch (`isTorchModeSupported(.on)`) or for a level outside
    /// that range, where AVFoundation raises an exception.
    public func setTorchModeOn(level: Float) throws(CaptureError) {
        try requireLock("setTorchModeOn(level:)")
        guard isTorchModeSupported(.on) else { throw unsupported("torch mode on", check: "isTorchModeSupported(_:)") }
        guard level == Self.maxAvailableTorchLevel || (level > 0 && level <= 1) else {
            throw CaptureError(
                .invalidArgument, "torch level \(level) is outside 0...1 (above 0): pass a level up to 1 or maxAvailableTorchLevel")
        }
        var values: [(ControlID, Int64)] = []
        if let c = control(.flashTorchIntensity) {
            let wanted = level == Self.maxAvailableTorchLevel ? c.maximum : Int64((Float(c.maximum) * level).rounded())
            values.append((.flashTorchIntensity, min(c.maximum, max(c.minimum, wanted))))
        }
        try apply("setTorchModeOn(level:)", values + [(.flashLEDMode, Self.ledTorch)])
    }

    // MARK: Points of interest

    /// Whether the device can focus on a point of the picture, as
    /// `AVCaptureDevice.isFocusPointOfInterestSupported`: false, since V4L2 has no standard
    /// control for a focus point (a camera's own way, where it has one, is not one this library
    /// knows).
    public var isFocusPointOfInterestSupported: Bool { false }

    /// Whether the device can meter exposure on a point of the picture, as
    /// `AVCaptureDevice.isExposurePointOfInterestSupported`: false, for the same reason.
    public var isExposurePointOfInterestSupported: Bool { false }

    /// The point the camera focuses on, (0, 0) top left to (1, 1) bottom right of the unrotated
    /// picture; (0.5, 0.5), the centre, where `isFocusPointOfInterestSupported` is false.
    ///
    /// Assignable inside the configuration lock, as in AVFoundation; an assignment where
    /// `isFocusPointOfInterestSupported` is false (every device here) traps, as AVFoundation
    /// raises an exception; `setFocusPointOfInterest(_:)` throws instead.
    public var focusPointOfInterest: CGPoint {
        get { CGPoint(x: 0.5, y: 0.5) }
        set {
            assign(
                "focusPointOfInterest", "(\(newValue.x), \(newValue.y))", supported: isFocusPointOfInterestSupported,
                check: "isFocusPointOfInterestSupported"
            ) { () throws(CaptureError) in try setFocusPointOfInterest(newValue) }
        }
    }

    /// The point exposure is metered on; see `focusPointOfInterest`.
    ///
    /// Assignable inside the configuration lock; where `isExposurePointOfInterestSupported` is
    /// false (every device here) the assignment traps; `setExposurePointOfInterest(_:)` throws
    /// instead.
    public var exposurePointOfInterest: CGPoint {
        get { CGPoint(x: 0.5, y: 0.5) }
        set {
            assign(
                "exposurePointOfInterest", "(\(newValue.x), \(newValue.y))", supported: isExposurePointOfInterestSupported,
                check: "isExposurePointOfInterestSupported"
            ) { () throws(CaptureError) in try setExposurePointOfInterest(newValue) }
        }
    }

    /// Sets `focusPointOfInterest`. Needs the configuration lock; throws `.invalidArgument`
    /// where `isFocusPointOfInterestSupported` is false (every device here).
    public func setFocusPointOfInterest(_ point: CGPoint) throws(CaptureError) {
        try requireLock("setFocusPointOfInterest(_:)")
        throw unsupported("a focus point of interest (V4L2 has no such control)", check: "isFocusPointOfInterestSupported")
    }

    /// Sets `exposurePointOfInterest`. Needs the configuration lock; throws `.invalidArgument`
    /// where `isExposurePointOfInterestSupported` is false (every device here).
    public func setExposurePointOfInterest(_ point: CGPoint) throws(CaptureError) {
        try requireLock("setExposurePointOfInterest(_:)")
        throw unsupported("an exposure point of interest (V4L2 has no such control)", check: "isExposurePointOfInterestSupported")
    }
}
