// CaptureMultiCamSession on the virtual pair: frames from both cameras, each routed only to its
// own output, with timestamps on one clock; manual connections; the bandwidth error.
import CaptureVirtual
import CaptureBackend
import Capture
import CaptureTestSupport
import Foundation
import Testing

@Suite(.serialized, .timeLimit(.minutes(2))) struct MultiCamSessionTests {
    private func pair(_ tag: String) throws -> (VirtualCamera, VirtualCamera, CaptureDevice, CaptureDevice) {
        let mode = VirtualCamera.Mode(.yuyv, width: 320, height: 240, frameRates: [30])
        let a = VirtualCamera(name: "MultiCam \(tag) A", position: .external, formats: [mode])
        let b = VirtualCamera(name: "MultiCam \(tag) B", position: .external, formats: [mode])
        VirtualCamera.install(a)
        VirtualCamera.install(b)
        let all = CaptureDevice.devices(for: .video)
        let da = try #require(all.first { $0.uniqueID == a.uniqueID })
        let db = try #require(all.first { $0.uniqueID == b.uniqueID })
        return (a, b, da, db)
    }

    @Test func virtualPairGivesPairedFrames() throws {
        let (a, b, da, db) = try pair("Pair")
        defer { VirtualCamera.uninstall(a); VirtualCamera.uninstall(b) }
        try MultiCamFlows.pairedFrames(da, db, preset: .inputPriority, frames: 30, timeout: 10)
    }

    /// A plain session still refuses a second camera; a multi-camera session takes it.
    @Test func onlyTheMultiCamSessionTakesTwoCameras() throws {
        let (a, b, da, db) = try pair("Refuse")
        defer { VirtualCamera.uninstall(a); VirtualCamera.uninstall(b) }
        let plain = CaptureSession()
        plain.addInput(try CaptureDeviceInput(device: da))
        #expect(!plain.canAddInput(try CaptureDeviceInput(device: db)))
        plain.removeInput(plain.inputs[0])
        let multi = CaptureMultiCamSession()
        multi.addInput(try CaptureDeviceInput(device: da))
        multi.addInput(try CaptureDeviceInput(device: db))
        #expect(multi.inputs.count == 2)
    }

    /// Inputs and outputs added without connections carry nothing until a connection is added;
    /// one output takes one video connection; a removed connection stops the flow.
    @Test func manualConnectionsRouteOnlyTheirCamera() throws {
        let (a, b, da, db) = try pair("Manual")
        defer { VirtualCamera.uninstall(a); VirtualCamera.uninstall(b) }
        let session = CaptureMultiCamSession()
        let ia = try CaptureDeviceInput(device: da), ib = try CaptureDeviceInput(device: db)
        session.addInputWithNoConnections(ia)
        session.addInputWithNoConnections(ib)
        let out = CaptureVideoDataOutput()
        let log = CameraFrameLog()
        out.setSampleBufferDelegate(log, queue: log.queue)
        session.addOutputWithNoConnections(out)
        #expect(session.connections.isEmpty)
        let toB = CaptureConnection(input: ib, output: out)
        #expect(session.canAddConnection(toB))
        session.addConnection(toB)
        #expect(session.connections.count == 1 && out.connections.first === toB)
        #expect(!session.canAddConnection(CaptureConnection(input: ia, output: out)), "an output takes one video connection")
        #expect(!session.canAddConnection(toB))
        try session.start()
        defer { session.stopRunning() }
        #expect(log.wait(for: 10, timeout: 5))
        #expect(log.devices.allSatisfy { $0 === db }, "frames of camera A reached an output connected to B")
        #expect(b.isStreaming && a.isStreaming)
        session.removeConnection(toB)
        #expect(session.connections.isEmpty && out.connections.isEmpty)
        let n = log.count
        Thread.sleep(forTimeInterval: 0.3)
        #expect(log.count <= n + 1, "frames after the connection went")
    }

    /// When the bus cannot carry both cameras (STREAMON: ENOSPC), starting fails with a typed
    /// error naming both cameras and the size, and nothing runs.
    @Test func insufficientBandwidthIsATypedError() throws {
        let (a, b, da, db) = try pair("Bandwidth")
        defer { VirtualCamera.uninstall(a); VirtualCamera.uninstall(b) }
        let session = CaptureMultiCamSession()
        session.addInput(try CaptureDeviceInput(device: da))
        session.addInput(try CaptureDeviceInput(device: db))
        let out = CaptureVideoDataOutput()
        session.addOutput(out)
        b.injectInsufficientBandwidth()
        do {
            try session.start()
            Issue.record("started although the bus had no bandwidth for both")
        } catch {
            #expect(error.code == .deviceBusy && error.isInsufficientBandwidth, "\(error)")
            #expect(
                error.message.contains("cannot carry") && error.message.contains(da.localizedName)
                    && error.message.contains(db.localizedName) && error.message.contains("320x240"), "\(error.message)")
            #expect(error.message.contains("smaller"), "says what to do: \(error.message)")
        }
        #expect(!session.isRunning && !a.isStreaming && !b.isStreaming)
        // The next start works (the fault was for one start).
        try session.start()
        session.stopRunning()
    }

    /// One camera of two stalls: only it is interrupted, the other keeps delivering, and its
    /// interruption ends when its frames come back.
    @Test func oneCameraStallsTheOtherGoesOn() throws {
        let (a, b, da, db) = try pair("Stall")
        defer { VirtualCamera.uninstall(a); VirtualCamera.uninstall(b) }
        let session = CaptureMultiCamSession()
        let events = EventLog(session)
        session.addInput(try CaptureDeviceInput(device: da))
        session.addInput(try CaptureDeviceInput(device: db))
        let oa = CaptureVideoDataOutput(), ob = CaptureVideoDataOutput()
        let la = CameraFrameLog(), lb = CameraFrameLog()
        oa.setSampleBufferDelegate(la, queue: la.queue)
        ob.setSampleBufferDelegate(lb, queue: lb.queue)
        session.addOutput(oa)
        session.addOutput(ob)
        try session.start()
        defer { session.stopRunning() }
        #expect(la.wait(for: 3, timeout: 5) && lb.wait(for: 3, timeout: 5))
        b.stall(for: .seconds(3))
        #expect(events.wait(timeout: 6) { if case .wasInterrupted(let d, .videoDeviceStalled) = $0 { d === db } else { false } })
        #expect(session.isInterrupted)
        #expect(!events.events.contains { if case .wasInterrupted(let d, _) = $0 { d === da } else { false } })
        let n = la.count
        #expect(la.wait(for: n + 10, timeout: 3), "camera A stopped while B stalled")
        #expect(events.wait(timeout: 6) { if case .interruptionEnded(let d) = $0 { d === db } else { false } })
        #expect(!session.isInterrupted)
        let m = lb.count
        #expect(lb.wait(for: m + 3, timeout: 3))
    }
}
