import CaptureBackend
import Capture
import Foundation
import Testing

/// Records which camera each frame came from and when, per output.
public final class CameraFrameLog: CaptureVideoDataOutputSampleBufferDelegate, @unchecked Sendable {
    private let lock = NSLock()
    private var frames: [(device: CaptureDevice?, time: CaptureTime)] = []
    public let queue = DispatchQueue(label: "test.multicam")
    public init() {}

    public func captureOutput(_ output: CaptureOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection) {
        let entry = (connection.device, sampleBuffer.presentationTimeStamp)
        lock.withLock { frames.append(entry) }
    }

    public var count: Int { lock.withLock { frames.count } }
    public var devices: [CaptureDevice?] { lock.withLock { frames.map(\.device) } }
    public var times: [CaptureTime] { lock.withLock { frames.map(\.time) } }

    @discardableResult
    public func wait(for n: Int, timeout: Double) -> Bool {
        let end = Date() + timeout
        while count < n, Date() < end { Thread.sleep(forTimeInterval: 0.005) }
        return count >= n
    }
}

/// The multi-camera session's flows, for the virtual pair on the host and vivid in the VM.
public enum MultiCamFlows {
    /// Two cameras in one `CaptureMultiCamSession`, a video data output each (connected
    /// automatically, in order): each output gets only its camera's frames, and nearly every
    /// frame of one camera has a frame of the other within one frame interval (one clock).
    public static func pairedFrames(
        _ a: CaptureDevice, _ b: CaptureDevice, preset: CaptureSession.Preset,
        frames: Int, timeout: Double
    ) throws {
        #expect(CaptureMultiCamSession.isMultiCamSupported)
        let session = CaptureMultiCamSession()
        let events = EventLog(session)
        session.beginConfiguration()
        let ia = try CaptureDeviceInput(device: a), ib = try CaptureDeviceInput(device: b)
        #expect(session.canAddInput(ia))
        session.addInput(ia)
        #expect(session.canAddInput(ib), "a multi-camera session takes a second camera")
        session.addInput(ib)
        let oa = CaptureVideoDataOutput(), ob = CaptureVideoDataOutput()
        let la = CameraFrameLog(), lb = CameraFrameLog()
        oa.setSampleBufferDelegate(la, queue: la.queue)
        ob.setSampleBufferDelegate(lb, queue: lb.queue)
        #expect(session.canAddOutput(oa))
        session.addOutput(oa)
        #expect(session.canAddOutput(ob), "a multi-camera session takes an output per camera")
        session.addOutput(ob)
        session.sessionPreset = preset
        let result = session.commitConfiguration()
        try #require(!result.isRejected, "\(result)")
        #expect(
            oa.connections.map(\.device) == [a] && ob.connections.map(\.device) == [b],
            "connections: \(session.connections)")
        #expect(session.connections.count == 2)
        try session.start()
        // A few frames to settle, then the ones measured.
        #expect(
            la.wait(for: frames + 3, timeout: timeout) && lb.wait(for: frames + 3, timeout: timeout),
            "frames: \(la.count) and \(lb.count); events \(events.events)")
        session.stopRunning()
        #expect(la.devices.allSatisfy { $0 === a }, "camera A's output got another camera's frames")
        #expect(lb.devices.allSatisfy { $0 === b }, "camera B's output got another camera's frames")
        let interval = max(a.activeVideoMinFrameDuration?.seconds ?? 1.0 / 30, b.activeVideoMinFrameDuration?.seconds ?? 1.0 / 30)
        let ta = la.times.dropFirst(3).map(\.nanoseconds), tb = lb.times.dropFirst(3).map(\.nanoseconds)
        let lo = max(ta.first ?? 0, tb.first ?? 0), hi = min(ta.last ?? 0, tb.last ?? 0)
        let overlap = ta.filter { $0 >= lo && $0 <= hi }
        try #require(overlap.count >= frames / 2, "the cameras' frames hardly overlap in time: \(ta.count), \(tb.count)")
        let gaps = overlap.map { t in tb.map { abs(Double($0) - Double(t)) / 1e9 }.min() ?? .infinity }.sorted()
        let paired = gaps.filter { $0 <= interval }.count
        print(
            "multicam: \(overlap.count) frames of \(a.localizedName) paired with \(b.localizedName): \(paired) within \(interval) s, median gap \(gaps[gaps.count / 2]) s, max \(gaps.last!) s"
        )
        #expect(Double(paired) >= 0.9 * Double(overlap.count), "gaps: \(gaps)")
        #expect(!events.events.contains { if case .runtimeError = $0 { true } else { false } }, "\(events.events)")
    }
}
