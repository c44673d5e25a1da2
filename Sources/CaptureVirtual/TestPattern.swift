import CaptureImaging
import CaptureBackend
#if canImport(Glibc)
import Glibc
#endif

// The virtual camera's picture: the same 75 % colour bars as vivid's default pattern (white,
// yellow, cyan, green, magenta, red, blue, black; sRGB 191 = 75 %, black 0), Rec. 601 Y'CbCr,
// limited range for raw YUV formats and full range for MJPEG (JFIF) and RGB. From the top:
//
//   rows [0, counterRows)             frame counter: the sequence number, 32 cells, MSB first,
//                                     white = 1, black = 0; or, while the camera shows the time
//                                     code, rows [0, 16) hold it instead (32 cells of 16x16
//                                     pixels from x = 0, MSB first: the capture time in ms since
//                                     the Unix epoch, modulo 2^32) and the counter is not drawn
//   rows [counterRows, barsTop)       black band with a white box that moves with the sequence
//   rows [barsTop, height)            eight equal colour bars; a camera's label, if it has
//                                     one, in a black box at the right edge just under the band
//
// Rendering is cheap: a buffer gets the whole picture once (and again after a control change);
// each frame only redraws the band and the counter.

/// Where the parts of the picture sit for one frame size. Shared by the renderer and the reader.
package struct PatternGeometry: Sendable, Hashable {
    package static let counterBits = 32
    package let width: Int
    package let height: Int
    package let counterRows: Int
    package let cellWidth: Int
    package let bandRows: Int
    package let boxSize: Int
    package let boxStep: Int
    package var barsTop: Int { counterRows + bandRows }

    package init(width: Int, height: Int) {
        self.width = width
        self.height = height
        counterRows = height >= 128 ? 16 : 8
        cellWidth = max(2, (width / Self.counterBits) & ~1)
        bandRows = max(2, (height / 8) & ~1)
        boxSize = bandRows
        boxStep = max(2, (width / 64) & ~1)
    }

    /// Left edge of colour bar `i` (0...8; 8 is the right edge), even for chroma subsampling.
    package func barX(_ i: Int) -> Int { i >= 8 ? width : (i * width / 8) & ~1 }

    /// Left edge of the moving box for a sequence number.
    package func boxX(sequence: UInt32) -> Int {
        let travel = max(1, (width - boxSize) / boxStep + 1)
        return Int(sequence % UInt32(travel)) * boxStep
    }

    /// Centre of counter cell `bit` (0 = most significant), for reading the counter back.
    package func cellCentre(_ bit: Int) -> (x: Int, y: Int) { (bit * cellWidth + cellWidth / 2, counterRows / 2) }

    /// The time code's cells: 16x16 pixels each, 32 of them from x = 0 in the top 16 rows.
    package static let timeCodeCell = 16
    /// Whether frames of this size hold the whole time code (512 pixels wide, 16 high).
    package var holdsTimeCode: Bool { width >= Self.counterBits * Self.timeCodeCell && height >= Self.timeCodeCell }
}

/// A colour in every form the renderer writes.
package struct PatternColor: Sendable, Hashable {
    package var y: UInt8
    package var cb: UInt8
    package var cr: UInt8
    package var r: UInt8
    package var g: UInt8
    package var b: UInt8

    /// Adjustments a control can make: brightness/contrast/saturation 0...255, 128 = neutral.
    package struct Adjustments: Sendable, Hashable {
        package var brightness: Int64 = 128
        package var contrast: Int64 = 128
        package var saturation: Int64 = 128
        /// Multiplies the light (exposure time × gain, or the exposure bias): 1 = nominal.
        package var exposure: Double = 1
        package static let neutral = Adjustments()
    }

    /// Converts an sRGB colour (already gamma-encoded, as vivid's table) with Rec. 601 weights.
    package init(r: Double, g: Double, b: Double, range: ColorRange, adjust: Adjustments = .neutral) {
        var yn = 0.299 * r + 0.587 * g + 0.114 * b
        var cbn = (b - yn) / 1.772
        var crn = (r - yn) / 1.402
        if adjust != .neutral {
            let contrast = Double(adjust.contrast) / 128
            let saturation = Double(adjust.saturation) / 128
            yn = min(1, max(0, yn * adjust.exposure * contrast + Double(adjust.brightness - 128) / 255))
            // Chroma scales with the light too, so an over-exposed colour washes out to white.
            let light = min(adjust.exposure, 1)
            cbn = min(0.5, max(-0.5, cbn * light * contrast * saturation))
            crn = min(0.5, max(-0.5, crn * light * contrast * saturation))
        }
        func byte(_ v: Double) -> UInt8 { UInt8(min(255, max(0, v.rounded()))) }
        switch range {
        case .limited:
            y = byte(16 + 219 * yn)
            cb = byte(128 + 224 * cbn)
            cr = byte(128 + 224 * crn)
        case .full:
            y = byte(255 * yn)
            cb = byte(128 + 255 * cbn)
            cr = byte(128 + 255 * crn)
        }
        // RGB back from the (adjusted) Y'CbCr, full range.
        self.r = byte(255 * (yn + 1.402 * crn))
        self.g = byte(255 * (yn - 0.344136 * cbn - 0.714136 * crn))
        self.b = byte(255 * (yn + 1.772 * cbn))
    }

    package static func black(_ range: ColorRange) -> PatternColor { PatternColor(r: 0, g: 0, b: 0, range: range) }
    package static func white(_ range: ColorRange) -> PatternColor { PatternColor(r: 1, g: 1, b: 1, range: range) }
}

/// The pictures the `test_pattern` control selects (values as the menu lists them).
package enum TestPatternKind: Int64, Sendable, CaseIterable {
    case colorBars75 = 0
    case colorBars100 = 1
    case black = 2

    package var menuName: String {
        switch self {
        case .colorBars75: "75% Colorbar"
        case .colorBars100: "100% Colorbar"
        case .black: "Black"
        }
    }

    /// sRGB levels of the eight bars, left to right.
    package var bars: [(Double, Double, Double)] {
        let order: [(Double, Double, Double)] = [
            (1, 1, 1), (1, 1, 0), (0, 1, 1), (0, 1, 0),
            (1, 0, 1), (1, 0, 0), (0, 0, 1), (0, 0, 0),
        ]
        switch self {
        case .colorBars75:
            // vivid: 75 % white, yellow ... blue are 191/255; the last bar is 100 % black.
            return order.enumerated().map { i, c in
                i == 7 ? c : (c.0 * 191 / 255, c.1 * 191 / 255, c.2 * 191 / 255)
            }
        case .colorBars100: return order
        case .black: return Array(repeating: (0, 0, 0), count: 8)
        }
    }
}

/// How a pixel format lays its bytes out, as far as drawing rectangles goes.
package enum PatternLayout: Sendable, Hashable {
    /// Packed 4:2:2: byte offsets of Y0, Cb, Y1, Cr in each 4-byte group.
    case packed422(y0: Int, cb: Int, y1: Int, cr: Int)
    /// Y plane, then interleaved chroma; `rows` is 2 for 4:2:0, 1 for 4:2:2.
    case semiPlanar(rows: Int, cbFirst: Bool)
    /// Y plane, then two chroma planes at half width; `rows` as above.
    case planar(rows: Int, cbFirst: Bool)
    /// Three bytes a pixel; offsets of R, G, B.
    case rgb(r: Int, g: Int, b: Int)
    /// Luma only.
    case grey

    package init?(_ format: PixelFormat) {
        switch format {
        case .yuyv: self = .packed422(y0: 0, cb: 1, y1: 2, cr: 3)
        case .uyvy: self = .packed422(y0: 1, cb: 0, y1: 3, cr: 2)
        case .yvyu: self = .packed422(y0: 0, cb: 3, y1: 2, cr: 1)
        case .vyuy: self = .packed422(y0: 1, cb: 2, y1: 3, cr: 0)
        case .nv12: self = .semiPlanar(rows: 2, cbFirst: true)
        case .nv21: self = .semiPlanar(rows: 2, cbFirst: false)
        case .nv16: self = .semiPlanar(rows: 1, cbFirst: true)
        case .nv61: self = .semiPlanar(rows: 1, cbFirst: false)
        case .yuv420: self = .planar(rows: 2, cbFirst: true)
        case .yvu420: self = .planar(rows: 2, cbFirst: false)
        case .yuv422p: self = .planar(rows: 1, cbFirst: true)
        case .rgb24: self = .rgb(r: 0, g: 1, b: 2)
        case .bgr24: self = .rgb(r: 2, g: 1, b: 0)
        case .grey: self = .grey
        default: return nil
        }
    }

    /// Bytes per line of the first plane and the total image size, as V4L2 reports them.
    package func planeFormat(width: Int, height: Int) -> PlaneFormat {
        switch self {
        case .packed422: PlaneFormat(bytesPerLine: width * 2, sizeImage: width * height * 2)
        case .semiPlanar(let rows, _), .planar(let rows, _):
            PlaneFormat(bytesPerLine: width, sizeImage: width * height + 2 * (width / 2) * (height / rows))
        case .rgb: PlaneFormat(bytesPerLine: width * 3, sizeImage: width * height * 3)
        case .grey: PlaneFormat(bytesPerLine: width, sizeImage: width * height)
        }
    }

    /// Full range for RGB, limited (video) range for the YUV family, as vivid reports them.
    package var colorRange: ColorRange {
        if case .rgb = self { return .full }
        return .limited
    }
}

/// A picture in memory that rectangles can be drawn into and luma read back from.
/// Coordinates and sizes handed in must be even where chroma is subsampled.
package struct PatternCanvas {
    package let base: UnsafeMutableRawPointer
    package let width: Int
    package let height: Int
    package let layout: PatternLayout

    /// Fills `[x, x+w) × [y, y+h)` with one colour: the first row is written pixel by pixel,
    /// the rest are copies of it.
    package func fill(x: Int, y: Int, w: Int, h: Int, _ c: PatternColor) {
        guard w > 0, h > 0 else { return }
        switch layout {
        case .packed422(let y0, let cb, let y1, let cr):
            let stride = width * 2
            let first = base + y * stride + x * 2
            // One 4-byte group, little-endian: each component shifted to its byte.
            let pattern =
                UInt32(c.y) << (8 * y0) | UInt32(c.y) << (8 * y1)
                | UInt32(c.cb) << (8 * cb) | UInt32(c.cr) << (8 * cr)
            for i in 0..<(w / 2) { first.storeBytes(of: pattern, toByteOffset: 4 * i, as: UInt32.self) }
            copyRow(first, stride: stride, bytes: w * 2, rows: h)
        case .semiPlanar(let rows, let cbFirst):
            fillPlane(base + y * width + x, stride: width, bytes: w, rows: h, c.y)
            let chroma = base + width * height + (y / rows) * width + x
            let pair = cbFirst ? UInt16(c.cb) | UInt16(c.cr) << 8 : UInt16(c.cr) | UInt16(c.cb) << 8
            for i in 0..<(w / 2) { chroma.storeBytes(of: pair, toByteOffset: 2 * i, as: UInt16.self) }
            copyRow(chroma, stride: width, bytes: w, rows: h / rows)
        case .planar(let rows, let cbFirst):
            fillPlane(base + y * width + x, stride: width, bytes: w, rows: h, c.y)
            let cw = width / 2, chromaRows = height / rows
            let p1 = base + width * height, p2 = p1 + cw * chromaRows
            let offset = (y / rows) * cw + x / 2
            fillPlane((cbFirst ? p1 : p2) + offset, stride: cw, bytes: w / 2, rows: h / rows, c.cb)
            fillPlane((cbFirst ? p2 : p1) + offset, stride: cw, bytes: w / 2, rows: h / rows, c.cr)
        case .rgb(let ri, let gi, let bi):
            let stride = width * 3
            let first = base + y * stride + x * 3
            for i in 0..<w {
                first.storeBytes(of: c.r, toByteOffset: 3 * i + ri, as: UInt8.self)
                first.storeBytes(of: c.g, toByteOffset: 3 * i + gi, as: UInt8.self)
                first.storeBytes(of: c.b, toByteOffset: 3 * i + bi, as: UInt8.self)
            }
            copyRow(first, stride: stride, bytes: w * 3, rows: h)
        case .grey:
            fillPlane(base + y * width + x, stride: width, bytes: w, rows: h, c.y)
        }
    }

    private func fillPlane(_ p: UnsafeMutableRawPointer, stride: Int, bytes: Int, rows: Int, _ v: UInt8) {
        for r in 0..<rows { memset(p + r * stride, Int32(v), bytes) }
    }

    private func copyRow(_ first: UnsafeMutableRawPointer, stride: Int, bytes: Int, rows: Int) {
        guard rows > 1 else { return }
        for r in 1..<rows { memcpy(first + r * stride, first, bytes) }
    }
}

/// Reads luma at a pixel of a picture laid out as `layout`; nil outside the picture.
package func patternLuma(
    _ bytes: UnsafeRawBufferPointer, layout: PatternLayout, width: Int, height: Int,
    x: Int, y: Int
) -> UInt8? {
    guard x >= 0, y >= 0, x < width, y < height else { return nil }
    let offset: Int
    switch layout {
    case .packed422(let y0, _, let y1, _): offset = y * width * 2 + (x / 2) * 4 + (x % 2 == 0 ? y0 : y1)
    case .semiPlanar, .planar, .grey: offset = y * width + x
    case .rgb(let ri, let gi, let bi):
        let p = y * width * 3 + x * 3
        guard p + 2 < bytes.count else { return nil }
        let l = 0.299 * Double(bytes[p + ri]) + 0.587 * Double(bytes[p + gi]) + 0.114 * Double(bytes[p + bi])
        return UInt8(min(255, l.rounded()))
    }
    guard offset < bytes.count else { return nil }
    return bytes[offset]
}

/// Reads the frame counter back from a luma reader; nil when a cell is neither black nor white
/// (the picture is not the virtual camera's, or is damaged).
package func readPatternCounter(geometry g: PatternGeometry, luma: (Int, Int) -> UInt8?) -> UInt32? {
    readPatternBits(at: g.cellCentre, luma: luma)
}

/// The 32 bits of black and white cells whose centres `centre` gives (MSB first), or nil.
private func readPatternBits(at centre: (Int) -> (x: Int, y: Int), luma: (Int, Int) -> UInt8?) -> UInt32? {
    var value: UInt32 = 0
    for bit in 0..<PatternGeometry.counterBits {
        let (x, y) = centre(bit)
        guard let l = luma(x, y) else { return nil }
        // Black is 0 (full) or 16 (limited), white 255 or 235: anything in between is not ours.
        if l >= 170 { value |= 1 << UInt32(PatternGeometry.counterBits - 1 - bit) } else if l > 85 { return nil }
    }
    return value
}

/// Reads the time code back from a luma reader (nil as for the counter, or for frames too small
/// to hold it).
package func readPatternTimeCode(geometry g: PatternGeometry, luma: (Int, Int) -> UInt8?) -> UInt32? {
    guard g.holdsTimeCode else { return nil }
    let cell = PatternGeometry.timeCodeCell
    return readPatternBits(at: { (x: $0 * cell + cell / 2, y: cell / 2) }, luma: luma)
}

/// Draws the virtual camera's picture into canvases of one size and layout.
package struct PatternRenderer {
    package let geometry: PatternGeometry
    package let range: ColorRange
    private(set) var bars: [PatternColor]
    package let black: PatternColor
    package let white: PatternColor
    /// Text drawn at the right edge under the band (`PatternLabel.swift`), if any.
    package let label: String?

    package init(
        width: Int, height: Int, range: ColorRange, kind: TestPatternKind, adjust: PatternColor.Adjustments,
        label: String? = nil
    ) {
        geometry = PatternGeometry(width: width, height: height)
        self.label = label
        self.range = range
        bars = kind.bars.map { PatternColor(r: $0.0, g: $0.1, b: $0.2, range: range, adjust: adjust) }
        black = .black(range)
        white = .white(range)
    }

    /// Everything: bars, label, band and counter.
    package func drawBackground(_ canvas: PatternCanvas) {
        let g = geometry
        for i in 0..<8 {
            canvas.fill(x: g.barX(i), y: g.barsTop, w: g.barX(i + 1) - g.barX(i), h: g.height - g.barsTop, bars[i])
        }
        canvas.fill(x: 0, y: 0, w: g.width, h: g.counterRows, black)
        if let label { drawLabel(canvas, label) }
    }

    /// What changes from frame to frame: the band with its box, and the counter, or the time
    /// code (`timeCode`: milliseconds) in its place.
    package func drawFrame(_ canvas: PatternCanvas, sequence: UInt32, timeCode: UInt32? = nil) {
        let g = geometry
        canvas.fill(x: 0, y: g.counterRows, w: g.width, h: g.bandRows, black)
        canvas.fill(x: g.boxX(sequence: sequence), y: g.counterRows, w: g.boxSize, h: g.boxSize, white)
        if let timeCode {
            drawBits(canvas, timeCode, cell: PatternGeometry.timeCodeCell, rows: min(PatternGeometry.timeCodeCell, g.height))
        } else {
            drawBits(canvas, sequence, cell: g.cellWidth, rows: g.counterRows)
        }
    }

    /// `value` as 32 cells `cell` pixels wide and `rows` high from the top left corner, MSB first
    /// (white = 1; cells past the right edge left out), and the rest of those rows black, so
    /// that nothing an injected fault scribbled there stays.
    private func drawBits(_ canvas: PatternCanvas, _ value: UInt32, cell: Int, rows: Int) {
        let width = geometry.width
        for bit in 0..<PatternGeometry.counterBits where bit * cell < width {
            let on = (value >> UInt32(PatternGeometry.counterBits - 1 - bit)) & 1 == 1
            canvas.fill(x: bit * cell, y: 0, w: min(cell, width - bit * cell), h: rows, on ? white : black)
        }
        let end = min(width, PatternGeometry.counterBits * cell)
        canvas.fill(x: end, y: 0, w: width - end, h: rows, black)
    }
}
