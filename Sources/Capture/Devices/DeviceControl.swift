import CaptureVirtual
import CaptureImaging
import CaptureBackend
extension CaptureDevice {
    /// Identifies a device control. Named cases cover the common camera controls; any V4L2
    /// control ID (`V4L2_CID_*`) is representable.
    public struct ControlID: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        public var rawValue: UInt32
        public init(rawValue: UInt32) { self.rawValue = rawValue }

        private static let user: UInt32 = 0x0098_0900
        private static let camera: UInt32 = 0x009A_0900
        /// `V4L2_CID_BRIGHTNESS`
        public static let brightness = ControlID(rawValue: user + 0)
        /// `V4L2_CID_CONTRAST`
        public static let contrast = ControlID(rawValue: user + 1)
        /// `V4L2_CID_SATURATION`
        public static let saturation = ControlID(rawValue: user + 2)
        /// `V4L2_CID_HUE`
        public static let hue = ControlID(rawValue: user + 3)
        /// `V4L2_CID_AUTO_WHITE_BALANCE`
        public static let whiteBalanceAutomatic = ControlID(rawValue: user + 12)
        /// `V4L2_CID_DO_WHITE_BALANCE` (button: one white balance now)
        public static let whiteBalanceOnce = ControlID(rawValue: user + 13)
        /// `V4L2_CID_AUTOGAIN`
        public static let gainAutomatic = ControlID(rawValue: user + 18)
        /// `V4L2_CID_GAIN`
        public static let gain = ControlID(rawValue: user + 19)
        /// `V4L2_CID_POWER_LINE_FREQUENCY`
        public static let powerLineFrequency = ControlID(rawValue: user + 24)
        /// `V4L2_CID_WHITE_BALANCE_TEMPERATURE`
        public static let whiteBalanceTemperature = ControlID(rawValue: user + 26)
        /// `V4L2_CID_SHARPNESS`
        public static let sharpness = ControlID(rawValue: user + 27)
        /// `V4L2_CID_EXPOSURE_AUTO` (menu: manual, auto, shutter priority, aperture priority)
        public static let exposureMode = ControlID(rawValue: camera + 1)
        /// `V4L2_CID_EXPOSURE_ABSOLUTE` (units of 100 µs)
        public static let exposureTime = ControlID(rawValue: camera + 2)
        /// `V4L2_CID_FOCUS_ABSOLUTE`
        public static let focusPosition = ControlID(rawValue: camera + 10)
        /// `V4L2_CID_FOCUS_AUTO`
        public static let focusAutomatic = ControlID(rawValue: camera + 12)
        /// `V4L2_CID_ZOOM_ABSOLUTE`
        public static let zoom = ControlID(rawValue: camera + 13)
        /// `V4L2_CID_AUTO_EXPOSURE_BIAS` (integer menu, in 0.001 EV)
        public static let exposureBias = ControlID(rawValue: camera + 19)
        /// `V4L2_CID_ISO_SENSITIVITY` (integer menu of ISO values)
        public static let isoSensitivity = ControlID(rawValue: camera + 23)
        /// `V4L2_CID_ISO_SENSITIVITY_AUTO` (menu: manual, auto)
        public static let isoSensitivityAutomatic = ControlID(rawValue: camera + 24)
        /// `V4L2_CID_AUTO_FOCUS_START` (button: one auto focus now)
        public static let focusOnce = ControlID(rawValue: camera + 28)
        /// `V4L2_CID_FLASH_LED_MODE` (menu: none, flash, torch)
        public static let flashLEDMode = ControlID(rawValue: 0x009C_0901)
        /// `V4L2_CID_FLASH_TORCH_INTENSITY` (the torch's current, in mA)
        public static let flashTorchIntensity = ControlID(rawValue: 0x009C_0908)
        /// `V4L2_CID_CAMERA_ORIENTATION` (read-only: front, back, external)
        public static let orientation = ControlID(rawValue: camera + 34)

        public var description: String { "0x" + String(rawValue, radix: 16) }
    }

    /// A control the device offers, with its range.
    public struct Control: Sendable, Hashable, CustomStringConvertible {
        /// How the control's value is read.
        public enum Kind: Sendable, Hashable {
            case integer, boolean, menu, integerMenu, button, integer64, string, other
        }
        /// One item of a menu control.
        public struct MenuItem: Sendable, Hashable {
            public var value: Int64
            public var name: String
        }
        public var id: ControlID
        /// The driver's name, e.g. "Brightness".
        public var name: String
        public var kind: Kind
        public var minimum: Int64
        public var maximum: Int64
        public var step: UInt64
        public var defaultValue: Int64
        /// Items of a menu or integer-menu control, in value order.
        public var menuItems: [MenuItem]
        public var isReadOnly: Bool
        /// The control exists but has no effect in the current mode (e.g. exposure time in auto mode).
        public var isInactive: Bool

        init(_ c: SourceControl) {
            id = ControlID(rawValue: c.id)
            name = c.name
            switch c.kind {
            case .integer: kind = .integer
            case .boolean: kind = .boolean
            case .menu: kind = .menu
            case .integerMenu: kind = .integerMenu
            case .button: kind = .button
            case .integer64: kind = .integer64
            case .string: kind = .string
            case .other: kind = .other
            }
            minimum = c.minimum
            maximum = c.maximum
            step = c.step
            defaultValue = c.defaultValue
            menuItems = c.menu.map { MenuItem(value: $0.value, name: $0.name) }
            isReadOnly = c.isReadOnly
            isInactive = c.isInactive
        }

        public var description: String { "\(name) [\(minimum)...\(maximum)] default \(defaultValue)" }
    }
}
