import CaptureImaging
import CaptureBackend
#if canImport(Glibc)
import Glibc
#endif

/// Makes one frame of a virtual camera's ``VirtualCamera/Picture`` in a stream's format: scaled
/// (box-averaged when shrinking, bilinear when growing) and placed as the fit says, the controls'
/// adjustments applied, converted to the pixel format (chroma averaged over the pixels it covers),
/// or JPEG-compressed for MJPEG. Done once per picture version; each frame is then a copy.
///
/// A namespace; any thread.
package enum PictureRenderer {
    /// The frame's bytes (raw formats: `ActiveFormat.sizeImage` bytes; MJPEG: a whole JPEG).
    package static func render(
        _ picture: VirtualCamera.Picture, fit: VirtualCamera.PictureFit, adjust: PatternColor.Adjustments,
        width: Int, height: Int, pixelFormat: PixelFormat, range: ColorRange, omitsHuffmanTables: Bool
    ) throws(CaptureError) -> [UInt8] {
        let rgb = scale(picture, fit: fit, width: width, height: height)
        if pixelFormat == .mjpeg {
            // As the pattern's MJPEG: full-range planar 4:2:2, compressed by the imaging layer.
            var planes = [UInt8](repeating: 0, count: width * height * 2)
            planes.withUnsafeMutableBytes { out in
                write(rgb, adjust: adjust, width: width, height: height, range: .full, layout: .planar(rows: 1, cbFirst: true), into: out)
            }
            let encoder = JPEGEncoder(quality: 90, subsampling: .s422)
            let encoded = planes.withUnsafeBytes { raw in
                Result { () throws(CaptureError) -> [UInt8] in
                    Array(
                        try encoder.encode(raw, pixelFormat: .yuv422p, width: width, height: height, bytesPerLine: width, colorRange: .full)
                    )
                }
            }
            var jpeg = try encoded.get()
            if omitsHuffmanTables {
                let n = jpeg.withUnsafeMutableBytes { MJPEGFrameEncoder.removeHuffmanTables($0) }
                jpeg.removeLast(jpeg.count - n)
            }
            return jpeg
        }
        guard let layout = PatternLayout(pixelFormat) else {
            throw CaptureError(.unsupportedFormat, "the virtual camera cannot draw a picture in \(pixelFormat)")
        }
        var frame = [UInt8](repeating: 0, count: layout.planeFormat(width: width, height: height).sizeImage)
        frame.withUnsafeMutableBytes { out in
            write(rgb, adjust: adjust, width: width, height: height, range: range, layout: layout, into: out)
        }
        return frame
    }

    /// The picture scaled into a black `width` x `height` RGB frame.
    package static func scale(_ picture: VirtualCamera.Picture, fit: VirtualCamera.PictureFit, width: Int, height: Int) -> [UInt8] {
        let place = fit.placement(pictureWidth: picture.width, pictureHeight: picture.height, frameWidth: width, frameHeight: height)
        var out = [UInt8](repeating: 0, count: width * height * 3)
        let pw = picture.width, ph = picture.height
        // Source pixels per frame pixel, on each axis.
        let sx = Double(pw) / place.width, sy = Double(ph) / place.height
        let x0 = max(0, Int(place.x.rounded())), x1 = min(width, Int((place.x + place.width).rounded()))
        let y0 = max(0, Int(place.y.rounded())), y1 = min(height, Int((place.y + place.height).rounded()))
        guard x0 < x1, y0 < y1 else { return out }
        picture.rgb.withUnsafeBufferPointer { src in
            out.withUnsafeMutableBufferPointer { dst in
                for y in y0..<y1 {
                    let fy0 = (Double(y) - place.y) * sy, fy1 = (Double(y + 1) - place.y) * sy
                    for x in x0..<x1 {
                        let fx0 = (Double(x) - place.x) * sx, fx1 = (Double(x + 1) - place.x) * sx
                        let o = (y * width + x) * 3
                        if sx > 1 || sy > 1 {
                            box(src, pw, ph, fx0, fx1, fy0, fy1, dst, o)
                        } else {
                            bilinear(src, pw, ph, (fx0 + fx1) / 2 - 0.5, (fy0 + fy1) / 2 - 0.5, dst, o)
                        }
                    }
                }
            }
        }
        return out
    }

    /// The mean of the source pixels under one frame pixel's footprint.
    private static func box(
        _ src: UnsafeBufferPointer<UInt8>, _ pw: Int, _ ph: Int, _ fx0: Double, _ fx1: Double, _ fy0: Double,
        _ fy1: Double, _ dst: UnsafeMutableBufferPointer<UInt8>, _ o: Int
    ) {
        let ax = min(pw - 1, max(0, Int(fx0))), bx = min(pw, max(ax + 1, Int(fx1.rounded())))
        let ay = min(ph - 1, max(0, Int(fy0))), by = min(ph, max(ay + 1, Int(fy1.rounded())))
        var r = 0, g = 0, b = 0
        for yy in ay..<by {
            var i = (yy * pw + ax) * 3
            for _ in ax..<bx {
                r += Int(src[i]); g += Int(src[i + 1]); b += Int(src[i + 2])
                i += 3
            }
        }
        let n = (bx - ax) * (by - ay)
        dst[o] = UInt8((r + n / 2) / n)
        dst[o + 1] = UInt8((g + n / 2) / n)
        dst[o + 2] = UInt8((b + n / 2) / n)
    }

    /// The source interpolated at (`fx`, `fy`) in source pixel coordinates (centres at integers).
    private static func bilinear(
        _ src: UnsafeBufferPointer<UInt8>, _ pw: Int, _ ph: Int, _ fx: Double, _ fy: Double,
        _ dst: UnsafeMutableBufferPointer<UInt8>, _ o: Int
    ) {
        let cx = min(Double(pw - 1), max(0, fx)), cy = min(Double(ph - 1), max(0, fy))
        let ix = Int(cx), iy = Int(cy)
        let jx = min(pw - 1, ix + 1), jy = min(ph - 1, iy + 1)
        let tx = cx - Double(ix), ty = cy - Double(iy)
        for c in 0..<3 {
            let a = Double(src[(iy * pw + ix) * 3 + c]), b = Double(src[(iy * pw + jx) * 3 + c])
            let d = Double(src[(jy * pw + ix) * 3 + c]), e = Double(src[(jy * pw + jx) * 3 + c])
            let v = (a * (1 - tx) + b * tx) * (1 - ty) + (d * (1 - tx) + e * tx) * ty
            dst[o + c] = UInt8(min(255, max(0, v.rounded())))
        }
    }

    /// Converts the scaled RGB frame into `layout`'s bytes at `range`, with the adjustments.
    private static func write(
        _ rgb: [UInt8], adjust: PatternColor.Adjustments, width: Int, height: Int, range: ColorRange,
        layout: PatternLayout, into out: UnsafeMutableRawBufferPointer
    ) {
        let n = width * height
        var ys = [UInt8](repeating: 0, count: n), cbs = ys, crs = ys
        var adjusted = rgb
        for i in 0..<n {
            let r = Int(rgb[3 * i]), g = Int(rgb[3 * i + 1]), b = Int(rgb[3 * i + 2])
            if adjust == .neutral {
                (ys[i], cbs[i], crs[i]) = ycbcr(r, g, b, range)
            } else {
                let c = PatternColor(r: Double(r) / 255, g: Double(g) / 255, b: Double(b) / 255, range: range, adjust: adjust)
                (ys[i], cbs[i], crs[i]) = (c.y, c.cb, c.cr)
                (adjusted[3 * i], adjusted[3 * i + 1], adjusted[3 * i + 2]) = (c.r, c.g, c.b)
            }
        }
        let p = out.bindMemory(to: UInt8.self)
        // Mean chroma over the `cols` x `rows` pixels at (x, y).
        func chroma(_ plane: [UInt8], _ x: Int, _ y: Int, cols: Int, rows: Int) -> UInt8 {
            var sum = 0
            for dy in 0..<rows { for dx in 0..<cols { sum += Int(plane[(y + dy) * width + x + dx]) } }
            return UInt8((sum + cols * rows / 2) / (cols * rows))
        }
        switch layout {
        case .packed422(let y0, let cb, let y1, let cr):
            for y in 0..<height {
                for x in stride(from: 0, to: width, by: 2) {
                    let o = (y * width + x) * 2, i = y * width + x
                    p[o + y0] = ys[i]
                    p[o + y1] = ys[i + 1]
                    p[o + cb] = chroma(cbs, x, y, cols: 2, rows: 1)
                    p[o + cr] = chroma(crs, x, y, cols: 2, rows: 1)
                }
            }
        case .semiPlanar(let rows, let cbFirst):
            for i in 0..<n { p[i] = ys[i] }
            for y in stride(from: 0, to: height, by: rows) {
                for x in stride(from: 0, to: width, by: 2) {
                    let o = n + (y / rows) * width + x
                    p[o + (cbFirst ? 0 : 1)] = chroma(cbs, x, y, cols: 2, rows: rows)
                    p[o + (cbFirst ? 1 : 0)] = chroma(crs, x, y, cols: 2, rows: rows)
                }
            }
        case .planar(let rows, let cbFirst):
            for i in 0..<n { p[i] = ys[i] }
            let cw = width / 2, plane = cw * (height / rows)
            for y in stride(from: 0, to: height, by: rows) {
                for x in stride(from: 0, to: width, by: 2) {
                    let o = (y / rows) * cw + x / 2
                    p[n + (cbFirst ? 0 : plane) + o] = chroma(cbs, x, y, cols: 2, rows: rows)
                    p[n + (cbFirst ? plane : 0) + o] = chroma(crs, x, y, cols: 2, rows: rows)
                }
            }
        case .rgb(let ri, let gi, let bi):
            for i in 0..<n {
                p[3 * i + ri] = adjusted[3 * i]
                p[3 * i + gi] = adjusted[3 * i + 1]
                p[3 * i + bi] = adjusted[3 * i + 2]
            }
        case .grey:
            for i in 0..<n { p[i] = ys[i] }
        }
    }

    /// Rec. 601 Y'CbCr of an sRGB pixel, in fixed point (as JFIF for full range).
    @inline(__always)
    private static func ycbcr(_ r: Int, _ g: Int, _ b: Int, _ range: ColorRange) -> (UInt8, UInt8, UInt8) {
        func clamp(_ v: Int) -> UInt8 { UInt8(min(255, max(0, v))) }
        switch range {
        case .full:
            return (
                clamp((77 * r + 150 * g + 29 * b + 128) >> 8),
                clamp(128 + ((-43 * r - 85 * g + 128 * b + 128) >> 8)),
                clamp(128 + ((128 * r - 107 * g - 21 * b + 128) >> 8))
            )
        case .limited:
            return (
                clamp(16 + ((66 * r + 129 * g + 25 * b + 128) >> 8)),
                clamp(128 + ((-38 * r - 74 * g + 112 * b + 128) >> 8)),
                clamp(128 + ((112 * r - 94 * g - 18 * b + 128) >> 8))
            )
        }
    }
}
