import CaptureImaging
import CaptureBackend
import Foundation
import Testing
@testable import Capture

@Suite struct ImagingEXIFTests {
    @Test func orientationMapping() {
        let expected: [(VideoOrientation, Bool, UInt16)] = [
            (.landscapeRight, false, 1), (.landscapeRight, true, 2), (.landscapeLeft, false, 3), (.landscapeLeft, true, 4),
            (.portrait, false, 6), (.portrait, true, 5), (.portraitUpsideDown, false, 8), (.portraitUpsideDown, true, 7),
        ]
        for (orientation, mirrored, value) in expected {
            #expect(
                EXIFOrientation(videoOrientation: orientation, mirrored: mirrored).rawValue == value, "\(orientation) mirrored \(mirrored)")
        }
        // Every EXIF value is reachable exactly once.
        let all = Set(expected.map { EXIFOrientation(videoOrientation: $0.0, mirrored: $0.1) })
        #expect(all.count == 8)
    }

    @Test(arguments: EXIFOrientation.allCases)
    func encodedStillCarriesItsEXIF(_ orientation: EXIFOrientation) throws {
        let info = EXIFInfo(
            orientation: orientation, make: "swift-capture", model: "Virtual Camera (front)",
            dateTime: "2026:12:02 15:04:05")
        let frame = ImagingTestFrame.bars(.yuyv, width: 64, height: 32)
        let jpeg = try frame.withImage { try JPEGEncoder().encodeData($0, exif: info) }
        let markers = try JPEGMarkers(parsing: jpeg)
        // Exif requires APP1 right after SOI, without JFIF.
        #expect(markers.exifSegment?.lowerBound == 2)
        #expect(markers.jfifSegment == nil)
        let read = jpeg.withUnsafeBytes { EXIFInfo(jpeg: $0) }
        #expect(read == info)
        #expect(try JPEGDecoder().decode(jpeg, as: .rgb).header.width == 64)
    }

    @Test func shortStringsAreInlineAndMissingFieldsStayMissing() throws {
        for info in [
            EXIFInfo(orientation: .left), EXIFInfo(orientation: .down, make: "ab", model: "abc"),
            EXIFInfo(make: "abcd", model: String(repeating: "m", count: 300)),
        ] {
            var payload: [UInt8] = []
            info.appendPayload(to: &payload)
            let read = payload.withUnsafeBytes { EXIFInfo(app1Payload: $0) }
            var expected = info
            expected.model = info.model.map { String($0.prefix(EXIFInfo.maximumStringBytes)) }
            #expect(read == expected)
        }
    }

    @Test func nonASCIIBecomesQuestionMarksAndDatesFormat() {
        var payload: [UInt8] = []
        EXIFInfo(make: "Caméra").appendPayload(to: &payload)
        #expect(payload.withUnsafeBytes { EXIFInfo(app1Payload: $0) }?.make == "Cam?ra")
        let text = EXIFInfo.dateTimeString(Date(timeIntervalSince1970: 0))
        #expect(text.count == 19 && text.dropFirst(4).first == ":" && text.dropFirst(13).first == ":")
    }

    @Test func hostileEXIFPayloadsGiveNil() throws {
        var payload: [UInt8] = []
        EXIFInfo(orientation: .right, make: "Make-longer-than-four", model: "Model", dateTime: "2026:01:01 00:00:00").appendPayload(
            to: &payload)
        // Every truncation and many corruptions are read without trapping.
        for cut in 0..<payload.count {
            _ = Array(payload.prefix(cut)).withUnsafeBytes { EXIFInfo(app1Payload: $0) }
        }
        var rng = ImagingTestRandom(state: 99)
        for _ in 0..<500 {
            var bad = payload
            for _ in 0..<3 { bad[Int.random(in: 0..<bad.count, using: &rng)] = UInt8.random(in: 0...255, using: &rng) }
            _ = bad.withUnsafeBytes { EXIFInfo(app1Payload: $0) }
        }
        #expect([UInt8]("Exif\0\0MM\0\u{2A}\u{7F}\u{FF}\u{FF}\u{FF}".utf8).withUnsafeBytes { EXIFInfo(app1Payload: $0) } == nil)
        #expect([UInt8]("JFIF".utf8).withUnsafeBytes { EXIFInfo(app1Payload: $0) } == nil)
    }

    @Test func mjpegStillGetsEXIFAndTables() throws {
        let original = try sampleJPEG()
        let stripped = strippingHuffmanTables(original)
        let info = EXIFInfo(orientation: .right, make: "Make", model: "Model")
        var out: [UInt8] = []
        try withJPEGBytes(stripped) { (raw) throws(CaptureError) in _ = try MJPEG.makeStill(raw, exif: info, into: &out) }
        let m = try JPEGMarkers(parsing: out)
        #expect(m.hasHuffmanTables)
        // The camera's JFIF stays first, the Exif follows it.
        #expect(m.jfifSegment?.lowerBound == 2)
        #expect(m.exifSegment?.lowerBound == m.jfifSegment?.upperBound)
        #expect(out.withUnsafeBytes { EXIFInfo(jpeg: $0) } == info)
        let decoder = JPEGDecoder()
        #expect(try decoder.decode(out, as: .rgb).pixels == decoder.decode(original, as: .rgb).pixels)

        // A second pass replaces the Exif segment instead of adding one.
        let again = EXIFInfo(orientation: .left)
        var twice: [UInt8] = []
        try withJPEGBytes(out) { (raw) throws(CaptureError) in _ = try MJPEG.makeStill(raw, exif: again, into: &twice) }
        #expect(twice.withUnsafeBytes { EXIFInfo(jpeg: $0) } == again)
        #expect(twice.count < out.count + 20)
        // Without EXIF and with tables present the frame is unchanged.
        var same: [UInt8] = []
        try withJPEGBytes(original) { (raw) throws(CaptureError) in _ = try MJPEG.makeStill(raw, exif: nil, into: &same) }
        #expect(same == original)
    }

    // Found by the huffman fuzz target: a frame with two Exif segments kept one of them (the
    // parser names the last; only that one was replaced), so the still had two and read back
    // the camera's orientation.
    @Test func mjpegStillReplacesEveryEXIFSegment() throws {
        let original = try sampleJPEG()
        var twoExif: [UInt8] = [0xFF, 0xD8]
        EXIFInfo(orientation: .down, model: "Camera A").appendSegment(to: &twoExif)
        EXIFInfo(orientation: .left, model: "Camera B").appendSegment(to: &twoExif)
        twoExif += original[2...]
        #expect(
            twoExif.withUnsafeBytes { raw in
                JPEGMarkers.exifSegments(raw, from: 2, to: (try? JPEGMarkers(parsing: raw))?.frameOffset ?? 0).count
            } == 2)
        let info = EXIFInfo(orientation: .right, make: "Make", model: "Model")
        var out: [UInt8] = []
        try withJPEGBytes(twoExif) { (raw) throws(CaptureError) in _ = try MJPEG.makeStill(raw, exif: info, into: &out) }
        let m = try JPEGMarkers(parsing: out)
        #expect(out.withUnsafeBytes { JPEGMarkers.exifSegments($0, from: 2, to: m.frameOffset) }.count == 1)
        #expect(out.withUnsafeBytes { EXIFInfo(jpeg: $0) } == info)
        let decoder = JPEGDecoder()
        #expect(try decoder.decode(out, as: .rgb).pixels == decoder.decode(original, as: .rgb).pixels)
    }

    /// A driver's padding after EOI (v4l2loopback reports `bytesused` = `sizeimage` for a frame
    /// written before the reader's REQBUFS) stays out of a still, with or without tables or EXIF.
    @Test func mjpegStillDropsPaddingAfterEOI() throws {
        let original = try sampleJPEG()
        let padding = [UInt8](repeating: 0, count: 4096)
        var out: [UInt8] = []
        try withJPEGBytes(original + padding) { (raw) throws(CaptureError) in _ = try MJPEG.makeStill(raw, exif: nil, into: &out) }
        #expect(out == original)
        let stripped = strippingHuffmanTables(original)
        var fixed: [UInt8] = []
        try withJPEGBytes(stripped) { (raw) throws(CaptureError) in _ = try MJPEG.makeStill(raw, exif: nil, into: &fixed) }
        try withJPEGBytes(stripped + padding) { (raw) throws(CaptureError) in _ = try MJPEG.makeStill(raw, exif: nil, into: &out) }
        #expect(out == fixed)
        let info = EXIFInfo(orientation: .right)
        try withJPEGBytes(original) { (raw) throws(CaptureError) in _ = try MJPEG.makeStill(raw, exif: info, into: &fixed) }
        try withJPEGBytes(original + padding) { (raw) throws(CaptureError) in _ = try MJPEG.makeStill(raw, exif: info, into: &out) }
        #expect(out == fixed)
        // The complete-JPEG path (JPEG delivery of MJPEG frames) ends at EOI too.
        try withJPEGBytes(original + padding) { (raw) throws(CaptureError) in _ = try MJPEG.insertStandardHuffmanTables(raw, into: &out) }
        #expect(out == original)
    }

    /// A buffer holding this frame and then the tail of an older, longer one (v4l2loopback's
    /// first frame after REQBUFS): the still ends at this frame's EOI, not at the tail's.
    @Test func mjpegStillEndsAtTheFirstEOI() throws {
        let original = try sampleJPEG()
        let older = try sampleJPEG(width: 192, height: 128)
        #expect(older.count > original.count + 64)
        let stale = original + older[original.count...]
        var out: [UInt8] = []
        try withJPEGBytes(stale) { (raw) throws(CaptureError) in _ = try MJPEG.makeStill(raw, exif: nil, into: &out) }
        #expect(out.count == original.count && out == original)
        let exact = try stale.withUnsafeBytes { raw throws(CaptureError) in try JPEGMarkers(parsing: raw) }
        #expect(exact.endOffset == original.count)
        // The per-frame form trusts the trailing EOI (documented): the tail comes along.
        let fast = try stale.withUnsafeBytes { raw throws(CaptureError) in try JPEGMarkers(parsing: raw, trustingTrailingEOI: true) }
        #expect(fast.endOffset == stale.count)
        let decoder = JPEGDecoder()
        #expect(try decoder.decode(stale, as: .rgb).pixels == decoder.decode(original, as: .rgb).pixels)
    }
}
