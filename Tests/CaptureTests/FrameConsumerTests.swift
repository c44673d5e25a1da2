import CaptureSystem
import Foundation
import Testing
@testable import Capture
import CaptureTestSupport

/// The extension point the preview, server and recorder products use: consumers' ports beside
/// the app's outputs, each with its own product, the JPEG encoded once for all of them.
@Suite struct FrameConsumerTests {
    /// Notes the sequence numbers and formats it gets.
    final class Taker: FrameConsumer, @unchecked Sendable {
        let seen = Locked<[(UInt64, PixelFormat?)]>([])
        func consume(_ sample: SampleBuffer, from connection: CaptureConnection) {
            let f = (sample.sequenceNumber, sample.pixelFormat)
            seen.withLock { $0.append(f) }
        }
        func consumeDrop(_ drop: DroppedFrames, from connection: CaptureConnection) {}
        var sequences: [UInt64] { seen.withLock { $0.map(\.0) } }
    }

    @Test func portsGetFramesBesideTheOutputsAndShareEncodes() async throws {
        let rig = try MisuseRig("Consumers", .init(.yuyv, width: 320, height: 240, frameRates: [30]))
        defer { rig.uninstall() }
        // The app: a raw video data output that keeps every frame, and a still output.
        let (session, video, appFrames) = try rig.videoSession(discardsLate: false)
        let still = CaptureStillImageOutput()
        still.outputSettings = .init(quality: 75)
        session.addOutput(still)
        // Three consumers: two want JPEG at quality 75, one raw frames.
        let a = Taker(), b = Taker(), raw = Taker()
        let ports = [FrameConsumerPort(a, jpegQuality: 75), FrameConsumerPort(b, jpegQuality: 75), FrameConsumerPort(raw)]
        for p in ports { #expect(session.addFrameConsumer(p)) }
        #expect(!session.addFrameConsumer(ports[0]), "a port added twice")
        #expect(session.outputs.count == 2 && session.consumerPorts.count == 3)
        // The app can still add its own outputs: ports do not take their kind's place.
        #expect(!session.canAddOutput(CaptureVideoDataOutput()))
        #expect(ports[0].connection(with: .video) != nil)

        try session.start()
        #expect(await appFrames.eventually(frames: 45, timeout: 15))
        let connection = try #require(still.connection(with: .video))
        let sample = try await still.captureStillImage(from: connection)
        #expect(TestJPEG.decode(try #require(sample.jpegData)) != nil)
        let encodes = session.stageJPEGEncodes
        let queued = Int(rig.camera.statistics.framesQueued)
        session.stopRunning()
        appFrames.queue.sync {}

        // One encode per frame for both JPEG ports and the still.
        #expect(still.ownEncodes == 0)
        #expect(encodes <= queued, "\(encodes) encodes for \(queued) frames")
        #expect(a.sequences.count >= 40 && raw.sequences.count >= 40, "A \(a.sequences.count), raw \(raw.sequences.count)")
        // The same JPEGs, in order, to both; JPEG or raw as each port asked.
        #expect(a.sequences == b.sequences)
        #expect(a.seen.withLock { $0.allSatisfy { $0.1 == .jpeg } } && raw.seen.withLock { $0.allSatisfy { $0.1 == .yuyv } })
        try appFrames.expectEveryFrameOnce()
        // Ports see the same frames as the app.
        #expect(Set(a.sequences).isSubset(of: Set(appFrames.sequences)))
        #expect(video.statistics.delivered == appFrames.count)
        withExtendedLifetime(ports) {}
    }
}
