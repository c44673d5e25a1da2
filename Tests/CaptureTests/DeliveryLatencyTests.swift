import Foundation
import Testing
@testable import Capture
import CaptureTestSupport

@Suite struct DeliveryLatencyTests {
    @Test func quantilesComeFromTheRightBuckets() {
        var h = LatencyHistogram()
        #expect(h.summary == DeliveryLatency(frames: 0, p50: .zero, p99: .zero, maximum: .zero))
        // 98 frames at 0.2 ms, one at 3 ms, one at 250 ms (past the fine buckets).
        for _ in 0..<98 { h.record(200_000) }
        h.record(3_000_000)
        h.record(250_000_000)
        let s = h.summary
        #expect(s.frames == 100)
        #expect(s.p50 == .microseconds(210), "\(s)")
        #expect(s.p99 == .microseconds(3010), "\(s)")
        #expect(s.maximum == .milliseconds(250))
        // The quantile never exceeds the maximum, and a clock that disagrees counts as 0.
        var one = LatencyHistogram()
        one.record(123_456)
        #expect(one.summary.p50 == .nanoseconds(123_456) && one.summary.p99 == one.summary.maximum)
        one.record(-5)
        #expect(one.summary.frames == 2 && one.quantile(0.5) == 10_000)
        // Beyond the last coarse bucket: counted there, the maximum exact.
        one.record(10_000_000_000)
        #expect(one.summary.maximum == .seconds(10) && one.quantile(1) == 10_000_000_000)
        one.reset()
        #expect(one.summary.frames == 0 && one.summary.maximum == .zero)
    }

    /// The output measures every frame it hands its delegate, from the capture timestamp; a
    /// delegate that makes frames wait shows it in the figures; `resetting` starts afresh.
    @Test func theOutputMeasuresWhatTheDelegateSees() async throws {
        let rig = try MisuseRig("Latency", .init(.yuyv, width: 320, height: 240, frameRates: [60]))
        defer { rig.uninstall() }
        let (session, video, collector) = try rig.videoSession(discardsLate: false)
        try session.start()
        defer { session.stopRunning() }
        #expect(await collector.eventually(frames: 30))
        let quick = video.deliveryLatency(resetting: true)
        #expect(quick.frames >= 30 && quick.p50 <= quick.p99 && quick.p99 <= quick.maximum, "\(quick)")
        // Measured in the right unit (a wrong one is 1000 times off); not a speed bound: a loaded
        // machine under a sanitizer can keep a quick delegate waiting for tens of milliseconds.
        #expect(quick.p50 > .zero && quick.p50 < .seconds(2), "\(quick)")
        // A delegate taking 40 ms a frame at 60 fps: frames wait in the backlog for it.
        collector.onFrame = { _ in usleep(40_000) }
        let n = collector.count
        #expect(await collector.eventually(frames: n + 15, timeout: 10))
        let slow = video.deliveryLatency()
        #expect(slow.frames >= 10 && slow.frames < quick.frames + 40, "\(slow)")
        #expect(slow.p50 > .milliseconds(20), "a waiting delegate must show in the latency: \(slow)")
    }
}
