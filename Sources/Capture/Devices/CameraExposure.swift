// Exposure, as AVCaptureDevice names it, over EXPOSURE_AUTO, EXPOSURE_ABSOLUTE, AUTOGAIN, GAIN or
// ISO_SENSITIVITY, and AUTO_EXPOSURE_BIAS (the map of all typed controls: CameraControls.swift).
import CaptureBackend
import Foundation

extension CaptureDevice {
    // V4L2_EXPOSURE_* menu values.
    private static let exposureAuto: Int64 = 0, exposureManual: Int64 = 1, exposureAperturePriority: Int64 = 3

    /// Whether the device can expose in `mode`. `.continuousAutoExposure` needs `EXPOSURE_AUTO`
    /// with an automatic item, `AUTOGAIN` or `ISO_SENSITIVITY_AUTO`; `.locked` needs a way to
    /// turn those off; `.custom` needs an exposure time, gain or ISO control it can set.
    public func isExposureModeSupported(_ mode: ExposureMode) -> Bool {
        let t = controlTable()
        let ae = t[.exposureMode]
        let aeAuto = menuHas(ae, Self.exposureAuto) || menuHas(ae, Self.exposureAperturePriority)
        let aeManual = ae == nil || menuHas(ae, Self.exposureManual)
        switch mode {
        case .continuousAutoExposure:
            return aeAuto || t[.gainAutomatic] != nil || t[.isoSensitivityAutomatic] != nil
        case .locked:
            return (ae != nil && menuHas(ae, Self.exposureManual)) || t[.gainAutomatic] != nil || t[.isoSensitivityAutomatic] != nil
        case .custom:
            return aeManual && (t[.exposureTime] != nil || t[.gain] != nil || t[.isoSensitivity] != nil)
        }
    }

    /// The exposure mode, read from the device (`.locked` and `.custom` are both V4L2's manual
    /// mode: the one last set is reported).
    ///
    /// Assignable inside the configuration lock, as in AVFoundation: without the lock, or with
    /// a mode `isExposureModeSupported(_:)` denies, the assignment traps; `setExposureMode(_:)`
    /// throws instead. Assigning `.custom` keeps the exposure time and ISO the device has.
    public var exposureMode: ExposureMode {
        get {
            let t = controlTable()
            let manual = state.withLock { $0.manualExposureMode }
            if t[.exposureMode] != nil, let v = try? value(of: .exposureMode) {
                return v == Self.exposureManual ? manual : .continuousAutoExposure
            }
            for id in [ControlID.gainAutomatic, .isoSensitivityAutomatic] where t[id] != nil {
                if let v = try? value(of: id) { return v != 0 ? .continuousAutoExposure : manual }
            }
            return manual
        }
        set {
            assign(
                "exposureMode", ".\(newValue)", readable: controlsReadable, supported: isExposureModeSupported(newValue),
                check: "isExposureModeSupported(_:)"
            ) { () throws(CaptureError) in try setExposureMode(newValue) }
        }
    }

    /// The automatic-exposure controls' values for `auto` on or off.
    private func exposureAutomation(_ auto: Bool, _ t: [ControlID: Control]) -> [(ControlID, Int64)] {
        var values: [(ControlID, Int64)] = []
        if let ae = t[.exposureMode] {
            if !auto {
                if menuHas(ae, Self.exposureManual) { values.append((.exposureMode, Self.exposureManual)) }
            } else if menuHas(ae, Self.exposureAuto) {
                values.append((.exposureMode, Self.exposureAuto))
            } else if menuHas(ae, Self.exposureAperturePriority) {
                values.append((.exposureMode, Self.exposureAperturePriority))
            }
        }
        if t[.gainAutomatic] != nil { values.append((.gainAutomatic, auto ? 1 : 0)) }
        if t[.isoSensitivityAutomatic] != nil { values.append((.isoSensitivityAutomatic, auto ? 1 : 0)) }
        return values
    }

    /// Sets the exposure mode (for `.custom` with values, use `setExposureModeCustom(duration:iso:)`).
    /// Needs the configuration lock; throws `.invalidArgument` for a mode
    /// `isExposureModeSupported(_:)` denies.
    public func setExposureMode(_ mode: ExposureMode) throws(CaptureError) {
        try requireLock("setExposureMode(_:)")
        guard isExposureModeSupported(mode) else { throw unsupported("exposure mode \(mode)", check: "isExposureModeSupported(_:)") }
        try apply("setExposureMode(_:)", exposureAutomation(mode == .continuousAutoExposure, controlTable()))
        if mode != .continuousAutoExposure { state.withLock { $0.manualExposureMode = mode } }
    }

    /// The shortest and longest exposure time (`EXPOSURE_ABSOLUTE`'s range, 100 µs units); nil
    /// without an exposure time control.
    public var minExposureDuration: Duration? { control(.exposureTime).map { .microseconds(100 * $0.minimum) } }
    /// See `minExposureDuration`.
    public var maxExposureDuration: Duration? { control(.exposureTime).map { .microseconds(100 * $0.maximum) } }

    /// The exposure time now (`EXPOSURE_ABSOLUTE`); nil without an exposure time control.
    public var exposureDuration: Duration? {
        guard control(.exposureTime) != nil, let v = try? value(of: .exposureTime) else { return nil }
        return .microseconds(100 * v)
    }

    /// The ISO control: `ISO_SENSITIVITY` (an integer menu of ISO values) when the device has it,
    /// else `GAIN` in the driver's units.
    private func isoControl(_ t: [ControlID: Control]) -> Control? { t[.isoSensitivity] ?? t[.gain] }

    /// The ISO values an integer menu offers, by menu index.
    private func isoItems(_ c: Control) -> [(index: Int64, iso: Float)] {
        c.menuItems.compactMap { item in Float(item.name).map { (item.value, $0) } }
    }

    /// The lowest ISO (gain) the device takes; 0 without an ISO or gain control.
    public var minISO: Float { isoRange?.lowerBound ?? 0 }
    /// The highest ISO (gain) the device takes; 0 without an ISO or gain control.
    public var maxISO: Float { isoRange?.upperBound ?? 0 }

    private var isoRange: ClosedRange<Float>? {
        guard let c = isoControl(controlTable()) else { return nil }
        if c.kind == .integerMenu {
            let isos = isoItems(c).map(\.iso)
            guard let lo = isos.min(), let hi = isos.max() else { return nil }
            return lo...hi
        }
        return Float(c.minimum)...Float(c.maximum)
    }

    /// The ISO now: `ISO_SENSITIVITY`'s value, or `GAIN` in the driver's units (vivid, UVC); 0
    /// without either. A gain the driver updates itself (automatic gain) is read fresh.
    public var iso: Float {
        guard let c = isoControl(controlTable()), let v = try? value(of: c.id) else { return 0 }
        if c.kind == .integerMenu { return isoItems(c).first { $0.index == v }?.iso ?? 0 }
        return Float(v)
    }

    /// Sets `.custom` exposure: `duration` (`currentExposureDuration` keeps it) and `iso`
    /// (`currentISO` keeps it), which must lie within `minExposureDuration...maxExposureDuration`
    /// and `minISO...maxISO`. Needs the configuration lock; throws `.invalidArgument` when the
    /// device cannot do `.custom`, has no control for a value given, or a value is out of range.
    public func setExposureModeCustom(duration: Duration, iso: Float) throws(CaptureError) {
        let what = "setExposureModeCustom(duration:iso:)"
        try requireLock(what)
        guard isExposureModeSupported(.custom) else { throw unsupported("exposure mode custom", check: "isExposureModeSupported(_:)") }
        let t = controlTable()
        var values = exposureAutomation(false, t)
        if duration != Self.currentExposureDuration {
            guard let c = t[.exposureTime] else {
                throw unsupported("a custom exposure duration (no exposure time control)", check: "exposureDuration != nil")
            }
            let units = Int64((Double(duration.components.seconds) * 1e4 + Double(duration.components.attoseconds) * 1e-14).rounded())
            guard (c.minimum...c.maximum).contains(units) else {
                throw CaptureError(
                    .invalidArgument,
                    "exposure duration \(duration) is outside \(localizedName)'s \(Duration.microseconds(100 * c.minimum))...\(Duration.microseconds(100 * c.maximum))"
                )
            }
            values.append((.exposureTime, units))
        }
        if iso != Self.currentISO {
            guard let c = isoControl(t), let range = isoRange else {
                throw unsupported("a custom ISO (no ISO or gain control)", check: "maxISO > 0")
            }
            guard range.contains(iso) else {
                throw CaptureError(.invalidArgument, "ISO \(iso) is outside \(localizedName)'s \(range.lowerBound)...\(range.upperBound)")
            }
            if c.kind == .integerMenu {
                let nearest = isoItems(c).min { abs($0.iso - iso) < abs($1.iso - iso) }!
                values.append((c.id, nearest.index))
            } else {
                values.append((c.id, Int64(iso.rounded())))
            }
        }
        try apply(what, values)
        state.withLock { $0.manualExposureMode = .custom }
    }

    /// The exposure bias items (`AUTO_EXPOSURE_BIAS`, in EV) by menu index (or value for a
    /// driver that makes it a plain integer in 0.001 EV).
    private func biasItems(_ c: Control) -> [(value: Int64, ev: Float)] {
        if c.kind == .integerMenu { return c.menuItems.compactMap { i in Int64(i.name).map { (i.value, Float($0) / 1000) } } }
        return [(c.minimum, Float(c.minimum) / 1000), (c.maximum, Float(c.maximum) / 1000)]
    }

    /// The lowest exposure bias in EV (`AUTO_EXPOSURE_BIAS`); 0 without that control.
    public var minExposureTargetBias: Float { control(.exposureBias).flatMap { biasItems($0).map(\.ev).min() } ?? 0 }
    /// The highest exposure bias in EV; 0 without that control.
    public var maxExposureTargetBias: Float { control(.exposureBias).flatMap { biasItems($0).map(\.ev).max() } ?? 0 }

    /// The exposure bias now, in EV (0 without an `AUTO_EXPOSURE_BIAS` control).
    public var exposureTargetBias: Float {
        guard let c = control(.exposureBias), let v = try? value(of: .exposureBias) else { return 0 }
        if c.kind == .integerMenu { return biasItems(c).first { $0.value == v }?.ev ?? 0 }
        return Float(v) / 1000
    }

    /// Sets the exposure bias (EV) that automatic exposure aims at, to the nearest step the
    /// device has. Needs the configuration lock; throws `.invalidArgument` without an
    /// `AUTO_EXPOSURE_BIAS` control or outside `minExposureTargetBias...maxExposureTargetBias`.
    public func setExposureTargetBias(_ bias: Float) throws(CaptureError) {
        try requireLock("setExposureTargetBias(_:)")
        guard let c = control(.exposureBias) else {
            throw unsupported(
                "an exposure target bias (no AUTO_EXPOSURE_BIAS control)", check: "maxExposureTargetBias > minExposureTargetBias")
        }
        guard (minExposureTargetBias...maxExposureTargetBias).contains(bias) else {
            throw CaptureError(
                .invalidArgument,
                "exposure bias \(bias) EV is outside \(localizedName)'s \(minExposureTargetBias)...\(maxExposureTargetBias)")
        }
        let value =
            c.kind == .integerMenu
            ? biasItems(c).min { abs($0.ev - bias) < abs($1.ev - bias) }!.value
            : Int64((bias * 1000).rounded())
        try apply("setExposureTargetBias(_:)", [(.exposureBias, value)])
    }
}
