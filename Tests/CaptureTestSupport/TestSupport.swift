// Shared by the host and driver tests: decoding JPEGs with TurboJPEG directly (independent of
// the library's own decoder), checking colour bars, counting descriptors and mappings.
import CTurboJPEG
import Foundation
import Capture

public struct RGBImage: Sendable {
    public var width: Int
    public var height: Int
    public var pixels: [UInt8]
    public init(width: Int, height: Int, pixels: [UInt8]) { self.width = width; self.height = height; self.pixels = pixels }
    public func pixel(x: Int, y: Int) -> (r: Int, g: Int, b: Int) {
        let i = (y * width + x) * 3
        return (Int(pixels[i]), Int(pixels[i + 1]), Int(pixels[i + 2]))
    }
}

public enum TestJPEG {
    /// Decodes with TurboJPEG; nil if it is not a decodable JPEG.
    public static func decode(_ data: Data) -> RGBImage? {
        guard let h = tjInitDecompress() else { return nil }
        defer { tjDestroy(h) }
        return data.withUnsafeBytes { raw -> RGBImage? in
            guard let base = raw.baseAddress?.assumingMemoryBound(to: UInt8.self) else { return nil }
            var w: Int32 = 0, hgt: Int32 = 0, sub: Int32 = 0, cs: Int32 = 0
            guard tjDecompressHeader3(h, base, UInt(raw.count), &w, &hgt, &sub, &cs) == 0, w > 0, hgt > 0 else { return nil }
            var out = [UInt8](repeating: 0, count: Int(w) * Int(hgt) * 3)
            let r = out.withUnsafeMutableBufferPointer {
                tjDecompress2(h, base, UInt(raw.count), $0.baseAddress, w, 0, hgt, Int32(TJPF_RGB.rawValue), 0)
            }
            guard r == 0 else { return nil }
            return RGBImage(width: Int(w), height: Int(hgt), pixels: out)
        }
    }

    /// The EXIF orientation tag of a JPEG, if it has one (little- or big-endian TIFF).
    public static func exifOrientation(_ data: Data) -> Int? {
        let b = [UInt8](data)
        var i = 2
        while i + 4 <= b.count, b[i] == 0xFF {
            let marker = b[i + 1]
            let len = Int(b[i + 2]) << 8 | Int(b[i + 3])
            if marker == 0xE1, i + 10 < b.count, b[i + 4] == 0x45, b[i + 5] == 0x78 {  // "Ex"
                let t = i + 10
                guard t + 8 <= b.count else { return nil }
                let le = b[t] == 0x49
                func u16(_ o: Int) -> Int { le ? Int(b[o]) | Int(b[o + 1]) << 8 : Int(b[o]) << 8 | Int(b[o + 1]) }
                func u32(_ o: Int) -> Int { le ? u16(o) | u16(o + 2) << 16 : u16(o) << 16 | u16(o + 2) }
                let ifd = t + u32(t + 4)
                guard ifd + 2 <= b.count else { return nil }
                for k in 0..<u16(ifd) {
                    let e = ifd + 2 + 12 * k
                    guard e + 12 <= b.count else { return nil }
                    if u16(e) == 0x0112 { return u16(e + 8) }
                }
                return nil
            }
            if marker == 0xDA { break }
            i += 2 + len
        }
        return nil
    }
}

/// The eight 75 % colour bars vivid draws (and the virtual camera copies), left to right, in
/// full-range RGB after JPEG decoding.
public enum ColorBars {
    public static let expected: [(name: String, r: Int, g: Int, b: Int)] = [
        ("white", 191, 191, 191), ("yellow", 191, 191, 0), ("cyan", 0, 191, 191), ("green", 0, 191, 0),
        ("magenta", 191, 0, 191), ("red", 191, 0, 0), ("blue", 0, 0, 191), ("black", 0, 0, 0),
    ]

    /// Names of the bars whose centre pixel at `row` is off by more than `tolerance`; empty when all match.
    public static func mismatches(_ image: RGBImage, row: Int, tolerance: Int = 24) -> [String] {
        var bad: [String] = []
        for (i, bar) in expected.enumerated() {
            let x = min(image.width - 1, (2 * i + 1) * image.width / 16)
            let p = image.pixel(x: x, y: row)
            if abs(p.r - bar.r) > tolerance || abs(p.g - bar.g) > tolerance || abs(p.b - bar.b) > tolerance {
                bad.append("\(bar.name) at x=\(x) is (\(p.r),\(p.g),\(p.b))")
            }
        }
        return bad
    }

    /// Where a pixel of the sensor's `width`x`height` picture lands in a still whose pixels were
    /// turned as EXIF `orientation` (1-8) says.
    public static func turned(x: Int, y: Int, width w: Int, height h: Int, orientation: Int) -> (x: Int, y: Int) {
        switch orientation {
        case 2: (w - 1 - x, y)
        case 3: (w - 1 - x, h - 1 - y)
        case 4: (x, h - 1 - y)
        case 5: (y, x)
        case 6: (h - 1 - y, x)
        case 7: (h - 1 - y, w - 1 - x)
        case 8: (y, w - 1 - x)
        default: (x, y)
        }
    }

    /// `mismatches(_:row:)` for a still turned as EXIF `orientation` says: each bar's centre at
    /// `row` of the sensor's `width`x`height` picture is looked for where the turn put it.
    public static func mismatches(
        _ image: RGBImage, turnedBy orientation: Int, row: Int, width: Int, height: Int,
        tolerance: Int = 24
    ) -> [String] {
        var bad: [String] = []
        for (i, bar) in expected.enumerated() {
            let xs = min(width - 1, (2 * i + 1) * width / 16)
            let (x, y) = turned(x: xs, y: row, width: width, height: height, orientation: orientation)
            let p = image.pixel(x: x, y: y)
            if abs(p.r - bar.r) > tolerance || abs(p.g - bar.g) > tolerance || abs(p.b - bar.b) > tolerance {
                bad.append("\(bar.name) at (\(x),\(y)) is (\(p.r),\(p.g),\(p.b))")
            }
        }
        return bad
    }
}

/// The process's descriptors and threads, counted whole (all of `/proc/self/fd` and
/// `/proc/self/task`, not per kind): meaningful only when nothing else runs in the process (the
/// `ProcessLeak…` suites, which scripts/test runs on their own).
public struct ProcessCounts: CustomStringConvertible, Sendable {
    public var descriptors: Int
    public var threads: Int
    public static var now: ProcessCounts {
        let fm = FileManager.default
        return ProcessCounts(
            descriptors: (try? fm.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? -1,
            threads: (try? fm.contentsOfDirectory(atPath: "/proc/self/task").count) ?? -1)
    }
    public var description: String { "\(descriptors) descriptors, \(threads) threads" }
    /// Back to `baseline`, but for `slack` of each: the descriptor listing `/proc/self/fd` opens,
    /// and a thread of Dispatch's or GLib's pools, which grow with work and shrink when idle on
    /// their own schedule. A leak of the clients' would be a socket or a thread per client.
    public func isBack(to baseline: ProcessCounts, slack: Int = 2) -> Bool {
        descriptors <= baseline.descriptors + slack && threads <= baseline.threads + slack
    }
}

public enum ProcessResources {
    /// Open descriptors of this process.
    public static var openDescriptors: Int {
        (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? -1
    }
    /// What each open descriptor of this process names (`socket:[N]`, `anon_inode:[eventfd]`, a
    /// path), by descriptor number: two listings' difference says what a leak holds.
    public static var descriptorTargets: [Int: String] {
        let fm = FileManager.default
        var out: [Int: String] = [:]
        for name in (try? fm.contentsOfDirectory(atPath: "/proc/self/fd")) ?? [] {
            guard let fd = Int(name), let target = try? fm.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(name)") else { continue }
            out[fd] = target
        }
        return out
    }
    /// The descriptors open in `now` that were not open, or named something else, in `before`.
    public static func added(since before: [Int: String], now: [Int: String]) -> [String] {
        now.filter { before[$0.key] != $0.value }.sorted { $0.key < $1.key }.map { "\($0.key) -> \($0.value)" }
    }
    /// Memory mappings of this process.
    public static var mappings: Int {
        (try? String(contentsOfFile: "/proc/self/maps", encoding: .utf8))?.split(separator: "\n").count ?? -1
    }
    /// Mappings of V4L2 buffers (shown as the device node in /proc/self/maps).
    public static var videoMappings: Int {
        ((try? String(contentsOfFile: "/proc/self/maps", encoding: .utf8)) ?? "").split(separator: "\n").filter {
            $0.contains("/dev/video")
        }.count
    }
    /// Descriptors open on /dev/video* nodes.
    public static var videoDescriptors: Int {
        let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        return fds.filter {
            ((try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\($0)")) ?? "").hasPrefix("/dev/video")
        }.count
    }
}

/// Collects session events for assertions.
public final class EventLog: @unchecked Sendable {
    private let lock = NSLock()
    private var list: [CaptureSession.Event] = []
    public init(_ session: CaptureSession) {
        session.addEventHandler { [weak self] e in self?.lock.withLock { self?.list.append(e) } }
    }
    public var events: [CaptureSession.Event] { lock.withLock { list } }
    /// Waits up to `timeout` for an event matching `match`.
    public func wait(timeout: Double = 10, _ match: (CaptureSession.Event) -> Bool) -> Bool {
        waitUntil(timeout: timeout) { events.contains(where: match) }
    }
}

/// Waits until `condition` holds, polling on this thread: for synchronous tests (an async test
/// uses `eventually`, which leaves its thread to the others). Returns whether it held in time.
@discardableResult
public func waitUntil(timeout: Double = 10, _ condition: () -> Bool) -> Bool {
    let end = Date().addingTimeInterval(timeout)
    while !condition() {
        if Date() > end { return false }
        Thread.sleep(forTimeInterval: 0.005)
    }
    return true
}

/// Waits until `condition` holds, polling without blocking a thread (a blocked test would
/// starve the concurrency pool that the other tests share). Returns whether it held in time.
public func eventually(timeout: Double = 10, _ condition: @Sendable () -> Bool) async -> Bool {
    let end = Date().addingTimeInterval(timeout)
    while !condition() {
        if Date() > end { return false }
        try? await Task.sleep(for: .milliseconds(10))
    }
    return true
}
