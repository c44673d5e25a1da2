// Typed forms of the V4L2 constants and structures the layer uses. Open sets are OptionSets or
// RawRepresentable structs (a driver may report values newer than this code).
import CaptureBackend
#if canImport(Glibc)
import Glibc
#endif
package import CV4L2Shim

/// `V4L2_CAP_*` capability bits (`capabilities` / `device_caps` of `VIDIOC_QUERYCAP`).
package struct V4L2Capabilities: OptionSet, Sendable, Hashable {
    package var rawValue: UInt32
    package init(rawValue: UInt32) { self.rawValue = rawValue }

    package static let videoCapture = V4L2Capabilities(rawValue: 0x0000_0001)
    package static let videoOutput = V4L2Capabilities(rawValue: 0x0000_0002)
    package static let videoOverlay = V4L2Capabilities(rawValue: 0x0000_0004)
    package static let vbiCapture = V4L2Capabilities(rawValue: 0x0000_0010)
    package static let vbiOutput = V4L2Capabilities(rawValue: 0x0000_0020)
    package static let slicedVBICapture = V4L2Capabilities(rawValue: 0x0000_0040)
    package static let slicedVBIOutput = V4L2Capabilities(rawValue: 0x0000_0080)
    package static let videoCaptureMultiplanar = V4L2Capabilities(rawValue: 0x0000_1000)
    package static let videoOutputMultiplanar = V4L2Capabilities(rawValue: 0x0000_2000)
    package static let videoMemoryToMemoryMultiplanar = V4L2Capabilities(rawValue: 0x0000_4000)
    package static let videoMemoryToMemory = V4L2Capabilities(rawValue: 0x0000_8000)
    package static let tuner = V4L2Capabilities(rawValue: 0x0001_0000)
    package static let audio = V4L2Capabilities(rawValue: 0x0002_0000)
    package static let radio = V4L2Capabilities(rawValue: 0x0004_0000)
    package static let sdrCapture = V4L2Capabilities(rawValue: 0x0010_0000)
    package static let extendedPixelFormat = V4L2Capabilities(rawValue: 0x0020_0000)
    package static let sdrOutput = V4L2Capabilities(rawValue: 0x0040_0000)
    package static let metadataCapture = V4L2Capabilities(rawValue: 0x0080_0000)
    package static let readWrite = V4L2Capabilities(rawValue: 0x0100_0000)
    package static let streaming = V4L2Capabilities(rawValue: 0x0400_0000)
    package static let metadataOutput = V4L2Capabilities(rawValue: 0x0800_0000)
    package static let touch = V4L2Capabilities(rawValue: 0x1000_0000)
    package static let ioMediaController = V4L2Capabilities(rawValue: 0x2000_0000)
    package static let deviceCapabilities = V4L2Capabilities(rawValue: 0x8000_0000)

    /// Whether a node with these capabilities is a camera: video capture (single- or
    /// multi-planar), not a memory-to-memory codec.
    package var isCamera: Bool {
        !intersection([.videoCapture, .videoCaptureMultiplanar]).isEmpty
            && intersection([.videoMemoryToMemory, .videoMemoryToMemoryMultiplanar]).isEmpty
    }
}

/// The buffer types this layer streams (`enum v4l2_buf_type`).
package enum V4L2BufferType: UInt32, Sendable, Hashable {
    case videoCapture = 1
    case videoCaptureMultiplanar = 9

    package var isMultiplanar: Bool { self == .videoCaptureMultiplanar }
}

/// `V4L2_BUF_FLAG_*` bits of a buffer.
package struct V4L2BufferFlags: OptionSet, Sendable, Hashable {
    package var rawValue: UInt32
    package init(rawValue: UInt32) { self.rawValue = rawValue }

    package static let mapped = V4L2BufferFlags(rawValue: 0x0000_0001)
    package static let queued = V4L2BufferFlags(rawValue: 0x0000_0002)
    package static let done = V4L2BufferFlags(rawValue: 0x0000_0004)
    package static let keyFrame = V4L2BufferFlags(rawValue: 0x0000_0008)
    /// The driver completed the buffer but its data is damaged.
    package static let error = V4L2BufferFlags(rawValue: 0x0000_0040)
    package static let last = V4L2BufferFlags(rawValue: 0x0010_0000)

    /// The timestamp clock bits.
    package var timestampClock: V4L2TimestampClock {
        switch rawValue & 0x0000_E000 {
        case 0x0000_2000: .monotonic
        case 0x0000_4000: .copy
        default: .unknown
        }
    }
}

/// Which clock a buffer timestamp is on (`V4L2_BUF_FLAG_TIMESTAMP_*`).
package enum V4L2TimestampClock: Sendable, Hashable {
    /// `CLOCK_MONOTONIC`, the clock `CaptureTime` uses.
    case monotonic
    /// Copied from an output buffer (memory-to-memory devices).
    case copy
    case unknown
}

/// `enum v4l2_field`: how interlaced fields are stored.
package struct V4L2Field: RawRepresentable, Sendable, Hashable {
    package var rawValue: UInt32
    package init(rawValue: UInt32) { self.rawValue = rawValue }
    package static let any = V4L2Field(rawValue: 0)
    /// Progressive.
    package static let none = V4L2Field(rawValue: 1)
    package static let top = V4L2Field(rawValue: 2)
    package static let bottom = V4L2Field(rawValue: 3)
    package static let interlaced = V4L2Field(rawValue: 4)
}

/// `VIDIOC_QUERYCAP`'s answer.
package struct V4L2Capability: Sendable, Hashable {
    package var driver: String
    package var card: String
    package var busInfo: String
    /// Kernel version, `KERNEL_VERSION(a, b, c)`.
    package var version: UInt32
    /// What the whole physical device can do.
    package var capabilities: V4L2Capabilities
    /// What this node can do (`device_caps` when `V4L2_CAP_DEVICE_CAPS` is set, else `capabilities`).
    package var deviceCapabilities: V4L2Capabilities

    package init(_ c: v4l2_capability) {
        driver = String(v4l2Chars: c.driver)
        card = String(v4l2Chars: c.card)
        busInfo = String(v4l2Chars: c.bus_info)
        version = c.version
        capabilities = V4L2Capabilities(rawValue: c.capabilities)
        deviceCapabilities =
            capabilities.contains(.deviceCapabilities)
            ? V4L2Capabilities(rawValue: c.device_caps) : capabilities
    }

    /// The capture buffer type this node streams with, or nil if it cannot capture video.
    package var captureBufferType: V4L2BufferType? {
        guard deviceCapabilities.isCamera else { return nil }
        // Prefer the single-planar API when a node offers both: every format fits one buffer then.
        return deviceCapabilities.contains(.videoCapture) ? .videoCapture : .videoCaptureMultiplanar
    }

    /// A short description of what the node is, for error messages.
    package var nodeKind: String {
        let c = deviceCapabilities
        if c.isCamera { return "video capture" }
        if !c.intersection([.videoMemoryToMemory, .videoMemoryToMemoryMultiplanar]).isEmpty { return "memory-to-memory (codec)" }
        if !c.intersection([.videoOutput, .videoOutputMultiplanar]).isEmpty { return "video output" }
        if c.contains(.metadataCapture) { return "metadata capture" }
        if !c.intersection([.vbiCapture, .vbiOutput, .slicedVBICapture, .slicedVBIOutput]).isEmpty { return "VBI" }
        if !c.intersection([.radio, .tuner]).isEmpty { return "radio" }
        if !c.intersection([.sdrCapture, .sdrOutput]).isEmpty { return "software-defined radio" }
        if c.contains(.touch) { return "touch" }
        return "non-capture"
    }
}

extension String {
    /// Reads a NUL-terminated C char array that the importer presents as a tuple.
    package init<T>(v4l2Chars tuple: T) {
        self = withUnsafeBytes(of: tuple) { raw in
            let end = raw.firstIndex(of: 0) ?? raw.count
            return String(decoding: raw[..<end], as: UTF8.self)
        }
    }
}

extension FrameInterval {
    /// From a V4L2 fraction (seconds per frame).
    package init(_ f: v4l2_fract) { self.init(numerator: f.numerator, denominator: f.denominator) }
    package var v4l2: v4l2_fract { v4l2_fract(numerator: numerator, denominator: denominator) }

    /// The interval reduced to lowest terms (1000/30000 becomes 1/30).
    package var reduced: FrameInterval {
        var a = numerator, b = denominator
        while b != 0 { (a, b) = (b, a % b) }
        guard a > 1 else { return self }
        return FrameInterval(numerator: numerator / a, denominator: denominator / a)
    }

    /// Whether two intervals are the same length of time (1/30 equals 2/60).
    package func isEquivalent(to other: FrameInterval) -> Bool {
        UInt64(numerator) * UInt64(other.denominator) == UInt64(other.numerator) * UInt64(denominator)
    }

    /// The intervals of a stepwise range, from `min` by `step` up to `max` (in exact rational
    /// arithmetic), at most `limit` of them. A zero step yields just `min` and `max`.
    package static func steps(min: FrameInterval, max: FrameInterval, step: FrameInterval, limit: Int = 64) -> [FrameInterval] {
        guard min.denominator != 0, max.denominator != 0 else { return [] }
        guard step.numerator != 0, step.denominator != 0 else { return min.isEquivalent(to: max) ? [min] : [min, max] }
        // Common denominator: lcm-free form min + k*step = (mn*sd + k*sn*md) / (md*sd).
        let den = UInt64(min.denominator) * UInt64(step.denominator)
        var num = UInt64(min.numerator) * UInt64(step.denominator)
        let inc = UInt64(step.numerator) * UInt64(min.denominator)
        var out: [FrameInterval] = []
        while out.count < limit {
            // Stop past max: num/den > max.n/max.d
            if num * UInt64(max.denominator) > UInt64(max.numerator) * den { break }
            let g = gcd(num, den)
            let n = num / g, d = den / g
            guard n <= UInt64(UInt32.max), d <= UInt64(UInt32.max) else { break }
            out.append(FrameInterval(numerator: UInt32(n), denominator: UInt32(d)))
            num += inc
        }
        return out
    }
}

private func gcd(_ a: UInt64, _ b: UInt64) -> UInt64 {
    var a = a, b = b
    while b != 0 { (a, b) = (b, a % b) }
    return a == 0 ? 1 : a
}

extension CaptureTime {
    /// From a V4L2 buffer timestamp. Wrapping arithmetic: vivid's `wrap_timestamp` starts the
    /// clock just before a 32- or 64-bit wrap, where plain arithmetic would trap.
    package init(_ tv: timeval) {
        self.init(
            nanoseconds: UInt64(bitPattern: Int64(tv.tv_sec)) &* 1_000_000_000
                &+ UInt64(bitPattern: Int64(tv.tv_usec)) &* 1_000)
    }
}

/// Sequence-number arithmetic on the driver's 32-bit counter, which wraps.
package enum V4L2Sequence {
    /// Frames the driver skipped between two consecutive dequeued sequence numbers (0 when
    /// `current` follows `previous`, including across the wrap from 2^32 - 1 to 0).
    package static func framesSkipped(from previous: UInt32, to current: UInt32) -> UInt32 {
        current &- previous &- 1
    }
}

/// The colour range of a format from the driver's `quantization` field. `V4L2_QUANTIZATION_DEFAULT`
/// means full range for RGB, HSV and JPEG data and limited range for YUV, as V4L2 defines it.
package func colorRange(quantization: UInt32, colorspace: UInt32, pixelFormat: PixelFormat) -> ColorRange {
    switch quantization {
    case 1: return .full  // V4L2_QUANTIZATION_FULL_RANGE
    case 2: return .limited  // V4L2_QUANTIZATION_LIM_RANGE
    default:
        // V4L2_COLORSPACE_JPEG (7) implies full range.
        if colorspace == 7 || pixelFormat.isCompressed || pixelFormat.isRGBLike { return .full }
        return .limited
    }
}

extension PixelFormat {
    /// Whether V4L2 treats the format as RGB, HSV or raw Bayer (default quantization full).
    package var isRGBLike: Bool {
        let fourCC = fourCC
        if PixelFormat.rgbFourCCs.contains(fourCC) { return true }
        // Bayer (BA81, GBRG, pBAA...) and HSV (HSV3, HSV4).
        let p2 = fourCC.prefix(2)
        return ["BA", "BG", "GB", "GR", "RG", "pB", "pG", "pR", "HS"].contains(p2)
    }
    private static let rgbFourCCs: Set<String> = [
        "RGB1", "R444", "AR12", "XR12", "RA12", "RX12", "AB12", "XB12", "BA12", "BX12", "RGBO", "AR15", "XR15",
        "RA15", "RX15", "AB15", "XB15", "BA15", "BX15", "RGBP", "RGBQ", "RGBR", "BGR3", "RGB3", "BGR4", "AR24",
        "XR24", "BA24", "BX24", "RGB4", "RA24", "RX24", "AB24", "XB24", "AR30", "RX30", "RA30",
    ]
}
