import CaptureVirtual
import CaptureImaging
import CaptureBackend
import CaptureSystem
import Capture
import CaptureTestSupport
import Foundation
import Testing

@Suite(.serialized) struct SessionFormatTests {
    /// MJPEG stills pass through: byte-identical to the camera's frame when it has Huffman
    /// tables; decodable (tables inserted) when it has none.
    @Test(arguments: [false, true])
    func mjpegPassthrough(omitTables: Bool) async throws {
        let rig = try VirtualSessionRig(
            "MJPEG \(omitTables)", modes: [.init(.mjpeg, width: 640, height: 480, frameRates: [30], omitsHuffmanTables: omitTables)],
            outputs: [.still, .video], discardsLate: false)
        defer { rig.uninstall() }
        let frames = FrameStore()
        rig.collector.onFrame = { s in frames.put(s.sequenceNumber, s.data()) }
        try rig.session.start()
        defer { rig.session.stopRunning() }
        let connection = try #require(rig.still.connection(with: .video))
        let sample = try await rig.still.captureStillImage(from: connection)
        let jpeg = try #require(sample.jpegData)
        #expect(rig.collector.wait(for: rig.collector.count + 2, timeout: 5))
        let source = try #require(frames.get(sample.sequenceNumber), "the video output never saw frame \(sample.sequenceNumber)")
        let hasDHT = { (d: Data) in d.withUnsafeBytes { b in (0..<(b.count - 1)).contains { b[$0] == 0xFF && b[$0 + 1] == 0xC4 } } }
        if omitTables {
            #expect(!hasDHT(source))
            #expect(hasDHT(jpeg))
        } else {
            #expect(jpeg == source)
        }
        let image = try #require(TestJPEG.decode(jpeg))
        #expect(image.width == 640 && image.height == 480)
    }

    /// `videoSettings` asks for a format the camera lacks: frames arrive converted, with the bars intact.
    @Test(arguments: [(PixelFormat.mjpeg, PixelFormat.bgra32), (.yuyv, .bgra32), (.yuyv, .nv12), (.nv12, .yuyv)])
    func convertsToRequestedFormat(_ from: PixelFormat, _ to: PixelFormat) throws {
        let rig = try VirtualSessionRig(
            "Convert \(from)-\(to)", modes: [.init(from, width: 320, height: 240)], videoSettings: .init(pixelFormat: to))
        defer { rig.uninstall() }
        let got = FrameStore()
        rig.collector.onFrame = { s in
            if s.pixelFormat == to, s.dimensions == VideoDimensions(width: 320, height: 240) { got.put(0, s.data()) }
        }
        try rig.session.start()
        #expect(rig.collector.wait(for: 3, timeout: 5))
        rig.session.stopRunning()
        let data = try #require(got.get(0), "no \(to) frame arrived")
        let row = 180
        let bars = ColorBars.expected
        for (i, bar) in bars.enumerated() {
            let x = (2 * i + 1) * 320 / 16
            if to == .bgra32 {
                let o = (row * 320 + x) * 4
                let (b, g, r) = (Int(data[o]), Int(data[o + 1]), Int(data[o + 2]))
                #expect(abs(r - bar.r) < 24 && abs(g - bar.g) < 24 && abs(b - bar.b) < 24, "\(bar.name): \(r),\(g),\(b)")
            } else {
                // Luma of a 75 % bar in limited range: 16 + 219 * 0.75 * Y'(bar).
                let y = to == .nv12 ? Int(data[row * 320 + x]) : Int(data[row * 640 + (x / 2) * 4 + (x % 2) * 2])
                let expect = 16.0 + 219.0 * (0.299 * Double(bar.r) + 0.587 * Double(bar.g) + 0.114 * Double(bar.b)) / 255.0
                #expect(abs(Double(y) - expect) < 12, "\(bar.name): Y \(y), expected \(Int(expect))")
            }
        }
    }

    /// A new frame rate on a running session takes effect without a failed restart, while the
    /// delegate holds a frame from before.
    @Test func frameRateChangeWhileRunning() throws {
        let rig = try VirtualSessionRig("Rate", modes: [.init(.yuyv, width: 320, height: 240, frameRates: [30, 15])])
        defer { rig.uninstall() }
        let (session, device, collector) = (rig.session, rig.device, rig.collector)
        let kept = FrameStore()
        collector.onFrame = { s in kept.put(0, s.data()) }
        try session.start()
        defer { session.stopRunning() }
        #expect(collector.wait(for: 3, timeout: 5))
        try device.lockForConfiguration()
        try device.setActiveVideoMinFrameDuration(FrameInterval(framesPerSecond: 15))
        device.unlockForConfiguration()
        #expect(device.activeVideoMinFrameDuration == FrameInterval(framesPerSecond: 15))
        let n = collector.count
        #expect(collector.wait(for: n + 5, timeout: 5))
        #expect(session.isRunning)
    }

    /// A rig with a still output, started. The caller stops the session and uninstalls the camera.
    private static func runningStillRig(_ name: String, _ mode: VirtualCamera.Mode) throws -> VirtualSessionRig {
        let rig = try VirtualSessionRig(name, modes: [mode], outputs: [.still])
        do {
            try rig.session.start()
            return rig
        } catch {
            rig.uninstall()
            throw error
        }
    }

    /// In `.exifOnly` mode, orientation and mirroring of a still connection become the EXIF
    /// orientation tag (pixel rotation, the default, is in StillRotationTests).
    @Test func orientationToEXIF() async throws {
        let rig = try Self.runningStillRig("Orientation", .init(.yuyv, width: 320, height: 240))
        defer { rig.session.stopRunning(); rig.uninstall() }
        let still = rig.still
        still.outputSettings.orientationMode = .exifOnly
        let c = try #require(still.connection(with: .video))
        let plain = try #require(try await still.captureStillImage(from: c).jpegData)
        #expect(TestJPEG.exifOrientation(plain) == nil)
        for (o, mirrored, tag) in [(VideoOrientation.portrait, false, 6), (.landscapeLeft, false, 3), (.portraitUpsideDown, true, 7)] {
            c.videoOrientation = o
            c.isVideoMirrored = mirrored
            let data = try #require(try await still.captureStillImage(from: c).jpegData)
            #expect(TestJPEG.exifOrientation(data) == tag, "\(o) mirrored \(mirrored)")
        }
    }

    /// A still before start, or from another output's connection, fails with a clear error.
    @Test func stillMisuse() async throws {
        let rig = try VirtualSessionRig("Misuse", modes: [.init(.yuyv, width: 320, height: 240)], outputs: [.still])
        defer { rig.uninstall() }
        let (session, still) = (rig.session, rig.still)
        let c = try #require(still.connection(with: .video))
        await #expect(throws: CaptureError.self) { _ = try await still.captureStillImage(from: c) }
        do {
            _ = try await still.captureStillImage(from: c)
        } catch {
            #expect(error.code == .invalidState)
        }
        // A second input of the same media type cannot be added; neither can a second still output.
        let other = try InstalledCamera("Misuse 2", modes: [.init(.yuyv, width: 320, height: 240)], position: .front)
        defer { other.uninstall() }
        #expect(!session.canAddInput(try other.input()))
        #expect(!session.canAddOutput(CaptureStillImageOutput()))
    }

    /// Unplugging: the session posts deviceDisconnected, stops, fails a pending still with
    /// `.disconnected`, and can run again after the camera comes back.
    @Test func disconnectMidStream() async throws {
        let rig = try VirtualSessionRig(
            "Unplug", modes: [.init(.yuyv, width: 320, height: 240, frameRates: [30])], outputs: [.still, .video])
        defer { rig.uninstall() }
        let (cam, session, still, collector) = (rig.camera, rig.session, rig.still, rig.collector)
        let events = EventLog(session)
        try session.start()
        #expect(collector.wait(for: 3, timeout: 5))
        cam.stall(for: nil)
        let pending = Task { try await still.captureStillImage(from: still.connection(with: .video)!) }
        _ = await eventually { still.isCapturingStillImage }
        cam.disconnect()
        let result = await pending.result
        #expect(throws: CaptureError.self) { try result.get() }
        if case .failure(let e as CaptureError) = result { #expect(e.code == .disconnected) }
        #expect(events.wait { if case .deviceDisconnected = $0 { true } else { false } })
        #expect(events.wait { if case .didStopRunning = $0 { true } else { false } })
        #expect(!session.isRunning)
        cam.resume()
        cam.reconnect()
        let before = collector.count
        try session.start()
        #expect(collector.wait(for: before + 3, timeout: 5), "no frames after reconnecting")
        session.stopRunning()
    }

    /// A still never waits forever on a camera that stopped delivering: it fails with `.timedOut`
    /// after max(5 s, 20 frame intervals), the session keeps running, and stills work again
    /// once frames come back.
    @Test func stillOnStalledCameraTimesOut() async throws {
        let rig = try Self.runningStillRig("Stalled still", .init(.yuyv, width: 320, height: 240, frameRates: [30]))
        defer { rig.session.stopRunning(); rig.uninstall() }
        let (cam, session, still) = (rig.camera, rig.session, rig.still)
        let connection = try #require(still.connection(with: .video))
        _ = try await still.captureStillImage(from: connection)
        cam.stall(for: nil)
        // Frames already on their way are taken (and dropped) before the capture below.
        try await Task.sleep(for: .milliseconds(300))
        let start = ContinuousClock.now
        do throws(CaptureError) {
            _ = try await still.captureStillImage(from: connection)
            Issue.record("a stalled camera delivered a still")
        } catch {
            #expect(error.code == .timedOut, "\(error)")
        }
        let waited = ContinuousClock.now - start
        #expect(waited >= .milliseconds(4500) && waited < .seconds(15), "waited \(waited)")
        #expect(session.isRunning && !still.isCapturingStillImage)
        cam.resume()
        #expect(try await still.captureStillImage(from: connection).jpegData != nil)
    }

    /// While the app holds every buffer of the camera (here a video data output that keeps its
    /// frames), a still waits past its time-out instead of blaming the device, and is taken from
    /// the first frame once a buffer goes back. (Under load, a slow delegate that keeps late
    /// frames starved a still into `.timedOut` before.)
    @Test func stillWaitsWhileTheAppHoldsEveryBuffer() async throws {
        let rig = try VirtualSessionRig(
            "Held still", modes: [.init(.yuyv, width: 320, height: 240, frameRates: [30])], outputs: [.video, .still],
            discardsLate: false)
        defer { rig.uninstall() }
        let (session, still, collector) = (rig.session, rig.still, rig.collector)
        collector.holdAll = true
        try session.start()
        defer { session.stopRunning() }
        let connection = try #require(still.connection(with: .video))
        // Dry: the device reports frames it had nowhere to write.
        _ = await eventually { collector.drops.contains { $0.reason == .outOfBuffers } }
        #expect(collector.drops.contains { $0.reason == .outOfBuffers }, "the camera never ran dry: \(collector.drops)")
        let result = Locked<(sample: SampleBuffer?, error: CaptureError?, at: ContinuousClock.Instant)?>(nil)
        let asked = ContinuousClock.now
        still.captureStillImageAsynchronously(from: connection) { sample, error in
            result.withLock { $0 = (sample, error, .now) }
        }
        // Past the 5 s time-out: still waiting.
        try await Task.sleep(for: .milliseconds(6000))
        #expect(
            result.withLock { $0 == nil } && still.isCapturingStillImage,
            "gave up while the app held the buffers: \(String(describing: result.withLock { $0?.error }))")
        let released = ContinuousClock.now
        collector.releaseHeld()
        _ = await eventually(timeout: 5) { result.withLock { $0 != nil } }
        let got = try #require(result.withLock { $0 }, "no still \(ContinuousClock.now - asked) after asking")
        #expect(got.error == nil && got.sample?.jpegData != nil, "\(String(describing: got.error))")
        #expect(got.at - released < .seconds(2), "the still came \(got.at - released) after a buffer went back")
    }

    /// A damaged frame (truncated, empty, garbled) does not fail a still: the capture skips it
    /// and takes the next frame that encodes. A camera that sends only damaged frames fails the
    /// capture with `.corruptFrame` once the time-out passes, not with a bare `.timedOut`.
    @Test(arguments: [PixelFormat.mjpeg, .yuyv])
    func stillSkipsDamagedFrames(format: PixelFormat) async throws {
        let rig = try Self.runningStillRig("Damaged still \(format)", .init(format, width: 320, height: 240, frameRates: [30]))
        defer { rig.session.stopRunning(); rig.uninstall() }
        let (cam, session, still) = (rig.camera, rig.session, rig.still)
        let connection = try #require(still.connection(with: .video))
        _ = try await still.captureStillImage(from: connection)

        // The capture waits on a quiet camera whose next frames are damaged.
        func captureAfterDamage(_ damage: [VirtualCamera.FrameDamage]) async throws -> Result<SampleBuffer, CaptureError> {
            cam.stall(for: nil)
            try await Task.sleep(for: .milliseconds(300))
            for d in damage { cam.injectDamagedFrame(d) }
            let task = Task { () -> Result<SampleBuffer, CaptureError> in
                do throws(CaptureError) { return .success(try await still.captureStillImage(from: connection)) } catch {
                    return .failure(error)
                }
            }
            _ = await eventually { still.isCapturingStillImage }
            cam.resume()
            return await task.value
        }
        let damagedBefore = cam.statistics.framesDamaged
        let sample = try await captureAfterDamage(VirtualCamera.FrameDamage.allCases).get()
        #expect(cam.statistics.framesDamaged >= damagedBefore + 2)
        let jpeg = try #require(sample.jpegData)
        let image = try #require(TestJPEG.decode(jpeg), "the still does not decode")
        #expect(image.width == 320 && image.height == 240)
        if format == .mjpeg {
            // Garbled MJPEG is skipped too: the still is a whole frame, its counter legible.
            #expect(VirtualCamera.frameNumber(inJPEG: jpeg) == UInt32(truncatingIfNeeded: sample.sequenceNumber))
        }

        let start = ContinuousClock.now
        switch try await captureAfterDamage(Array(repeating: .empty, count: 400)) {
        case .success: Issue.record("a still from an empty frame")
        case .failure(let error):
            #expect(error.code == .corruptFrame, "\(error)")
            #expect(error.message.contains("undamaged"), "\(error)")
        }
        #expect(ContinuousClock.now - start >= .milliseconds(4500))
        #expect(session.isRunning)
    }

    /// A still output released with a capture pending (the app dropped it and its session)
    /// still calls the completion, with `.cancelled`, without waiting for the timeout.
    @Test func releasedOutputCancelsPendingStill() throws {
        let camera = try InstalledCamera("Released still", modes: [.init(.yuyv, width: 320, height: 240, frameRates: [30])])
        defer { camera.uninstall() }
        let (cam, device) = (camera.camera, camera.device)
        let done = DispatchSemaphore(value: 0)
        let outcome = StillOutcome()
        weak var released: CaptureStillImageOutput?
        do {
            let session = CaptureSession()
            session.addInput(try CaptureDeviceInput(device: device))
            let still = CaptureStillImageOutput()
            released = still
            session.addOutput(still)
            // Stalled before it starts: no frame can answer the still (stalled after the start, a
            // first frame could, under TSan's slowness once).
            cam.stall(for: nil)
            try session.start()
            let connection = try #require(still.connection(with: .video))
            still.captureStillImageAsynchronously(from: connection) { sample, error in
                outcome.set(sample != nil, error?.code)
                done.signal()
            }
            #expect(still.isCapturingStillImage)
        }
        // The capture thread lets go of its routes as it ends, which may lag on a loaded machine.
        waitUntil(timeout: 5) { released == nil }
        #expect(released == nil, "the output outlived its session and the app's reference")
        #expect(done.wait(timeout: .now() + 3) == .success, "the completion of a released output never ran")
        #expect(outcome.get() == (false, .cancelled))
        cam.resume()
    }

    /// A fatal stall is reported as deviceStalled (not a hang) and frames resume after it.
    @Test func stallIsReported() throws {
        let rig = try VirtualSessionRig("Stall", modes: [.init(.yuyv, width: 320, height: 240, frameRates: [30])])
        defer { rig.uninstall() }
        let (cam, session, collector) = (rig.camera, rig.session, rig.collector)
        let events = EventLog(session)
        try session.start()
        defer { session.stopRunning() }
        #expect(collector.wait(for: 3, timeout: 5))
        cam.stall(for: .seconds(3))
        #expect(events.wait(timeout: 8) { if case .deviceStalled = $0 { true } else { false } })
        let n = collector.count
        #expect(collector.wait(for: n + 3, timeout: 8))
        #expect(events.wait { if case .deviceResumed = $0 { true } else { false } })
    }

    /// Corrupt frames and driver-style gaps come out as drops with the right reasons and counts.
    @Test func corruptAndDroppedFrames() throws {
        let rig = try VirtualSessionRig(
            "Faults", modes: [.init(.yuyv, width: 320, height: 240, frameRates: [60])], discardsLate: false)
        defer { rig.uninstall() }
        let (cam, session, collector) = (rig.camera, rig.session, rig.collector)
        try session.start()
        #expect(collector.wait(for: 5, timeout: 5))
        func dropped(_ reason: DropReason) -> Int { collector.drops.filter { $0.reason == reason }.reduce(0) { $0 + $1.count } }
        cam.injectCorruptFrame()
        waitUntil { dropped(.corrupt) >= 1 }
        cam.injectDroppedFrames(7)
        waitUntil { dropped(.discontinuity) >= 7 }
        // A few frames after the gap, then stop and let the delegate's queue drain.
        collector.wait(for: collector.count + 3, timeout: 10)
        session.stopRunning()
        collector.queue.sync {}
        let drops = collector.drops
        #expect(drops.filter { $0.reason == .corrupt }.reduce(0) { $0 + $1.count } == 1, "\(drops)")
        #expect(drops.filter { $0.reason == .discontinuity }.reduce(0) { $0 + $1.count } == 7, "\(drops)")
        // Every frame produced is delivered or reported.
        let seqs = collector.sequences
        let reported = drops.reduce(0) { $0 + $1.count }
        #expect(Int(seqs.last! - seqs.first!) + 1 == seqs.count + reported)
    }

    /// Seed 002: a still saved to the album under a temporary HOME is complete and decodable.
    @Test func saveToAlbum() async throws {
        let home = FileManager.default.temporaryDirectory.appendingPathComponent("album-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: home) }
        let library = PhotoLibrary(directory: home.appendingPathComponent("Pictures"))
        let rig = try VirtualSessionRig("Album", modes: [.init(.yuyv, width: 640, height: 480)], outputs: [.still])
        defer { rig.uninstall() }
        try rig.session.start()
        defer { rig.session.stopRunning() }
        let jpeg = try #require(try await rig.still.captureStillImage(from: rig.still.connection(with: .video)!).jpegData)
        let url = try await library.save(jpeg: jpeg, metadata: nil)
        let written = try Data(contentsOf: url)
        let image = try #require(TestJPEG.decode(written))
        #expect(image.width == 640 && image.height == 480)
        #expect(url.deletingLastPathComponent().path == home.appendingPathComponent("Pictures").path)
    }
}

final class FrameStore: @unchecked Sendable {
    private let lock = NSLock()
    private var frames: [UInt64: Data] = [:]
    func put(_ k: UInt64, _ d: Data) { lock.withLock { frames[k] = d } }
    func get(_ k: UInt64) -> Data? { lock.withLock { frames[k] } }
}

/// What a still's completion handler got (it runs on the output's queue).
private final class StillOutcome: @unchecked Sendable {
    private let lock = NSLock()
    private var value: (Bool, CaptureError.Code?) = (false, nil)
    func set(_ gotSample: Bool, _ code: CaptureError.Code?) { lock.withLock { value = (gotSample, code) } }
    func get() -> (Bool, CaptureError.Code?) { lock.withLock { value } }
}
