import Capture
import CaptureBenchSupport
import CaptureRecording
import CaptureTestSupport
import Foundation
import Testing

/// The recorder's writer on frames from memory (the path `capture-bench record` measures).
@Suite struct MovieWriterTests {
    /// A source that reports no row pitch (0) has rows without padding: each row of the file's
    /// picture is the frame's own row, not a repeat of the first. Checked by decoding with ffmpeg.
    @Test(arguments: [(PixelFormat.nv12, 96, 64), (PixelFormat.yuv420, 80, 48)])
    func framesWithoutAPitchAreRecordedRowByRow(_ format: PixelFormat, _ width: Int, _ height: Int) throws {
        let folder = try TempFolder("writer")
        defer { folder.remove() }
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
        let url = folder.file("rows.mp4")
        let writer = try #require(try MovieWriter(url: url, fragmentInterval: .seconds(1)))
        try writer.begin(
            .init(width: width, height: height, pixelFormat: format, frameInterval: FrameInterval(framesPerSecond: 30)),
            audio: nil, settings: MovieOutputSettings(rateControl: .quality(4)))
        for i in 0..<3 { try writer.write(replay.sample(0, sequence: UInt32(i)), at: Int64(i) * 33_333_333) }
        try writer.finish(videoEnd: 100_000_000)
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
