// Interruptions and connection state on the virtual camera and microphone: a stall and a device
// held by another client each give wasInterrupted then interruptionEnded (the session resumes by
// itself); an unplug is a runtime error, not an interruption, and turns isConnected false with
// the AVFoundation-style notification.
import CaptureVirtual
import CaptureBackend
import Capture
import CaptureSystem
import CaptureTestSupport
import Foundation
import Testing

@Suite(.serialized, .timeLimit(.minutes(2))) struct InterruptionTests {
    private func rig(_ name: String) throws -> (VirtualCamera, CaptureDevice, CaptureSession, EventLog, FrameCollector) {
        let r = try VirtualSessionRig(name, position: .external)
        return (r.camera, r.device, r.session, EventLog(r.session), r.collector)
    }

    private static func isBegan(_ e: CaptureSession.Event, _ reason: CaptureSession.InterruptionReason) -> Bool {
        if case .wasInterrupted(_, let r) = e { r == reason } else { false }
    }
    private static func isEnded(_ e: CaptureSession.Event) -> Bool {
        if case .interruptionEnded = e { true } else { false }
    }

    /// A stall: began (reason videoDeviceStalled), isInterrupted while it lasts, ended with the
    /// next frame; the session keeps running and no runtime error is posted.
    @Test func stallInterruptsThenEnds() throws {
        let (cam, _, session, events, collector) = try rig("Interrupt Stall")
        defer { VirtualCamera.uninstall(cam) }
        try session.start()
        defer { session.stopRunning() }
        #expect(collector.wait(for: 3, timeout: 5))
        #expect(!session.isInterrupted)
        cam.stall(for: .seconds(4))
        #expect(events.wait(timeout: 8) { Self.isBegan($0, .videoDeviceStalled) }, "events: \(events.events)")
        #expect(session.isInterrupted && session.isRunning)
        #expect(events.wait(timeout: 8) { Self.isEnded($0) }, "events: \(events.events)")
        #expect(!session.isInterrupted)
        let n = collector.count
        #expect(collector.wait(for: n + 3, timeout: 5))
        let list = events.events
        let began = try #require(list.firstIndex { Self.isBegan($0, .videoDeviceStalled) })
        let ended = try #require(list.firstIndex { Self.isEnded($0) })
        #expect(began < ended)
        #expect(!list.contains { if case .runtimeError = $0 { true } else { false } })
    }

    /// Another client streams from the camera when the session starts: the session runs
    /// interrupted (videoDeviceInUseByAnotherClient, no runtime error), and once the other
    /// client lets go the interruption ends and frames flow.
    @Test func streamHeldByAnotherClientInterruptsUntilReleased() throws {
        let (cam, _, session, events, collector) = try rig("Interrupt Busy")
        defer { VirtualCamera.uninstall(cam) }
        let other = try cam.makeSource()
        try other.startStreaming(bufferCount: 2)
        // The throwing start says so at once.
        #expect(throws: CaptureError.self) { try session.start() }
        #expect(!session.isRunning && !session.isInterrupted)
        session.startRunning()
        defer { session.stopRunning() }
        #expect(session.isRunning)
        #expect(events.wait(timeout: 3) { Self.isBegan($0, .videoDeviceInUseByAnotherClient) }, "events: \(events.events)")
        #expect(session.isInterrupted)
        Thread.sleep(forTimeInterval: 0.6)
        #expect(collector.count == 0)
        #expect(!events.events.contains { Self.isEnded($0) })
        other.stopStreaming()
        #expect(events.wait(timeout: 5) { Self.isEnded($0) }, "events: \(events.events)")
        #expect(!session.isInterrupted)
        #expect(collector.wait(for: 3, timeout: 5))
        #expect(!events.events.contains { if case .runtimeError = $0 { true } else { false } })
        // Began exactly once however many retries it took.
        #expect(events.events.filter { Self.isBegan($0, .videoDeviceInUseByAnotherClient) }.count == 1)
    }

    /// Stopping while interrupted ends the retries; isInterrupted is false after the stop.
    @Test func stopWhileInterrupted() throws {
        let (cam, _, session, events, collector) = try rig("Interrupt Stop")
        defer { VirtualCamera.uninstall(cam) }
        let other = try cam.makeSource()
        try other.startStreaming(bufferCount: 2)
        session.startRunning()
        #expect(events.wait(timeout: 3) { Self.isBegan($0, .videoDeviceInUseByAnotherClient) })
        session.stopRunning()
        #expect(!session.isInterrupted && !session.isRunning)
        other.stopStreaming()
        Thread.sleep(forTimeInterval: 0.6)
        #expect(collector.count == 0, "a stopped session resumed its camera")
        #expect(!cam.isStreaming)
    }

    /// A microphone another client holds (the virtual microphone's `occupy()`, as another
    /// process holding an ALSA hw: device) when the session starts: the session runs, the
    /// camera delivers while the microphone is interrupted (audioDeviceInUseByAnotherClient,
    /// once), and audio flows once the other client lets go.
    @Test func microphoneHeldByAnotherClientInterruptsUntilReleased() throws {
        let (cam, _, session, events, frames) = try rig("Interrupt Busy Mic Camera")
        defer { VirtualCamera.uninstall(cam) }
        let mic = VirtualMicrophone(name: "Interrupt Busy Mic")
        VirtualMicrophone.install(mic)
        defer { VirtualMicrophone.uninstall(mic) }
        let device = try #require(CaptureDevice.devices(for: .audio).first { $0.uniqueID == mic.uniqueID })
        session.addInput(try CaptureDeviceInput(device: device))
        let output = CaptureAudioDataOutput()
        output.audioSettings = .init(framesPerBuffer: 480)
        let audio = AudioCollector()
        output.setSampleBufferDelegate(audio, queue: audio.audioQueue)
        session.addOutput(output)
        mic.occupy()
        // Making an input of a held microphone fails at once, as for a camera.
        #expect(throws: CaptureError.self) { _ = try CaptureDeviceInput(device: device) }
        do {
            try session.start()
            Issue.record("the throwing start ran with the microphone held")
        } catch { #expect(error.code == .deviceBusy, "\(error)") }
        #expect(!session.isRunning && !session.isInterrupted)
        session.startRunning()
        defer { session.stopRunning() }
        #expect(session.isRunning)
        let began = { (e: CaptureSession.Event) -> Bool in
            if case .wasInterrupted(let d, .audioDeviceInUseByAnotherClient) = e { d === device } else { false }
        }
        #expect(events.wait(timeout: 3, began), "events: \(events.events)")
        #expect(session.isInterrupted)
        // The camera is not held up by the microphone.
        #expect(frames.wait(for: 3, timeout: 5))
        Thread.sleep(forTimeInterval: 0.6)
        #expect(audio.audio.isEmpty)
        #expect(output.audioFormat == nil)
        #expect(!events.events.contains { Self.isEnded($0) })
        mic.release()
        #expect(
            events.wait(timeout: 5) { if case .interruptionEnded(let d) = $0 { d === device } else { false } },
            "events: \(events.events)")
        #expect(!session.isInterrupted)
        #expect(audio.wait(audio: 5, timeout: 5))
        #expect(output.audioFormat != nil)
        #expect(!events.events.contains { if case .runtimeError = $0 { true } else { false } }, "\(events.events)")
        // Began exactly once however many retries it took; the camera was never interrupted.
        #expect(events.events.filter(began).count == 1)
        #expect(events.events.filter { if case .wasInterrupted = $0 { true } else { false } }.count == 1)
    }

    /// The throwing start leaves a held microphone's session stopped with nothing running;
    /// stopping while interrupted ends the retries (a release afterwards starts nothing).
    @Test func stopWhileMicrophoneHeld() throws {
        let mic = VirtualMicrophone(name: "Interrupt Stop Mic")
        VirtualMicrophone.install(mic)
        defer { VirtualMicrophone.uninstall(mic) }
        let device = try #require(CaptureDevice.devices(for: .audio).first { $0.uniqueID == mic.uniqueID })
        let session = CaptureSession()
        let events = EventLog(session)
        session.addInput(try CaptureDeviceInput(device: device))
        let output = CaptureAudioDataOutput()
        let audio = AudioCollector()
        output.setSampleBufferDelegate(audio, queue: audio.audioQueue)
        session.addOutput(output)
        mic.occupy()
        session.startRunning()
        #expect(events.wait(timeout: 3) { Self.isBegan($0, .audioDeviceInUseByAnotherClient) })
        session.stopRunning()
        #expect(!session.isInterrupted && !session.isRunning)
        mic.release()
        Thread.sleep(forTimeInterval: 0.6)
        #expect(audio.audio.isEmpty, "a stopped session resumed its microphone")
        #expect(!events.events.contains { Self.isEnded($0) })
    }

    /// An unplug: a runtime error and deviceDisconnected, not an interruption; isConnected
    /// turns false and wasDisconnectedNotification names the device.
    @Test func disconnectIsARuntimeErrorNotAnInterruption() throws {
        let (cam, device, session, events, collector) = try rig("Interrupt Unplug")
        defer { VirtualCamera.uninstall(cam) }
        let posted = Locked<[ObjectIdentifier]>([])
        let token = NotificationCenter.default.addObserver(forName: CaptureDevice.wasDisconnectedNotification, object: device, queue: nil) {
            n in
            if let d = n.object as? CaptureDevice { posted.withLock { $0.append(ObjectIdentifier(d)) } }
        }
        defer { NotificationCenter.default.removeObserver(token) }
        try session.start()
        defer { session.stopRunning() }
        #expect(collector.wait(for: 3, timeout: 5))
        #expect(device.isConnected)
        cam.disconnect()
        #expect(events.wait(timeout: 5) { if case .runtimeError(let e) = $0 { e.code == .disconnected } else { false } })
        #expect(events.wait(timeout: 2) { if case .deviceDisconnected = $0 { true } else { false } })
        #expect(!device.isConnected)
        #expect(!session.isInterrupted)
        #expect(!events.events.contains { if case .wasInterrupted = $0 { true } else { false } })
        // Once, however the unplug is noticed (other tests' devices are not observed).
        #expect(posted.withLock { $0 } == [ObjectIdentifier(device)])
        cam.reconnect()
        #expect(device.isConnected)
    }

    /// A started device monitor posts the connection notifications as cameras come and go.
    @Test func monitorPostsConnectionNotifications() throws {
        let monitor = DeviceMonitor()
        try? monitor.start()
        defer { monitor.stop() }
        let cam = VirtualCamera(name: "Interrupt Hotplug", position: .external)
        let seen = Locked<[String]>([])
        let names: [(Notification.Name, String)] = [
            (CaptureDevice.wasConnectedNotification, "+"), (CaptureDevice.wasDisconnectedNotification, "-"),
        ]
        let tokens = names.map { name, sign in
            NotificationCenter.default.addObserver(forName: name, object: nil, queue: nil) { n in
                if let d = n.object as? CaptureDevice, d.uniqueID == cam.uniqueID { seen.withLock { $0.append(sign) } }
            }
        }
        defer { tokens.forEach(NotificationCenter.default.removeObserver) }
        VirtualCamera.install(cam)
        let device = try #require(CaptureDevice.devices(for: .video).first { $0.uniqueID == cam.uniqueID })
        #expect(device.isConnected)
        VirtualCamera.uninstall(cam)
        #expect(!device.isConnected)
        waitUntil(timeout: 3) { seen.withLock { $0.count } >= 2 }
        #expect(seen.withLock { $0 } == ["+", "-"])
    }
}
