import Capture
import CaptureTestSupport
import CaptureVision
import Foundation
import Testing

@Suite(.serialized) struct MetadataOutputTests {
    @Test func typesAreAvailableOnlyWithACameraAndUnavailableOnesAreRefused() throws {
        let output = CaptureMetadataOutput()
        #expect(output.availableMetadataObjectTypes.isEmpty)
        #expect(throws: CaptureError.self) { try output.setMetadataObjectTypes([.qr]) }
        let rig = try VisionRig("types", picture: nil, types: [.qr])
        let available = rig.output.availableMetadataObjectTypes
        for t in [MetadataObjectType.qr, .ean8, .ean13, .upce, .code39, .code128, .interleaved2of5, .pdf417, .dataMatrix, .aztec, .face] {
            #expect(available.contains(t), "\(t) not available")
        }
        do {
            try rig.output.setMetadataObjectTypes([.qr, MetadataObjectType(rawValue: "com.example.none")])
            Issue.record("an unknown type was taken")
        } catch {
            #expect(error.code == .invalidArgument)
            #expect(error.description.contains("com.example.none"))
        }
        #expect(rig.output.metadataObjectTypes == [.qr])
        // The property never stops the program: it takes what is available and leaves the rest out.
        rig.output.metadataObjectTypes = [.face, MetadataObjectType(rawValue: "com.example.none"), .ean13]
        #expect(rig.output.metadataObjectTypes == [.face, .ean13])
    }

    @Test func detectionCostsTheVideoDataOutputNoFrame() throws {
        let video = CaptureVideoDataOutput()
        video.alwaysDiscardsLateVideoFrames = false
        let collector = FrameCollector()
        video.setSampleBufferDelegate(collector, queue: DispatchQueue(label: "vision-frames"))
        // Faces on a busy picture: the slowest detection there is, slower than 30 fps here.
        let rig = try VisionRig("beside", picture: try VisionPictures.picture("lfw0"), types: [.face, .qr], extra: [video])
        #expect(waitUntil(timeout: 20) { collector.count >= 60 })
        // (The detector runs at a lower priority than capture: on a busy machine its first
        // detection may come after many frames.)
        #expect(waitUntil(timeout: 60) { rig.output.statistics.framesDetected > 0 }, "no detection")
        let stats = rig.output.statistics
        #expect(stats.framesOffered >= stats.framesDetected + stats.framesSkipped)
        // Every frame the camera made reached the video output, in order.
        #expect(rig.camera.statistics.framesDroppedForLackOfBuffers == 0)
        let sequences = collector.sequences
        let first = try #require(sequences.first), last = try #require(sequences.last)
        #expect(collector.drops.isEmpty, "\(collector.drops)")
        #expect(sequences == Array(first...last), "frames missing between \(first) and \(last)")
        #expect(stats.framesSkipped > 0, "the detector kept up: this test shows nothing")
    }

    @Test func detectionsComeAsAnAsyncSequenceToo() async throws {
        let (picture, _) = try qrPicture("SEQUENCE", size: 200, centre: CGPoint(x: 320, y: 240), degrees: 0)
        let rig = try VisionRig("async", picture: picture, types: [.qr])
        var text: String?
        for await objects in rig.output.detections() {
            text = (objects.first as? MetadataMachineReadableCodeObject)?.stringValue
            if text != nil { break }
        }
        #expect(text == "SEQUENCE")
    }
}
