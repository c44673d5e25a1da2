import CaptureBackend
import Foundation

/// Motion-JPEG frames as cameras send them: each a JPEG image, often without Huffman tables
/// (UVC cameras rely on the decoder's defaults), sometimes truncated or padded.
///
/// Everything here reads untrusted bytes with checked lengths and allocates nothing once the
/// caller's output buffer is big enough. Stateless; any thread.
public enum MJPEG {
    /// Whether `frame` defines Huffman tables before its first scan. False for bytes that do not
    /// parse as a JPEG.
    public static func hasHuffmanTables(_ frame: UnsafeRawBufferPointer) -> Bool {
        (try? JPEGMarkers(parsing: frame))?.hasHuffmanTables ?? false
    }

    /// Checks that `frame` is one complete JPEG image (SOI, segment lengths within the bytes, one
    /// frame header, a scan, EOI) and, when given, of the size the device was set to.
    /// Throws `.corruptFrame` otherwise (truncated frames, zero length, wrong size).
    @discardableResult
    public static func validateFrame(
        _ frame: UnsafeRawBufferPointer, width: Int? = nil,
        height: Int? = nil
    ) throws(CaptureError) -> JPEGMarkers {
        let markers = try JPEGMarkers(parsing: frame)
        if let width, let height, markers.frame.width != width || markers.frame.height != height {
            throw CaptureError(
                .corruptFrame,
                "JPEG: the frame is \(markers.frame.width)x\(markers.frame.height), the device was set to \(width)x\(height)")
        }
        return markers
    }

    /// Writes a standalone JPEG for `frame` into `output` (replacing its contents, keeping its
    /// capacity): the frame's bytes up to its EOI, with the standard tables (JPEG Annex K.3)
    /// inserted before the frame header when it has none. Anything after EOI is dropped: drivers
    /// pad (v4l2loopback reports `bytesused` = `sizeimage` for a frame written before the reader's
    /// `REQBUFS`), and padding is not part of the image. Returns what the frame's markers said.
    ///
    /// Made for every frame, so the end is found from the back
    /// (`JPEGMarkers(parsing:trustingTrailingEOI: true)`); `makeStill` finds it exactly.
    @discardableResult
    public static func insertStandardHuffmanTables(
        _ frame: UnsafeRawBufferPointer,
        into output: inout [UInt8]
    ) throws(CaptureError) -> JPEGMarkers {
        try write(frame, JPEGMarkers(parsing: frame, trustingTrailingEOI: true), into: &output)
    }

    /// The most bytes `insertStandardHuffmanTables(_:into:)` writes for `frame`.
    package static func completedSizeBound(_ frame: UnsafeRawBufferPointer) -> Int {
        frame.count + standardHuffmanTableSegment.count
    }

    /// `insertStandardHuffmanTables(_:into:)` into `output` (at least `completedSizeBound`
    /// bytes), for a producer that writes in place; returns the bytes written.
    package static func insertStandardHuffmanTables(
        _ frame: UnsafeRawBufferPointer,
        into output: UnsafeMutableRawBufferPointer
    ) throws(CaptureError) -> Int {
        let markers = try JPEGMarkers(parsing: frame, trustingTrailingEOI: true)
        var at = 0
        func put(_ bytes: UnsafeRawBufferPointer) {
            guard let src = bytes.baseAddress, !bytes.isEmpty else { return }
            precondition(at + bytes.count <= output.count, "MJPEG: output smaller than completedSizeBound")
            (output.baseAddress! + at).copyMemory(from: src, byteCount: bytes.count)
            at += bytes.count
        }
        if markers.hasHuffmanTables {
            put(UnsafeRawBufferPointer(rebasing: frame[0..<markers.endOffset]))
        } else {
            put(UnsafeRawBufferPointer(rebasing: frame[0..<markers.frameOffset]))
            standardHuffmanTableSegment.withUnsafeBytes { put($0) }
            put(UnsafeRawBufferPointer(rebasing: frame[markers.frameOffset..<markers.endOffset]))
        }
        return at
    }

    @discardableResult
    private static func write(
        _ frame: UnsafeRawBufferPointer, _ markers: JPEGMarkers,
        into output: inout [UInt8]
    ) -> JPEGMarkers {
        output.removeAll(keepingCapacity: true)
        if markers.hasHuffmanTables {
            output.append(contentsOf: UnsafeRawBufferPointer(rebasing: frame[0..<markers.endOffset]))
            return markers
        }
        output.reserveCapacity(markers.endOffset + standardHuffmanTableSegment.count)
        output.append(contentsOf: UnsafeRawBufferPointer(rebasing: frame[0..<markers.frameOffset]))
        output.append(contentsOf: standardHuffmanTableSegment)
        output.append(contentsOf: UnsafeRawBufferPointer(rebasing: frame[markers.frameOffset..<markers.endOffset]))
        return markers
    }

    /// The frame as a standalone JPEG; see `insertStandardHuffmanTables(_:into:)`.
    public static func insertingStandardHuffmanTables(_ frame: UnsafeRawBufferPointer) throws(CaptureError) -> [UInt8] {
        var out: [UInt8] = []
        try insertStandardHuffmanTables(frame, into: &out)
        return out
    }

    /// The frame as a standalone JPEG; see `insertStandardHuffmanTables(_:into:)`.
    public static func insertingStandardHuffmanTables(_ frame: Data) throws(CaptureError) -> Data {
        let result = frame.withUnsafeBytes { raw in
            Result { () throws(CaptureError) in try insertingStandardHuffmanTables(raw) }
        }
        return Data(try result.get())
    }

    /// Writes `frame` as a still: the image up to its EOI (padding after it stays out of the
    /// file), standard Huffman tables inserted when missing, and, with `exif`, an Exif APP1
    /// segment after SOI (after the JFIF APP0 when there is one; every Exif segment the camera
    /// wrote is replaced). Without `exif` and with tables present the image's bytes are unchanged.
    @discardableResult
    public static func makeStill(
        _ frame: UnsafeRawBufferPointer, exif: EXIFInfo?,
        into output: inout [UInt8]
    ) throws(CaptureError) -> JPEGMarkers {
        let markers = try JPEGMarkers(parsing: frame)
        guard let exif else { return write(frame, markers, into: &output) }
        output.removeAll(keepingCapacity: true)
        output.reserveCapacity(markers.endOffset + standardHuffmanTableSegment.count + 512)
        var cursor = 2
        output.append(contentsOf: [0xFF, 0xD8])
        if let jfif = markers.jfifSegment, jfif.lowerBound == 2 {
            output.append(contentsOf: UnsafeRawBufferPointer(rebasing: frame[jfif]))
            cursor = jfif.upperBound
        }
        exif.appendSegment(to: &output, pixelWidth: markers.frame.width, pixelHeight: markers.frame.height)
        func copy(_ range: Range<Int>) {
            guard !range.isEmpty else { return }
            output.append(contentsOf: UnsafeRawBufferPointer(rebasing: frame[range]))
        }
        // Every Exif segment the frame brought goes, not only the one `markers` names (the last):
        // a still has one Exif, ours.
        for old in JPEGMarkers.exifSegments(frame, from: cursor, to: markers.frameOffset) {
            copy(cursor..<old.lowerBound)
            cursor = old.upperBound
        }
        copy(cursor..<markers.frameOffset)
        cursor = markers.frameOffset
        if !markers.hasHuffmanTables { output.append(contentsOf: standardHuffmanTableSegment) }
        copy(cursor..<markers.endOffset)
        return markers
    }

    /// The standard tables of JPEG Annex K.3 (luma and chroma, DC and AC) as one DHT segment,
    /// marker included.
    public static let standardHuffmanTableSegment: [UInt8] = {
        let dcLumaBits: [UInt8] = [0, 1, 5, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0]
        let dcChromaBits: [UInt8] = [0, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0]
        let dcValues: [UInt8] = Array(0...11)
        let acLumaBits: [UInt8] = [0, 2, 1, 3, 3, 2, 4, 3, 5, 5, 4, 4, 0, 0, 1, 0x7D]
        let acLumaValues: [UInt8] = [
            0x01, 0x02, 0x03, 0x00, 0x04, 0x11, 0x05, 0x12, 0x21, 0x31, 0x41, 0x06, 0x13, 0x51, 0x61, 0x07,
            0x22, 0x71, 0x14, 0x32, 0x81, 0x91, 0xA1, 0x08, 0x23, 0x42, 0xB1, 0xC1, 0x15, 0x52, 0xD1, 0xF0,
            0x24, 0x33, 0x62, 0x72, 0x82, 0x09, 0x0A, 0x16, 0x17, 0x18, 0x19, 0x1A, 0x25, 0x26, 0x27, 0x28,
            0x29, 0x2A, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3A, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x49,
            0x4A, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5A, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x69,
            0x6A, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7A, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89,
            0x8A, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9A, 0xA2, 0xA3, 0xA4, 0xA5, 0xA6, 0xA7,
            0xA8, 0xA9, 0xAA, 0xB2, 0xB3, 0xB4, 0xB5, 0xB6, 0xB7, 0xB8, 0xB9, 0xBA, 0xC2, 0xC3, 0xC4, 0xC5,
            0xC6, 0xC7, 0xC8, 0xC9, 0xCA, 0xD2, 0xD3, 0xD4, 0xD5, 0xD6, 0xD7, 0xD8, 0xD9, 0xDA, 0xE1, 0xE2,
            0xE3, 0xE4, 0xE5, 0xE6, 0xE7, 0xE8, 0xE9, 0xEA, 0xF1, 0xF2, 0xF3, 0xF4, 0xF5, 0xF6, 0xF7, 0xF8,
            0xF9, 0xFA,
        ]
        let acChromaBits: [UInt8] = [0, 2, 1, 2, 4, 4, 3, 4, 7, 5, 4, 4, 0, 1, 2, 0x77]
        let acChromaValues: [UInt8] = [
            0x00, 0x01, 0x02, 0x03, 0x11, 0x04, 0x05, 0x21, 0x31, 0x06, 0x12, 0x41, 0x51, 0x07, 0x61, 0x71,
            0x13, 0x22, 0x32, 0x81, 0x08, 0x14, 0x42, 0x91, 0xA1, 0xB1, 0xC1, 0x09, 0x23, 0x33, 0x52, 0xF0,
            0x15, 0x62, 0x72, 0xD1, 0x0A, 0x16, 0x24, 0x34, 0xE1, 0x25, 0xF1, 0x17, 0x18, 0x19, 0x1A, 0x26,
            0x27, 0x28, 0x29, 0x2A, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3A, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48,
            0x49, 0x4A, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5A, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68,
            0x69, 0x6A, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7A, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87,
            0x88, 0x89, 0x8A, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9A, 0xA2, 0xA3, 0xA4, 0xA5,
            0xA6, 0xA7, 0xA8, 0xA9, 0xAA, 0xB2, 0xB3, 0xB4, 0xB5, 0xB6, 0xB7, 0xB8, 0xB9, 0xBA, 0xC2, 0xC3,
            0xC4, 0xC5, 0xC6, 0xC7, 0xC8, 0xC9, 0xCA, 0xD2, 0xD3, 0xD4, 0xD5, 0xD6, 0xD7, 0xD8, 0xD9, 0xDA,
            0xE2, 0xE3, 0xE4, 0xE5, 0xE6, 0xE7, 0xE8, 0xE9, 0xEA, 0xF2, 0xF3, 0xF4, 0xF5, 0xF6, 0xF7, 0xF8,
            0xF9, 0xFA,
        ]
        // Table class (0 DC, 1 AC) in the high nibble, destination (0 luma, 1 chroma) in the low.
        let tables: [(UInt8, [UInt8], [UInt8])] = [
            (0x00, dcLumaBits, dcValues), (0x10, acLumaBits, acLumaValues),
            (0x01, dcChromaBits, dcValues), (0x11, acChromaBits, acChromaValues),
        ]
        var body: [UInt8] = []
        for (id, bits, values) in tables {
            body.append(id)
            body += bits
            body += values
        }
        let length = body.count + 2
        return [0xFF, 0xC4, UInt8(length >> 8), UInt8(length & 0xFF)] + body
    }()
}
