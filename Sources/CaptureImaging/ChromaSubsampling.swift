/// How many chroma samples a JPEG keeps per luma sample.
public enum ChromaSubsampling: String, Sendable, Hashable, CaseIterable {
    /// Full-resolution chroma.
    case s444
    /// Half horizontal chroma resolution: what YUYV cameras deliver.
    case s422
    /// Half horizontal and vertical chroma resolution: what NV12/YU12 cameras deliver.
    case s420
    /// Luma only (a greyscale JPEG).
    case grey

    /// TurboJPEG's `TJSAMP_*` value (the shim's `cv4l2_jpeg_subsampling` uses the same numbers).
    package var turboJPEGValue: Int32 {
        switch self {
        case .s444: 0
        case .s422: 1
        case .s420: 2
        case .grey: 3
        }
    }

    package init?(turboJPEGValue: Int32) {
        switch turboJPEGValue {
        case 0: self = .s444
        case 1: self = .s422
        case 2: self = .s420
        case 3: self = .grey
        default: return nil
        }
    }
}
