import CaptureBackend
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// What a JPEG's marker segments say, read from untrusted bytes (a camera's MJPEG frame, a file).
///
/// Every length is checked against the bytes there are; hostile input gives
/// `CaptureError(.corruptFrame)`, never a trap or an out-of-bounds read. Parsing allocates
/// nothing. Plain value; any thread.
public struct JPEGMarkers: Sendable, Hashable {
    /// The frame header (SOFn).
    public struct Frame: Sendable, Hashable {
        /// The SOF marker's second byte: 0xC0 baseline, 0xC1 extended, 0xC2 progressive...
        public var marker: UInt8
        public var precision: Int
        public var width: Int
        public var height: Int
        /// 1 (grey), 3 (YCbCr) or 4 (CMYK).
        public var componentCount: Int
        /// Sampling factors of the first component (luma), 1...4.
        public var lumaHorizontalSampling: Int
        public var lumaVerticalSampling: Int
        /// Whether every component after the first samples at 1x1 (true for usual YCbCr JPEGs).
        public var chromaIsUnitSampled: Bool

        /// The chroma subsampling, for the usual layouts; nil for unusual ones.
        public var subsampling: ChromaSubsampling? {
            if componentCount == 1 { return .grey }
            guard componentCount == 3, chromaIsUnitSampled else { return nil }
            switch (lumaHorizontalSampling, lumaVerticalSampling) {
            case (1, 1): return .s444
            case (2, 1): return .s422
            case (2, 2): return .s420
            default: return nil
            }
        }
    }

    /// The frame header, from the one SOF segment.
    public var frame: Frame
    /// Offset of the SOF marker's 0xFF.
    public var frameOffset: Int
    /// Whether a DHT segment comes before the first scan.
    public var hasHuffmanTables: Bool
    /// Whether a DQT segment comes before the first scan.
    public var hasQuantizationTables: Bool
    /// Offset of the first SOS marker's 0xFF.
    public var firstScanOffset: Int
    /// Offset just past the EOI marker. Bytes after it (drivers pad frames) are not part of the image.
    /// Exact with `init(parsing:)`; see `init(parsing:trustingTrailingEOI:)` for the fast form.
    public var endOffset: Int
    /// The whole JFIF APP0 segment (marker included), if there is one before the frame header.
    public var jfifSegment: Range<Int>?
    /// The whole Exif APP1 segment (marker included), if there is one before the frame header.
    public var exifSegment: Range<Int>?
    /// DRI's restart interval, 0 when absent.
    public var restartInterval: Int

    /// Whether the frame is progressive (SOF2, SOF6, SOF10, SOF14).
    public var isProgressive: Bool { [0xC2, 0xC6, 0xCA, 0xCE].contains(frame.marker) }

    /// Parses `bytes`. Throws `.corruptFrame` for anything that is not a complete JPEG: no SOI,
    /// a segment longer than the bytes left, no or several frame headers, a scan before the
    /// frame header, no EOI (truncated), zero width or height.
    public init(parsing bytes: UnsafeRawBufferPointer) throws(CaptureError) {
        try self.init(parsing: bytes, trustingTrailingEOI: false)
    }

    /// Parses `bytes` as `init(parsing:)` does, but with `trustingTrailingEOI` a baseline frame
    /// whose bytes end in EOI (zero padding allowed) is taken to end there without its
    /// entropy-coded data being read: twice as fast, for frames handed on at memory speed. The
    /// end is then wrong only for a buffer that holds an older, longer frame's tail after the
    /// image (v4l2loopback's first frame after `REQBUFS` reports `bytesused` = `sizeimage`); the
    /// image decodes the same, with those bytes after it. Stills and saved photos use the exact form.
    public init(parsing bytes: UnsafeRawBufferPointer, trustingTrailingEOI: Bool) throws(CaptureError) {
        let n = bytes.count
        guard n > 0, let base = bytes.baseAddress else { throw Self.corrupt("the frame is empty") }
        let b = base.assumingMemoryBound(to: UInt8.self)
        guard n >= 4, b[0] == 0xFF, b[1] == 0xD8 else { throw Self.corrupt("no JPEG start-of-image marker") }

        var frame: Frame?
        var frameOffset = 0
        var huffman = false, quant = false
        var firstScan: Int?
        var jfif: Range<Int>?, exif: Range<Int>?
        var restart = 0
        var i = 2
        while true {
            guard i < n else { throw Self.corrupt("truncated: no end-of-image marker") }
            guard b[i] == 0xFF else { throw Self.corrupt("expected a marker at byte \(i)") }
            // Any number of 0xFF fill bytes may precede a marker.
            while i < n && b[i] == 0xFF { i += 1 }
            guard i < n else { throw Self.corrupt("truncated: no end-of-image marker") }
            let marker = b[i]
            let start = i - 1
            i += 1
            switch marker {
            case 0xD9:
                guard let frame, let firstScan else { throw Self.corrupt("end of image before any scan") }
                self.init(
                    frame: frame, frameOffset: frameOffset, hasHuffmanTables: huffman,
                    hasQuantizationTables: quant, firstScanOffset: firstScan, endOffset: i,
                    jfifSegment: jfif, exifSegment: exif, restartInterval: restart)
                return
            case 0xD8:
                throw Self.corrupt("a second start-of-image marker at byte \(start)")
            case 0x01, 0xD0...0xD7:
                continue  // standalone markers: no length
            case 0x00:
                throw Self.corrupt("stuffed byte outside a scan at byte \(start)")
            default:
                break
            }
            guard n - i >= 2 else { throw Self.corrupt("truncated in a segment header at byte \(start)") }
            let length = Int(b[i]) << 8 | Int(b[i + 1])
            guard length >= 2 else { throw Self.corrupt("segment at byte \(start) declares length \(length)") }
            guard length <= n - i else {
                throw Self.corrupt("truncated: the segment at byte \(start) declares \(length) bytes, \(n - i) remain")
            }
            let payload = i + 2
            let payloadCount = length - 2
            let end = i + length
            switch marker {
            case 0xC0...0xC3, 0xC5...0xC7, 0xC9...0xCB, 0xCD...0xCF:
                guard frame == nil else { throw Self.corrupt("a second frame header at byte \(start)") }
                guard firstScan == nil else { throw Self.corrupt("frame header after a scan") }
                frame = try Self.parseFrame(marker: marker, b + payload, count: payloadCount)
                frameOffset = start
            case 0xC4:
                try Self.checkHuffmanTables(b + payload, count: payloadCount)
                if firstScan == nil { huffman = true }
            case 0xDB:
                if firstScan == nil { quant = true }
            case 0xDD:
                guard payloadCount >= 2 else { throw Self.corrupt("short restart-interval segment") }
                restart = Int(b[payload]) << 8 | Int(b[payload + 1])
            case 0xE0 where firstScan == nil && frame == nil:
                if payloadCount >= 5 && memcmp(b + payload, "JFIF", 4) == 0 && b[payload + 4] == 0 {
                    jfif = start..<end
                }
            case 0xE1 where firstScan == nil && frame == nil:
                if payloadCount >= 6 && memcmp(b + payload, "Exif", 4) == 0 && b[payload + 4] == 0 && b[payload + 5] == 0 {
                    exif = start..<end
                }
            case 0xDA:
                guard let frame else { throw Self.corrupt("scan before the frame header") }
                guard payloadCount >= 1, b[payload] >= 1, b[payload] <= 4,
                    payloadCount >= 1 + 2 * Int(b[payload]) + 3
                else { throw Self.corrupt("malformed scan header at byte \(start)") }
                let isFirst = firstScan == nil
                if isFirst { firstScan = start }
                // Baseline frames (one scan) usually end with EOI: find it from the end and skip the
                // entropy-coded data, which keeps passthrough at memory speed.
                if trustingTrailingEOI, isFirst, !Self.progressiveMarkers.contains(frame.marker),
                    let eoi = Self.trailingEOI(b, count: n, after: end)
                {
                    self.init(
                        frame: frame, frameOffset: frameOffset, hasHuffmanTables: huffman,
                        hasQuantizationTables: quant, firstScanOffset: start, endOffset: eoi,
                        jfifSegment: jfif, exifSegment: exif, restartInterval: restart)
                    return
                }
                i = try Self.skipEntropyCodedData(b, count: n, from: end)
                continue
            default:
                break
            }
            i = end
        }
    }

    private init(
        frame: Frame, frameOffset: Int, hasHuffmanTables: Bool, hasQuantizationTables: Bool,
        firstScanOffset: Int, endOffset: Int, jfifSegment: Range<Int>?, exifSegment: Range<Int>?,
        restartInterval: Int
    ) {
        self.frame = frame
        self.frameOffset = frameOffset
        self.hasHuffmanTables = hasHuffmanTables
        self.hasQuantizationTables = hasQuantizationTables
        self.firstScanOffset = firstScanOffset
        self.endOffset = endOffset
        self.jfifSegment = jfifSegment
        self.exifSegment = exifSegment
        self.restartInterval = restartInterval
    }

    /// Parses `Data`, `[UInt8]` or any contiguous bytes.
    public init(parsing bytes: some ContiguousBytes) throws(CaptureError) {
        let result = bytes.withUnsafeBytes { raw in Result { () throws(CaptureError) in try JPEGMarkers(parsing: raw) } }
        self = try result.get()
    }

    /// Every Exif APP1 segment in `bytes[from..<to]`, in order: a stretch of header segments that
    /// `init(parsing:)` accepted (whole segments, fill bytes, standalone markers), such as the one
    /// from after SOI to the frame header. Stops at anything else.
    package static func exifSegments(_ bytes: UnsafeRawBufferPointer, from: Int, to: Int) -> [Range<Int>] {
        var found: [Range<Int>] = []
        let to = min(to, bytes.count)
        var i = max(0, from)
        while i < to, bytes[i] == 0xFF {
            while i < to && bytes[i] == 0xFF { i += 1 }
            guard i < to else { break }
            let marker = bytes[i]
            let start = i - 1
            i += 1
            if marker == 0x01 || (0xD0...0xD7).contains(marker) { continue }
            guard to - i >= 2 else { break }
            let length = Int(bytes[i]) << 8 | Int(bytes[i + 1])
            guard length >= 2, length <= to - i else { break }
            let end = i + length
            if marker == 0xE1, length >= 8, bytes[i + 2] == 0x45, bytes[i + 3] == 0x78, bytes[i + 4] == 0x69,
                bytes[i + 5] == 0x66, bytes[i + 6] == 0, bytes[i + 7] == 0
            {
                found.append(start..<end)
            }
            i = end
        }
        return found
    }

    private static let progressiveMarkers: Set<UInt8> = [0xC2, 0xC6, 0xCA, 0xCE]

    package static func corrupt(_ message: String) -> CaptureError {
        CaptureError(.corruptFrame, "JPEG: " + message)
    }

    private static func parseFrame(marker: UInt8, _ p: UnsafePointer<UInt8>, count: Int) throws(CaptureError) -> Frame {
        guard count >= 6 else { throw corrupt("short frame header") }
        let height = Int(p[1]) << 8 | Int(p[2])
        let width = Int(p[3]) << 8 | Int(p[4])
        let components = Int(p[5])
        guard width > 0, height > 0 else { throw corrupt("frame header declares \(width)x\(height)") }
        guard (1...4).contains(components), count >= 6 + 3 * components else {
            throw corrupt("frame header with \(components) components is malformed")
        }
        var unit = true
        var lumaH = 0, lumaV = 0
        for c in 0..<components {
            let factors = p[6 + 3 * c + 1]
            let h = Int(factors >> 4), v = Int(factors & 15)
            guard (1...4).contains(h), (1...4).contains(v) else { throw corrupt("sampling factors \(h)x\(v) out of range") }
            if c == 0 { lumaH = h; lumaV = v } else if h != 1 || v != 1 { unit = false }
        }
        return Frame(
            marker: marker, precision: Int(p[0]), width: width, height: height, componentCount: components,
            lumaHorizontalSampling: lumaH, lumaVerticalSampling: lumaV, chromaIsUnitSampled: unit)
    }

    /// Each table: class/id byte, 16 counts, then as many values as the counts add up to.
    private static func checkHuffmanTables(_ p: UnsafePointer<UInt8>, count: Int) throws(CaptureError) {
        var i = 0
        guard count >= 17 else { throw corrupt("short Huffman table segment") }
        while i < count {
            guard count - i >= 17 else { throw corrupt("truncated Huffman table") }
            guard p[i] & 0xEC == 0 else { throw corrupt("bad Huffman table class/id \(p[i])") }
            var values = 0
            for k in 1...16 { values += Int(p[i + k]) }
            guard values <= 256, count - i - 17 >= values else { throw corrupt("Huffman table longer than its segment") }
            i += 17 + values
        }
    }

    /// Offset just past an EOI that ends the data, allowing zero padding after it.
    private static func trailingEOI(_ b: UnsafePointer<UInt8>, count n: Int, after start: Int) -> Int? {
        var e = n
        while e > start && b[e - 1] == 0 { e -= 1 }
        guard e - start >= 2, b[e - 2] == 0xFF, b[e - 1] == 0xD9 else { return nil }
        // In entropy-coded data 0xFF is always followed by 0x00 or a restart marker, so an FF D9
        // at the end is an EOI: this image's, unless an older frame's tail follows the image.
        return e
    }

    /// Returns the offset of the next marker (its 0xFF) after entropy-coded data.
    private static func skipEntropyCodedData(_ b: UnsafePointer<UInt8>, count n: Int, from start: Int) throws(CaptureError) -> Int {
        var i = start
        while i < n {
            guard let hit = memchr(b + i, 0xFF, n - i) else { break }
            let j = UnsafePointer<UInt8>(hit.assumingMemoryBound(to: UInt8.self)) - b
            guard j + 1 < n else { break }
            let next = b[j + 1]
            if next == 0x00 || (0xD0...0xD7).contains(next) || next == 0xFF {
                // A stuffed 0xFF, a restart marker, or fill before a marker.
                i = next == 0xFF ? j + 1 : j + 2
                continue
            }
            return j
        }
        throw corrupt("truncated: the scan data has no end-of-image marker")
    }
}
