import Capture
@testable import CapturePreview
import CaptureTestSupport
import Foundation
import Testing

/// The preview layer as a frame consumer, without a window: it holds at most the newest frame,
/// and slows neither capture nor the app's outputs.
@Suite struct PreviewConsumerTests {
    @Test func aPreviewBesideAJPEGOutputChangesNeitherItsFramesNorItsDrops() async throws {
        let camera = VirtualCamera(
            name: "Preview consumer \(UUID().uuidString.prefix(8))", position: .back,
            formats: [.init(.yuyv, width: 320, height: 240, frameRates: [30])])
        VirtualCamera.install(camera)
        defer { VirtualCamera.uninstall(camera) }
        let device = try #require(CaptureDevice.device(withUniqueID: camera.uniqueID))
        let session = CaptureSession()
        session.addInput(try CaptureDeviceInput(device: device))
        let video = CaptureVideoDataOutput()
        video.videoSettings = .init(jpeg: .init(quality: 70))
        video.alwaysDiscardsLateVideoFrames = false
        let frames = FrameCollector()
        video.setSampleBufferDelegate(frames, queue: frames.queue)
        session.addOutput(video)
        // A preview nobody draws: it keeps replacing its one frame.
        let preview = CaptureVideoPreviewLayer(session: session)
        #expect(session.outputs.count == 1, "the preview is not one of the app's outputs")
        try session.start()
        #expect(await eventually(timeout: 20) { frames.count >= 45 })
        session.stopRunning()
        frames.queue.sync {}
        // The preview keeps one buffer; with the JPEG encoder's two (queued and encoding) a loaded
        // machine can have all four out for a moment, and the camera then loses frames (as it
        // does when the capture thread is late). Whatever was lost, the app's output accounts for
        // every frame from its first to its last: delivered, or reported lost (`.outOfBuffers`,
        // `.discontinuity`, or `.frameWasLate` when its encoder fell behind), once.
        try frames.expectEveryFrameOnce()
        // The preview got them too, keeping one (all but the last replaced, none drawn).
        let p = preview.statistics
        #expect(p.framesDrawn == 0 && p.framesReplaced >= 40, "\(p)")
        #expect(preview.videoFormat?.pixelFormat == .yuyv)
        let first = preview.sink.take()
        let kept = first != nil
        #expect(kept, "the newest frame is kept for the next drawn frame")
        let second = preview.sink.take()
        let another = second != nil
        #expect(!another, "and only one")
    }

    @Test func theSessionCanBeSwappedAndTheLayerFreed() throws {
        let a = CaptureSession(), b = CaptureSession()
        var preview: CaptureVideoPreviewLayer? = CaptureVideoPreviewLayer(session: a)
        #expect(preview?.session === a)
        preview?.session = b
        #expect(preview?.session === b)
        weak let gone = preview
        preview = nil
        #expect(gone == nil)
    }
}
