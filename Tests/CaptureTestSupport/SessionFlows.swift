// The seeds' flows as reusable checks: the host runs them on the virtual camera, the VM on vivid.
import CaptureBackend
import Capture
import Foundation
import Testing

public enum SessionFlows {
    /// Seeds 000/001/002: input, preset 1280x720, still JPEG of the right size and colours.
    public static func stillAt720p(_ device: CaptureDevice, barRow: Double = 0.75) async throws {
        let session = CaptureSession()
        let input = try CaptureDeviceInput(device: device)
        let still = CaptureStillImageOutput()
        still.outputSettings = .init(codec: .jpeg, quality: 90)
        #expect(session.canAddInput(input))
        session.addInput(input)
        #expect(session.canAddOutput(still))
        session.addOutput(still)
        #expect(session.canSetSessionPreset(.hd1280x720))
        session.sessionPreset = .hd1280x720
        try session.start()
        defer { session.stopRunning() }
        let connection = try #require(still.connection(with: .video))
        let sample = try await still.captureStillImage(from: connection)
        let jpeg = try #require(CaptureStillImageOutput.jpegStillImageDataRepresentation(sample))
        let image = try #require(TestJPEG.decode(jpeg), "the still is not a decodable JPEG")
        #expect(image.width == 1280 && image.height == 720)
        #expect(ColorBars.mismatches(image, row: Int(Double(image.height) * barRow)) == [])
    }

    /// Seeds 000/001/003/004: toggle to the other position's camera inside begin/commit and back;
    /// frames keep coming from whichever camera is in.
    public static func toggleCameras(_ first: CaptureDevice, _ second: CaptureDevice) throws {
        let session = CaptureSession()
        let output = CaptureVideoDataOutput()
        let collector = FrameCollector()
        output.setSampleBufferDelegate(collector, queue: collector.queue)
        var current = try CaptureDeviceInput(device: first)
        session.addInput(current)
        session.addOutput(output)
        session.sessionPreset = .low
        try session.start()
        defer { session.stopRunning() }
        #expect(collector.wait(for: 3, timeout: 20))
        for target in [second, first] {
            let next = try CaptureDeviceInput(device: target)
            session.beginConfiguration()
            session.removeInput(current)
            if session.canAddInput(next) {
                session.addInput(next)
                current = next
            } else {
                session.addInput(current)
            }
            let result = session.commitConfiguration()
            #expect(result.isRejected == false, "toggle to \(target.localizedName): \(result)")
            #expect((session.inputs.first as? CaptureDeviceInput)?.device === target)
            let before = collector.count
            #expect(collector.wait(for: before + 3, timeout: 20), "no frames after switching to \(target.localizedName)")
        }
        #expect(session.isRunning)
    }

    /// Video data output: `n` frames in order, on the delegate's queue.
    public static func framesInOrder(_ device: CaptureDevice, count n: Int = 120, preset: CaptureSession.Preset = .low) throws {
        let session = CaptureSession()
        let output = CaptureVideoDataOutput()
        output.alwaysDiscardsLateVideoFrames = false
        let collector = FrameCollector()
        collector.markQueue()
        output.setSampleBufferDelegate(collector, queue: collector.queue)
        session.addInput(try CaptureDeviceInput(device: device))
        session.addOutput(output)
        session.sessionPreset = preset
        try session.start()
        #expect(collector.wait(for: n, timeout: Double(n) / 2 + 20))
        session.stopRunning()
        let seq = Array(collector.sequences.prefix(n))
        #expect(seq.count == n)
        #expect(zip(seq, seq.dropFirst()).allSatisfy { $1 > $0 }, "sequence numbers must increase")
        let ts = Array(collector.timestamps.prefix(n))
        #expect(zip(ts, ts.dropFirst()).allSatisfy { $1 - $0 > 0 }, "timestamps must increase")
        #expect(collector.callsOffQueue == 0, "delegate called off its queue")
    }

    /// A delegate that holds every buffer sees `.outOfBuffers` drops, and the stream recovers
    /// when it lets go.
    public static func outOfBuffers(_ device: CaptureDevice) throws {
        let session = CaptureSession()
        let output = CaptureVideoDataOutput()
        output.alwaysDiscardsLateVideoFrames = false
        let collector = FrameCollector()
        collector.holdAll = true
        output.setSampleBufferDelegate(collector, queue: collector.queue)
        session.addInput(try CaptureDeviceInput(device: device))
        session.addOutput(output)
        session.sessionPreset = .low
        let events = EventLog(session)
        try session.start()
        defer { session.stopRunning() }
        #expect(collector.wait(for: 2, timeout: 20))
        // Give the device time to run dry and skip frames; the drops are reported meanwhile.
        Thread.sleep(forTimeInterval: 1.5)
        let duringHold = collector.drops
        let heldCount = collector.count
        collector.releaseHeld()
        #expect(duringHold.contains { $0.reason == .outOfBuffers && $0.count > 0 }, "drops seen while holding: \(duringHold)")
        #expect(collector.wait(for: heldCount + 5, timeout: 20), "the stream did not recover after the buffers came back")
        #expect(!events.events.contains { if case .deviceStalled = $0 { true } else { false } }, "held buffers are not a stall")
        session.stopRunning()
        collector.queue.sync {}
        try collector.expectEveryFrameOnce()
    }

    /// With `alwaysDiscardsLateVideoFrames`, a slow delegate gets the newest frames, not a backlog.
    public static func discardsLateFrames(_ device: CaptureDevice) throws {
        let session = CaptureSession()
        let output = CaptureVideoDataOutput()
        output.alwaysDiscardsLateVideoFrames = true
        let collector = FrameCollector()
        collector.delay = 0.25
        output.setSampleBufferDelegate(collector, queue: collector.queue)
        session.addInput(try CaptureDeviceInput(device: device))
        session.addOutput(output)
        session.sessionPreset = .low
        try session.start()
        #expect(collector.wait(for: 6, timeout: 30))
        let lastSeen = collector.sequences.last ?? 0
        session.stopRunning()
        let late = collector.drops.filter { $0.reason == .frameWasLate }.reduce(0) { $0 + $1.count }
        #expect(late > 0, "a slow delegate must see late drops")
        let seqs = collector.sequences
        // Consecutive deliveries skip frames: the delegate sees the newest, not every one.
        let gaps = zip(seqs, seqs.dropFirst()).map { $1 - $0 }
        #expect(gaps.dropFirst().contains { $0 > 1 }, "sequence gaps \(gaps) show a backlog, not the newest frames")
        _ = lastSeen
    }

    /// A commit the device rejects (a preset it cannot do) keeps the old format running.
    public static func rejectedCommitKeepsRunning(_ device: CaptureDevice, impossible: CaptureSession.Preset) throws {
        let session = CaptureSession()
        let output = CaptureVideoDataOutput()
        let collector = FrameCollector()
        output.setSampleBufferDelegate(collector, queue: collector.queue)
        session.addInput(try CaptureDeviceInput(device: device))
        session.addOutput(output)
        session.sessionPreset = .low
        try session.start()
        defer { session.stopRunning() }
        #expect(collector.wait(for: 2, timeout: 20))
        let dims = try #require(device.activeFormat?.dimensions)
        #expect(!session.canSetSessionPreset(impossible))
        session.beginConfiguration()
        session.sessionPreset = impossible
        let result = session.commitConfiguration()
        #expect(result.isRejected)
        #expect(session.sessionPreset == .low)
        #expect(session.isRunning)
        let sizes = SizeRecorder()
        collector.onFrame = { s in sizes.add(s.dimensions) }
        let before = collector.count
        #expect(collector.wait(for: before + 3, timeout: 20))
        #expect(sizes.all.allSatisfy { $0 == dims }, "frames after the rejected commit: \(sizes.all), expected \(dims)")
    }
}

public final class SizeRecorder: @unchecked Sendable {
    private let lock = NSLock()
    private var list: [VideoDimensions?] = []
    public init() {}
    public func add(_ d: VideoDimensions?) { lock.withLock { list.append(d) } }
    public var all: [VideoDimensions?] { lock.withLock { list } }
}
