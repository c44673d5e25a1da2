import Capture
import CaptureBenchSupport
@testable import CaptureCodecs
import CaptureTestSupport
import Foundation
import Testing

/// The H.264 encoder on frames from memory (what a stage, and `capture-bench record`, run).
@Suite struct H264FrameEncoderTests {
    /// A source that reports no row pitch (0) has rows without padding: each row of the
    /// encoder's picture is the frame's own row, not a repeat of the first. Checked by decoding
    /// with ffmpeg.
    @Test(arguments: [(PixelFormat.nv12, 96, 64), (PixelFormat.yuv420, 80, 48)])
    func framesWithoutAPitchAreEncodedRowByRow(_ format: PixelFormat, _ width: Int, _ height: Int) throws {
        // Luma rises by 3 per row (16...), chroma neutral.
        let chroma = 2 * ((width + 1) / 2) * ((height + 1) / 2)
        var bytes = [UInt8](repeating: 128, count: width * height + chroma)
        for y in 0..<height { for x in 0..<width { bytes[y * width + x] = UInt8(16 + 3 * y) } }
        let memory = UnsafeMutableRawBufferPointer.allocate(byteCount: bytes.count, alignment: 64)
        defer { memory.deallocate() }
        memory.copyBytes(from: bytes)
        let replay = FrameReplay(
            pixelFormat: format, width: width, height: height, bytesPerLine: 0,
            buffers: [UnsafeRawBufferPointer(memory)])
        let encoder = H264FrameEncoder(H264Settings(rateControl: .quality(4)), interval: FrameInterval(framesPerSecond: 30))
        var stream = Data()
        for i in 0..<3 {
            try encoder.load(replay.sample(0, sequence: UInt32(i)))
            try encoder.encode(keyFrame: false) { unit in
                if stream.isEmpty { stream = unit.parameterSets }
                unit.withUnsafeBytes { stream.append(contentsOf: $0) }
            }
        }
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("rows-\(UUID().uuidString).h264")
        defer { try? FileManager.default.removeItem(at: url) }
        try stream.write(to: url)
        let r = try runProcess(
            "/usr/bin/ffmpeg", ["-v", "error", "-i", url.path, "-frames:v", "1", "-f", "rawvideo", "-pix_fmt", "yuv420p", "-"])
        #expect(r.status == 0, "\(r.stderr)")
        // The luma plane as it is (no range conversion), then the chroma planes.
        let luma = [UInt8](r.stdout.prefix(width * height))
        try #require(r.stdout.count == width * height + chroma, "\(r.stdout.count) bytes decoded")
        for y in [0, height / 2, height - 1] {
            let row = luma[(y * width)..<((y + 1) * width)]
            let mean = row.reduce(0) { $0 + Int($1) } / width
            #expect(abs(mean - (16 + 3 * y)) <= 3, "row \(y): mean \(mean), sent \(16 + 3 * y)")
        }
    }
}
