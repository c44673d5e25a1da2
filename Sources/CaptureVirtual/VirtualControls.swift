// The virtual camera's controls, with V4L2's control IDs so code written for real cameras
// finds them where it looks.
import CaptureBackend

extension VirtualCamera {
    /// `V4L2_CID_BRIGHTNESS`, `V4L2_CID_CONTRAST`, `V4L2_CID_SATURATION` (user class base 0x980900)
    /// and `V4L2_CID_TEST_PATTERN` (image-processing class base 0x9f0900 + 3).
    package enum ControlID {
        package static let brightness: UInt32 = 0x0098_0900
        package static let contrast: UInt32 = 0x0098_0901
        package static let saturation: UInt32 = 0x0098_0902
        package static let testPattern: UInt32 = 0x009F_0903
    }

    package static let controlList: [SourceControl] = {
        func level(_ id: UInt32, _ name: String) -> SourceControl {
            SourceControl(id: id, name: name, kind: .integer, minimum: 0, maximum: 255, step: 1, defaultValue: 128,
                          menu: [], isReadOnly: false, isInactive: false)
        }
        return [
            level(ControlID.brightness, "Brightness"),
            level(ControlID.contrast, "Contrast"),
            level(ControlID.saturation, "Saturation"),
            SourceControl(id: ControlID.testPattern, name: "Test Pattern", kind: .menu, minimum: 0,
                          maximum: Int64(TestPatternKind.allCases.count - 1), step: 1, defaultValue: 0,
                          menu: TestPatternKind.allCases.map { (value: $0.rawValue, name: $0.menuName) },
                          isReadOnly: false, isInactive: false)
        ]
    }()

    package func controlValue(_ id: UInt32) throws(CaptureError) -> Int64 {
        let value: Int64? = state.withLock { s in
            switch id {
            case ControlID.brightness: s.brightness
            case ControlID.contrast: s.contrast
            case ControlID.saturation: s.saturation
            case ControlID.testPattern: s.pattern.rawValue
            default: nil
            }
        }
        guard let value else { throw Self.unknownControl(id) }
        return value
    }

    /// Integer controls clamp to their range, as V4L2 drivers do; a menu value outside the menu
    /// is rejected.
    package func setControlValue(_ id: UInt32, _ value: Int64) throws(CaptureError) {
        let clamped = min(255, max(0, value))
        try state.withLock { s throws(CaptureError) in
            switch id {
            case ControlID.brightness: s.brightness = clamped
            case ControlID.contrast: s.contrast = clamped
            case ControlID.saturation: s.saturation = clamped
            case ControlID.testPattern:
                guard let kind = TestPatternKind(rawValue: value) else {
                    throw CaptureError(.invalidArgument, "test pattern \(value) is not in the menu (0...\(TestPatternKind.allCases.count - 1))")
                }
                s.pattern = kind
            default: throw Self.unknownControl(id)
            }
            s.patternVersion &+= 1
        }
    }

    private static func unknownControl(_ id: UInt32) -> CaptureError {
        CaptureError(.invalidArgument, "the virtual camera has no control with ID 0x\(String(id, radix: 16))")
    }
}
