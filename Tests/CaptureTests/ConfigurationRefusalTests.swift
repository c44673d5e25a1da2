import CaptureVirtual
import Capture
import CaptureTestSupport
import Foundation
import Testing

/// A refused `addInput` or preset is reported (canAddInput/canSetSessionPreset say no, a
/// `.configurationRejected` event, a `.rejected` commit) and leaves the session as it was; on the
/// virtual camera, whose formats stop at 640x480 here.
@Suite(.serialized) struct ConfigurationRefusalTests {
    static let modes: [VirtualCamera.Mode] = [.init(.yuyv, width: 320, height: 240), .init(.yuyv, width: 640, height: 480)]

    static func camera(_ tag: String) -> (CaptureDevice, VirtualCamera) {
        let cam = VirtualCamera(name: "Refusal \(tag)", position: .front, formats: modes)
        VirtualCamera.install(cam)
        return (CaptureDevice.devices(for: .video).first { $0.uniqueID == cam.uniqueID }!, cam)
    }

    static func rejections(_ log: EventLog) -> [CaptureError] {
        log.events.compactMap { if case .configurationRejected(let e) = $0 { e } else { nil } }
    }

    @Test func impossiblePresetThenAddInput() throws {
        let (device, cam) = Self.camera("preset-first")
        defer { VirtualCamera.uninstall(cam) }
        let session = CaptureSession()
        let log = EventLog(session)
        // No camera yet: any preset may be set.
        #expect(session.canSetSessionPreset(.hd1920x1080))
        session.sessionPreset = .hd1920x1080
        #expect(session.sessionPreset == .hd1920x1080)
        let input = try CaptureDeviceInput(device: device)
        #expect(!session.canAddInput(input), "the camera cannot do 1920x1080: canAddInput must say so")
        // Unchecked, outside a transaction: not added, and an event says why.
        session.addInput(input)
        #expect(session.inputs.isEmpty)
        #expect(log.wait { if case .configurationRejected = $0 { true } else { false } }, "no event: \(log.events)")
        let event = try #require(Self.rejections(log).first)
        #expect(event.code == .unsupportedFormat && event.message.contains("1920x1080"), "\(event)")
        #expect(session.sessionPreset == .hd1920x1080)
        // Inside a transaction with an output: the commit is rejected, nothing changes.
        let output = CaptureVideoDataOutput()
        session.beginConfiguration()
        session.addOutput(output)
        session.addInput(input)
        let result = session.commitConfiguration()
        guard case .rejected(let e) = result else { Issue.record("commit: \(result)"); return }
        #expect(e.code == .unsupportedFormat)
        #expect(session.inputs.isEmpty && session.outputs.isEmpty, "the transaction must be undone: \(session.inputs), \(session.outputs)")
        #expect(log.wait { _ in Self.rejections(log).count == 2 }, "the commit's rejection is an event too: \(log.events)")
        // A preset the camera can do, and the input goes in and runs.
        session.sessionPreset = .vga640x480
        #expect(session.canAddInput(input))
        session.addInput(input)
        session.addOutput(output)
        try session.start()
        defer { session.stopRunning() }
        #expect(device.activeFormat?.dimensions == VideoDimensions(width: 640, height: 480))
    }

    @Test func addInputThenImpossiblePreset() throws {
        let (device, cam) = Self.camera("input-first")
        defer { VirtualCamera.uninstall(cam) }
        let session = CaptureSession()
        let log = EventLog(session)
        let input = try CaptureDeviceInput(device: device)
        let output = CaptureVideoDataOutput()
        let collector = FrameCollector()
        output.setSampleBufferDelegate(collector, queue: collector.queue)
        session.sessionPreset = .low
        session.addInput(input)
        session.addOutput(output)
        try session.start()
        defer { session.stopRunning() }
        #expect(collector.wait(for: 2, timeout: 20))
        let dims = try #require(device.activeFormat?.dimensions)
        #expect(!session.canSetSessionPreset(.hd1280x720))
        // Unchecked, outside a transaction: refused, the preset stays, an event says why.
        session.sessionPreset = .hd1280x720
        #expect(session.sessionPreset == .low)
        #expect(log.wait { if case .configurationRejected = $0 { true } else { false } }, "no event: \(log.events)")
        #expect(Self.rejections(log).first?.code == .unsupportedFormat)
        #expect(!log.events.contains { if case .runtimeError = $0 { true } else { false } }, "a refusal is not a runtime error")
        // A toggle that removes the camera, sets the preset (allowed: no camera is staged) and
        // adds the camera back unchecked: the whole transaction is undone.
        session.beginConfiguration()
        session.removeInput(input)
        session.sessionPreset = .hd1280x720
        session.addInput(input)
        let result = session.commitConfiguration()
        #expect(result.isRejected, "\(result)")
        #expect(session.inputs.count == 1 && session.inputs.first === input)
        #expect(session.sessionPreset == .low)
        #expect(session.isRunning)
        let sizes = SizeRecorder()
        collector.onFrame = { sizes.add($0.dimensions) }
        let before = collector.count
        #expect(collector.wait(for: before + 3, timeout: 20), "frames stopped after the refusal")
        #expect(sizes.all.allSatisfy { $0 == dims }, "\(sizes.all), expected \(dims)")
    }
}
