// A session's state after a fault, as AVFoundation users expect it: a rejected transaction leaves
// no interruption behind, a runtime error stops the whole session (isRunning and isInterrupted
// false, pending work ended at once, not by its time-out), and a format the session has not
// applied is not what the device reports.
import CaptureVirtual
import CaptureBackend
import CaptureSystem
import Foundation
import Testing
@testable import Capture
import CaptureTestSupport

@Suite(.serialized, .timeLimit(.minutes(2))) struct SessionRuntimeFaultTests {
    private static let mode = VirtualCamera.Mode(.yuyv, width: 320, height: 240, frameRates: [30])

    private static func isInterruption(_ e: CaptureSession.Event) -> Bool {
        if case .wasInterrupted = e { true } else { false }
    }

    /// A transaction of a running session adds a camera another client holds, then a camera that
    /// fails to start: the commit is rejected and the session is as it was, so it is not
    /// interrupted, posted no interruption, and does not start the held camera once it is free.
    @Test func rejectedTransactionLeavesNoInterruption() throws {
        let a = try InstalledCamera("Reject Held A", modes: [Self.mode])
        let b = try InstalledCamera("Reject Held B", modes: [Self.mode])
        let c = try InstalledCamera("Reject Held C", modes: [Self.mode])
        defer { a.uninstall(); b.uninstall(); c.uninstall() }
        let (session, events, log) = try runningMultiCam(a)
        defer { session.stopRunning() }
        let ib = try b.input(), ic = try c.input()
        let other = try b.camera.makeSource()
        try other.startStreaming(bufferCount: 2)
        c.camera.injectInsufficientBandwidth()

        session.beginConfiguration()
        session.addInput(ib)
        session.addInput(ic)
        let result = session.commitConfiguration()
        #expect(result.isRejected, "\(result)")
        session.hub.waitUntilDelivered(timeout: .seconds(2))
        #expect(session.inputs.count == 1 && session.isRunning)
        #expect(!session.isInterrupted, "interrupted by a camera the rejected transaction did not add")
        #expect(!events.events.contains(where: Self.isInterruption), "\(events.events)")

        other.stopStreaming()
        Thread.sleep(forTimeInterval: 0.6)
        #expect(!b.camera.isStreaming, "the session started a camera it does not have")
        #expect(!session.isInterrupted)
        let n = log.count
        #expect(log.wait(for: n + 3, timeout: 5), "camera A stopped")
    }

    /// A camera another client holds fails for another reason while the session retries it (here
    /// it is unplugged): a runtime error that stops the session, and a still waiting on that
    /// camera ends at once with `.disconnected`, not with `.timedOut` after 5 s.
    @Test func failedRetryEndsAPendingStill() throws {
        let rig = try VirtualSessionRig("Retry Fails", modes: [Self.mode], outputs: [.still])
        defer { rig.camera.reconnect(); rig.uninstall() }
        let (session, still) = (rig.session, rig.still)
        let events = EventLog(session)
        let other = try rig.camera.makeSource()
        try other.startStreaming(bufferCount: 2)
        session.startRunning()
        defer { session.stopRunning() }
        #expect(events.wait(timeout: 3, Self.isInterruption))
        let connection = try #require(still.connection(with: .video))
        let outcome = Locked<(code: CaptureError.Code?, after: Duration)?>(nil)
        let asked = ContinuousClock.now
        still.captureStillImageAsynchronously(from: connection) { _, error in
            outcome.withLock { $0 = (error?.code, ContinuousClock.now - asked) }
        }
        rig.camera.disconnect()
        #expect(events.wait(timeout: 3) { if case .didStopRunning = $0 { true } else { false } }, "\(events.events)")
        #expect(events.events.contains { if case .runtimeError(let e) = $0 { e.code == .disconnected } else { false } })
        #expect(!session.isRunning && !session.isInterrupted)
        waitUntil(timeout: 8) { outcome.withLock { $0 != nil } }
        let got = try #require(outcome.withLock { $0 }, "the still never completed")
        #expect(got.code == .disconnected, "\(String(describing: got.code))")
        #expect(got.after < .seconds(3), "the still ended only after \(got.after)")
    }

    /// A fatal driver error (not an unplug) on one camera stops the session, as in AVFoundation:
    /// the other camera and the microphone another client holds stop too, `isRunning` and
    /// `isInterrupted` turn false, a still waiting on the other camera and the audio output's
    /// sequence end at once, and the microphone is not started when it comes free.
    @Test func runtimeErrorStopsEveryInput() async throws {
        let a = try InstalledCamera("Fatal A", modes: [Self.mode])
        let b = try InstalledCamera("Fatal B", modes: [Self.mode])
        defer { a.uninstall(); b.uninstall() }
        let mic = VirtualMicrophone(name: "Fatal Mic \(UUID().uuidString.prefix(6))")
        VirtualMicrophone.install(mic)
        defer { VirtualMicrophone.uninstall(mic) }
        let micDevice = try #require(CaptureDevice.devices(for: .audio).first { $0.uniqueID == mic.uniqueID })
        let session = CaptureMultiCamSession()
        let events = EventLog(session)
        let ia = try a.input(), ib = try b.input()
        session.addInput(ia)
        session.addInputWithNoConnections(ib)
        session.addInput(try CaptureDeviceInput(device: micDevice))
        let still = CaptureStillImageOutput()
        session.addOutputWithNoConnections(still)
        let toB = CaptureConnection(input: ib, output: still)
        session.addConnection(toB)
        let audio = CaptureAudioDataOutput()
        session.addOutput(audio)
        let buffers = audio.sampleBuffers()
        let audioEnded = Locked(false)
        let reader = Task {
            for await _ in buffers {}
            audioEnded.withLock { $0 = true }
        }
        defer { reader.cancel() }
        mic.occupy()
        defer { mic.release() }
        session.startRunning()
        defer { session.stopRunning() }
        #expect(await eventually(timeout: 3) { events.events.contains(where: Self.isInterruption) && a.camera.isStreaming })
        b.camera.stall(for: nil)
        defer { b.camera.resume() }
        let stalledAt = CaptureTime.now()
        let outcome = Locked<(code: CaptureError.Code?, after: Duration, captured: CaptureTime?)?>(nil)
        func ask() {
            outcome.withLock { $0 = nil }
            let asked = ContinuousClock.now
            still.captureStillImageAsynchronously(from: toB) { sample, error in
                outcome.withLock { $0 = (error?.code, ContinuousClock.now - asked, sample?.presentationTimeStamp) }
            }
        }
        ask()
        // A frame B made before its stall may still be on its way (a loaded machine's capture
        // thread behind) and answer the still: then it is asked again, until one waits.
        for _ in 0..<3 {
            _ = await eventually(timeout: 1) { outcome.withLock { $0 != nil } }
            guard let o = outcome.withLock({ $0 }), o.code == nil, let t = o.captured, t < stalledAt else { break }
            ask()
        }

        let runner = try #require(session.lock.withLock { session.runners[ObjectIdentifier(ia)] })
        session.runnerFailed(runner, error: CaptureError(.driverError, "injected fatal driver error"))
        #expect(await eventually(timeout: 3) { events.events.contains { if case .didStopRunning = $0 { true } else { false } } })
        #expect(events.events.contains { if case .runtimeError(let e) = $0 { e.code == .driverError } else { false } })
        #expect(!session.isRunning, "a runtime error left the session running")
        #expect(!session.isInterrupted, "a stopped session is still interrupted")
        #expect(!a.camera.isStreaming && !b.camera.isStreaming)
        #expect(await eventually(timeout: 8) { outcome.withLock { $0 != nil } })
        let got = try #require(outcome.withLock { $0 }, "the still on camera B never completed")
        #expect(got.code == .cancelled, "\(String(describing: got.code))")
        #expect(got.after < .seconds(3), "the still on camera B ended only after \(got.after)")
        #expect(await eventually(timeout: 3) { audioEnded.withLock { $0 } }, "the audio sequence did not end")
        mic.release()
        try await Task.sleep(for: .milliseconds(600))
        #expect(!session.isRunning && !session.isInterrupted)
        #expect(
            !events.events.contains { if case .interruptionEnded = $0 { true } else { false } },
            "the stopped session resumed the microphone")
    }

    /// While the session is busy (another thread holds it, as a commit restarting cameras does),
    /// a new active format is not reported before the session applies it; the session then
    /// rejects it (the camera cannot restart in it) and the device reports the old one throughout.
    @Test func formatIsNotReportedBeforeTheSessionAppliesIt() throws {
        let rig = try VirtualSessionRig(
            "Format Wish", modes: [Self.mode, .init(.yuyv, width: 640, height: 480, frameRates: [30])])
        defer { rig.uninstall() }
        let (session, device, collector) = (rig.session, rig.device, rig.collector)
        try session.start()
        defer { session.stopRunning() }
        #expect(collector.wait(for: 3, timeout: 5))
        let before = try #require(device.activeFormat)
        let wanted = try #require(device.formats.first { $0 != before })
        rig.camera.injectInsufficientBandwidth()

        let holding = DispatchSemaphore(value: 0), release = DispatchSemaphore(value: 0)
        Thread {
            session.lock.lock()
            holding.signal()
            release.wait()
            session.lock.unlock()
        }.start()
        holding.wait()
        let thrown = Locked<CaptureError?>(nil)
        let done = DispatchSemaphore(value: 0)
        Thread {
            do throws(CaptureError) {
                try device.lockForConfiguration()
                defer { device.unlockForConfiguration() }
                try device.setActiveFormat(wanted)
            } catch {
                thrown.withLock { $0 = error }
            }
            done.signal()
        }.start()
        Thread.sleep(forTimeInterval: 0.3)
        let seen = device.activeFormat
        release.signal()
        #expect(done.wait(timeout: .now() + 5) == .success)
        #expect(seen == before, "reported \(String(describing: seen)) before the session applied it")
        #expect(thrown.withLock { $0 }?.code == .deviceBusy, "\(String(describing: thrown.withLock { $0 }))")
        #expect(device.activeFormat == before)
        #expect(session.isRunning)
        let n = collector.count
        #expect(collector.wait(for: n + 3, timeout: 5))
    }
}

/// A running multi-camera session with `camera`'s input and a video data output that logs its
/// frames, three frames in; the events logged from before the start.
func runningMultiCam(_ camera: InstalledCamera) throws -> (CaptureMultiCamSession, EventLog, CameraFrameLog) {
    let session = CaptureMultiCamSession()
    let events = EventLog(session)
    session.addInput(try camera.input())
    let log = CameraFrameLog()
    let output = CaptureVideoDataOutput()
    output.setSampleBufferDelegate(log, queue: log.queue)
    session.addOutput(output)
    try session.start()
    #expect(log.wait(for: 3, timeout: 5))
    return (session, events, log)
}
