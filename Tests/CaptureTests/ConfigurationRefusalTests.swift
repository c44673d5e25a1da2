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

    static func camera(_ tag: String) throws -> (CaptureDevice, VirtualCamera) {
        let installed = try InstalledCamera("Refusal \(tag)", modes: modes, position: .front)
        return (installed.device, installed.camera)
    }

    static func rejections(_ log: EventLog) -> [CaptureError] {
        log.events.compactMap { if case .configurationRejected(let e) = $0 { e } else { nil } }
    }

    @Test func impossiblePresetThenAddInput() throws {
        let (device, cam) = try Self.camera("preset-first")
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
        let (device, cam) = try Self.camera("input-first")
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
        // A Bool: Swift Testing's reflection of a failed `===` on a session's objects traps.
        let sameInput = session.inputs.count == 1 && session.inputs.first === input
        #expect(sameInput)
        #expect(session.sessionPreset == .low)
        #expect(session.isRunning)
        let sizes = SizeRecorder()
        collector.onFrame = { sizes.add($0.dimensions) }
        let before = collector.count
        #expect(collector.wait(for: before + 3, timeout: 20), "frames stopped after the refusal")
        #expect(sizes.all.allSatisfy { $0 == dims }, "\(sizes.all), expected \(dims)")
    }

    /// The two kinds of refused commit a running session meets: a camera another (stopped)
    /// session holds, and a preset the camera lacks.
    enum Refusal: String, CaseIterable, Sendable { case cameraHeldElsewhere, presetTheCameraLacks }

    @Test(arguments: Refusal.allCases)
    func refusedCommitKeepsTheRunningGraph(_ kind: Refusal) async throws {
        let (device, cam) = try Self.camera("graph-\(kind.rawValue)")
        let (otherDevice, otherCam) = try Self.camera("graph-held-\(kind.rawValue)")
        defer { VirtualCamera.uninstall(cam); VirtualCamera.uninstall(otherCam) }
        // The other camera belongs to a session that never runs.
        let holder = CaptureSession()
        holder.addInput(try CaptureDeviceInput(device: otherDevice))
        #expect(holder.inputs.count == 1)

        let session = CaptureSession()
        session.sessionPreset = .low
        let input = try CaptureDeviceInput(device: device)
        let video = CaptureVideoDataOutput()
        let frames = ConnectionRecorder()
        video.setSampleBufferDelegate(frames, queue: frames.queue)
        let still = CaptureStillImageOutput()
        session.addInput(input)
        session.addOutput(video)
        session.addOutput(still)
        try session.start()
        defer { session.stopRunning() }
        #expect(await eventually(timeout: 20) { frames.count >= 2 })
        let videoConnection = try #require(video.connection(with: .video))
        let stillConnection = try #require(still.connection(with: .video))

        session.beginConfiguration()
        session.removeInput(input)
        switch kind {
        case .cameraHeldElsewhere:
            session.addInput(try CaptureDeviceInput(device: otherDevice))
        case .presetTheCameraLacks:
            session.addInput(input)
            session.sessionPreset = .hd1280x720
        }
        let result = session.commitConfiguration()
        guard case .rejected(let error) = result else { Issue.record("commit: \(result)"); return }
        #expect(error.code == (kind == .cameraHeldElsewhere ? .deviceBusy : .unsupportedFormat), "\(error)")

        // The same graph: inputs, connection objects, running. (Booleans: Swift Testing's
        // reflection of a failed `===` on these objects traps.)
        let sameInput = session.inputs.count == 1 && session.inputs.first === input
        #expect(session.isRunning && sameInput)
        let sameVideo = video.connection(with: .video) === videoConnection
        #expect(sameVideo, "the video output has a new connection object")
        let sameStill = still.connection(with: .video) === stillConnection
        #expect(sameStill, "the still output has a new connection object")
        let sameList = session.connections.count == 2 && session.connections.allSatisfy { $0 === videoConnection || $0 === stillConnection }
        #expect(sameList)

        // Every later frame comes on the connection the output lists.
        let before = frames.count
        #expect(await eventually(timeout: 20) { frames.count >= before + 10 }, "frames stopped after the refusal")
        let foreign = frames.connections.filter { $0 !== video.connection(with: .video) }.count
        #expect(foreign == 0, "\(foreign) of \(frames.count) frames came on another connection")

        // Orientation set on the output's connection applies to a still, which comes at once.
        let wanted = try #require(device.activeFormat?.dimensions)
        try #require(still.connection(with: .video)).videoOrientation = .portrait
        let sample = try await still.captureStillImage(from: try #require(still.connection(with: .video)))
        #expect(
            sample.dimensions == VideoDimensions(width: wanted.height, height: wanted.width),
            "\(String(describing: sample.dimensions)), camera \(wanted)")
        #expect(!session.isInterrupted)
    }

    /// A camera another session holds, even a stopped one, is reported: canAddInput says no and
    /// reasonCannotAddInput why; a session left with a video output and no camera does not
    /// start silently (start() throws, startRunning() posts a runtime error).
    @Test func cameraHeldByAStoppedSessionIsReported() throws {
        let (device, cam) = try Self.camera("held")
        defer { VirtualCamera.uninstall(cam) }
        let holder = CaptureSession()
        let held = try CaptureDeviceInput(device: device)
        holder.addInput(held)
        #expect(!holder.isRunning && holder.inputs.count == 1)

        let session = CaptureSession()
        let log = EventLog(session)
        let input = try CaptureDeviceInput(device: device)
        #expect(!session.canAddInput(input))
        let why = try #require(session.reasonCannotAddInput(input))
        #expect(why.code == .deviceBusy && why.message.contains(device.localizedName), "\(why)")
        // The seeds' shape: add only if canAddInput says yes; the session has no camera.
        if session.canAddInput(input) { session.addInput(input) }
        let output = CaptureVideoDataOutput()
        session.addOutput(output)
        do {
            try session.start()
            Issue.record("start() succeeded with no camera")
        } catch {
            #expect(error.code == .invalidState && error.message.contains("no camera"), "\(error)")
            #expect(error.message.contains("another session"), "the refusal is named: \(error)")
        }
        #expect(!session.isRunning)
        session.startRunning()
        #expect(!session.isRunning)
        #expect(
            log.wait { if case .runtimeError(let e) = $0 { e.code == .invalidState } else { false } },
            "startRunning() must post the error: \(log.events)")

        // Once the holder lets go, the camera can be added and the session runs.
        holder.removeInput(held)
        #expect(session.canAddInput(input) && session.reasonCannotAddInput(input) == nil)
        session.addInput(input)
        try session.start()
        session.stopRunning()

        // A camera refused while the session had one is not why it has none later.
        let (secondDevice, secondCam) = try Self.camera("held-second")
        defer { VirtualCamera.uninstall(secondCam) }
        let single = CaptureSession()
        let second = try CaptureDeviceInput(device: secondDevice)
        single.addInput(second)
        #expect(!single.canAddInput(try CaptureDeviceInput(device: device)))
        single.removeInput(second)
        single.addOutput(CaptureVideoDataOutput())
        do {
            try single.start()
            Issue.record("start() succeeded with no camera")
        } catch {
            #expect(error.code == .invalidState && !error.message.contains("refused"), "\(error)")
        }

        // A session with no output for video needs no camera.
        let empty = CaptureSession()
        try empty.start()
        #expect(empty.isRunning)
        empty.stopRunning()
    }
}

/// A video data delegate that records the connection of every frame.
final class ConnectionRecorder: CaptureVideoDataOutputSampleBufferDelegate, @unchecked Sendable {
    let queue = DispatchQueue(label: "test.connection-recorder")
    private let lock = NSLock()
    private var list: [CaptureConnection] = []
    var connections: [CaptureConnection] { lock.withLock { list } }
    var count: Int { lock.withLock { list.count } }
    func captureOutput(_ output: CaptureOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection) {
        lock.withLock { list.append(connection) }
    }
}
