import CaptureImaging
import CaptureBackend
import Foundation
import Testing
@testable import Capture

/// A JPEG our encoder made from bars, for the parsers to chew on.
func sampleJPEG(width: Int = 96, height: Int = 64, format: PixelFormat = .yuyv, quality: Int = 90) throws -> [UInt8] {
    let frame = ImagingTestFrame.bars(format, width: width, height: height)
    let encoder = JPEGEncoder(quality: quality)
    // The bytes belong to the encoder: copy them while it lives.
    return try withExtendedLifetime(encoder) { try frame.withImage { Array(try encoder.encode($0)) } }
}

/// `jpeg` with every DHT segment removed, as many UVC cameras send their frames.
func strippingHuffmanTables(_ jpeg: [UInt8]) -> [UInt8] {
    var out: [UInt8] = [0xFF, 0xD8]
    var i = 2
    while i + 4 <= jpeg.count, jpeg[i] == 0xFF {
        let marker = jpeg[i + 1]
        let length = Int(jpeg[i + 2]) << 8 | Int(jpeg[i + 3])
        if marker == 0xDA { out += jpeg[i...]; return out }
        if marker != 0xC4 { out += jpeg[i..<(i + 2 + length)] }
        i += 2 + length
    }
    return out
}

/// `withUnsafeBytes` for closures with typed throws.
func withJPEGBytes<R>(_ bytes: [UInt8], _ body: (UnsafeRawBufferPointer) throws(CaptureError) -> R) throws(CaptureError) -> R {
    let result = bytes.withUnsafeBytes { raw in Result { () throws(CaptureError) in try body(raw) } }
    return try result.get()
}

func imagingErrorCode(_ body: () throws(CaptureError) -> Void) -> CaptureError.Code? {
    do { try body(); return nil } catch { return error.code }
}

@Suite struct JPEGMarkersTests {
    @Test func parsesOurOwnOutput() throws {
        let jpeg = try sampleJPEG()
        let m = try JPEGMarkers(parsing: jpeg)
        #expect(m.frame.width == 96 && m.frame.height == 64)
        #expect(m.frame.componentCount == 3 && m.frame.subsampling == .s422 && m.frame.marker == 0xC0)
        #expect(m.hasHuffmanTables && m.hasQuantizationTables)
        #expect(m.endOffset == jpeg.count)
        #expect(m.jfifSegment?.lowerBound == 2)
        #expect(m.frameOffset < m.firstScanOffset)
        #expect(!m.isProgressive)
    }

    @Test func paddingAfterEOIIsNotPartOfTheImage() throws {
        let jpeg = try sampleJPEG()
        let padded = jpeg + [UInt8](repeating: 0, count: 300)
        #expect(try JPEGMarkers(parsing: padded).endOffset == jpeg.count)
        let garbage = jpeg + [1, 2, 3, 0xFF]
        #expect(try JPEGMarkers(parsing: garbage).endOffset == jpeg.count)
    }

    @Test func truncatedFramesAreCorrupt() throws {
        let jpeg = try sampleJPEG()
        // Every cut loses EOI; the parser and the decoder both say corrupt, at every length.
        let decoder = JPEGDecoder()
        for cut in Array(0..<40) + Array(stride(from: 40, to: jpeg.count, by: 7)) + [jpeg.count - 1] {
            let piece = Array(jpeg.prefix(cut))
            #expect(imagingErrorCode { () throws(CaptureError) in _ = try JPEGMarkers(parsing: piece) } == .corruptFrame, "cut at \(cut)")
            #expect(
                imagingErrorCode { () throws(CaptureError) in
                    try withJPEGBytes(piece) { (raw) throws(CaptureError) in _ = try MJPEG.validateFrame(raw) }
                } == .corruptFrame)
            #expect(
                imagingErrorCode { () throws(CaptureError) in _ = try decoder.decode(piece, as: .rgb) } == .corruptFrame,
                "decode cut at \(cut)")
        }
    }

    @Test func wrongLengthsAndSizesAreCorrupt() throws {
        let jpeg = try sampleJPEG()
        let m = try JPEGMarkers(parsing: jpeg)
        // A segment that claims more bytes than there are.
        var long = jpeg
        long[m.frameOffset + 2] = 0xFF; long[m.frameOffset + 3] = 0xFF
        #expect(imagingErrorCode { () throws(CaptureError) in _ = try JPEGMarkers(parsing: long) } == .corruptFrame)
        // A length below 2.
        var tiny = jpeg
        tiny[4] = 0; tiny[5] = 1
        #expect(imagingErrorCode { () throws(CaptureError) in _ = try JPEGMarkers(parsing: tiny) } == .corruptFrame)
        // Zero bytes, no SOI.
        #expect(imagingErrorCode { () throws(CaptureError) in _ = try JPEGMarkers(parsing: [UInt8]()) } == .corruptFrame)
        #expect(imagingErrorCode { () throws(CaptureError) in _ = try JPEGMarkers(parsing: Array(jpeg.dropFirst())) } == .corruptFrame)
        // The size the device was set to.
        let ok = jpeg.withUnsafeBytes { raw in Result { () throws(CaptureError) in try MJPEG.validateFrame(raw, width: 96, height: 64) } }
        #expect((try? ok.get()) != nil)
        let wrong = jpeg.withUnsafeBytes { raw in
            Result { () throws(CaptureError) in try MJPEG.validateFrame(raw, width: 1280, height: 720) }
        }
        #expect(imagingErrorCode { () throws(CaptureError) in _ = try wrong.get() } == .corruptFrame)
        // Zero height in the frame header (DNL) is not accepted.
        var zero = jpeg
        zero[m.frameOffset + 5] = 0; zero[m.frameOffset + 6] = 0
        #expect(imagingErrorCode { () throws(CaptureError) in _ = try JPEGMarkers(parsing: zero) } == .corruptFrame)
    }

    @Test func hugeDeclaredDimensionsAreRejectedBeforeDecoding() throws {
        let jpeg = try sampleJPEG()
        let m = try JPEGMarkers(parsing: jpeg)
        var huge = jpeg
        for k in 5...8 { huge[m.frameOffset + k] = 0xFF }  // 65535 x 65535
        let parsed = try JPEGMarkers(parsing: huge)
        #expect(parsed.frame.width == 65535 && parsed.frame.height == 65535)
        let decoder = JPEGDecoder(maximumPixelCount: 4096 * 4096)
        #expect(
            imagingErrorCode { () throws(CaptureError) in
                try withJPEGBytes(huge) { (raw) throws(CaptureError) in _ = try decoder.readHeader(raw) }
            } == .corruptFrame)
        #expect(imagingErrorCode { () throws(CaptureError) in _ = try decoder.decode(huge, as: .rgb) } == .corruptFrame)
    }

    @Test func randomBytesNeverTrap() {
        var rng = ImagingTestRandom(state: 42)
        let decoder = JPEGDecoder(maximumPixelCount: 1 << 20)
        for round in 0..<400 {
            var bytes = (0..<Int.random(in: 0..<600, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
            if round % 2 == 0, bytes.count >= 2 { bytes[0] = 0xFF; bytes[1] = 0xD8 }
            let parse = imagingErrorCode { () throws(CaptureError) in _ = try JPEGMarkers(parsing: bytes) }
            #expect(parse == .corruptFrame || parse == nil)
            let decode = imagingErrorCode { () throws(CaptureError) in _ = try decoder.decode(bytes, as: .rgb) }
            #expect(decode == .corruptFrame || decode == nil)
            _ = bytes.withUnsafeBytes { MJPEG.hasHuffmanTables($0) }
            _ = bytes.withUnsafeBytes { EXIFInfo(app1Payload: $0) }
        }
    }

    @Test func mutatedJPEGsNeverTrap() throws {
        let jpeg = try sampleJPEG(width: 48, height: 32)
        var rng = ImagingTestRandom(state: 7)
        let decoder = JPEGDecoder(maximumPixelCount: 1 << 22)
        var out: [UInt8] = []
        for _ in 0..<500 {
            var bytes = jpeg
            for _ in 0..<Int.random(in: 1...6, using: &rng) {
                bytes[Int.random(in: 0..<bytes.count, using: &rng)] = UInt8.random(in: 0...255, using: &rng)
            }
            if Bool.random(using: &rng) { bytes.removeLast(Int.random(in: 0..<bytes.count, using: &rng)) }
            let parse = imagingErrorCode { () throws(CaptureError) in _ = try JPEGMarkers(parsing: bytes) }
            #expect(parse == .corruptFrame || parse == nil)
            let insert = imagingErrorCode { () throws(CaptureError) in
                try withJPEGBytes(bytes) { (raw) throws(CaptureError) in _ = try MJPEG.insertStandardHuffmanTables(raw, into: &out) }
            }
            #expect(insert == .corruptFrame || insert == nil)
            let decode = imagingErrorCode { () throws(CaptureError) in _ = try decoder.decode(bytes, as: .bgra) }
            #expect(decode == .corruptFrame || decode == nil)
        }
    }
}

@Suite struct JPEGHuffmanInsertionTests {
    @Test func standardSegmentIsWellFormed() throws {
        let dht = MJPEG.standardHuffmanTableSegment
        #expect(dht.count == 420 && dht[0] == 0xFF && dht[1] == 0xC4)
        #expect(Int(dht[2]) << 8 | Int(dht[3]) == 418)
    }

    @Test func insertionMakesAHuffmanlessFrameStandalone() throws {
        let original = try sampleJPEG()
        let stripped = strippingHuffmanTables(original)
        // libjpeg writes one DHT segment per table: 4 markers and lengths plus the 416 table bytes.
        #expect(stripped.count == original.count - 432)
        #expect(!stripped.withUnsafeBytes { MJPEG.hasHuffmanTables($0) })
        #expect(original.withUnsafeBytes { MJPEG.hasHuffmanTables($0) })

        let fixed = try withJPEGBytes(stripped) { (raw) throws(CaptureError) in try MJPEG.insertingStandardHuffmanTables(raw) }
        let m = try JPEGMarkers(parsing: fixed)
        #expect(m.hasHuffmanTables)
        #expect(fixed.count == stripped.count + 420)
        // The DHT goes right before the frame header.
        #expect(Array(fixed[(m.frameOffset - 420)..<m.frameOffset]) == MJPEG.standardHuffmanTableSegment)
        // Our encoder uses the standard tables, so the pixels must be exactly the original's.
        let decoder = JPEGDecoder()
        #expect(try decoder.decode(fixed, as: .rgb).pixels == decoder.decode(original, as: .rgb).pixels)
        // libjpeg-turbo itself supplies the standard tables, so the camera's frame decodes here too.
        #expect(try decoder.decode(stripped, as: .rgb).pixels == decoder.decode(original, as: .rgb).pixels)
    }

    @Test func framesWithTablesStayByteIdenticalUpToEOI() throws {
        let original = try sampleJPEG()
        var out: [UInt8] = [9, 9]
        try withJPEGBytes(original) { (raw) throws(CaptureError) in _ = try MJPEG.insertStandardHuffmanTables(raw, into: &out) }
        #expect(out == original)
        // A driver's padding after EOI is not part of the image.
        let padded = original + [0, 0, 0]
        try withJPEGBytes(padded) { (raw) throws(CaptureError) in _ = try MJPEG.insertStandardHuffmanTables(raw, into: &out) }
        #expect(out.count == original.count && out == original)
        let data = try MJPEG.insertingStandardHuffmanTables(Data(padded))
        #expect(data.count == original.count && Array(data) == original)
    }

    @Test func insertionReusesTheOutputBuffer() throws {
        let stripped = strippingHuffmanTables(try sampleJPEG())
        var out: [UInt8] = []
        try withJPEGBytes(stripped) { (raw) throws(CaptureError) in _ = try MJPEG.insertStandardHuffmanTables(raw, into: &out) }
        let storage = out.withUnsafeBufferPointer { $0.baseAddress }
        try withJPEGBytes(stripped) { (raw) throws(CaptureError) in _ = try MJPEG.insertStandardHuffmanTables(raw, into: &out) }
        #expect(out.withUnsafeBufferPointer { $0.baseAddress } == storage)
    }
}
