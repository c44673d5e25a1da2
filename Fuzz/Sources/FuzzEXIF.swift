// libFuzzer target: Exif reading, both from a bare APP1 payload and from a whole JPEG. What
// parses must write back, and writing is a fixed point: the written payload reads back to
// values that write the same bytes again, with the orientation kept. (The first read may hold
// text the writer normalises: strings over 255 bytes, bytes outside printable ASCII.)
import CaptureBackend
import CaptureImaging

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzEXIF(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let bytes = UnsafeRawBufferPointer(start: data, count: size)
    _ = EXIFInfo(jpeg: bytes)
    guard let info = EXIFInfo(app1Payload: bytes) else { return 0 }
    var first: [UInt8] = []
    info.appendPayload(to: &first)
    guard let back = first.withUnsafeBytes({ EXIFInfo(app1Payload: $0) }) else {
        preconditionFailure("the written payload of \(info) does not read back")
    }
    precondition(back.orientation == info.orientation, "orientation changed: \(info) -> \(back)")
    var second: [UInt8] = []
    back.appendPayload(to: &second)
    precondition(first == second, "writing is not a fixed point: \(info) -> \(back)")
    return 0
}
