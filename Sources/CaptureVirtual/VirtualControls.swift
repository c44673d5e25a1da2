// The virtual camera's controls, with V4L2's control IDs, types and ranges (those of a typical
// UVC webcam), so code written for real cameras finds them where it looks.
import CaptureBackend
#if canImport(Glibc)
import Glibc
#endif

extension VirtualCamera {
    /// V4L2 control IDs: user class base 0x980900, camera class 0x9a0900, flash class 0x9c0900,
    /// image-processing class 0x9f0900.
    package enum ControlID {
        package static let brightness: UInt32 = 0x0098_0900
        package static let contrast: UInt32 = 0x0098_0901
        package static let saturation: UInt32 = 0x0098_0902
        package static let autoWhiteBalance: UInt32 = 0x0098_090C
        package static let gain: UInt32 = 0x0098_0913
        package static let whiteBalanceTemperature: UInt32 = 0x0098_091A
        package static let exposureAuto: UInt32 = 0x009A_0901
        package static let exposureAbsolute: UInt32 = 0x009A_0902
        package static let focusAbsolute: UInt32 = 0x009A_090A
        package static let focusAuto: UInt32 = 0x009A_090C
        package static let zoomAbsolute: UInt32 = 0x009A_090D
        package static let autoExposureBias: UInt32 = 0x009A_0913
        package static let flashLEDMode: UInt32 = 0x009C_0901
        package static let flashTorchIntensity: UInt32 = 0x009C_0908
        package static let testPattern: UInt32 = 0x009F_0903
    }

    /// `V4L2_EXPOSURE_MANUAL` and `V4L2_EXPOSURE_APERTURE_PRIORITY`: the two modes UVC cameras offer.
    package static let exposureManual: Int64 = 1
    package static let exposureAperturePriority: Int64 = 3
    /// The exposure time (100 µs units) at which a manual exposure gives the nominal picture.
    package static let nominalExposure: Int64 = 333
    /// The gain (ISO-like) at which a manual exposure gives the nominal picture.
    package static let nominalGain: Int64 = 100
    /// `AUTO_EXPOSURE_BIAS` integer-menu items in 0.001 EV: -2 EV ... +2 EV in half stops.
    package static let exposureBiasSteps: [Int64] = stride(from: -2000, through: 2000, by: 500).map { $0 }

    private static func integer(
        _ id: UInt32, _ name: String, _ range: ClosedRange<Int64>, step: UInt64 = 1,
        default value: Int64
    ) -> SourceControl {
        SourceControl(
            id: id, name: name, kind: .integer, minimum: range.lowerBound, maximum: range.upperBound, step: step,
            defaultValue: value, menu: [], isReadOnly: false, isInactive: false)
    }

    private static func boolean(_ id: UInt32, _ name: String, default value: Bool) -> SourceControl {
        SourceControl(
            id: id, name: name, kind: .boolean, minimum: 0, maximum: 1, step: 1, defaultValue: value ? 1 : 0,
            menu: [], isReadOnly: false, isInactive: false)
    }

    /// Every control with its default; `isInactive` as in the default modes (automatic exposure,
    /// white balance and focus).
    package static let controlList: [SourceControl] = [
        integer(ControlID.brightness, "Brightness", 0...255, default: 128),
        integer(ControlID.contrast, "Contrast", 0...255, default: 128),
        integer(ControlID.saturation, "Saturation", 0...255, default: 128),
        boolean(ControlID.autoWhiteBalance, "White Balance, Automatic", default: true),
        integer(ControlID.gain, "Gain", 100...1600, default: nominalGain),
        integer(ControlID.whiteBalanceTemperature, "White Balance Temperature", 2800...6500, step: 10, default: 4600),
        SourceControl(
            id: ControlID.exposureAuto, name: "Auto Exposure", kind: .menu, minimum: 0, maximum: 3, step: 1,
            defaultValue: exposureAperturePriority,
            menu: [(value: exposureManual, name: "Manual Mode"), (value: exposureAperturePriority, name: "Aperture Priority Mode")],
            isReadOnly: false, isInactive: false),
        integer(ControlID.exposureAbsolute, "Exposure Time, Absolute", 1...10000, default: nominalExposure),
        integer(ControlID.focusAbsolute, "Focus, Absolute", 0...255, default: 0),
        boolean(ControlID.focusAuto, "Focus, Automatic Continuous", default: true),
        integer(ControlID.zoomAbsolute, "Zoom, Absolute", 100...400, default: 100),
        SourceControl(
            id: ControlID.autoExposureBias, name: "Auto Exposure, Bias", kind: .integerMenu, minimum: 0,
            maximum: Int64(exposureBiasSteps.count - 1), step: 1, defaultValue: Int64(exposureBiasSteps.count / 2),
            menu: exposureBiasSteps.enumerated().map { (value: Int64($0.offset), name: String($0.element)) },
            isReadOnly: false, isInactive: false),
        SourceControl(
            id: ControlID.flashLEDMode, name: "LED Mode", kind: .menu, minimum: 0, maximum: 2, step: 1, defaultValue: 0,
            menu: [(value: 0, name: "Off"), (value: 2, name: "Torch")], isReadOnly: false, isInactive: false),
        // In mA, as flash LED drivers count it.
        integer(ControlID.flashTorchIntensity, "Torch Intensity", 25...400, step: 25, default: 400),
        SourceControl(
            id: ControlID.testPattern, name: "Test Pattern", kind: .menu, minimum: 0,
            maximum: Int64(TestPatternKind.allCases.count - 1), step: 1, defaultValue: 0,
            menu: TestPatternKind.allCases.map { (value: $0.rawValue, name: $0.menuName) },
            isReadOnly: false, isInactive: false),
    ]

    package static let defaultControlValues: [UInt32: Int64] =
        Dictionary(uniqueKeysWithValues: controlList.map { ($0.id, $0.defaultValue) })

    /// The controls with their current `isInactive` (a manual value has no effect while its
    /// automatic mode is on, as V4L2 drivers flag it).
    package func controls() -> [SourceControl] {
        let values = state.withLock { $0.controlValues }
        return Self.controlList.map { c in
            var c = c
            switch c.id {
            case ControlID.exposureAbsolute: c.isInactive = values[ControlID.exposureAuto] != Self.exposureManual
            case ControlID.whiteBalanceTemperature: c.isInactive = values[ControlID.autoWhiteBalance] != 0
            case ControlID.focusAbsolute: c.isInactive = values[ControlID.focusAuto] != 0
            default: break
            }
            return c
        }
    }

    package func controlValue(_ id: UInt32) throws(CaptureError) -> Int64 {
        guard let value = state.withLock({ $0.controlValues[id] }) else { throw Self.unknownControl(id) }
        return value
    }

    /// Integer controls clamp to their range (and step), as V4L2 drivers do; booleans take any
    /// non-zero value as 1; a menu value outside the menu is rejected.
    package func setControlValue(_ id: UInt32, _ value: Int64) throws(CaptureError) {
        guard let c = Self.controlList.first(where: { $0.id == id }) else { throw Self.unknownControl(id) }
        let stored: Int64
        switch c.kind {
        case .menu, .integerMenu:
            guard c.menu.contains(where: { $0.value == value }) else {
                throw CaptureError(
                    .invalidArgument, "\(c.name) \(value) is not in the menu (\(c.menu.map { "\($0.value)" }.joined(separator: ", ")))")
            }
            stored = value
        case .boolean:
            stored = value == 0 ? 0 : 1
        default:
            let clamped = min(c.maximum, max(c.minimum, value))
            let step = Int64(max(1, c.step))
            stored = c.minimum + (clamped - c.minimum + step / 2) / step * step
        }
        state.withLock { s in
            s.controlValues[id] = min(c.maximum, stored)
            s.patternVersion &+= 1
        }
    }

    /// How much the exposure controls brighten the picture (1: nominal): exposure time × gain in
    /// manual mode, the bias (2^EV) in automatic mode.
    package static func exposureFactor(_ values: [UInt32: Int64]) -> Double {
        if values[ControlID.exposureAuto] == exposureManual {
            let time = Double(values[ControlID.exposureAbsolute] ?? nominalExposure) / Double(nominalExposure)
            let gain = Double(values[ControlID.gain] ?? nominalGain) / Double(nominalGain)
            return time * gain
        }
        let index = Int(values[ControlID.autoExposureBias] ?? Int64(exposureBiasSteps.count / 2))
        let ev = Double(exposureBiasSteps[max(0, min(exposureBiasSteps.count - 1, index))]) / 1000
        return exp2(ev)
    }

    private static func unknownControl(_ id: UInt32) -> CaptureError {
        CaptureError(.invalidArgument, "the virtual camera has no control with ID 0x\(String(id, radix: 16))")
    }
}
