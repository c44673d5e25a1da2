import CaptureSystem
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
        // The newest frame may still be on its way to the delegate (it holds its buffer there too).
        let allWithTheDelegate = await eventually { collector.heldCount == buffers }
        #expect(allWithTheDelegate, "the delegate holds \(collector.heldCount) of \(buffers) buffers")
        for left in stride(from: buffers - 1, through: 0, by: -1) {
            #expect(collector.releaseOldestHeld())
            // Checked at once, on this thread: the release itself queued the buffer back.
            #expect(
                source.buffersHeldByClients == left,
                "after releasing a sample, \(source.buffersHeldByClients) buffers are still out (\(left) expected)")
        }
        collector.holdAll = false
        rig.camera.resume()
        // And the camera goes on with the buffers it got back.
        let more = collector.count + 3
        #expect(await collector.eventually(frames: more))
    }

    /// Every holder inside the library gives its hold back: with a raw output, a JPEG and a raw
    /// port whose consumers keep frames (as the server and the preview do) and stills running, a
    /// camera that stops sending leaves no buffer out once the last frames were handed on.
    @Test func noHolderKeepsABufferOnceTheFramesAreHandedOn() async throws {
        let rig = try MisuseRig("LeaseHolders")
        defer { rig.uninstall() }
        let (session, raw, collector) = try rig.videoSession()
        let still = CaptureStillImageOutput()
        // Beside the app's output: a JPEG port whose consumer keeps each JPEG until the next
        // (a hold, as the server's parts are made), and a raw port that keeps the newest frame
        // as the preview does.
        final class Keeper: FrameConsumer, @unchecked Sendable {
            /// The frame kept, the frames seen, and whether the keeper closed (keeps no more).
            let kept = Locked<(SampleBuffer?, Int, Bool)>((nil, 0, false))
            func consume(_ sample: SampleBuffer, from connection: CaptureConnection) {
                sample.hold()
                let old: SampleBuffer? = kept.withLock { k in
                    if k.2 { return sample }
                    defer { k = (sample, k.1 + 1, false) }
                    return k.0
                }
                old?.release()
            }
            func consumeDrop(_ drop: DroppedFrames, from connection: CaptureConnection) {}
            var count: Int { kept.withLock { $0.1 } }
            /// Closes: gives back the frame kept last and keeps none of those still on their way.
            func letGo() {
                let last = kept.withLock { k in
                    defer { k = (nil, k.1, true) }
                    return k.0
                }
                last?.release()
            }
        }
        let jpegKeeper = Keeper(), rawKeeper = Keeper()
        let jpegPort = FrameConsumerPort(jpegKeeper, jpegQuality: 80), rawPort = FrameConsumerPort(rawKeeper)
        #expect(session.addFrameConsumer(jpegPort))
        #expect(session.addFrameConsumer(rawPort))
        #expect(session.canAddOutput(still))
        session.addOutput(still)
        let source = try rig.device.source()
        session.startRunning()
        defer { session.stopRunning() }
        #expect(await collector.eventually(frames: 10))
        let connection = try #require(still.connections.first)
        for _ in 0..<3 { _ = try await still.captureStillImage(from: connection) }
        #expect(await eventually(timeout: 20) { jpegKeeper.count >= 10 && rawKeeper.count >= 10 })
        // The keepers let go of what they kept and keep no more, as the preview does when it closes.
        rawKeeper.letGo()
        jpegKeeper.letGo()
        rig.camera.stall(for: nil)
        let settled = await eventually(timeout: 10) { source.buffersHeldByClients == 0 }
        #expect(settled, "\(source.buffersHeldByClients) buffers still out after the camera stopped sending")
        #expect(raw.statistics.delivered >= 10)
    }

    /// A sample the delegate keeps only weakly is never reused for another frame: once the
    /// callback returns the weak reference is nil (its buffer went back), never a view showing
    /// another frame or none.
    @Test func aWeaklyKeptSampleIsNeverReused() async throws {
        let rig = try MisuseRig("LeaseWeak")
        defer { rig.uninstall() }
        final class WeakKeeper: CaptureVideoDataOutputSampleBufferDelegate, @unchecked Sendable {
            let lock = NSLock()
            weak var previous: SampleBuffer?
            var previousSequence: UInt64 = 0
            var frames = 0, stillThere = 0, wrongFrame = 0
            func captureOutput(_ output: CaptureOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection) {
                lock.withLock {
                    if let p = previous {
                        stillThere += 1
                        if p.sequenceNumber != previousSequence || p.pixelFormat == nil { wrongFrame += 1 }
                    }
                    previous = sampleBuffer
                    previousSequence = sampleBuffer.sequenceNumber
                    frames += 1
                }
            }
        }
        let keeper = WeakKeeper()
        let session = CaptureSession()
        session.addInput(try CaptureDeviceInput(device: rig.device))
        let output = CaptureVideoDataOutput()
        output.setSampleBufferDelegate(keeper, queue: DispatchQueue(label: "lease-weak"))
        session.addOutput(output)
        session.startRunning()
        defer { session.stopRunning() }
        let enough = await eventually(timeout: 20) { keeper.lock.withLock { keeper.frames >= 20 } }
        #expect(enough)
        keeper.lock.withLock {
            #expect(keeper.wrongFrame == 0)
            #expect(keeper.stillThere == 0, "a weakly kept sample outlived its callback \(keeper.stillThere) times")
        }
    }

    /// A JPEG slot is reused from explicit hand-back alone: while a hold is out (its producer's,
    /// a consumer's, the face an app kept) its bytes are never rewritten; once the last one went
    /// back, the same slot is written again. A face the app sees only weakly is let go at once.
    @Test func aJPEGSlotIsRewrittenOnlyOnceItsLastHoldWentBack() throws {
        let ring = JPEGSampleRing(count: 1)
        let dims = VideoDimensions(width: 8, height: 8)
        func jpeg(_ bytes: [UInt8]) -> SampleBuffer? {
            bytes.withUnsafeBytes {
                ring.sample(
                    copying: $0, dimensions: dims,
                    metadata: FrameMetadata(sequence: UInt32(bytes[0]), timestamp: CaptureTime(nanoseconds: 1), bufferIndex: -1))
            }
        }
        let slot = try #require(jpeg([1, 2, 3]))
        #expect(jpeg([4]) == nil, "a slot its producer holds was taken again")
        slot.hold()  // a consumer keeps it
        slot.release()  // the producer handed it on
        #expect(jpeg([4]) == nil, "a slot a consumer holds was taken again")
        var face: SampleBuffer? = slot.handOut()
        slot.release()  // the consumer's hold: the face holds the slot now
        let kept = face
        face = nil  // the library's reference, once the callback returned
        // The app kept the face: it keeps its bytes, and the slot stays out.
        #expect(jpeg([4]) == nil, "a slot whose face the app kept was taken again")
        #expect(kept?.jpegData == Data([1, 2, 3]) && kept?.sequenceNumber == 1)
        _ = consume kept
        let again = try #require(jpeg([5, 6]), "the slot did not come back once the app let go")
        #expect(again === slot && again.jpegData == Data([5, 6]))
        // A face seen through a weak reference only ends with the library's reference.
        face = again.handOut()
        again.release()
        weak let seen = face
        face = nil
        #expect(seen == nil, "a weakly seen face outlived its hand-out")
        #expect(jpeg([7])?.jpegData == Data([7]))
    }
}
