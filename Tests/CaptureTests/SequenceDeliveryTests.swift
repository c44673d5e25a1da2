import CaptureImaging
import CaptureBackend
import Foundation
import Testing
@testable import Capture
import CaptureTestSupport

/// The async sequence of a video data output carries the frames its delegate gets: converted to
/// `videoSettings`, completed JPEGs from an MJPEG camera, with or without a delegate.
@Suite struct SequenceDeliveryTests {
    /// What the test keeps of a frame (keeping the frames themselves would hold their buffers).
    struct Seen: Sendable {
        var sequenceNumber: UInt64
        var pixelFormat: PixelFormat?
        var bytesPerRow: Int
        var jpeg: Data?
        init(_ s: SampleBuffer) {
            sequenceNumber = s.sequenceNumber
            pixelFormat = s.pixelFormat
            bytesPerRow = s.bytesPerRow()
            jpeg = s.jpegData.map { Data($0) }
        }
    }

    /// The first `n` frames of `stream`, or what came within `timeout` seconds (a hang fails the
    /// test's expectations instead of stalling the suite). The stream ends with this call.
    private static func firstFrames(_ stream: AsyncStream<SampleBuffer>, _ n: Int, timeout: Double = 10) async -> [Seen] {
        await withTaskGroup(of: [Seen]?.self) { group in
            group.addTask {
                var out: [Seen] = []
                for await s in stream {
                    out.append(Seen(s))
                    if out.count == n { break }
                }
                return out
            }
            group.addTask {
                try? await Task.sleep(for: .seconds(timeout))
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first ?? []
        }
    }

    @Test func theSequenceGetsConvertedFramesWithAndWithoutADelegate() async throws {
        let rig = try MisuseRig("Sequence convert")
        defer { rig.uninstall() }
        let (session, video, collector) = try rig.videoSession(discardsLate: false)
        video.videoSettings = .init(pixelFormat: .bgra32)
        let formats = FormatRecorder()
        collector.onFrame = { formats.add($0.pixelFormat) }
        try session.start()
        defer { session.stopRunning() }
        let frames = await Self.firstFrames(video.sampleBuffers(bufferingNewest: 8), 5)
        #expect(frames.count == 5)
        #expect(frames.allSatisfy { $0.pixelFormat == .bgra32 && $0.bytesPerRow == 320 * 4 }, "\(frames.map(\.pixelFormat))")
        #expect(formats.all.prefix(5).allSatisfy { $0 == .bgra32 })
        // The same frames: what the sequence got, the delegate got.
        #expect(Set(frames.map(\.sequenceNumber)).isSubset(of: Set(collector.sequences)))
        // Without a delegate the sequence still gets converted frames.
        video.setSampleBufferDelegate(nil, queue: nil)
        let more = await Self.firstFrames(video.sampleBuffers(bufferingNewest: 2), 5)
        #expect(more.count == 5)
        #expect(more.allSatisfy { $0.pixelFormat == .bgra32 }, "\(more.map(\.pixelFormat))")
        #expect(zip(more, more.dropFirst()).allSatisfy { $1.sequenceNumber > $0.sequenceNumber })
    }

    @Test func anMJPEGCamerasSequenceGetsCompleteJPEGsInJPEGMode() async throws {
        let rig = try MisuseRig("Sequence MJPEG", .init(.mjpeg, width: 320, height: 240, frameRates: [30], omitsHuffmanTables: true))
        defer { rig.uninstall() }
        let session = CaptureSession()
        session.addInput(try rig.input())
        let video = CaptureVideoDataOutput()
        video.videoSettings = .init(jpeg: .init(quality: 80))
        session.addOutput(video)
        try session.start()
        defer { session.stopRunning() }
        let frames = await Self.firstFrames(video.sampleBuffers(bufferingNewest: 4), 4)
        #expect(frames.count == 4)
        for f in frames {
            let jpeg = try #require(f.jpeg, "not a JPEG sample: \(String(describing: f.pixelFormat))")
            #expect(jpeg.withUnsafeBytes { MJPEG.hasHuffmanTables($0) }, "the camera's frame was not completed")
            #expect(TestJPEG.decode(jpeg) != nil)
        }
    }
}
