import CaptureSystem
import Foundation
import Synchronization
import Testing
@testable import Capture
import CaptureTestSupport

/// A consumer the route table calls directly (the preview's and the server's way in): no queue
/// of the library's in between, what it takes fixed by its port, never among the app's outputs.
@Suite struct FrameConsumerPortTests {
    /// Records what the session hands it.
    final class Recorder: FrameConsumer, @unchecked Sendable {
        struct Seen { var formats: [PixelFormat?] = []; var leases = 0; var drops = 0 }
        let seen = Locked(Seen())
        func consume(_ sample: SampleBuffer, from connection: CaptureConnection) {
            // The frame lease itself (a queue would hand on a view of it, taken with a hold).
            let lease = sample.isFrameLease && !sample.isView
            seen.withLock {
                $0.formats.append(sample.pixelFormat)
                if lease { $0.leases += 1 }
            }
        }
        func consumeDrop(_ drop: DroppedFrames, from connection: CaptureConnection) {
            seen.withLock { $0.drops += drop.count }
        }
        var count: Int { seen.withLock { $0.formats.count } }
    }

    @Test func portsGetRawOrJPEGFramesStraightFromThePipeline() async throws {
        let rig = try MisuseRig("Ports", .init(.yuyv, width: 320, height: 240, frameRates: [30]))
        defer { rig.uninstall() }
        let (session, _, appFrames) = try rig.videoSession()
        let raw = Recorder(), jpeg = Recorder()
        let rawPort = FrameConsumerPort(raw)
        let jpegPort = FrameConsumerPort(jpeg, jpegQuality: 80)
        #expect(session.addFrameConsumer(rawPort) && session.addFrameConsumer(jpegPort))
        #expect(!session.addFrameConsumer(rawPort), "a port added twice")
        #expect(session.outputs.count == 1, "ports are not among the app's outputs")
        #expect(rawPort.connection(with: .video) != nil)
        try session.start()
        #expect(await eventually(timeout: 20) { raw.count >= 20 && jpeg.count >= 20 })
        #expect(await appFrames.eventually(frames: 10))
        let r = raw.seen.withLock { $0 }, j = jpeg.seen.withLock { $0 }
        #expect(r.formats.allSatisfy { $0 == .yuyv }, "\(r.formats)")
        #expect(j.formats.allSatisfy { $0 == .jpeg }, "\(j.formats)")
        // No hop through a queue: raw frames are the capture thread's leases, during its call.
        #expect(r.leases == r.formats.count, "\(r.leases) of \(r.formats.count) raw frames came as the lease")
        // Removed: not called any more once the removal returns.
        session.removeFrameConsumer(rawPort)
        let n = raw.count
        #expect(await appFrames.eventually(frames: appFrames.count + 10))
        #expect(raw.count == n, "a removed port's consumer was called")
        #expect(rawPort.session == nil && session.consumerPorts.map(ObjectIdentifier.init) == [ObjectIdentifier(jpegPort)])
        session.stopRunning()
    }

    @Test func aPortDoesNotKeepItsConsumerAlive() async throws {
        let rig = try MisuseRig("Port owner", .init(.yuyv, width: 320, height: 240, frameRates: [30]))
        defer { rig.uninstall() }
        let (session, _, appFrames) = try rig.videoSession()
        var consumer: Recorder? = Recorder()
        weak let gone = consumer
        let port = FrameConsumerPort(consumer!)
        #expect(session.addFrameConsumer(port))
        try session.start()
        defer { session.stopRunning() }
        #expect(await eventually(timeout: 20) { (gone?.count ?? 0) >= 3 })
        consumer = nil
        // (A call running on the capture thread holds it until it returns.)
        #expect(await eventually { gone == nil }, "the port kept its consumer alive")
        // Frames for a consumer that is gone are let go; the app's output is unaffected.
        #expect(await appFrames.eventually(frames: appFrames.count + 10))
    }
}
