// libFuzzer target: the TurboJPEG-backed decoder with a pixel cap (as libjpeg-turbo's own fuzzers
// do), every output layout in turn, and every output byte read so ASan sees partial writes.
import CaptureBackend
import CaptureImaging

nonisolated(unsafe) private let decoder = JPEGDecoder(maximumPixelCount: 1 << 20)
nonisolated(unsafe) private var round = 0

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzDecoder(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let bytes = UnsafeRawBufferPointer(start: data, count: size)
    let layouts = JPEGDecoder.PixelLayout.allCases
    round &+= 1
    let layout = layouts[round % layouts.count]
    guard let (header, pixels) = try? decoder.decode(bytes, as: layout) else { return 0 }
    precondition(header.width * header.height <= 1 << 20, "the pixel cap was not applied")
    precondition(pixels.count == header.width * header.height * layout.bytesPerPixel)
    var sum: UInt8 = 0
    for p in pixels { sum &+= p }
    // Keeps the read from being optimised away.
    if sum == 0x5A && pixels.count == 1 { print("") }
    return 0
}
