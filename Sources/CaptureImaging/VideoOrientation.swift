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
