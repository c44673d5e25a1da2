import CaptureImaging
import CaptureBackend
extension CaptureSession {
    /// A quality level for the session's video, as `AVCaptureSession.Preset`. Resolved against
    /// the formats the camera really has.
    public enum Preset: String, Sendable, Hashable, CaseIterable {
        /// The largest size the camera has, for stills.
        case photo
        /// The largest size up to 1920x1080.
        case high
        /// The size closest to 640x480.
        case medium
        /// The size closest to 320x240.
        case low
        /// Exactly 352x288.
        case cif352x288
        /// Exactly 640x480.
        case vga640x480
        /// Exactly 1280x720.
        case hd1280x720
        /// Exactly 1920x1080.
        case hd1920x1080
        /// Exactly 3840x2160.
        case hd4K3840x2160
        /// Leaves the device's `activeFormat` as set by the app.
        case inputPriority

        /// The exact size the preset needs, if it names one.
        public var exactDimensions: VideoDimensions? {
            switch self {
            case .cif352x288: VideoDimensions(width: 352, height: 288)
            case .vga640x480: VideoDimensions(width: 640, height: 480)
            case .hd1280x720: VideoDimensions(width: 1280, height: 720)
            case .hd1920x1080: VideoDimensions(width: 1920, height: 1080)
            case .hd4K3840x2160: VideoDimensions(width: 3840, height: 2160)
            default: nil
            }
        }
    }
}

/// Picks a device format for a preset.
enum PresetResolver {
    /// Formats ranked for capture: raw formats the encoder reads in place first, MJPEG next.
    static let pixelFormatRank: [PixelFormat] = [
        .yuyv, .uyvy, .nv12, .nv21, .yuv420, .yvu420, .nv16, .nv61, .yvyu, .vyuy, .yuv422p,
        .nv12m, .nv21m, .yuv420m, .mjpeg, .jpeg, .rgb24, .bgr24, .xbgr32, .grey,
    ]

    static func rank(_ f: PixelFormat, preferred: PixelFormat?) -> Int {
        if let preferred, f == preferred { return -1 }
        return pixelFormatRank.firstIndex(of: f) ?? pixelFormatRank.count
    }

    /// The format to use for `preset` on a device with `formats`, or nil if the preset needs a
    /// size the device lacks.
    static func format(
        for preset: CaptureSession.Preset, in formats: [CaptureDevice.Format],
        preferred: PixelFormat?
    ) -> CaptureDevice.Format? {
        let usable = formats.filter { rank($0.pixelFormat, preferred: preferred) < pixelFormatRank.count }
        guard !usable.isEmpty else { return nil }
        let area = { (f: CaptureDevice.Format) in f.dimensions.width * f.dimensions.height }
        let candidates: [CaptureDevice.Format]
        switch preset {
        case .inputPriority:
            return nil
        case .photo:
            let best = usable.map(area).max()!
            candidates = usable.filter { area($0) == best }
        case .high:
            let fit = usable.filter { $0.dimensions.width <= 1920 && $0.dimensions.height <= 1080 }
            guard let best = fit.map(area).max() else { return nil }
            candidates = fit.filter { area($0) == best }
        case .medium, .low:
            let target = preset == .medium ? 640 * 480 : 320 * 240
            let d = { (f: CaptureDevice.Format) in abs(area(f) - target) }
            let best = usable.map(d).min()!
            candidates = usable.filter { d($0) == best }
        default:
            let want = preset.exactDimensions!
            candidates = usable.filter { $0.dimensions == want }
        }
        return candidates.min { a, b in
            let ra = rank(a.pixelFormat, preferred: preferred), rb = rank(b.pixelFormat, preferred: preferred)
            if ra != rb { return ra < rb }
            return a.maxFrameRate > b.maxFrameRate
        }
    }
}
