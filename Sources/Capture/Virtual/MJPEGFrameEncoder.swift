internal import CV4L2Shim
#if canImport(Glibc)
import Glibc
#endif

/// Makes the virtual camera's MJPEG frames: the test pattern is drawn into a full-range planar
/// 4:2:2 picture (as UVC cameras send MJPEG), compressed by TurboJPEG straight into the
/// stream's buffer, and optionally stripped of its Huffman tables (DHT), as many UVC cameras do.
///
/// Owned by one producer thread; not shared.
final class MJPEGFrameEncoder {
    let width: Int
    let height: Int
    let quality: Int32
    let omitsHuffmanTables: Bool
    private let handle: tjhandle
    private let planes: UnsafeMutableRawPointer
    private var renderedVersion: UInt64 = .max

    /// The buffer size a frame may need (TurboJPEG's worst case for this size).
    static func bufferSize(width: Int, height: Int) -> Int {
        Int(tjBufSize(Int32(width), Int32(height), Int32(TJSAMP_422.rawValue)))
    }

    init(width: Int, height: Int, quality: Int32 = 90, omitsHuffmanTables: Bool) throws(CaptureError) {
        guard let h = tjInitCompress() else {
            throw CaptureError(.driverError, "TurboJPEG could not start a compressor for the virtual camera",
                               operation: "tjInitCompress")
        }
        self.width = width
        self.height = height
        self.quality = quality
        self.omitsHuffmanTables = omitsHuffmanTables
        handle = h
        planes = .allocate(byteCount: width * height * 2, alignment: 64)
    }

    deinit {
        tjDestroy(handle)
        planes.deallocate()
    }

    /// Draws frame `sequence` and compresses it into `destination` (at least `bufferSize` bytes).
    /// Returns the JPEG's length.
    func encode(renderer: PatternRenderer, version: UInt64, sequence: UInt32,
                into destination: UnsafeMutableRawPointer, capacity: Int) throws(CaptureError) -> Int {
        let canvas = PatternCanvas(base: planes, width: width, height: height, layout: .planar(rows: 1, cbFirst: true))
        if renderedVersion != version {
            renderer.drawBackground(canvas)
            renderedVersion = version
        }
        renderer.drawFrame(canvas, sequence: sequence)

        let y = UnsafePointer(planes.assumingMemoryBound(to: UInt8.self))
        let cb = y + width * height
        let cr = cb + (width / 2) * height
        var src: (UnsafePointer<UInt8>?, UnsafePointer<UInt8>?, UnsafePointer<UInt8>?) = (y, cb, cr)
        var strides: (Int32, Int32, Int32) = (Int32(width), Int32(width / 2), Int32(width / 2))
        var out: UnsafeMutablePointer<UInt8>? = destination.assumingMemoryBound(to: UInt8.self)
        var size = UInt(capacity)
        let rc = withUnsafeMutablePointer(to: &src) { srcp in
            withUnsafeMutablePointer(to: &strides) { stp in
                srcp.withMemoryRebound(to: UnsafePointer<UInt8>?.self, capacity: 3) { s in
                    stp.withMemoryRebound(to: Int32.self, capacity: 3) { st in
                        tjCompressFromYUVPlanes(handle, s, Int32(width), st, Int32(height), Int32(TJSAMP_422.rawValue),
                                                &out, &size, quality, TJFLAG_NOREALLOC | TJFLAG_FASTDCT)
                    }
                }
            }
        }
        guard rc == 0, out == destination.assumingMemoryBound(to: UInt8.self), Int(size) <= capacity else {
            let why = String(cString: tjGetErrorStr2(handle))
            throw CaptureError(.driverError, "the virtual camera could not encode an MJPEG frame: \(why)",
                               operation: "tjCompressFromYUVPlanes")
        }
        var length = Int(size)
        if omitsHuffmanTables {
            length = Self.removeHuffmanTables(UnsafeMutableRawBufferPointer(start: destination, count: length))
        }
        return length
    }

    /// Removes every DHT segment (marker 0xFFC4) before the start of scan, in place. Returns the
    /// new length. Leaves data it cannot parse as it is.
    static func removeHuffmanTables(_ jpeg: UnsafeMutableRawBufferPointer) -> Int {
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
