import CaptureImaging
import CaptureBackend
internal import CTurboJPEG
#if canImport(Glibc)
import Glibc
#endif

/// Makes the virtual camera's MJPEG frames: the test pattern is drawn into a full-range planar
/// 4:2:2 picture (as UVC cameras send MJPEG), compressed by the imaging layer's `JPEGEncoder`,
/// copied into the stream's buffer, and optionally stripped of its Huffman tables (DHT), as
/// many UVC cameras do.
///
/// Owned by one producer thread; not shared.
package final class MJPEGFrameEncoder {
    package let width: Int
    package let height: Int
    package let omitsHuffmanTables: Bool
    private let encoder: JPEGEncoder
    private let planes: UnsafeMutableRawPointer
    private var renderedVersion: UInt64 = .max

    /// The buffer size a frame may need (TurboJPEG's worst case for this size).
    package static func bufferSize(width: Int, height: Int) -> Int {
        Int(tjBufSize(Int32(width), Int32(height), Int32(TJSAMP_422.rawValue)))
    }

    package init(width: Int, height: Int, quality: Int = 90, omitsHuffmanTables: Bool) {
        self.width = width
        self.height = height
        self.omitsHuffmanTables = omitsHuffmanTables
        encoder = JPEGEncoder(quality: quality, subsampling: .s422)
        planes = .allocate(byteCount: width * height * 2, alignment: 64)
    }

    deinit { planes.deallocate() }

    /// Draws frame `sequence` and compresses it into `destination` (`capacity` bytes, at least
    /// `bufferSize`). Returns the JPEG's length.
    package func encode(
        renderer: PatternRenderer, version: UInt64, sequence: UInt32, timeCode: UInt32? = nil,
        into destination: UnsafeMutableRawPointer, capacity: Int
    ) throws(CaptureError) -> Int {
        let canvas = PatternCanvas(base: planes, width: width, height: height, layout: .planar(rows: 1, cbFirst: true))
        if renderedVersion != version {
            renderer.drawBackground(canvas)
            renderedVersion = version
        }
        renderer.drawFrame(canvas, sequence: sequence, timeCode: timeCode)

        let jpeg = try encoder.encode(
            UnsafeRawBufferPointer(start: planes, count: width * height * 2),
            pixelFormat: .yuv422p, width: width, height: height, bytesPerLine: width,
            colorRange: .full)
        guard jpeg.count <= capacity, let source = jpeg.baseAddress else {
            throw CaptureError(.driverError, "the virtual camera's MJPEG frame (\(jpeg.count) bytes) does not fit its buffer (\(capacity))")
        }
        memcpy(destination, source, jpeg.count)
        var length = jpeg.count
        if omitsHuffmanTables {
            length = Self.removeHuffmanTables(UnsafeMutableRawBufferPointer(start: destination, count: length))
        }
        return length
    }

    /// Removes every DHT segment (marker 0xFFC4) before the start of scan, in place. Returns the
    /// new length. Leaves data it cannot parse as it is.
    package static func removeHuffmanTables(_ jpeg: UnsafeMutableRawBufferPointer) -> Int {
        var n = jpeg.count
        guard n >= 4, jpeg[0] == 0xFF, jpeg[1] == 0xD8 else { return n }
        var i = 2
        while i + 4 <= n {
            guard jpeg[i] == 0xFF else { return n }
            let marker = jpeg[i + 1]
            if marker == 0xFF { i += 1; continue }  // fill byte
            if marker == 0xDA || marker == 0xD9 { break }  // start of scan / end of image
            if marker == 0x01 || (0xD0...0xD7).contains(marker) { i += 2; continue }
            let segment = 2 + (Int(jpeg[i + 2]) << 8 | Int(jpeg[i + 3]))
            guard i + segment <= n else { return n }
            if marker == 0xC4 {
                let base = jpeg.baseAddress!
                memmove(base + i, base + i + segment, n - i - segment)
                n -= segment
            } else {
                i += segment
            }
        }
        return n
    }
}
