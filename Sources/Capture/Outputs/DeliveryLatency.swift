/// How long frames took from capture to the app: from a frame's capture timestamp (the driver's,
/// on the monotonic clock) to the moment the delegate is called with it. Conversion and JPEG
/// encoding on the way count; waiting for a busy delegate counts too.
public struct DeliveryLatency: Sendable, Hashable, CustomStringConvertible {
    /// Frames measured.
    public var frames: Int
    /// Half of the frames arrived within this (10 µs resolution below 40 ms, 1 ms above).
    public var p50: Duration
    /// 99 % of the frames arrived within this.
    public var p99: Duration
    /// The slowest frame.
    public var maximum: Duration

    public init(frames: Int, p50: Duration, p99: Duration, maximum: Duration) {
        self.frames = frames
        self.p50 = p50
        self.p99 = p99
        self.maximum = maximum
    }

    public var description: String {
        func µs(_ d: Duration) -> String { String(Int((d.inMilliseconds * 1000).rounded())) + " µs" }
        return "\(frames) frames: p50 \(µs(p50)), p99 \(µs(p99)), max \(µs(maximum))"
    }
}

extension Duration {
    /// The duration in milliseconds (for reports: the tool's JSON, the benchmarks).
    package var inMilliseconds: Double { Double(components.seconds) * 1e3 + Double(components.attoseconds) / 1e15 }
}

/// Latency counts in fixed buckets: recording allocates nothing and takes constant time.
/// 10 µs buckets up to about 41 ms, then 1 ms buckets up to about 4.1 s; longer ones count in
/// the last bucket (the maximum stays exact). Not thread-safe: keep it under its owner's lock.
struct LatencyHistogram {
    private static let fineStep: Int64 = 10_000, coarseStep: Int64 = 1_000_000, buckets = 4096
    private var fine: [UInt32]
    private var coarse: [UInt32]
    private(set) var count = 0
    private var maximum: Int64 = 0

    init() {
        fine = Array(repeating: 0, count: Self.buckets)
        coarse = Array(repeating: 0, count: Self.buckets)
    }

    /// Records one latency, in nanoseconds (negative ones, from a clock that disagrees, as 0).
    mutating func record(_ nanoseconds: Int64) {
        let n = max(0, nanoseconds)
        count += 1
        maximum = max(maximum, n)
        if n < Self.fineStep * Int64(Self.buckets) {
            fine[Int(n / Self.fineStep)] &+= 1
        } else {
            coarse[min(Self.buckets - 1, Int(n / Self.coarseStep))] &+= 1
        }
    }

    /// Forgets every measurement (keeps the storage).
    mutating func reset() {
        for i in fine.indices { fine[i] = 0 }
        for i in coarse.indices { coarse[i] = 0 }
        count = 0
        maximum = 0
    }

    /// The upper edge of the bucket holding the `fraction` quantile, at most the maximum.
    func quantile(_ fraction: Double) -> Int64 {
        guard count > 0 else { return 0 }
        let rank = max(1, Int((Double(count) * fraction).rounded(.up)))
        var seen = 0
        for (i, c) in fine.enumerated() where c > 0 {
            seen += Int(c)
            if seen >= rank { return min(maximum, Int64(i + 1) * Self.fineStep) }
        }
        for (i, c) in coarse.enumerated() where c > 0 {
            seen += Int(c)
            // The last bucket has no upper edge but the maximum.
            if seen >= rank { return i == Self.buckets - 1 ? maximum : min(maximum, Int64(i + 1) * Self.coarseStep) }
        }
        return maximum
    }

    var summary: DeliveryLatency {
        DeliveryLatency(
            frames: count, p50: .nanoseconds(quantile(0.5)), p99: .nanoseconds(quantile(0.99)),
            maximum: .nanoseconds(maximum))
    }
}
