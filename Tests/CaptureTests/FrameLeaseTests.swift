@testable import Capture
import CaptureTestSupport
import Foundation
import Testing

/// A driver buffer goes back the moment its last holder lets go: no polling, no waiting for the
/// next frame or a timeout.
@Suite struct FrameLeaseTests {
    @Test func releasingOneHeldSampleRequeuesItsBufferOnTheReleasingThread() async throws {
        let rig = try MisuseRig("Lease")
        defer { rig.uninstall() }
        let (session, _, collector) = try rig.videoSession(discardsLate: false)
        collector.holdAll = true
        let source = try rig.device.source()
        session.startRunning()
        defer { session.stopRunning() }
        let dry = await eventually(timeout: 20) { source.bufferCount > 0 && source.buffersHeldByClients == source.bufferCount }
        try #require(dry, "the app never held every buffer (\(source.buffersHeldByClients) of \(source.bufferCount))")
        // Nothing new is made meanwhile, so a buffer that goes back stays free.
        rig.camera.stall(for: nil)
        let buffers = source.bufferCount
        #expect(collector.heldCount == buffers)
        for left in stride(from: buffers - 1, through: 0, by: -1) {
            #expect(collector.releaseOldestHeld())
            // Checked at once, on this thread: the release itself queued the buffer back.
            #expect(source.buffersHeldByClients == left, "after releasing a sample, \(source.buffersHeldByClients) buffers are still out (\(left) expected)")
        }
        collector.holdAll = false
        rig.camera.resume()
        // And the camera goes on with the buffers it got back.
        let more = collector.count + 3
        #expect(await collector.eventually(frames: more))
    }

    /// Every holder inside the library gives its hold back: with a raw, a converted and a JPEG
    /// output, stills and an async sequence running, a camera that stops sending leaves no
    /// buffer out once the last frames were handed on.
    @Test func noHolderKeepsABufferOnceTheFramesAreHandedOn() async throws {
        let rig = try MisuseRig("LeaseHolders")
        defer { rig.uninstall() }
        let (session, raw, collector) = try rig.videoSession()
        let convertedFrames = FrameCollector()
        let still = CaptureStillImageOutput()
        // A session has one video data output; the converted and JPEG ones are frame consumers.
        let consumerConverted = CaptureVideoDataOutput(frameConsumer: ())
        consumerConverted.videoSettings = .init(pixelFormat: .bgra32)
        consumerConverted.setSampleBufferDelegate(convertedFrames, queue: convertedFrames.queue)
        let consumerJPEG = CaptureVideoDataOutput(frameConsumer: ())
        consumerJPEG.videoSettings = .init(jpeg: .init(quality: 80))
        #expect(session.addFrameConsumer(consumerConverted))
        #expect(session.addFrameConsumer(consumerJPEG))
        #expect(session.canAddOutput(still))
        session.addOutput(still)
        let source = try rig.device.source()
        session.startRunning()
        defer { session.stopRunning() }
        let stream = Task {
            var n = 0
            for await s in consumerJPEG.sampleBuffers() {
                if s.jpegData != nil { n += 1 }
                if n >= 10 { break }
            }
            return n
        }
        #expect(await collector.eventually(frames: 10))
        let connection = try #require(still.connections.first)
        for _ in 0..<3 { _ = try await still.captureStillImage(from: connection) }
        #expect(await stream.value == 10)
        #expect(await convertedFrames.eventually(frames: 10))
        rig.camera.stall(for: nil)
        let settled = await eventually(timeout: 10) { source.buffersHeldByClients == 0 }
        #expect(settled, "\(source.buffersHeldByClients) buffers still out after the camera stopped sending")
        #expect(raw.statistics.delivered >= 10)
    }
}
