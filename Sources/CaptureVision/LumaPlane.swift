import Capture
import CaptureBackend
import CaptureImaging

/// The detector's own copy of a frame's luma (8 bits a pixel, rows `width` apart): taken from
/// the camera's buffer (a copy of the Y plane, or the Y bytes of a packed 4:2:2 frame), or
/// decoded from an MJPEG frame, so that the driver buffer goes back before detection starts.
/// Its memory grows to the largest frame seen and is then reused: no allocation per frame.
///
/// Owned by the detection thread.
final class LumaPlane {
    private(set) var width = 0
    private(set) var height = 0
    private var memory: UnsafeMutableRawPointer?
    private var capacity = 0
    private let decoder = JPEGDecoder()

    deinit { memory?.deallocate() }

    /// The luma, rows `width` bytes apart; valid until the next `load`.
    var bytes: UnsafePointer<UInt8>? { memory.map { UnsafePointer($0.assumingMemoryBound(to: UInt8.self)) } }

    /// Takes `sample`'s luma. Throws `.unsupportedFormat` for formats without one it knows,
    /// `.corruptFrame` for a JPEG that does not decode.
    func load(_ sample: SampleBuffer) throws(CaptureError) {
        guard let format = sample.pixelFormat, let size = sample.dimensions else {
            throw CaptureError(.unsupportedFormat, "the metadata output got a sample without a picture")
        }
        let w = size.width, h = size.height
        if format == .mjpeg || format == .jpeg {
            let header = try sample.withUnsafeBytes { jpeg in Result { () throws(CaptureError) in try decoder.readHeader(jpeg) } }.get()
            let out = reserve(header.width, header.height)
            _ = try sample.withUnsafeBytes { jpeg in
                Result { () throws(CaptureError) in
                    try decoder.decode(
                        jpeg, as: .grey, into: UnsafeMutableRawBufferPointer(start: out, count: header.width * header.height))
                }
            }.get()
            return
        }
        let stride = sample.bytesPerRow(plane: 0)
        let (step, offset): (Int, Int)
        switch format {
        case .yuyv, .yvyu: (step, offset) = (2, 0)
        case .uyvy, .vyuy: (step, offset) = (2, 1)
        case .nv12, .nv21, .nv16, .nv61, .yuv420, .yvu420, .yuv422p, .grey: (step, offset) = (1, 0)
        case .rgb24, .bgr24: (step, offset) = (3, -1)
        default:
            throw CaptureError(.unsupportedFormat, "the metadata output cannot read \(format) frames; choose a YUV, RGB or MJPEG format")
        }
        guard stride >= w * step else { throw CaptureError(.corruptFrame, "a \(format) frame with \(stride) bytes a row for \(w) pixels") }
        let out = reserve(w, h).assumingMemoryBound(to: UInt8.self)
        let complete = sample.withUnsafeBytes { (raw: UnsafeRawBufferPointer) -> Bool in
            guard let base = raw.baseAddress, raw.count >= stride * (h - 1) + w * step else { return false }
            let src = base.assumingMemoryBound(to: UInt8.self)
            // A plane without padding in one copy: row by row it cost twice as much (640x480 from
            // a buffer another thread just wrote: 0.075 against 0.037 ms).
            if step == 1 && stride == w {
                out.update(from: src, count: w * h)
                return true
            }
            for y in 0..<h {
                let row = src + y * stride, dst = out + y * w
                switch step {
                case 1: dst.update(from: row, count: w)
                case 2: for x in 0..<w { dst[x] = row[2 * x + offset] }
                default:
                    // Rec. 601 luma; red first for RGB24, last for BGR24.
                    let (r, b) = format == .rgb24 ? (0, 2) : (2, 0)
                    for x in 0..<w {
                        let p = row + 3 * x
                        let red: Int = 77 * Int(p[r]), green: Int = 150 * Int(p[1]), blue: Int = 29 * Int(p[b])
                        dst[x] = UInt8((red + green + blue + 128) >> 8)
                    }
                }
            }
            return true
        }
        if !complete { throw CaptureError(.corruptFrame, "a \(format) frame is short of \(w)x\(h) pixels") }
    }

    private func reserve(_ w: Int, _ h: Int) -> UnsafeMutableRawPointer {
        if w * h > capacity {
            memory?.deallocate()
            memory = .allocate(byteCount: w * h, alignment: 64)
            capacity = w * h
        }
        width = w
        height = h
        return memory!
    }
}
