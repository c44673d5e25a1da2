import Foundation
import Synchronization
import Testing
@testable import Capture

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

    /// Sample buffers are reused once let go, never while held: a held sample keeps its frame
    /// (metadata and pixels) while the session goes on, and released ones come back as the
    /// same few objects (one per driver buffer), so delivering a frame allocates nothing.
    @Test func heldSamplesKeepTheirFrameAndReleasedOnesAreReused() throws {
        let camera = VirtualCamera(name: "Reuse \(UUID().uuidString.prefix(8))", position: .front,
                                   formats: [VirtualCamera.Mode(.yuyv, width: 320, height: 240, frameRates: [120])])
        VirtualCamera.install(camera)
        defer { VirtualCamera.uninstall(camera) }
        let device = try #require(CaptureDevice.device(withUniqueID: camera.uniqueID))
        let session = CaptureSession()
        session.addInput(try CaptureDeviceInput(device: device))
        let output = CaptureVideoDataOutput()
        output.alwaysDiscardsLateVideoFrames = false
        session.addOutput(output)

        final class Watcher: CaptureVideoDataOutputSampleBufferDelegate, @unchecked Sendable {
            let lock = NSLock()
            var kept: SampleBuffer?
            var keptSequence: UInt64 = 0
            var objects: [ObjectIdentifier] = []
            var sequences: [UInt64] = []
            var pixelsMatch = true
            let done = DispatchSemaphore(value: 0)
            func captureOutput(_ output: CaptureOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection) {
                let n = VirtualCamera.frameNumber(in: sampleBuffer)
                lock.withLock {
                    if kept == nil {
                        kept = sampleBuffer
                        keptSequence = sampleBuffer.sequenceNumber
                        return
                    }
                    if n.map(UInt64.init) != sampleBuffer.sequenceNumber { pixelsMatch = false }
                    objects.append(ObjectIdentifier(sampleBuffer))
                    sequences.append(sampleBuffer.sequenceNumber)
                    if objects.count == 60 { done.signal() }
                }
            }
        }
        let watcher = Watcher()
        output.setSampleBufferDelegate(watcher, queue: DispatchQueue(label: "test.reuse"))
        try session.start()
        defer { session.stopRunning() }
        #expect(watcher.done.wait(timeout: .now() + 10) == .success, "60 frames did not arrive")
        let (kept, keptSequence, objects, sequences, pixelsMatch) = watcher.lock.withLock {
            (watcher.kept!, watcher.keptSequence, watcher.objects, watcher.sequences, watcher.pixelsMatch)
        }
        // The held sample still shows its own frame, in its metadata and in its pixels.
        #expect(kept.sequenceNumber == keptSequence)
        #expect(VirtualCamera.frameNumber(in: kept).map(UInt64.init) == keptSequence)
        #expect(!objects.contains(ObjectIdentifier(kept)), "a held sample was handed out again")
        #expect(pixelsMatch, "a frame's pixels did not match its sequence number")
        #expect(zip(sequences, sequences.dropFirst()).allSatisfy { $1 > $0 })
        // 60 frames through a handful of reused objects, at most one per driver buffer.
        let distinct = Set(objects).count
        #expect(distinct <= 8, "\(distinct) distinct sample buffers for 60 frames")
    }
}
