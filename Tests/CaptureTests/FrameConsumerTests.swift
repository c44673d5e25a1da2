import Foundation
import Testing
@testable import Capture
import CaptureTestSupport

/// The extension point the preview, server and recorder products use: frame consumers beside
/// the app's outputs, each with its own product and queue, none slowing the others.
@Suite struct FrameConsumerTests {
    @Test func consumersGetFramesBesideTheOutputsAndShareEncodes() async throws {
        let rig = try MisuseRig("Consumers", .init(.yuyv, width: 320, height: 240, frameRates: [30]))
        defer { rig.uninstall() }
        // The app: a raw video data output that keeps every frame, and a still output.
        let (session, video, appFrames) = try rig.videoSession(discardsLate: false)
        let still = CaptureStillImageOutput()
        still.outputSettings = .init(quality: 75)
        session.addOutput(still)
        // Three consumers: two want JPEG at quality 75 (one of them slow), one raw frames.
        func consumer(_ settings: CaptureVideoDataOutput.VideoSettings, delay: Double = 0) -> (CaptureVideoDataOutput, FrameCollector) {
            let c = CaptureVideoDataOutput(frameConsumer: ())
            c.videoSettings = settings
            let collector = FrameCollector()
            collector.delay = delay
            c.setSampleBufferDelegate(collector, queue: collector.queue)
            return (c, collector)
        }
        let (jpegA, framesA) = consumer(.init(jpeg: .init(quality: 75)))
        let (jpegB, framesB) = consumer(.init(jpeg: .init(quality: 75)), delay: 0.2)
        let (raw, rawFrames) = consumer(.init())
        for c in [jpegA, jpegB, raw] { #expect(session.addFrameConsumer(c)) }
        #expect(!session.addFrameConsumer(jpegA), "a consumer added twice")
        #expect(!session.addFrameConsumer(CaptureVideoDataOutput()), "an ordinary output is not a consumer")
        #expect(session.outputs.count == 2 && session.frameConsumers.count == 3)
        // The app can still add its own outputs: consumers do not take their kind's place.
        #expect(!session.canAddOutput(CaptureVideoDataOutput()))
        #expect(jpegA.connection(with: .video) != nil)

        try session.start()
        #expect(await appFrames.eventually(frames: 45, timeout: 15))
        let connection = try #require(still.connection(with: .video))
        let sample = try await still.captureStillImage(from: connection)
        #expect(TestJPEG.decode(try #require(sample.jpegData)) != nil)
        let encodes = session.stageJPEGEncodes
        let queued = Int(rig.camera.statistics.framesQueued)
        session.stopRunning()
        for q in [appFrames.queue, framesA.queue, framesB.queue, rawFrames.queue] { q.sync {} }

        // One encode per frame for both JPEG consumers and the still.
        #expect(still.ownEncodes == 0)
        #expect(encodes <= queued, "\(encodes) encodes for \(queued) frames")
        #expect(framesA.count >= 40 && rawFrames.count >= 40, "A \(framesA.count), raw \(rawFrames.count)")
        // The slow consumer gets the newest frames, its lost ones counted, and slows nobody.
        #expect(framesB.count < framesA.count / 2, "slow consumer: \(framesB.count)")
        let late = framesB.drops.filter { $0.reason == .frameWasLate }.reduce(0) { $0 + $1.count }
        #expect(late > 0)
        let lateA = framesA.drops.filter { $0.reason == .frameWasLate }.reduce(0) { $0 + $1.count }
        #expect(
            framesB.count + late <= framesA.count + lateA + 2, "B: \(framesB.count) + \(late) late, A: \(framesA.count) + \(lateA) late")
        try appFrames.expectEveryFrameOnce()
        // Consumers see the same frames as the app, JPEG or raw as asked.
        #expect(Set(framesA.sequences).isSubset(of: Set(appFrames.sequences)))
        #expect(jpegA.statistics.delivered == framesA.count && video.statistics.delivered == appFrames.count)
    }

    @Test func aRemovedConsumerIsNoLongerCalled() async throws {
        let rig = try MisuseRig("Consumer removed")
        defer { rig.uninstall() }
        let (session, _, appFrames) = try rig.videoSession()
        let consumer = CaptureVideoDataOutput(frameConsumer: ())
        consumer.videoSettings = .init(jpeg: .init(quality: 60))
        let frames = FrameCollector()
        consumer.setSampleBufferDelegate(frames, queue: frames.queue)
        session.addFrameConsumer(consumer)
        try session.start()
        defer { session.stopRunning() }
        #expect(await frames.eventually(frames: 5))
        session.removeFrameConsumer(consumer)
        frames.queue.sync {}
        let n = frames.count
        let m = appFrames.count
        #expect(await appFrames.eventually(frames: m + 10))
        frames.queue.sync {}
        #expect(frames.count <= n + 1, "a removed consumer got \(frames.count - n) more frames")
        #expect(session.frameConsumers.isEmpty && consumer.session == nil)
    }
}
