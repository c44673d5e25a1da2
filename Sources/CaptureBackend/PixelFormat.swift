/// A pixel format, identified by its V4L2 four-character code (FourCC).
///
/// An open set: any FourCC a driver reports is representable; the common ones have names.
public struct PixelFormat: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    /// The little-endian FourCC value, as in `V4L2_PIX_FMT_*`.
    public var rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    /// Makes a format from four ASCII characters, e.g. `"YUYV"`. Returns nil unless exactly four
    /// printable ASCII characters are given.
    public init?(fourCC: String) {
        let bytes = Array(fourCC.utf8)
        guard bytes.count == 4, bytes.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) else { return nil }
        rawValue = UInt32(bytes[0]) | UInt32(bytes[1]) << 8 | UInt32(bytes[2]) << 16 | UInt32(bytes[3]) << 24
    }

    /// The four characters; non-printable bytes show as `.`. The big-endian flag (bit 31) shows as `-BE`.
    public var fourCC: String {
        let v = rawValue & 0x7FFF_FFFF
        let chars = (0..<4).map { i -> Character in
            let b = UInt8((v >> (8 * UInt32(i))) & 0xFF)
            return (b >= 0x20 && b < 0x7F) ? Character(Unicode.Scalar(b)) : "."
        }
        return String(chars) + (rawValue & 0x8000_0000 != 0 ? "-BE" : "")
    }

    public var description: String { fourCC.trimmingTrailingSpaces }

    /// Packed 4:2:2, Y0 U Y1 V.
    public static let yuyv = PixelFormat(fourCC: "YUYV")!
    /// Packed 4:2:2, U Y0 V Y1.
    public static let uyvy = PixelFormat(fourCC: "UYVY")!
    /// Packed 4:2:2, Y0 V Y1 U.
    public static let yvyu = PixelFormat(fourCC: "YVYU")!
    /// Packed 4:2:2, V Y0 U Y1.
    public static let vyuy = PixelFormat(fourCC: "VYUY")!
    /// 4:2:0, Y plane then interleaved CbCr.
    public static let nv12 = PixelFormat(fourCC: "NV12")!
    /// 4:2:0, Y plane then interleaved CrCb.
    public static let nv21 = PixelFormat(fourCC: "NV21")!
    /// 4:2:2, Y plane then interleaved CbCr.
    public static let nv16 = PixelFormat(fourCC: "NV16")!
    /// 4:2:2, Y plane then interleaved CrCb.
    public static let nv61 = PixelFormat(fourCC: "NV61")!
    /// 4:2:0 multi-planar NV12 (`NM12`): Y and CbCr in separate buffers.
    public static let nv12m = PixelFormat(fourCC: "NM12")!
    /// 4:2:0 multi-planar NV21 (`NM21`).
    public static let nv21m = PixelFormat(fourCC: "NM21")!
    /// 4:2:0 planar, Y then Cb then Cr (`YU12`, I420).
    public static let yuv420 = PixelFormat(fourCC: "YU12")!
    /// 4:2:0 planar, Y then Cr then Cb (`YV12`).
    public static let yvu420 = PixelFormat(fourCC: "YV12")!
    /// 4:2:0 planar in three buffers (`YM12`).
    public static let yuv420m = PixelFormat(fourCC: "YM12")!
    /// 4:2:2 planar, Y then Cb then Cr (`422P`).
    public static let yuv422p = PixelFormat(fourCC: "422P")!
    /// 24-bit R G B.
    public static let rgb24 = PixelFormat(fourCC: "RGB3")!
    /// 24-bit B G R.
    public static let bgr24 = PixelFormat(fourCC: "BGR3")!
    /// 32-bit X R G B (`XR24` is B G R X in memory).
    public static let xbgr32 = PixelFormat(fourCC: "XR24")!
    /// 32-bit B G R A in memory (`AR24`), AVFoundation's `kCVPixelFormatType_32BGRA`.
    public static let bgra32 = PixelFormat(fourCC: "AR24")!
    /// 8-bit greyscale.
    public static let grey = PixelFormat(fourCC: "GREY")!
    /// Motion-JPEG: each buffer is one JPEG image, often without Huffman tables.
    public static let mjpeg = PixelFormat(fourCC: "MJPG")!
    /// JFIF JPEG.
    public static let jpeg = PixelFormat(fourCC: "JPEG")!

    /// Whether buffers of this format hold compressed data of varying size.
    public var isCompressed: Bool { self == .mjpeg || self == .jpeg }

    /// Whether the format is split over several V4L2 planes (separate buffers), as `NM12`.
    public var isMultiPlanar: Bool { self == .nv12m || self == .nv21m || self == .yuv420m }
}

extension String {
    package var trimmingTrailingSpaces: String {
        var s = self
        while s.last == " " { s.removeLast() }
        return s
    }
}
