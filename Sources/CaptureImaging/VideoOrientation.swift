/// How the picture is turned relative to the camera sensor, as in AVFoundation.
///
/// A camera sensor's native orientation is landscape: frames come off the device upright when
/// the camera is held in `landscapeRight`. The other values say how the device is held, so that
/// stills can be marked (EXIF orientation) to display upright. Plain value; any thread.
public enum VideoOrientation: String, Sendable, Hashable, CaseIterable {
    /// Held upright, the top of the picture toward the top of the device; shows the sensor's
    /// image turned 90° clockwise.
    case portrait
    /// Held upside down in portrait; shows the sensor's image turned 90° counter-clockwise.
    case portraitUpsideDown
    /// Held in landscape, the device's top edge to the left (AVFoundation: home button on the
    /// right): the sensor's native orientation, no turn.
    case landscapeRight
    /// Held in landscape, the device's top edge to the right: the sensor's image turned 180°.
    case landscapeLeft
}

extension VideoOrientation {
    /// The clockwise turn in degrees from the sensor's picture, as AVFoundation's
    /// `videoRotationAngle`: portrait 90, landscapeLeft 180, portraitUpsideDown 270.
    public var rotationAngle: Double {
        switch self {
        case .landscapeRight: 0
        case .portrait: 90
        case .landscapeLeft: 180
        case .portraitUpsideDown: 270
        }
    }

    /// The orientation for a clockwise turn of `rotationAngle` degrees (0, 90, 180 or 270; also
    /// -90 and 360 and the like); nil for angles that are not quarter turns.
    public init?(rotationAngle: Double) {
        guard abs(rotationAngle) <= 1_000_000, rotationAngle == rotationAngle.rounded(), Int(rotationAngle) % 90 == 0 else { return nil }
        switch ((Int(rotationAngle) % 360) + 360) % 360 {
        case 0: self = .landscapeRight
        case 90: self = .portrait
        case 180: self = .landscapeLeft
        default: self = .portraitUpsideDown
        }
    }
}
