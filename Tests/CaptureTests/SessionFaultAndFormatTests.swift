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
        let cam = VirtualCamera(
            name: "MJPEG \(omitTables)", position: .back,
            formats: [.init(.mjpeg, width: 640, height: 480, frameRates: [30], omitsHuffmanTables: omitTables)])
        VirtualCamera.install(cam)
        defer { VirtualCamera.uninstall(cam) }
        let device = try #require(CaptureDevice.devices(for: .video).first { $0.uniqueID == cam.uniqueID })
        let session = CaptureSession()
        session.addInput(try CaptureDeviceInput(device: device))
        let still = CaptureStillImageOutput()
        let video = CaptureVideoDataOutput()
        let frames = FrameStore()
        let collector = FrameCollector()
        collector.onFrame = { s in frames.put(s.sequenceNumber, s.data()) }
        video.setSampleBufferDelegate(collector, queue: collector.queue)
        video.alwaysDiscardsLateVideoFrames = false
        session.addOutput(still)
        session.addOutput(video)
        try session.start()
        defer { session.stopRunning() }
        let connection = try #require(still.connection(with: .video))
        let sample = try await still.captureStillImage(from: connection)
        let jpeg = try #require(sample.jpegData)
        #expect(collector.wait(for: collector.count + 2, timeout: 5))
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
        let cam = VirtualCamera(name: "Convert \(from)-\(to)", position: .back, formats: [.init(from, width: 320, height: 240)])
        VirtualCamera.install(cam)
        defer { VirtualCamera.uninstall(cam) }
        let device = try #require(CaptureDevice.devices(for: .video).first { $0.uniqueID == cam.uniqueID })
        let session = CaptureSession()
        session.addInput(try CaptureDeviceInput(device: device))
        let video = CaptureVideoDataOutput()
        video.videoSettings = .init(pixelFormat: to)
        let collector = FrameCollector()
        let got = FrameStore()
        collector.onFrame = { s in
            if s.pixelFormat == to, s.dimensions == VideoDimensions(width: 320, height: 240) { got.put(0, s.data()) }
        }
        video.setSampleBufferDelegate(collector, queue: collector.queue)
        session.addOutput(video)
        try session.start()
        #expect(collector.wait(for: 3, timeout: 5))
        session.stopRunning()
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
        let cam = VirtualCamera(name: "Rate", position: .back, formats: [.init(.yuyv, width: 320, height: 240, frameRates: [30, 15])])
        VirtualCamera.install(cam)
        defer { VirtualCamera.uninstall(cam) }
        let device = try #require(CaptureDevice.devices(for: .video).first { $0.uniqueID == cam.uniqueID })
        let session = CaptureSession()
        session.addInput(try CaptureDeviceInput(device: device))
        let video = CaptureVideoDataOutput()
        let collector = FrameCollector()
        let kept = FrameStore()
        collector.onFrame = { s in kept.put(0, s.data()) }
        video.setSampleBufferDelegate(collector, queue: collector.queue)
        session.addOutput(video)
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

    /// Installs `cam` and starts a session with an input on it and a still output. The caller
    /// stops the session and uninstalls the camera.
    private static func runningStillSession(_ cam: VirtualCamera) throws -> (CaptureSession, CaptureStillImageOutput) {
        VirtualCamera.install(cam)
        do {
            let device = try #require(CaptureDevice.device(withUniqueID: cam.uniqueID))
            let session = CaptureSession()
            session.addInput(try CaptureDeviceInput(device: device))
            let still = CaptureStillImageOutput()
            session.addOutput(still)
            try session.start()
            return (session, still)
        } catch {
            VirtualCamera.uninstall(cam)
            throw error
        }
    }

    /// In `.exifOnly` mode, orientation and mirroring of a still connection become the EXIF
    /// orientation tag (pixel rotation, the default, is in StillRotationTests).
    @Test func orientationToEXIF() async throws {
        let cam = VirtualCamera(name: "Orientation", position: .back, formats: [.init(.yuyv, width: 320, height: 240)])
        let (session, still) = try Self.runningStillSession(cam)
        defer { session.stopRunning(); VirtualCamera.uninstall(cam) }
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
        let cam = VirtualCamera(name: "Misuse", position: .back, formats: [.init(.yuyv, width: 320, height: 240)])
        VirtualCamera.install(cam)
        defer { VirtualCamera.uninstall(cam) }
        let device = try #require(CaptureDevice.devices(for: .video).first { $0.uniqueID == cam.uniqueID })
        let session = CaptureSession()
        session.addInput(try CaptureDeviceInput(device: device))
        let still = CaptureStillImageOutput()
        session.addOutput(still)
        let c = try #require(still.connection(with: .video))
        await #expect(throws: CaptureError.self) { _ = try await still.captureStillImage(from: c) }
        do {
            _ = try await still.captureStillImage(from: c)
        } catch {
            #expect(error.code == .invalidState)
        }
        // A second input of the same media type cannot be added; neither can a second still output.
        let other = VirtualCamera(name: "Misuse 2", position: .front, formats: [.init(.yuyv, width: 320, height: 240)])
        VirtualCamera.install(other)
        defer { VirtualCamera.uninstall(other) }
        let d2 = try #require(CaptureDevice.devices(for: .video).first { $0.uniqueID == other.uniqueID })
        #expect(!session.canAddInput(try CaptureDeviceInput(device: d2)))
        #expect(!session.canAddOutput(CaptureStillImageOutput()))
    }

    /// Unplugging: the session posts deviceDisconnected, stops, fails a pending still with
    /// `.disconnected`, and can run again after the camera comes back.
    @Test func disconnectMidStream() async throws {
        let cam = VirtualCamera(name: "Unplug", position: .back, formats: [.init(.yuyv, width: 320, height: 240, frameRates: [30])])
        VirtualCamera.install(cam)
        defer { VirtualCamera.uninstall(cam) }
        let device = try #require(CaptureDevice.devices(for: .video).first { $0.uniqueID == cam.uniqueID })
        let session = CaptureSession()
        let events = EventLog(session)
        session.addInput(try CaptureDeviceInput(device: device))
        let still = CaptureStillImageOutput()
        let video = CaptureVideoDataOutput()
        let collector = FrameCollector()
        video.setSampleBufferDelegate(collector, queue: collector.queue)
        session.addOutput(still)
        session.addOutput(video)
        try session.start()
        #expect(collector.wait(for: 3, timeout: 5))
        cam.stall(for: nil)
        let pending = Task { try await still.captureStillImage(from: still.connection(with: .video)!) }
        try await Task.sleep(for: .milliseconds(100))
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
        let cam = VirtualCamera(name: "Stalled still", position: .back, formats: [.init(.yuyv, width: 320, height: 240, frameRates: [30])])
        let (session, still) = try Self.runningStillSession(cam)
        defer { session.stopRunning(); VirtualCamera.uninstall(cam) }
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
        let cam = VirtualCamera(name: "Held still", position: .back, formats: [.init(.yuyv, width: 320, height: 240, frameRates: [30])])
        VirtualCamera.install(cam)
        defer { VirtualCamera.uninstall(cam) }
        let device = try #require(CaptureDevice.device(withUniqueID: cam.uniqueID))
        let session = CaptureSession()
        let output = CaptureVideoDataOutput()
        output.alwaysDiscardsLateVideoFrames = false
        let collector = FrameCollector()
        collector.holdAll = true
        output.setSampleBufferDelegate(collector, queue: collector.queue)
        let still = CaptureStillImageOutput()
        session.addInput(try CaptureDeviceInput(device: device))
        session.addOutput(output)
        session.addOutput(still)
        try session.start()
        defer { session.stopRunning() }
        let connection = try #require(still.connection(with: .video))
        // Dry: the device reports frames it had nowhere to write.
        let dryBy = ContinuousClock.now + .seconds(10)
        while !collector.drops.contains(where: { $0.reason == .outOfBuffers }), ContinuousClock.now < dryBy {
            try await Task.sleep(for: .milliseconds(20))
        }
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
        let doneBy = ContinuousClock.now + .seconds(5)
        while result.withLock({ $0 == nil }), ContinuousClock.now < doneBy { try await Task.sleep(for: .milliseconds(20)) }
        let got = try #require(result.withLock { $0 }, "no still \(ContinuousClock.now - asked) after asking")
        #expect(got.error == nil && got.sample?.jpegData != nil, "\(String(describing: got.error))")
        #expect(got.at - released < .seconds(2), "the still came \(got.at - released) after a buffer went back")
    }

    /// A damaged frame (truncated, empty, garbled) does not fail a still: the capture skips it
    /// and takes the next frame that encodes. A camera that sends only damaged frames fails the
    /// capture with `.corruptFrame` once the time-out passes, not with a bare `.timedOut`.
    @Test(arguments: [PixelFormat.mjpeg, .yuyv])
    func stillSkipsDamagedFrames(format: PixelFormat) async throws {
        let cam = VirtualCamera(
            name: "Damaged still \(format)", position: .back,
            formats: [.init(format, width: 320, height: 240, frameRates: [30])])
        let (session, still) = try Self.runningStillSession(cam)
        defer { session.stopRunning(); VirtualCamera.uninstall(cam) }
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
            while !still.isCapturingStillImage { try await Task.sleep(for: .milliseconds(5)) }
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
        let cam = VirtualCamera(name: "Released still", position: .back, formats: [.init(.yuyv, width: 320, height: 240, frameRates: [30])])
        VirtualCamera.install(cam)
        defer { VirtualCamera.uninstall(cam) }
        let device = try #require(CaptureDevice.devices(for: .video).first { $0.uniqueID == cam.uniqueID })
        let done = DispatchSemaphore(value: 0)
        let outcome = StillOutcome()
        weak var released: CaptureStillImageOutput?
        do {
            let session = CaptureSession()
            session.addInput(try CaptureDeviceInput(device: device))
            let still = CaptureStillImageOutput()
            released = still
            session.addOutput(still)
            try session.start()
            cam.stall(for: nil)
            let connection = try #require(still.connection(with: .video))
            still.captureStillImageAsynchronously(from: connection) { sample, error in
                outcome.set(sample != nil, error?.code)
                done.signal()
            }
            #expect(still.isCapturingStillImage)
        }
        // The capture thread lets go of its routes as it ends, which may lag on a loaded machine.
        let deadline = Date() + 5
        while released != nil && Date() < deadline { Thread.sleep(forTimeInterval: 0.005) }
        #expect(released == nil, "the output outlived its session and the app's reference")
        #expect(done.wait(timeout: .now() + 3) == .success, "the completion of a released output never ran")
        #expect(outcome.get() == (false, .cancelled))
        cam.resume()
    }

    /// A fatal stall is reported as deviceStalled (not a hang) and frames resume after it.
    @Test func stallIsReported() throws {
        let cam = VirtualCamera(name: "Stall", position: .back, formats: [.init(.yuyv, width: 320, height: 240, frameRates: [30])])
        VirtualCamera.install(cam)
        defer { VirtualCamera.uninstall(cam) }
        let device = try #require(CaptureDevice.devices(for: .video).first { $0.uniqueID == cam.uniqueID })
        let session = CaptureSession()
        let events = EventLog(session)
        session.addInput(try CaptureDeviceInput(device: device))
        let video = CaptureVideoDataOutput()
        let collector = FrameCollector()
        video.setSampleBufferDelegate(collector, queue: collector.queue)
        session.addOutput(video)
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
        let cam = VirtualCamera(name: "Faults", position: .back, formats: [.init(.yuyv, width: 320, height: 240, frameRates: [60])])
        VirtualCamera.install(cam)
        defer { VirtualCamera.uninstall(cam) }
        let device = try #require(CaptureDevice.devices(for: .video).first { $0.uniqueID == cam.uniqueID })
        let session = CaptureSession()
        session.addInput(try CaptureDeviceInput(device: device))
        let video = CaptureVideoDataOutput()
        video.alwaysDiscardsLateVideoFrames = false
        let collector = FrameCollector()
        video.setSampleBufferDelegate(collector, queue: collector.queue)
        session.addOutput(video)
        try session.start()
        #expect(collector.wait(for: 5, timeout: 5))
        cam.injectCorruptFrame()
        Thread.sleep(forTimeInterval: 0.2)
        cam.injectDroppedFrames(7)
        Thread.sleep(forTimeInterval: 0.3)
        session.stopRunning()
        Thread.sleep(forTimeInterval: 0.1)
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
        let cam = VirtualCamera(name: "Album", position: .back, formats: [.init(.yuyv, width: 640, height: 480)])
        VirtualCamera.install(cam)
        defer { VirtualCamera.uninstall(cam) }
        let device = try #require(CaptureDevice.devices(for: .video).first { $0.uniqueID == cam.uniqueID })
        let session = CaptureSession()
        session.addInput(try CaptureDeviceInput(device: device))
        let still = CaptureStillImageOutput()
        session.addOutput(still)
        try session.start()
        defer { session.stopRunning() }
        let jpeg = try #require(try await still.captureStillImage(from: still.connection(with: .video)!).jpegData)
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
