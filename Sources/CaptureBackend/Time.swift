import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A point on the monotonic clock (`CLOCK_MONOTONIC`), in nanoseconds.
///
/// Video frames (V4L2 `TIMESTAMP_MONOTONIC`) and audio buffers carry times on this one clock, so
/// they can be lined up. Drivers may wrap the value; `-` uses wrapping arithmetic so that a wrap
/// reads as a small step, not a trap.
public struct CaptureTime: Sendable, Hashable, Comparable, CustomStringConvertible {
    public var nanoseconds: UInt64
    public init(nanoseconds: UInt64) { self.nanoseconds = nanoseconds }

    /// Seconds since the clock's origin (boot), as a `Double`.
    public var seconds: Double { Double(nanoseconds) / 1e9 }

    /// The current monotonic time.
    public static func now() -> CaptureTime {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return CaptureTime(nanoseconds: UInt64(bitPattern: Int64(ts.tv_sec)) &* 1_000_000_000 &+ UInt64(ts.tv_nsec))
    }

    /// The signed distance `lhs - rhs` in nanoseconds, wrapping at 2^64.
    public static func - (lhs: CaptureTime, rhs: CaptureTime) -> Int64 {
        Int64(bitPattern: lhs.nanoseconds &- rhs.nanoseconds)
    }

    /// Ordered by wrapping distance, so times on either side of a wrap still compare right
    /// (as long as they are less than 2^63 ns, about 292 years, apart).
    public static func < (lhs: CaptureTime, rhs: CaptureTime) -> Bool { lhs - rhs < 0 }

    public var description: String { String(format: "%.6f s", seconds) }
}

/// A frame interval as the rational number of seconds V4L2 uses (e.g. 1/30).
public struct FrameInterval: Sendable, Hashable, Comparable, CustomStringConvertible {
    public var numerator: UInt32
    public var denominator: UInt32
    public init(numerator: UInt32, denominator: UInt32) {
        self.numerator = numerator
        self.denominator = denominator
    }
    /// The interval for a frame rate, e.g. `FrameInterval(framesPerSecond: 30)` is 1/30 s.
    /// Fractional rates are kept to 1/1000 fps (29.97 becomes 1000/29970).
    public init(framesPerSecond fps: Double) {
        if fps == fps.rounded(), fps >= 1, fps <= 1_000_000 {
            self.init(numerator: 1, denominator: UInt32(fps))
        } else {
            self.init(numerator: 1000, denominator: UInt32(max(1, min(Double(UInt32.max), (fps * 1000).rounded()))))
        }
    }
    /// Frames per second; 0 for a zero denominator.
    public var framesPerSecond: Double { numerator == 0 ? 0 : Double(denominator) / Double(numerator) }
    /// The interval in seconds.
    public var seconds: Double { denominator == 0 ? 0 : Double(numerator) / Double(denominator) }
    /// The interval as a `Duration`.
    public var duration: Duration { .nanoseconds(Int64((seconds * 1e9).rounded())) }

    public static func < (a: FrameInterval, b: FrameInterval) -> Bool {
        // Cross-multiply in 64 bits: exact, no overflow for 32-bit parts.
        UInt64(a.numerator) * UInt64(b.denominator) < UInt64(b.numerator) * UInt64(a.denominator)
    }
    public var description: String { "\(numerator)/\(denominator) s" }
}

/// Width and height in pixels.
public struct VideoDimensions: Sendable, Hashable, CustomStringConvertible {
    public var width: Int
    public var height: Int
    public init(width: Int, height: Int) { self.width = width; self.height = height }
    /// Parses `"1280x720"`.
    public init?(_ text: String) {
        let parts = text.lowercased().split(separator: "x")
        guard parts.count == 2, let w = Int(parts[0]), let h = Int(parts[1]), w > 0, h > 0 else { return nil }
        self.init(width: w, height: h)
    }
    public var description: String { "\(width)x\(height)" }
}

/// Whether luma and chroma use the full 0-255 range (JFIF) or the limited video range
/// (Y 16-235, C 16-240), as most cameras deliver.
public enum ColorRange: Sendable, Hashable {
    case limited
    case full
}
