// libFuzzer target: JPEG marker parsing and MJPEG frame validation over arbitrary bytes.
// A thrown CaptureError is the expected outcome for junk; a crash or sanitizer report is a bug.
import CaptureBackend
import CaptureImaging

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzMarkers(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let bytes = UnsafeRawBufferPointer(start: data, count: size)
    do {
        let m = try JPEGMarkers(parsing: bytes)
        // What the parser claims must lie inside the input.
        precondition(m.frameOffset >= 0 && m.frameOffset < m.endOffset && m.endOffset <= size, "offsets outside the input")
        precondition(m.firstScanOffset > m.frameOffset && m.firstScanOffset <= m.endOffset, "scan before the frame header")
        if let r = m.exifSegment { precondition(r.lowerBound >= 0 && r.upperBound <= size) }
        if let r = m.jfifSegment { precondition(r.lowerBound >= 0 && r.upperBound <= size) }
        precondition(m.frame.width >= 0 && m.frame.height >= 0)
        _ = m.frame.subsampling
        _ = try? MJPEG.validateFrame(bytes, width: m.frame.width, height: m.frame.height)
        precondition(MJPEG.hasHuffmanTables(bytes) == m.hasHuffmanTables)
    } catch {
        precondition(error.code == .corruptFrame || error.code == .unsupportedFormat, "unexpected error kind \(error.code)")
        precondition(!MJPEG.hasHuffmanTables(bytes))
    }
    return 0
}
