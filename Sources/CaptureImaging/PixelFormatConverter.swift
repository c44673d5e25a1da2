import CaptureBackend
internal import CJPEGShim

/// Converts frames into a pixel format the device cannot deliver (for the video data output's
/// `videoSettings`): YUV camera formats, GREY, RGB and MJPEG into BGRA, and YUV, GREY and MJPEG
/// into NV12 or YUYV.
///
/// BT.601 matrix; YUV sources use their `colorRange` (limited for cameras, full for decoded
/// JPEG); NV12/YUYV are written in limited range, as cameras deliver them. Chroma is averaged
/// when rows are dropped (4:2:2 → 4:2:0) and repeated when rows are added. One converter per
/// thread (it keeps a JPEG decoder and its plane memory).
package final class PixelFormatConverter {
    /// B, G, R, A bytes in memory: V4L2 `AR24` (`V4L2_PIX_FMT_ABGR32`), AVFoundation's 32BGRA.
    package static let bgra32 = PixelFormat(fourCC: "AR24")!

    /// Formats `convert` can write.
    package static let destinations: Set<PixelFormat> = [bgra32, .xbgr32, .nv12, .yuyv]

    package static func canConvert(from source: PixelFormat, to destination: PixelFormat) -> Bool {
        guard destinations.contains(destination) else { return false }
        if source.isCompressed { return true }
        guard ImageLayout.supports(source) else { return false }
        let isRGB = source == .rgb24 || source == .bgr24 || source == .xbgr32 || source == bgra32
        return !isRGB || destination == bgra32 || destination == .xbgr32
    }

    /// Bytes per line and bytes of a tightly packed frame in `format` (NV12 and YUYV rows have an
    /// even number of pixels). Nil for formats `convert` cannot write or impossible sizes.
    package static func frameSize(_ format: PixelFormat, width: Int, height: Int) -> (bytesPerLine: Int, byteCount: Int)? {
        guard width > 0, height > 0, width <= ImageLayout.maximumDimension, height <= ImageLayout.maximumDimension else { return nil }
        let even = (width + 1) & ~1
        switch format {
        case bgra32, .xbgr32: return (width * 4, width * 4 * height)
        case .yuyv: return (even * 2, even * 2 * height)
        case .nv12: return (even, even * height + even * ((height + 1) / 2))
        default: return nil
        }
    }

    private var decoder: JPEGDecoder?

    package init() {}

    /// Converts `source` into `output`, laid out as `destination` with rows `bytesPerLine` apart
    /// (0: tightly packed; for NV12 the chroma plane follows the luma plane at the same pitch).
    /// Throws `.unsupportedFormat` for pairs `canConvert` rejects, `.invalidArgument` when
    /// `output` is too small, `.corruptFrame` for damaged frames (MJPEG that does not decode,
    /// planes smaller than the format needs).
    package func convert(
        _ source: ImageBuffer, to destination: PixelFormat, into output: UnsafeMutableRawBufferPointer,
        bytesPerLine: Int = 0
    ) throws(CaptureError) {
        guard Self.canConvert(from: source.pixelFormat, to: destination),
            let natural = Self.frameSize(destination, width: source.width, height: source.height)
        else {
            throw CaptureError(.unsupportedFormat, "cannot convert \(source.pixelFormat) frames to \(destination)")
        }
        let pitch = bytesPerLine == 0 ? natural.bytesPerLine : bytesPerLine
        let rows = destination == .nv12 ? source.height + (source.height + 1) / 2 : source.height
        let (need, overflow) = pitch.multipliedReportingOverflow(by: rows)
        guard pitch >= natural.bytesPerLine, !overflow, output.count >= need, let out = output.baseAddress else {
            throw CaptureError(.invalidArgument, "output buffer too small for \(source.width)x\(source.height) \(destination)")
        }
        let o = out.assumingMemoryBound(to: UInt8.self)

        if source.pixelFormat.isCompressed {
            let decoder = self.decoder ?? JPEGDecoder()
            self.decoder = decoder
            let jpeg = source.plane0.bytes
            let header = try decoder.readHeader(jpeg)
            guard header.width == source.width, header.height == source.height else {
                throw CaptureError(
                    .corruptFrame, "JPEG: the frame is \(header.width)x\(header.height), expected \(source.width)x\(source.height)")
            }
            if destination == Self.bgra32 || destination == .xbgr32 {
                try decoder.decode(jpeg, as: .bgra, into: output, bytesPerLine: pitch)
                return
            }
            try decoder.decodeToPlanes(jpeg) { (planes) throws(CaptureError) in
                try self.convert(planes, to: destination, into: output, bytesPerLine: pitch)
            }
            return
        }

        let layout = try ImageLayout(source)
        switch destination {
        case .nv12: Self.toNV12(layout, o, pitch)
        case .yuyv: Self.toYUYV(layout, o, pitch)
        default: Self.toBGRA(layout, o, pitch)
        }
    }

    // MARK: sample access

    private struct Sampler {
        package let layout: ImageLayout
        package let y: UnsafePointer<UInt8>
        package let cb: UnsafePointer<UInt8>?
        package let cr: UnsafePointer<UInt8>?

        package init(_ layout: ImageLayout) {
            self.layout = layout
            // ImageLayout checked every plane it returns.
            y = layout.y!.assumingMemoryBound(to: UInt8.self)
            cb = layout.cb?.assumingMemoryBound(to: UInt8.self)
            cr = layout.cr?.assumingMemoryBound(to: UInt8.self)
        }

        @inline(__always) package func luma(_ row: Int, _ x: Int) -> Int {
            let r = y + row * layout.yStride
            switch layout.kind {
            case .packed422(let y0, let y1, _, _): return Int(r[4 * (x >> 1) + (x & 1 == 0 ? y0 : y1)])
            default: return Int(r[x])
            }
        }

        /// Chroma pair `i` of source luma row `row` (rows map onto chroma rows as the format says).
        @inline(__always) package func chroma(_ row: Int, _ i: Int) -> (Int, Int) {
            switch layout.kind {
            case .packed422(_, _, let cbOffset, let crOffset):
                let g = y + row * layout.yStride + 4 * i
                return (Int(g[cbOffset]), Int(g[crOffset]))
            case .semiPlanar(let cbFirst):
                let c = cb! + (layout.chromaHalfHeight ? row >> 1 : row) * layout.cbStride + 2 * i
                return cbFirst ? (Int(c[0]), Int(c[1])) : (Int(c[1]), Int(c[0]))
            case .planar:
                let cr0 = layout.chromaHalfHeight ? row >> 1 : row
                return (Int(cb![cr0 * layout.cbStride + i]), Int(cr![cr0 * layout.crStride + i]))
            default:
                return (128, 128)
            }
        }
    }

    @inline(__always) private static func clamp(_ v: Int) -> UInt8 { UInt8(min(255, max(0, v))) }
    @inline(__always) private static func limitedLuma(_ v: Int, full: Bool) -> UInt8 {
        full ? UInt8((219 * v + 4207) / 255) : UInt8(v)
    }
    @inline(__always) private static func limitedChroma(_ v: Int, full: Bool) -> UInt8 {
        full ? UInt8((224 * v + 4095) / 255) : UInt8(v)
    }

    // MARK: conversions

    private static func toBGRA(_ layout: ImageLayout, _ out: UnsafeMutablePointer<UInt8>, _ pitch: Int) {
        let s = Sampler(layout)
        let w = layout.width
        let limited = layout.colorRange == .limited
        for row in 0..<layout.height {
            let d = out + row * pitch
            let src = s.y + row * layout.yStride
            switch layout.kind {
            case .rgb24, .bgr24, .bgrx32:
                let step = layout.kind == .bgrx32 ? 4 : 3
                let rOffset = layout.kind == .rgb24 ? 0 : 2
                for x in 0..<w {
                    d[4 * x] = src[step * x + 2 - rOffset]
                    d[4 * x + 1] = src[step * x + 1]
                    d[4 * x + 2] = src[step * x + rOffset]
                    d[4 * x + 3] = 255
                }
            case .packed422(let y0, _, let cbOffset, let crOffset):
                cv4l2_yuv_to_bgra_row(src + y0, 2, src + cbOffset, src + crOffset, 4, w, limited ? 1 : 0, d)
            case .semiPlanar(let cbFirst):
                let c = s.cb! + (layout.chromaHalfHeight ? row >> 1 : row) * layout.cbStride
                cv4l2_yuv_to_bgra_row(src, 1, c + (cbFirst ? 0 : 1), c + (cbFirst ? 1 : 0), 2, w, limited ? 1 : 0, d)
            case .planar:
                let c = layout.chromaHalfHeight ? row >> 1 : row
                cv4l2_yuv_to_bgra_row(src, 1, s.cb! + c * layout.cbStride, s.cr! + c * layout.crStride, 1, w, limited ? 1 : 0, d)
            case .grey:
                for x in 0..<w {
                    let (u, v) = s.chroma(row, x >> 1)
                    let du = u - 128, dv = v - 128
                    let c = limited ? (s.luma(row, x) - 16) * 298 : s.luma(row, x) * 256
                    let p = d + 4 * x
                    if limited {
                        p[0] = clamp((c + 516 * du + 128) >> 8)
                        p[1] = clamp((c - 100 * du - 208 * dv + 128) >> 8)
                        p[2] = clamp((c + 409 * dv + 128) >> 8)
                    } else {
                        p[0] = clamp((c + 454 * du + 128) >> 8)
                        p[1] = clamp((c - 88 * du - 183 * dv + 128) >> 8)
                        p[2] = clamp((c + 359 * dv + 128) >> 8)
                    }
                    p[3] = 255
                }
            }
        }
    }

    private static func toNV12(_ layout: ImageLayout, _ out: UnsafeMutablePointer<UInt8>, _ pitch: Int) {
        let s = Sampler(layout)
        let w = layout.width, h = layout.height, cw = layout.chromaWidth
        let full = layout.colorRange == .full
        for row in 0..<h {
            let d = out + row * pitch
            for x in 0..<w { d[x] = limitedLuma(s.luma(row, x), full: full) }
            if w & 1 == 1 { d[w] = d[w - 1] }
        }
        let chroma = out + h * pitch
        for k in 0..<(h + 1) / 2 {
            let d = chroma + k * pitch
            let a = min(2 * k, h - 1), b = min(2 * k + 1, h - 1)
            // Sources with a chroma row per luma row (4:2:2) average the two rows.
            let average = !layout.chromaHalfHeight && a != b
            for i in 0..<cw {
                var (u, v) = s.chroma(a, i)
                if average {
                    let (u2, v2) = s.chroma(b, i)
                    u = (u + u2 + 1) >> 1
                    v = (v + v2 + 1) >> 1
                }
                d[2 * i] = limitedChroma(u, full: full)
                d[2 * i + 1] = limitedChroma(v, full: full)
            }
        }
    }

    private static func toYUYV(_ layout: ImageLayout, _ out: UnsafeMutablePointer<UInt8>, _ pitch: Int) {
        let s = Sampler(layout)
        let w = layout.width, cw = layout.chromaWidth
        let full = layout.colorRange == .full
        for row in 0..<layout.height {
            let d = out + row * pitch
            for i in 0..<cw {
                let (u, v) = s.chroma(row, i)
                d[4 * i] = limitedLuma(s.luma(row, 2 * i), full: full)
                d[4 * i + 1] = limitedChroma(u, full: full)
                d[4 * i + 2] = limitedLuma(s.luma(row, min(2 * i + 1, w - 1)), full: full)
                d[4 * i + 3] = limitedChroma(v, full: full)
            }
        }
    }
}
