// A session restarting a camera (a new format, or a rejected transaction bringing the old one
// back) keeps `isInterrupted`, `isRunning` and the notifications true: a camera that cannot start
// again is an interruption or a runtime error, never silence; a stall or a device another client
// holds outlives the restart and ends when the camera delivers again; a rejected format is not
// what the device reports.
import CaptureVirtual
import CaptureBackend
import CaptureSystem
import Foundation
import Testing
@testable import Capture
import CaptureTestSupport

@Suite(.serialized, .timeLimit(.minutes(2))) struct SessionRestartFaultTests {
    private static let small = VirtualCamera.Mode(.yuyv, width: 320, height: 240, frameRates: [30])
    private static let large = VirtualCamera.Mode(.yuyv, width: 640, height: 480, frameRates: [30])

    private static func isInUse(_ e: CaptureSession.Event) -> Bool {
        if case .wasInterrupted(_, .videoDeviceInUseByAnotherClient) = e { true } else { false }
    }
    private static func isStall(_ e: CaptureSession.Event) -> Bool {
        if case .wasInterrupted(_, .videoDeviceStalled) = e { true } else { false }
    }
    private static func isEnd(_ e: CaptureSession.Event) -> Bool {
        if case .interruptionEnded = e { true } else { false }
    }

    /// Asks `device` (in a running session) for a format other than its active one.
    private static func changeFormat(of device: CaptureDevice) throws(CaptureError) {
        try device.lockForConfiguration()
        defer { device.unlockForConfiguration() }
        guard let other = device.formats.first(where: { $0 != device.activeFormat }) else { return }
        try device.setActiveFormat(other)
    }

    /// `rig`'s session running, three frames in, then its camera stalled (and the stall posted).
    private static func stalled(_ rig: VirtualSessionRig) throws -> (CaptureSession, FrameCollector, EventLog) {
        let events = EventLog(rig.session)
        try rig.session.start()
        #expect(rig.collector.wait(for: 3, timeout: 5))
        rig.camera.stall(for: nil)
        #expect(events.wait(timeout: 5, isStall))
        return (rig.session, rig.collector, events)
    }

    /// The camera cannot start in the new format nor again in the old one (no USB bandwidth,
    /// twice): not a silent dead camera in a running session but a runtime error that stops it.
    @Test func cameraThatCannotRestartIsARuntimeError() throws {
        let rig = try VirtualSessionRig("Restart Fails", modes: [Self.small, Self.large])
        defer { rig.uninstall() }
        let events = EventLog(rig.session)
        try rig.session.start()
        defer { rig.session.stopRunning() }
        #expect(rig.collector.wait(for: 3, timeout: 5))
        rig.camera.injectInsufficientBandwidth()
        rig.camera.injectInsufficientBandwidth()

        #expect(throws: CaptureError.self) { try Self.changeFormat(of: rig.device) }
        #expect(events.wait(timeout: 3) { if case .didStopRunning = $0 { true } else { false } }, "\(events.events)")
        #expect(events.events.contains { if case .runtimeError(let e) = $0 { e.code == .deviceBusy } else { false } })
        #expect(!rig.session.isRunning && !rig.session.isInterrupted)
    }

    /// Camera A, changed to a new format in a transaction that then fails (camera C has no
    /// bandwidth), is taken by another client the moment it stops: neither its new format nor the
    /// undo can start it. It is interrupted (announced), not left without a runner, and runs
    /// again once the other client lets go.
    @Test func cameraTakenWhileARejectedTransactionRestartsItIsInterrupted() throws {
        let a = try InstalledCamera("Undo Taken A", modes: [Self.small, Self.large])
        let b = try InstalledCamera("Undo Taken B", modes: [Self.small])
        let c = try InstalledCamera("Undo Taken C", modes: [Self.small])
        defer { a.camera.endTakeover(); a.uninstall(); b.uninstall(); c.uninstall() }
        let (session, events, log) = try runningMultiCam(a)
        defer { session.stopRunning() }

        c.camera.injectInsufficientBandwidth()
        a.camera.injectTakeover()
        session.beginConfiguration()
        try Self.changeFormat(of: a.device)
        session.addInput(try b.input())
        session.addInput(try c.input())
        let result = session.commitConfiguration()
        #expect(result.isRejected, "\(result)")
        session.hub.waitUntilDelivered(timeout: .seconds(2))
        #expect(session.isRunning)
        #expect(session.isInterrupted, "camera A stopped in silence")
        #expect(events.events.contains(where: Self.isInUse), "\(events.events)")

        a.camera.endTakeover()
        #expect(waitUntil(timeout: 5) { !session.isInterrupted && a.camera.isStreaming })
        #expect(events.wait(timeout: 3, Self.isEnd), "\(events.events)")
        let n = log.count
        #expect(log.wait(for: n + 3, timeout: 5), "camera A did not deliver again")
    }

    /// A stalled camera restarted in a new format: the stall goes on (no second notice) and
    /// ends, with `interruptionEnded`, once the camera delivers again.
    @Test func stallEndsAfterARestart() throws {
        let rig = try VirtualSessionRig("Stall Restart", modes: [Self.small, Self.large])
        defer { rig.camera.resume(); rig.uninstall() }
        let (session, collector, events) = try Self.stalled(rig)
        defer { session.stopRunning() }

        try Self.changeFormat(of: rig.device)
        #expect(session.isInterrupted, "the camera still stalls")
        rig.camera.resume()
        let n = collector.count
        #expect(collector.wait(for: n + 3, timeout: 5), "no frames after the restart")
        #expect(waitUntil(timeout: 3) { !session.isInterrupted }, "interrupted while frames flow")
        #expect(events.wait(timeout: 3, Self.isEnd), "\(events.events)")
        #expect(events.events.filter(Self.isStall).count == 1, "\(events.events)")
    }

    /// A stalled camera that another client takes the moment the session stops it to restart it
    /// in a new format: it is retried as any camera another client holds, and runs again once
    /// that client lets go.
    @Test func stalledCameraTakenDuringARestartIsRetried() throws {
        let rig = try VirtualSessionRig("Stall Taken", modes: [Self.small, Self.large])
        defer { rig.camera.resume(); rig.camera.endTakeover(); rig.uninstall() }
        let (session, collector, events) = try Self.stalled(rig)
        defer { session.stopRunning() }

        rig.camera.injectTakeover()
        try Self.changeFormat(of: rig.device)
        // (The stall's interruption goes on, now retried as "in use": no second notice.)
        #expect(session.isInterrupted)
        rig.camera.resume()
        rig.camera.endTakeover()
        #expect(waitUntil(timeout: 5) { rig.camera.isStreaming && !session.isInterrupted }, "never retried: \(events.events)")
        #expect(events.wait(timeout: 3, Self.isEnd), "\(events.events)")
        let n = collector.count
        #expect(collector.wait(for: n + 3, timeout: 5), "no frames after the retry")
    }

    /// A format set inside a transaction that is then rejected (by a refusal: the camera is not
    /// restarted) is not what the device reports.
    @Test func rejectedTransactionUndoesTheFormat() throws {
        let rig = try VirtualSessionRig("Reject Format", modes: [Self.small, Self.large])
        defer { rig.uninstall() }
        let (session, device) = (rig.session, rig.device)
        try session.start()
        defer { session.stopRunning() }
        #expect(rig.collector.wait(for: 3, timeout: 5))
        let before = try #require(device.activeFormat)
        // A second camera is refused: the session keeps running its camera as it was.
        let second = try InstalledCamera("Reject Format Other")
        defer { second.uninstall() }

        session.beginConfiguration()
        try Self.changeFormat(of: device)
        session.addInput(try second.input())
        let result = session.commitConfiguration()
        #expect(result.isRejected, "\(result)")
        #expect(device.activeFormat == before, "reports \(String(describing: device.activeFormat)) after the rejection")
        #expect(session.sessionPreset != .inputPriority)
        let n = rig.collector.count
        #expect(rig.collector.wait(for: n + 3, timeout: 5))
    }
}
