import CaptureBackend
import CaptureSystem
import Foundation
import Synchronization
import Testing
@testable import Capture
import CaptureTestSupport

/// A frame is encoded to JPEG once for every consumer of the same quality: a JPEG video data
/// output and a still output at that quality share the encode; the still only adds its EXIF.
@Suite struct SharedEncodeTests {
    private static func session(_ rig: MisuseRig, videoQuality: Int, stillQuality: Int)
        throws -> (CaptureSession, CaptureVideoDataOutput, CaptureStillImageOutput, FrameCollector)
    {
        let (session, video, collector) = try rig.videoSession(discardsLate: false)
        video.videoSettings = .init(jpeg: .init(quality: videoQuality))
        let still = CaptureStillImageOutput()
        still.outputSettings = .init(quality: stillQuality)
        session.addOutput(still)
        return (session, video, still, collector)
    }

    @Test func oneEncodePerFrameForAStillAndAJPEGStreamAtOneQuality() async throws {
        let rig = try MisuseRig("Shared encode")
        defer { rig.uninstall() }
        let (session, video, still, collector) = try Self.session(rig, videoQuality: 80, stillQuality: 80)
        try session.start()
        #expect(await collector.eventually(frames: 5))
        let connection = try #require(still.connection(with: .video))
        // Tagged, not turned: a still that turns its pixels makes its own turned encode instead.
        still.outputSettings.orientationMode = .exifOnly
        connection.videoOrientation = .portrait
        for _ in 0..<5 {
            let sample = try await still.captureStillImage(from: connection)
            let jpeg = try #require(sample.jpegData)
            let image = try #require(TestJPEG.decode(jpeg), "the still does not decode")
            #expect(image.width == 320 && image.height == 240)
            #expect(ColorBars.mismatches(image, row: 180) == [])
            #expect(TestJPEG.exifOrientation(jpeg) == 6, "the still lost its orientation")
        }
        let n = collector.count
        #expect(await collector.eventually(frames: n + 5))
        // Read in this order: a frame is counted as encoded before it is delivered, and the camera
        // queues it before it is encoded. (The stop delivers what the encoders still hold.)
        let delivered = collector.count
        let encodes = session.stageJPEGEncodes
        let queued = Int(rig.camera.statistics.framesQueued)
        session.stopRunning()
        collector.queue.sync {}
        #expect(still.ownEncodes == 0, "the still encoded \(still.ownEncodes) frames itself")
        // One encode per frame handed on, however many consumers: never more than the camera queued.
        #expect(encodes > 0 && encodes <= queued, "\(encodes) encodes for \(queued) frames")
        #expect(delivered <= encodes, "\(delivered) JPEG frames delivered from \(encodes) encodes")
        let late = video.statistics.dropped[.frameWasLate] ?? 0
        #expect(collector.count + late + 2 >= encodes, "encodes \(encodes), delivered \(collector.count), late \(late)")
        // The stream's frames are JPEGs of the camera's size.
        #expect(collector.sequences.count > 5)
    }

    /// A still that turns its pixels does not take the stream's JPEG: it encodes its raw frame
    /// turned (one encode), cheaper than transforming the shared JPEG.
    @Test func aTurnedStillEncodesItsOwnTurnedFrame() async throws {
        let rig = try MisuseRig("Shared turn")
        defer { rig.uninstall() }
        let (session, _, still, collector) = try Self.session(rig, videoQuality: 80, stillQuality: 80)
        try session.start()
        defer { session.stopRunning() }
        #expect(await collector.eventually(frames: 3))
        let connection = try #require(still.connection(with: .video))
        connection.videoOrientation = .portrait
        let jpeg = try #require(try await still.captureStillImage(from: connection).jpegData)
        let image = try #require(TestJPEG.decode(jpeg))
        #expect(image.width == 240 && image.height == 320)
        #expect(ColorBars.mismatches(image, turnedBy: 6, row: 180, width: 320, height: 240) == [])
        #expect(TestJPEG.exifOrientation(jpeg) == 1)
        #expect(still.ownEncodes == 1, "the still encoded \(still.ownEncodes) frames itself")
    }

    /// The app holds every JPEG the stream handed it: a still at the stream's quality still
    /// gets its frame (a sample of its own), instead of timing out.
    @Test func aStillDoesNotStarveWhenTheAppHoldsEveryStreamJPEG() async throws {
        let rig = try MisuseRig("Shared starve")
        defer { rig.uninstall() }
        let (session, _, still, collector) = try Self.session(rig, videoQuality: 80, stillQuality: 80)
        collector.holdAll = true
        try session.start()
        defer { session.stopRunning() }
        // The stream's six reused JPEG samples are all held now (later frames are dropped).
        #expect(await collector.eventually(frames: 6))
        try await Task.sleep(for: .milliseconds(200))
        let connection = try #require(still.connection(with: .video))
        let requested = CaptureTime.now()
        let sample = try await still.captureStillImage(from: connection)
        #expect(TestJPEG.decode(try #require(sample.jpegData)) != nil)
        // Starving would end in the still's 5 s time-out (thrown above); its frame was captured
        // well within it. (The camera's clock, not the test's: a loaded run once resumed this
        // test 53 s after the still had its frame.)
        let waited = Double(sample.presentationTimeStamp - requested) / 1e9
        #expect(waited < 4, "the still's frame was captured \(waited) s after the request")
        #expect(still.ownEncodes == 0)
        collector.releaseHeld()
    }

    @Test func aStillAtAnotherQualityEncodesItself() async throws {
        let rig = try MisuseRig("Own encode")
        defer { rig.uninstall() }
        let (session, _, still, collector) = try Self.session(rig, videoQuality: 60, stillQuality: 95)
        try session.start()
        defer { session.stopRunning() }
        #expect(await collector.eventually(frames: 3))
        let connection = try #require(still.connection(with: .video))
        for _ in 0..<3 {
            let sample = try await still.captureStillImage(from: connection)
            #expect(TestJPEG.decode(try #require(sample.jpegData)) != nil)
        }
        #expect(still.ownEncodes == 3)
    }

    /// The JPEG stream and a delegate swap or removal go on as before: the stage delivers to
    /// whoever wants its product now, and stops when nobody does.
    @Test func theStageFollowsTheOutputsThatWantIt() async throws {
        let rig = try MisuseRig("Stage follows")
        defer { rig.uninstall() }
        let (session, video, _, collector) = try Self.session(rig, videoQuality: 70, stillQuality: 70)
        try session.start()
        defer { session.stopRunning() }
        #expect(await collector.eventually(frames: 3))
        #expect(collector.sequences.count >= 3)
        // Back to raw frames: the delegate gets YUYV again.
        let formats = FormatRecorder()
        collector.onFrame = { formats.add($0.pixelFormat) }
        video.videoSettings = .init()
        let n = collector.count
        #expect(await collector.eventually(frames: n + 5))
        #expect(formats.all.suffix(3).allSatisfy { $0 == .yuyv }, "\(formats.all)")
        video.videoSettings = .init(jpeg: .init(quality: 70))
        let m = collector.count
        #expect(await collector.eventually(frames: m + 5))
        #expect(formats.all.suffix(3).allSatisfy { $0 == .jpeg }, "\(formats.all)")
        session.removeOutput(video)
        let encodes = session.stageJPEGEncodes
        try await Task.sleep(for: .milliseconds(300))
        #expect(session.stageJPEGEncodes <= encodes + 2, "the stage went on encoding for nobody")
    }

    /// What an output takes is decided when its routes are built: a settings change made from
    /// its own delegate callback, every few frames, rebuilds them without blocking delivery, and the
    /// frames that follow come in the new product.
    @Test func settingsChangedFromTheDelegateTakeEffectWithoutBlocking() async throws {
        let rig = try MisuseRig("Settings from the delegate")
        defer { rig.uninstall() }
        let (session, video, collector) = try rig.videoSession()
        let formats = FormatRecorder()
        let seen = Atomic<Int>(0)
        collector.onFrame = { [video] s in
            formats.add(s.pixelFormat)
            // Every third frame flips between raw frames and JPEG.
            let n = seen.add(1, ordering: .relaxed).newValue
            if n % 3 == 0 { video.videoSettings = n % 6 == 0 ? .init() : .init(jpeg: .init(quality: 75)) }
        }
        try session.start()
        #expect(await collector.eventually(frames: 30, timeout: 30))
        session.stopRunning()
        let all = formats.all
        #expect(all.contains(.yuyv) && all.contains(.jpeg), "\(all)")
        // Each change shows within a few frames: no run of one format outlasts three changes.
        var run = 0
        var longest = 0
        for (a, b) in zip(all, all.dropFirst()) {
            run = a == b ? run + 1 : 0
            longest = max(longest, run)
        }
        #expect(longest < 9, "\(all)")
    }

    /// An MJPEG camera's frames are made complete once per frame for every JPEG consumer: a JPEG
    /// video data output and a JPEG frame consumer get the same bytes, and a still takes them and
    /// adds its EXIF.
    @Test func anMJPEGFrameIsCompletedOnceForEveryJPEGConsumer() async throws {
        // 15 fps and newest-wins consumers: light enough for a loaded machine under a sanitizer.
        let rig = try MisuseRig("Shared MJPEG", .init(.mjpeg, width: 320, height: 240, frameRates: [15], omitsHuffmanTables: true))
        defer { rig.uninstall() }
        let (session, video, collector) = try rig.videoSession()
        video.videoSettings = .init(jpeg: .init(quality: 80))
        // Per frame, what each consumer got: the bytes and which sample held them (the app gets
        // the face of the sample the port gets).
        let bytes = Locked<[UInt64: [(Data, ObjectIdentifier)]]>([:])
        let keep: @Sendable (SampleBuffer) -> Void = { s in
            if let d = s.jpegData {
                bytes.withLock { $0[s.sequenceNumber, default: []].append((d, ObjectIdentifier(s.faceOwner ?? s))) }
            }
        }
        final class Port: FrameConsumer, @unchecked Sendable {
            let keep: @Sendable (SampleBuffer) -> Void
            let count = Locked(0)
            init(_ keep: @escaping @Sendable (SampleBuffer) -> Void) { self.keep = keep }
            func consume(_ sample: SampleBuffer, from connection: CaptureConnection) {
                keep(sample)
                count.withLock { $0 += 1 }
            }
            func consumeDrop(_ drop: DroppedFrames, from connection: CaptureConnection) {}
        }
        let consumer = Port(keep)
        let port = FrameConsumerPort(consumer, jpegQuality: 60)
        #expect(session.addFrameConsumer(port))
        let still = CaptureStillImageOutput()
        session.addOutput(still)
        collector.onFrame = keep
        try session.start()
        #expect(await collector.eventually(frames: 6, timeout: 20))
        #expect(await eventually(timeout: 20) { consumer.count.withLock { $0 } >= 6 })
        let connection = try #require(still.connection(with: .video))
        connection.videoOrientation = .portrait
        let sample = try await still.captureStillImage(from: connection)
        let stillJPEG = try #require(sample.jpegData)
        #expect(stillJPEG.withUnsafeBytes { MJPEG.hasHuffmanTables($0) })
        #expect(TestJPEG.exifOrientation(stillJPEG) == 1, "the still was not turned upright")
        #expect(TestJPEG.decode(stillJPEG) != nil)
        let completions = session.mjpegCompletions
        let queued = Int(rig.camera.statistics.framesQueued)
        session.stopRunning()
        collector.queue.sync {}
        #expect(completions > 0 && completions <= queued, "\(completions) completions for \(queued) frames")
        #expect(still.ownEncodes == 0)
        // Every frame both consumers got was made once: the same sample, the same bytes.
        let both = bytes.withLock { $0 }.filter { $0.value.count == 2 }
        #expect(both.count >= 3, "\(both.count) frames reached both consumers")
        for (seq, pair) in both {
            #expect(pair[0].1 == pair[1].1, "frame \(seq) was completed twice (two samples)")
            #expect(pair[0].0 == pair[1].0, "frame \(seq) differs between the consumers")
            #expect(pair[0].0.withUnsafeBytes { MJPEG.hasHuffmanTables($0) }, "frame \(seq) was not completed")
        }
    }
}

final class FormatRecorder: Sendable {
    private let list = Locked<[PixelFormat?]>([])
    func add(_ f: PixelFormat?) { list.withLock { $0.append(f) } }
    var all: [PixelFormat?] { list.withLock { $0 } }
}
