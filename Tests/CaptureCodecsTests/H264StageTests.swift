import CaptureBackend
import CaptureSystem
import Foundation
import Testing
@testable import Capture
@testable import CaptureCodecs
import CaptureTestSupport

/// The H.264 stage: one encode per frame for every consumer of the same settings, a key frame
/// for each consumer that joins or asks, units a real decoder (ffprobe) reads.
@Suite struct H264StageTests {
    /// Keeps what an H.264 stage hands it: every unit's facts, and (if `keeps`) the units.
    final class Viewer: H264Consumer, @unchecked Sendable {
        struct Seen {
            var units: [(sequence: UInt64, key: Bool, unit: ObjectIdentifier, size: Int)] = []
            var bytes = Data()
            var parameterSets = Data()
            var drops = 0
            var failures: [H264StageError] = []
        }
        let seen = Locked(Seen())
        func consume(_ unit: H264AccessUnit, from connection: CaptureConnection) {
            seen.withLock { s in
                s.units.append((unit.sequenceNumber, unit.isKeyFrame, ObjectIdentifier(unit), unit.count))
                if s.parameterSets.isEmpty { s.parameterSets = unit.parameterSets }
                unit.withUnsafeBytes { s.bytes.append(contentsOf: $0) }
            }
        }
        func consumeDrop(_ drop: DroppedFrames, from connection: CaptureConnection) { seen.withLock { $0.drops += drop.count } }
        func h264StageFailed(_ error: H264StageError, from connection: CaptureConnection) { seen.withLock { $0.failures.append(error) } }
        var count: Int { seen.withLock { $0.units.count } }
    }

    /// A session on a virtual camera with an app output (whose frames pace the test) and
    /// H.264 viewers on ports of their own.
    struct Rig {
        let rig: VirtualSessionRig
        var session: CaptureSession { rig.session }
        init(_ name: String, _ mode: VirtualCamera.Mode = InstalledCamera.smallMode) throws {
            rig = try VirtualSessionRig(name, modes: [mode])
        }
        func port(_ viewer: Viewer, _ settings: H264Settings) -> FrameConsumerPort {
            let port = FrameConsumerPort(encodedFor: viewer)
            port.encodedProduct = settings.product
            #expect(session.addFrameConsumer(port))
            return port
        }
    }

    @Test func consumersOfTheSameSettingsShareOneEncode() async throws {
        let r = try Rig("H264 share")
        defer { r.rig.uninstall() }
        let a = Viewer(), b = Viewer(), other = Viewer()
        let settings = H264Settings(preset: "ultrafast")
        let pa = r.port(a, settings), pb = r.port(b, settings)
        try r.session.start()
        #expect(await eventually(timeout: 30) { a.count >= 30 && b.count >= 30 })
        // One encode per unit: two encoders would make twice as many as either viewer gets.
        let before = a.count
        let encodes = r.session.stageEncodes
        let after = a.count
        #expect(encodes >= before && encodes <= after + 2, "\(encodes) encodes for \(before)...\(after) units")
        // Another quality is another product: a stage of its own beside the shared one.
        let po = r.port(other, H264Settings(preset: "ultrafast", rateControl: .quality(40)))
        #expect(await eventually(timeout: 30) { other.count >= 10 })
        r.session.stopRunning()
        let sa = a.seen.withLock { $0 }, sb = b.seen.withLock { $0 }
        // The same unit objects, in the same order: each frame encoded once for both.
        #expect(sa.units.map(\.unit) == sb.units.map(\.unit) && sa.units.map(\.sequence) == sb.units.map(\.sequence))
        #expect(sa.units.first?.key == true, "the first unit is a key frame")
        #expect(Set(sa.units.map(\.sequence)).count == sa.units.count, "a frame encoded twice")
        #expect(other.seen.withLock { $0.units.first?.key } == true)
        withExtendedLifetime((pa, pb, po)) {}
    }

    @Test func aConsumerThatJoinsOrAsksGetsAKeyFrameAtOnce() async throws {
        let r = try Rig("H264 join")
        defer { r.rig.uninstall() }
        // No key frame of the encoder's own in the test's time: every other one was asked for.
        let settings = H264Settings(preset: "ultrafast", keyFrameInterval: 100_000)
        let first = Viewer(), late = Viewer()
        let p1 = r.port(first, settings)
        try r.session.start()
        #expect(await eventually(timeout: 30) { first.count >= 10 })
        let p2 = r.port(late, settings)
        #expect(await eventually(timeout: 30) { late.count >= 5 })
        #expect(late.seen.withLock { $0.units.first?.key } == true, "a late joiner's first unit is a key frame")
        let keysBefore = first.seen.withLock { $0.units.filter(\.key).count }
        #expect(keysBefore == 2, "the first frame and the join: \(keysBefore) key frames")
        // Asked: a key frame within a few frames (one may be on its way already).
        let n = first.count
        p1.requestKeyFrame()
        #expect(await eventually(timeout: 30) { first.count >= n + 5 })
        let after = first.seen.withLock { Array($0.units[n...]) }
        #expect(after.prefix(3).contains { $0.key }, "\(after.map(\.key))")
        // A connection turned off and on again is a join: its consumer resumes at a key frame,
        // asked for at once (not at the encoder's next interval).
        let c2 = try #require(p2.connection(with: .video))
        c2.isEnabled = false
        let m = first.count
        #expect(await eventually(timeout: 30) { first.count >= m + 5 })
        let k = late.count
        let keysBeforeReturn = first.seen.withLock { $0.units.filter(\.key).count }
        c2.isEnabled = true
        #expect(await eventually(timeout: 30) { late.count >= k + 3 })
        #expect(late.seen.withLock { $0.units[k].key } == true, "the first unit after turning back on is a key frame")
        #expect(first.seen.withLock { $0.units.filter(\.key).count } > keysBeforeReturn, "no key frame was asked for")
        r.session.stopRunning()
        withExtendedLifetime((p1, p2)) {}
    }

    /// The units with their parameter sets are an H.264 stream ffprobe decodes, frame for frame,
    /// from every pixel layout the stage takes in its own way (NV12 and I420 copied, YUYV and
    /// MJPEG converted).
    @Test(arguments: [PixelFormat.nv12, .yuv420, .yuyv, .mjpeg])
    func unitsDecode(_ format: PixelFormat) async throws {
        let r = try Rig("H264 decode", .init(format, width: 352, height: 288, frameRates: [30]))
        defer { r.rig.uninstall() }
        let v = Viewer()
        let p = r.port(v, H264Settings(preset: "ultrafast", keyFrameInterval: 10))
        try r.session.start()
        #expect(await eventually(timeout: 30) { v.count >= 25 })
        r.session.stopRunning()
        let s = v.seen.withLock { $0 }
        #expect(s.failures.isEmpty, "\(s.failures.map(\.message))")
        #expect(!s.parameterSets.isEmpty, "no SPS/PPS")
        #expect(s.units.filter(\.key).count >= 2, "a key frame every 10 frames")
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("stage-\(UUID().uuidString).h264")
        defer { try? FileManager.default.removeItem(at: url) }
        try (s.parameterSets + s.bytes).write(to: url)
        let probe = try runProcess(
            "/usr/bin/ffprobe",
            [
                "-v", "error", "-count_frames", "-select_streams", "v:0", "-show_entries", "stream=codec_name,width,height,nb_read_frames",
                "-of", "csv=p=0", url.path,
            ])
        #expect(probe.status == 0, "\(probe.stderr)")
        #expect(probe.text.trimmingCharacters(in: .whitespacesAndNewlines) == "h264,352,288,\(s.units.count)", "\(probe.text)")
        withExtendedLifetime(p) {}
    }

    /// A camera format the encoder has no route from (RGB) fails the stage once, with words.
    @Test func framesItCannotEncodeFailTheStageOnce() async throws {
        let r = try Rig("H264 rgb", .init(.rgb24, width: 320, height: 240, frameRates: [30]))
        defer { r.rig.uninstall() }
        let v = Viewer()
        let p = r.port(v, H264Settings(preset: "ultrafast"))
        try r.session.start()
        #expect(await eventually(timeout: 30) { v.seen.withLock { !$0.failures.isEmpty } })
        // Ten frames more: the failure is not told again for each.
        let n = r.rig.collector.count
        #expect(await eventually(timeout: 30) { r.rig.collector.count >= n + 10 })
        r.session.stopRunning()
        let s = v.seen.withLock { $0 }
        #expect(s.units.isEmpty && s.failures.count == 1, "\(s.failures.map(\.message))")
        #expect(s.failures.first?.code == .unsupportedCodec && s.failures.first?.message.contains("RGB") == true)
        withExtendedLifetime(p) {}
    }

    /// Keeps the order in which units and loss reports came.
    final class Ledger: H264Consumer, @unchecked Sendable {
        enum Event {
            case unit(UInt64)
            case drop(first: UInt64, count: Int, reason: DropReason)
            /// The sequence numbers it covers.
            var range: ClosedRange<UInt64> {
                switch self {
                case .unit(let s): s...s
                case .drop(let first, let count, _): first...(first + UInt64(max(1, count)) - 1)
                }
            }
        }
        let events = Locked([Event]())
        func consume(_ unit: H264AccessUnit, from connection: CaptureConnection) {
            events.withLock { $0.append(.unit(unit.sequenceNumber)) }
        }
        func consumeDrop(_ drop: DroppedFrames, from connection: CaptureConnection) {
            events.withLock { $0.append(.drop(first: drop.sequenceNumber ?? 0, count: drop.count, reason: drop.reason)) }
        }
        func h264StageFailed(_ error: H264StageError, from connection: CaptureConnection) {}
        var units: Int { events.withLock { $0.reduce(0) { if case .unit = $1 { $0 + 1 } else { $0 } } } }
    }

    /// A stage behind (x264's placebo, a consumer that keeps every frame) while the camera loses
    /// frames: its consumer hears of every loss, the camera's and its own, after the units of the
    /// frames before it and before those after it, each frame once. (Before, the camera's losses
    /// came straight from the capture thread and the stage's as soon as it noted them, ahead of
    /// the frames still queued: a recording not yet at its first frame left them out.)
    @Test func lossesReachConsumersInFrameOrderWithTheUnits() async throws {
        // (At this size placebo takes longer per frame than the camera's interval.)
        let r = try Rig("H264 order", .init(.nv12, width: 1920, height: 1080, frameRates: [30]))
        defer { r.rig.uninstall() }
        let v = Ledger()
        let port = FrameConsumerPort(encodedFor: v, keepsEveryFrame: true)
        port.encodedProduct = H264Settings(preset: "placebo").product
        #expect(r.session.addFrameConsumer(port))
        try r.session.start()
        #expect(await eventually(timeout: 60) { v.units >= 2 })
        // The camera loses frames while the stage has a backlog: three rounds, and more until the
        // stage has lost one late too (its backlog takes a while to fill where the camera is slow
        // as well, as under a sanitizer), 30 at most.
        func lateSoFar() -> Int {
            v.events.withLock { $0.reduce(0) { if case .drop(_, let c, .frameWasLate) = $1 { $0 + c } else { $0 } } }
        }
        var rounds = 0
        repeat {
            r.rig.camera.injectDroppedFrames(2)
            let n = r.rig.collector.count
            #expect(await eventually(timeout: 30) { r.rig.collector.count >= n + 10 })
            rounds += 1
        } while rounds < 3 || (lateSoFar() == 0 && rounds < 30)
        r.session.stopRunning()
        let events = v.events.withLock { $0 }
        let first = try #require(events.firstIndex { if case .unit = $0 { true } else { false } })
        let heard = Array(events[first...])
        // In frame order, each frame once: every event starts right after the one before.
        var misplaced: [String] = []
        for (a, b) in zip(heard, heard.dropFirst()) where b.range.lowerBound != a.range.upperBound + 1 {
            misplaced.append("\(a) then \(b)")
        }
        #expect(misplaced.isEmpty, "\(misplaced.count) out of order: \(misplaced.prefix(5))")
        let camera = heard.reduce(0) { if case .drop(_, let c, let reason) = $1, reason != .frameWasLate { $0 + c } else { $0 } }
        let late = heard.reduce(0) { if case .drop(_, let c, .frameWasLate) = $1 { $0 + c } else { $0 } }
        #expect(camera >= 2 * rounds, "the camera's losses reached the consumer: \(camera) of \(2 * rounds)")
        #expect(late > 0, "the stage was never behind by more than its backlog (no frame lost late)")
        print("in order: \(v.units) units, \(camera) lost by the camera, \(late) by the stage")
    }

    @Test func anEncoderThisFFmpegLacksIsReportedToItsConsumers() async throws {
        let r = try Rig("H264 missing")
        defer { r.rig.uninstall() }
        let v = Viewer()
        let p = r.port(v, H264Settings(encoder: "h264_no_such_encoder"))
        try r.session.start()
        #expect(await eventually(timeout: 30) { v.seen.withLock { !$0.failures.isEmpty } })
        r.session.stopRunning()
        let s = v.seen.withLock { $0 }
        #expect(s.units.isEmpty)
        #expect(s.failures.first?.code == .unsupportedCodec && s.failures.first?.message.contains("h264_no_such_encoder") == true)
        withExtendedLifetime(p) {}
    }
}
