import CaptureVirtual
import CaptureImaging
import CaptureBackend
import Foundation
import Testing
@testable import Capture
import CaptureTestSupport

/// The virtual camera as a user's own test uses it: installed, found through `CaptureDevice`,
/// streamed by a session, faults injected from outside. Mirrors the example in the
/// `VirtualCamera` documentation.
@Suite struct VirtualCameraSessionTests {
    @Test func installingMakesACameraDiscoverable() throws {
        let camera = VirtualCamera(name: "Discovery Test \(UUID().uuidString.prefix(8))", position: .back)
        VirtualCamera.install(camera)
        #expect(VirtualCamera.installed.contains { $0 === camera })
        #expect(CaptureDevice.devices(for: .video).contains { $0.uniqueID == camera.uniqueID })
        VirtualCamera.uninstall(camera)
        #expect(!VirtualCamera.installed.contains { $0 === camera })
        #expect(!CaptureDevice.devices(for: .video).contains { $0.uniqueID == camera.uniqueID })
    }

    @Test func aUsersTestDrivesTheVirtualCameraThroughASession() async throws {
        let camera = VirtualCamera(name: "Session Test \(UUID().uuidString.prefix(8))", position: .back)
        VirtualCamera.install(camera)
        defer { VirtualCamera.uninstall(camera) }

        let device = try #require(CaptureDevice.device(withUniqueID: camera.uniqueID))
        #expect(device.isVirtual && device.position == .back && device.path == camera.uniqueID)

        let session = CaptureSession()
        let events = session.events()
        session.beginConfiguration()
        let input = try CaptureDeviceInput(device: device)
        #expect(session.canAddInput(input))
        session.addInput(input)
        let output = CaptureVideoDataOutput()
        #expect(session.canAddOutput(output))
        session.addOutput(output)
        #expect(!session.commitConfiguration().isRejected)
        let frames = output.sampleBuffers(bufferingNewest: 16)
        try session.start()
        defer { session.stopRunning() }

        // Frames carry the counter the camera drew; it matches the sequence and increases.
        var numbers: [UInt32] = []
        for await sample in frames {
            let n = try #require(VirtualCamera.frameNumber(in: sample))
            #expect(UInt64(n) == sample.sequenceNumber)
            numbers.append(n)
            if numbers.count == 3 { camera.injectDroppedFrames(4) }
            if numbers.count == 8 { break }
        }
        #expect(zip(numbers, numbers.dropFirst()).allSatisfy { $1 > $0 })
        #expect(numbers.last! - numbers.first! >= 7 + 4, "numbers: \(numbers)")

        // An unplug reaches the session as a device-disconnected event.
        camera.disconnect()
        let disconnected = await withTaskGroup(of: Bool.self) { group in
            group.addTask {
                for await e in events { if case .deviceDisconnected = e { return true } }
                return false
            }
            group.addTask {
                try? await Task.sleep(for: .seconds(5))
                return false
            }
            let first = await group.next() ?? false
            group.cancelAll()
            return first
        }
        #expect(disconnected)
        // The session lets go of the stream (it may take the capture thread a moment).
        for _ in 0..<50 where camera.isStreaming { try await Task.sleep(for: .milliseconds(20)) }
        #expect(!camera.isStreaming)
    }

    /// An installed front virtual camera with one mode, in a session with a video data output
    /// that keeps every frame (no late-frame discarding). The caller uninstalls the camera.
    private static func keepingSession(
        _ name: String, _ mode: VirtualCamera.Mode,
        settings: CaptureVideoDataOutput.VideoSettings = .init()
    ) throws
        -> (VirtualCamera, CaptureSession, CaptureVideoDataOutput)
    {
        let camera = VirtualCamera(name: "\(name) \(UUID().uuidString.prefix(8))", position: .front, formats: [mode])
        VirtualCamera.install(camera)
        let session = CaptureSession()
        do {
            let device = try #require(CaptureDevice.device(withUniqueID: camera.uniqueID))
            session.addInput(try CaptureDeviceInput(device: device))
        } catch {
            VirtualCamera.uninstall(camera)
            throw error
        }
        let output = CaptureVideoDataOutput()
        output.videoSettings = settings
        output.alwaysDiscardsLateVideoFrames = false
        session.addOutput(output)
        return (camera, session, output)
    }

    /// Sample buffers are reused once let go, never while held: a held sample keeps its frame
    /// (metadata and pixels) while the session goes on, and released ones come back as the
    /// same few objects (one per driver buffer), so delivering a frame allocates nothing.
    @Test func heldSamplesKeepTheirFrameAndReleasedOnesAreReused() async throws {
        let (camera, session, output) = try Self.keepingSession(
            "Reuse", VirtualCamera.Mode(.yuyv, width: 320, height: 240, frameRates: [120]))
        defer { VirtualCamera.uninstall(camera) }

        final class Watcher: CaptureVideoDataOutputSampleBufferDelegate, @unchecked Sendable {
            let lock = NSLock()
            var kept: SampleBuffer?
            var keptSequence: UInt64 = 0
            var objects: [ObjectIdentifier] = []
            var sequences: [UInt64] = []
            var pixelsMatch = true
            func captureOutput(_ output: CaptureOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection) {
                let n = VirtualCamera.frameNumber(in: sampleBuffer)
                lock.withLock {
                    if kept == nil {
                        kept = sampleBuffer
                        keptSequence = sampleBuffer.sequenceNumber
                        return
                    }
                    if n.map(UInt64.init) != sampleBuffer.sequenceNumber { pixelsMatch = false }
                    objects.append(ObjectIdentifier(sampleBuffer.faceOwner ?? sampleBuffer))
                    sequences.append(sampleBuffer.sequenceNumber)
                }
            }
        }
        let watcher = Watcher()
        output.setSampleBufferDelegate(watcher, queue: DispatchQueue(label: "test.reuse"))
        try session.start()
        defer { session.stopRunning() }
        #expect(await eventually { watcher.lock.withLock { watcher.objects.count >= 60 } }, "60 frames did not arrive")
        let (kept, keptSequence, objects, sequences, pixelsMatch) = watcher.lock.withLock {
            (watcher.kept!, watcher.keptSequence, watcher.objects, watcher.sequences, watcher.pixelsMatch)
        }
        // The held sample still shows its own frame, in its metadata and in its pixels.
        #expect(kept.sequenceNumber == keptSequence)
        #expect(VirtualCamera.frameNumber(in: kept).map(UInt64.init) == keptSequence)
        #expect(!objects.contains(ObjectIdentifier(kept.faceOwner ?? kept)), "a held sample's lease was handed out again")
        #expect(pixelsMatch, "a frame's pixels did not match its sequence number")
        #expect(zip(sequences, sequences.dropFirst()).allSatisfy { $1 > $0 })
        // 60 frames through a handful of reused frame leases, at most one per driver buffer (each
        // sample handed out is an object of its own, over its lease).
        let distinct = Set(objects).count
        #expect(distinct <= 8, "\(distinct) distinct frame leases for 60 frames")
    }

    /// JPEG delivery: raw frames encoded on two threads arrive in order, each a complete JPEG
    /// of its own frame; MJPEG frames without Huffman tables arrive with them inserted.
    @Test(arguments: [PixelFormat.yuyv, .nv12, .mjpeg])
    func jpegDeliveryInOrder(format: PixelFormat) async throws {
        let (camera, session, output) = try Self.keepingSession(
            "JPEG \(format)", VirtualCamera.Mode(format, width: 320, height: 240, frameRates: [60], omitsHuffmanTables: format == .mjpeg),
            settings: .init(jpeg: .init(quality: 80, threads: 2)))
        defer { VirtualCamera.uninstall(camera) }

        final class Check: CaptureVideoDataOutputSampleBufferDelegate, @unchecked Sendable {
            let lock = NSLock()
            var sequences: [UInt64] = []
            var problems: [String] = []
            var drops = 0
            func captureOutput(_ output: CaptureOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection) {
                var problem: String?
                if sampleBuffer.pixelFormat != .jpeg { problem = "pixel format \(String(describing: sampleBuffer.pixelFormat))" }
                if let data = sampleBuffer.jpegData {
                    if let img = TestJPEG.decode(data) {
                        if img.width != 320 || img.height != 240 { problem = "\(img.width)x\(img.height)" }
                    } else {
                        problem = "frame \(sampleBuffer.sequenceNumber) does not decode"
                    }
                    if !data.withUnsafeBytes({ MJPEG.hasHuffmanTables($0) }) { problem = "no Huffman tables" }
                    if VirtualCamera.frameNumber(inJPEG: data).map(UInt64.init) != sampleBuffer.sequenceNumber {
                        problem = "frame \(sampleBuffer.sequenceNumber) shows another frame's counter"
                    }
                } else {
                    problem = "no JPEG bytes"
                }
                lock.withLock {
                    if let problem { problems.append(problem) }
                    sequences.append(sampleBuffer.sequenceNumber)
                }
            }
            func captureOutput(_ output: CaptureOutput, didDrop drop: DroppedFrames, from connection: CaptureConnection) {
                lock.withLock { drops += drop.count }
            }
        }
        let check = Check()
        output.setSampleBufferDelegate(check, queue: DispatchQueue(label: "test.jpeg"))
        try session.start()
        #expect(await eventually(timeout: 20) { check.lock.withLock { check.sequences.count >= 40 } }, "40 JPEG frames did not arrive")
        session.stopRunning()
        let (sequences, problems, drops) = check.lock.withLock { (check.sequences, check.problems, check.drops) }
        #expect(problems.isEmpty, "\(problems.prefix(5))")
        #expect(zip(sequences, sequences.dropFirst()).allSatisfy { $1 > $0 }, "out of order: \(sequences.prefix(20))")
        // Every frame the camera produced between the first and the last delivered is accounted for.
        if let first = sequences.first, let last = sequences.last {
            #expect(Int(last - first) + 1 <= sequences.count + drops)
        }
    }
}
