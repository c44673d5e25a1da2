import CaptureBackend

/// Turns a frame clockwise by a quarter-turn multiple and mirrors it left to right (after the
/// turn, as a video data output's connection asks), in one pass into a buffer of the same pixel
/// format, tightly packed (V4L2's single-buffer layout: luma, then chroma).
///
/// Every uncompressed format `ImageLayout` reads: 4:2:0 (NV12, NV21, I420, YV12), grey and RGB
/// are moved sample for sample; the 4:2:2 formats (YUYV and kin, NV16, NV61, 4:2:2 planar),
/// whose chroma pairs lie along rows, take the chroma of the sensor pixel that lands first in
/// each pair when turned a quarter (nearest, no averaging). Sizes must be even for formats with
/// chroma subsampling. Plain value; any thread.
package struct FrameTransform: Sendable, Hashable {
    /// Clockwise quarter turns: 0, 90, 180 or 270.
    package let angle: Int
    package let mirrored: Bool

    package init?(angle: Int, mirrored: Bool) {
        // (A switch, not an array's `contains`: this runs for every frame of a data output.)
        switch angle {
        case 0, 90, 180, 270: break
        default: return nil
        }
        self.angle = angle
        self.mirrored = mirrored
    }

    package var isIdentity: Bool { angle == 0 && !mirrored }
    package var swapsSides: Bool { angle == 90 || angle == 270 }

    /// Whether `format` frames of this size can be transformed.
    package static func supports(_ format: PixelFormat, width: Int, height: Int) -> Bool {
        guard ImageLayout.supports(format), width > 0, height > 0 else { return false }
        let subsampled = (try? ImageLayout.nativeSubsampling(of: format)).map { $0 != .s444 && $0 != .grey } ?? false
        return !subsampled || (width % 2 == 0 && height % 2 == 0)
    }

    /// The output's size, bytes per line of its first plane and total bytes.
    package func output(_ format: PixelFormat, width: Int, height: Int) -> (width: Int, height: Int, bytesPerLine: Int, byteCount: Int)? {
        guard Self.supports(format, width: width, height: height) else { return nil }
        let (w, h) = swapsSides ? (height, width) : (width, height)
        switch format {
        case .yuyv, .uyvy, .yvyu, .vyuy: return (w, h, 2 * w, 2 * w * h)
        case .nv12, .nv21, .yuv420, .yvu420: return (w, h, w, w * h + w * h / 2)
        case .nv16, .nv61, .yuv422p: return (w, h, w, 2 * w * h)
        case .grey: return (w, h, w, w * h)
        case .rgb24, .bgr24: return (w, h, 3 * w, 3 * w * h)
        default: return (w, h, 4 * w, 4 * w * h)
        }
    }

    /// Where output pixel (x, y) comes from in the source, as `ix = ax*x + bx*y + cx` and
    /// `iy = ay*x + by*y + cy`.
    private struct Map {
        var ax = 0, bx = 0, cx = 0, ay = 0, by = 0, cy = 0
    }

    private func map(sourceWidth w: Int, sourceHeight h: Int) -> Map {
        // Mirroring happens after the turn: output x runs backwards first.
        let outW = swapsSides ? h : w
        let (sx, tx) = mirrored ? (-1, outW - 1) : (1, 0)  // x' = sx*x + tx
        var m = Map()
        switch angle {
        case 90:  // ix = y, iy = h-1-x'
            m.bx = 1
            m.ay = -sx; m.cy = h - 1 - tx
        case 180:  // ix = w-1-x', iy = h-1-y
            m.ax = -sx; m.cx = w - 1 - tx
            m.by = -1; m.cy = h - 1
        case 270:  // ix = w-1-y, iy = x'
            m.bx = -1; m.cx = w - 1
            m.ay = sx; m.cy = tx
        default:  // ix = x', iy = y
            m.ax = sx; m.cx = tx
            m.by = 1
        }
        return m
    }

    /// Transforms `source` into `output` (at least `output(...)`'s byte count). Throws
    /// `.unsupportedFormat` for formats or sizes it cannot take, `.invalidArgument` for a short
    /// output, `.corruptFrame` when the source's planes are shorter than its format needs.
    package func apply(_ source: ImageBuffer, into output: UnsafeMutableRawBufferPointer) throws(CaptureError) {
        guard let out = self.output(source.pixelFormat, width: source.width, height: source.height) else {
            throw CaptureError(.unsupportedFormat, "cannot turn \(source.pixelFormat) frames of \(source.width)x\(source.height)")
        }
        guard output.count >= out.byteCount, let o = output.baseAddress?.assumingMemoryBound(to: UInt8.self) else {
            throw CaptureError(.invalidArgument, "output buffer too small for a turned \(source.width)x\(source.height) frame")
        }
        let layout = try ImageLayout(source)
        let m = map(sourceWidth: layout.width, sourceHeight: layout.height)
        let (w, h) = (out.width, out.height)
        guard let y = layout.y?.assumingMemoryBound(to: UInt8.self) else { return }
        switch layout.kind {
        case .packed422(let y0, let y1, let cb, let cr):
            Self.packed(y, layout.yStride, m, o, w, h, offsets: (y0, y1, cb, cr))
        case .grey:
            Self.plane(y, layout.yStride, 1, 1, m, o, w, w, h, 1, 1, size: 1)
        case .rgb24, .bgr24:
            Self.plane(y, layout.yStride, 1, 1, m, o, 3 * w, w, h, 1, 1, size: 3)
        case .bgrx32:
            Self.plane(y, layout.yStride, 1, 1, m, o, 4 * w, w, h, 1, 1, size: 4)
        case .semiPlanar:
            guard let c = layout.cb?.assumingMemoryBound(to: UInt8.self) else { return }
            let sy = layout.chromaHalfHeight ? 2 : 1
            Self.plane(y, layout.yStride, 1, 1, m, o, w, w, h, 1, 1, size: 1)
            Self.plane(c, layout.cbStride, 2, sy, m, o + w * h, w, w / 2, h / sy, 2, sy, size: 2)
        case .planar:
            guard let cbP = layout.cb?.assumingMemoryBound(to: UInt8.self), let crP = layout.cr?.assumingMemoryBound(to: UInt8.self)
            else { return }
            let sy = layout.chromaHalfHeight ? 2 : 1
            let chroma = (w / 2) * (h / sy)
            // Memory order as the format's: YV12 has Cr first.
            let crFirst = source.pixelFormat == .yvu420
            Self.plane(y, layout.yStride, 1, 1, m, o, w, w, h, 1, 1, size: 1)
            Self.plane(cbP, layout.cbStride, 2, sy, m, o + w * h + (crFirst ? chroma : 0), w / 2, w / 2, h / sy, 2, sy, size: 1)
            Self.plane(crP, layout.crStride, 2, sy, m, o + w * h + (crFirst ? 0 : chroma), w / 2, w / 2, h / sy, 2, sy, size: 1)
        }
    }

    /// Writes an output plane of `ow`x`oh` samples of `size` bytes, `dStride` apart by rows:
    /// sample (i, j) stands for output pixel (i*osx, j*osy), which comes from source pixel `m`
    /// says, read from the source plane as sample (ix/isx, iy/isy).
    private static func plane(
        _ s: UnsafePointer<UInt8>, _ sStride: Int, _ isx: Int, _ isy: Int, _ m: Map,
        _ d: UnsafeMutablePointer<UInt8>, _ dStride: Int, _ ow: Int, _ oh: Int, _ osx: Int, _ osy: Int, size: Int
    ) {
        for j in 0..<oh {
            let row = d + j * dStride
            let py = j * osy
            // Source pixel of sample 0 of this row, and its step per sample.
            var ix = m.bx * py + m.cx, iy = m.by * py + m.cy
            let stepX = m.ax * osx, stepY = m.ay * osx
            switch size {
            case 1:
                for i in 0..<ow {
                    row[i] = s[(iy / isy) * sStride + ix / isx]
                    ix += stepX; iy += stepY
                }
            case 2:
                for i in 0..<ow {
                    let p = s + (iy / isy) * sStride + (ix / isx) * 2
                    row[2 * i] = p[0]; row[2 * i + 1] = p[1]
                    ix += stepX; iy += stepY
                }
            default:
                for i in 0..<ow {
                    let p = s + (iy / isy) * sStride + (ix / isx) * size
                    for k in 0..<size { row[size * i + k] = p[k] }
                    ix += stepX; iy += stepY
                }
            }
        }
    }

    /// Packed 4:2:2: each output pair takes both pixels' luma and the first pixel's chroma.
    private static func packed(
        _ s: UnsafePointer<UInt8>, _ sStride: Int, _ m: Map, _ d: UnsafeMutablePointer<UInt8>, _ w: Int, _ h: Int,
        offsets: (y0: Int, y1: Int, cb: Int, cr: Int)
    ) {
        for y in 0..<h {
            let row = d + y * 2 * w
            var ix = m.bx * y + m.cx, iy = m.by * y + m.cy
            for pair in 0..<(w / 2) {
                let a = s + iy * sStride + 4 * (ix >> 1)
                let aLuma = a[ix & 1 == 0 ? offsets.y0 : offsets.y1]
                let (bx, by) = (ix + m.ax, iy + m.ay)
                let b = s + by * sStride + 4 * (bx >> 1)
                let out = row + 4 * pair
                out[offsets.y0] = aLuma
                out[offsets.y1] = b[bx & 1 == 0 ? offsets.y0 : offsets.y1]
                out[offsets.cb] = a[offsets.cb]
                out[offsets.cr] = a[offsets.cr]
                ix += 2 * m.ax; iy += 2 * m.ay
            }
        }
    }
}
