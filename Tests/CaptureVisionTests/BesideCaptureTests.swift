import Capture
import CaptureTestSupport
import CaptureVision
import Foundation
import Testing

/// The session: a 1280x720 30 fps camera showing a face and a QR code, with a video data
/// output, a JPEG stream (a frame consumer port at a JPEG quality, as `CaptureStreamServer`'s) and
/// a metadata output looking for QR codes and faces. Detection is slower than the camera here, so
/// the metadata output skips frames; the other two must still get every frame the camera
/// delivered. Compared by sequence number with what the camera made, never with the clock: a busy
/// machine may make the camera late, which is no loss of theirs.
@Suite(.serialized) struct BesideCaptureTests {
    /// The JPEG stream's end of the seam: the sequence numbers of the JPEGs and the drops reported.
    final class JPEGStream: FrameConsumer, @unchecked Sendable {
        private let lock = NSLock()
        private var _sequences: [UInt64] = []
        private var _drops: [DroppedFrames] = []
        private var _notJPEG = 0
        var sequences: [UInt64] { lock.withLock { _sequences } }
        var drops: [DroppedFrames] { lock.withLock { _drops } }
        var notJPEG: Int { lock.withLock { _notJPEG } }

        func consume(_ sample: SampleBuffer, from connection: CaptureConnection) {
            let jpeg = sample.pixelFormat == .jpeg || sample.pixelFormat == .mjpeg
            lock.withLock {
                _sequences.append(sample.sequenceNumber)
                if !jpeg { _notJPEG += 1 }
            }
        }

        func consumeDrop(_ drop: DroppedFrames, from connection: CaptureConnection) { lock.withLock { _drops.append(drop) } }
    }

    @Test func theVideoOutputAndTheJPEGStreamLoseNoFrameToDetection() throws {
        let camera = VirtualCamera(
            name: "Vision beside \(UUID().uuidString.prefix(6))", formats: [.init(.nv12, width: 1280, height: 720, frameRates: [30])])
        camera.picture = try VisionPictures.picture("astronaut_qr")
        VirtualCamera.install(camera)
        defer { VirtualCamera.uninstall(camera) }
        let device = try #require(CaptureDevice.device(withUniqueID: camera.uniqueID))

        let frames = FrameCollector()
        let video = CaptureVideoDataOutput()
        video.alwaysDiscardsLateVideoFrames = false
        video.setSampleBufferDelegate(frames, queue: frames.queue)
        let stream = JPEGStream()
        let port = FrameConsumerPort(stream, jpegQuality: 80)
        let metadata = CaptureMetadataOutput()
        let session = CaptureSession()
        session.beginConfiguration()
        session.addInput(try CaptureDeviceInput(device: device))
        session.addOutput(video)
        session.addFrameConsumer(port)
        session.addOutput(metadata)
        if case .rejected(let e) = session.commitConfiguration() { throw e }
        try metadata.setMetadataObjectTypes([.qr, .face])
        let found = MetadataFound()
        metadata.setMetadataObjectsDelegate(found, queue: found.queue)
        try session.start()
        // Three seconds of the camera's frames (90 sequence numbers), however long they take, and
        // at least one detection with the face and the code, so the detector really ran.
        let enough = waitUntil(timeout: 60) { camera.framesProduced >= 90 && found.sawFaceAndCode }
        session.stopRunning()
        frames.queue.sync {}
        found.queue.sync {}
        #expect(enough, "the camera made \(camera.framesProduced) frames; face and code seen: \(found.sawFaceAndCode)")

        let made = camera.statistics
        let sequences = frames.sequences
        let first = try #require(sequences.first), last = try #require(sequences.last)
        // The camera lost nothing either (a buffer held too long by anyone would show here).
        #expect(made.framesDroppedForLackOfBuffers == 0 && made.framesDroppedByInjection == 0, "\(made)")
        // The video data output: every sequence number from the first, in order, no drop reported.
        #expect(sequences == Array(first...last), "video: frames missing between \(first) and \(last)")
        #expect(frames.drops.isEmpty, "video drops: \(frames.drops)")
        // The JPEG stream: the same frames, each as a JPEG, no drop reported.
        #expect(stream.sequences == sequences, "JPEG: \(stream.sequences.count) frames, video \(sequences.count)")
        #expect(stream.drops.isEmpty, "JPEG drops: \(stream.drops)")
        #expect(stream.notJPEG == 0)
        // Together they had what the camera queued, up to the frames still in its buffers at the stop.
        #expect(UInt64(sequences.count) + 4 >= made.framesQueued, "video \(sequences.count) of \(made.framesQueued) queued")

        // The metadata output skipped frames for itself, each counted (once its last frame is done).
        _ = waitUntil(timeout: 10) {
            let s = metadata.statistics
            return s.framesOffered == s.framesDetected + s.framesFailed + s.framesSkipped
        }
        let s = metadata.statistics
        #expect(s.framesSkipped > 0, "the detector kept up with 720p faces: this test shows nothing")
        #expect(s.framesDetected > 0)
        #expect(s.framesOffered == s.framesDetected + s.framesFailed + s.framesSkipped, "\(s)")
        #expect(s.framesOffered <= sequences.count)
    }
}

/// Whether a detection had both a face and the QR code.
private final class MetadataFound: CaptureMetadataOutputObjectsDelegate, @unchecked Sendable {
    let queue = DispatchQueue(label: "beside-capture.metadata")
    private let lock = NSLock()
    private var both = false
    var sawFaceAndCode: Bool { lock.withLock { both } }

    func metadataOutput(_ output: CaptureMetadataOutput, didOutput objects: [MetadataObject], from connection: CaptureConnection) {
        let code = objects.contains { ($0 as? MetadataMachineReadableCodeObject)?.stringValue == "beside capture" }
        let face = objects.contains { $0.type == .face }
        if code && face { lock.withLock { both = true } }
    }
}
