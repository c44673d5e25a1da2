// Interruptions against vivid in the VM: another process (v4l2-ctl) that takes the camera after
// the app made its input interrupts a session started with startRunning(), and the session
// resumes by itself once that process lets go. (Making an input of a camera already taken fails
// with .deviceBusy at once.) The notifications AVFoundation apps observe say the same.
import CaptureBackend
import Capture
import CaptureTestSupport
import Foundation
import Testing

@Suite(.serialized, .timeLimit(.minutes(3))) struct InterruptionDriverTests {
    @Test func anotherProcessStreamingInterruptsUntilItExits() throws {
        let cam = try VM.vividCameras()[0]
        let rig = try FaultRig(cam)
        // (Killed when it goes, if the test ends first.)
        let child = try RunningProcess(
            URL(fileURLWithPath: "/usr/bin/v4l2-ctl"),
            [
                "-d", cam.path, "--set-fmt-video=width=320,height=180", "--stream-mmap",
                "--stream-count=100000", "--stream-to=/dev/null",
            ])
        // v4l2-ctl starts streaming within a second or two even in the emulated VM.
        Thread.sleep(forTimeInterval: 3)
        try #require(child.process.isRunning, "v4l2-ctl did not stream: \(child.stderr)")
        // The same, as an AVFoundation app observes it.
        final class Posted: @unchecked Sendable {
            let lock = NSLock()
            var lines: [String] = []
        }
        let posted = Posted()
        let tokens = [CaptureSession.wasInterruptedNotification, CaptureSession.interruptionEndedNotification].map { name in
            NotificationCenter.default.addObserver(forName: name, object: rig.session, queue: nil) { n in
                let reason = n.userInfo?[CaptureSessionInterruptionReasonKey] as? String ?? "-"
                let same = (n.userInfo?[CaptureSessionInterruptedDeviceKey] as? CaptureDevice) === cam
                posted.lock.withLock { posted.lines.append("\(n.name.rawValue) \(reason) \(same)") }
            }
        }
        defer { tokens.forEach(NotificationCenter.default.removeObserver) }
        rig.session.startRunning()
        defer { rig.session.stopRunning() }
        #expect(rig.session.isRunning)
        let began = rig.events.wait(timeout: 15) {
            if case .wasInterrupted(let d, let reason) = $0 { d === cam && reason == .videoDeviceInUseByAnotherClient } else { false }
        }
        #expect(began, "events: \(rig.events.events)")
        #expect(rig.session.isInterrupted)
        #expect(rig.collector.count == 0)
        #expect(!rig.events.events.contains { if case .runtimeError = $0 { true } else { false } }, "\(rig.events.events)")
        child.signal(SIGKILL)
        _ = child.exitStatus()
        let ended = rig.events.wait(timeout: 30) { if case .interruptionEnded(let d) = $0 { d === cam } else { false } }
        #expect(ended, "events: \(rig.events.events)")
        #expect(!rig.session.isInterrupted)
        #expect(rig.collector.wait(for: 3, timeout: 30), "no frames after the interruption ended: \(rig.events.events)")
        // Posted on the event queue after the handlers: by now, or within moments.
        let end = Date() + 5
        while posted.lock.withLock({ posted.lines.count }) < 2, Date() < end { Thread.sleep(forTimeInterval: 0.01) }
        #expect(
            posted.lock.withLock { posted.lines } == [
                "CaptureSessionWasInterruptedNotification videoDeviceInUseByAnotherClient true",
                "CaptureSessionInterruptionEndedNotification - true",
            ])
        print("interruption: \(rig.events.events.map(\.description))")
    }
}
