// libFuzzer target: standard Huffman-table insertion and still assembly (with and without Exif)
// from untrusted MJPEG frames. The output of a frame that parsed must itself parse, with tables;
// a still is made exactly when the exact parser accepts the frame.
import CaptureBackend
import CaptureImaging

nonisolated(unsafe) private var output: [UInt8] = []

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzHuffman(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let bytes = UnsafeRawBufferPointer(start: data, count: size)
    // Per-frame insertion trusts a trailing EOI and skips the entropy-coded data (documented on
    // `JPEGMarkers(parsing:trustingTrailingEOI:)`): it accepts every frame the exact parser
    // accepts, and some more whose scan data is broken. Stills parse exactly.
    let exact = (try? JPEGMarkers(parsing: bytes)) != nil
    guard let markers = try? MJPEG.insertStandardHuffmanTables(bytes, into: &output) else {
        precondition(!exact, "insertion refused a frame the exact parser accepts")
        return 0
    }
    let again = output.withUnsafeBytes { try? JPEGMarkers(parsing: $0, trustingTrailingEOI: !exact) }
    precondition(again != nil, "the output of a valid frame does not parse")
    precondition(again!.hasHuffmanTables, "the output has no Huffman tables")
    precondition(again!.frame == markers.frame, "the frame header changed")
    let exif = EXIFInfo(orientation: .right, make: "fuzz", model: "m", dateTime: "2026:01:01 00:00:00")
    let made = (try? MJPEG.makeStill(bytes, exif: exif, into: &output)) != nil
    precondition(
        made == exact,
        made
            ? "makeStill took a frame the exact parser refuses"
            : "makeStill refused a frame the exact parser accepts")
    guard made else { return 0 }
    let still = output.withUnsafeBytes { raw -> (JPEGMarkers?, EXIFInfo?) in
        (try? JPEGMarkers(parsing: raw), EXIFInfo(jpeg: raw))
    }
    precondition(still.0?.hasHuffmanTables == true, "the still does not parse or has no tables")
    precondition(still.1?.orientation == .right, "the still's Exif did not survive")
    return 0
}
