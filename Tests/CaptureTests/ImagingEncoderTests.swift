import CaptureImaging
import CaptureV4L2
import CaptureBackend
import Foundation
import Testing
import CJPEGShim
@testable import Capture

/// Eight vertical 75 % colour bars (white, yellow, cyan, green, magenta, red, blue, black) in
/// BT.601 limited-range YUV, laid out in any format the encoder reads, with optional padding.
struct ImagingTestFrame {
    static let barsYUV: [(y: UInt8, u: UInt8, v: UInt8)] = [
        (180, 128, 128), (162, 44, 142), (131, 156, 44), (112, 72, 58),
        (84, 184, 198), (65, 100, 212), (35, 212, 114), (16, 128, 128),
    ]
    /// What the bars are in full-range RGB: 75 % is 191, not the 180 the luma byte holds.
    static let barsRGB: [(r: Int, g: Int, b: Int)] = [
        (191, 191, 191), (191, 191, 0), (0, 191, 191), (0, 191, 0),
        (191, 0, 191), (191, 0, 0), (0, 0, 191), (0, 0, 0),
    ]
    /// Bars' luma in full range (what a greyscale JPEG of them holds).
    static let barsFullLuma: [Int] = barsYUV.map { (Int($0.y) - 16) * 255 / 219 }

    var format: PixelFormat
    var width: Int
    var height: Int
    var colorRange: ColorRange = .limited
    var planes: [[UInt8]]
    var bytesPerLine: [Int]

    static func bar(_ x: Int, width: Int) -> Int { min(7, x * 8 / width) }

    /// Builds bars in `format`. `padding` bytes are added to each row; `separatePlanes` puts
    /// chroma in its own buffers (as NM12/YM12 drivers deliver).
    static func bars(
        _ format: PixelFormat, width: Int, height: Int, padding: Int = 0,
        separatePlanes: Bool? = nil
    ) -> ImagingTestFrame {
        let cw = (width + 1) / 2
        let yuv = { (x: Int) in barsYUV[bar(x, width: width)] }
        let multi = separatePlanes ?? format.isMultiPlanar
        func plane(rows: Int, stride: Int, fill: (Int, UnsafeMutablePointer<UInt8>) -> Void) -> [UInt8] {
            var p = [UInt8](repeating: 0xEE, count: rows * stride)  // 0xEE: visible if padding leaked
            p.withUnsafeMutableBufferPointer { b in for r in 0..<rows { fill(r, b.baseAddress! + r * stride) } }
            return p
        }
        switch format {
        case .yuyv, .uyvy, .yvyu, .vyuy:
            let order: [Int]  // offsets of y0, y1, u, v
            switch format {
            case .yuyv: order = [0, 2, 1, 3]
            case .uyvy: order = [1, 3, 0, 2]
            case .yvyu: order = [0, 2, 3, 1]
            default: order = [1, 3, 2, 0]
            }
            let stride = cw * 4 + padding
            let p = plane(rows: height, stride: stride) { _, row in
                for i in 0..<cw {
                    let a = yuv(2 * i), b = yuv(min(2 * i + 1, width - 1))
                    row[4 * i + order[0]] = a.y
                    row[4 * i + order[1]] = b.y
                    row[4 * i + order[2]] = a.u
                    row[4 * i + order[3]] = a.v
                }
            }
            return ImagingTestFrame(format: format, width: width, height: height, planes: [p], bytesPerLine: [stride])
        case .nv12, .nv21, .nv16, .nv61, .nv12m, .nv21m:
            let half = format == .nv12 || format == .nv21 || format == .nv12m || format == .nv21m
            let cbFirst = format == .nv12 || format == .nv16 || format == .nv12m
            let stride = max(width, 2 * cw) + padding
            let ch = half ? (height + 1) / 2 : height
            let y = plane(rows: height, stride: stride) { _, row in for x in 0..<width { row[x] = yuv(x).y } }
            let c = plane(rows: ch, stride: stride) { _, row in
                for i in 0..<cw {
                    row[2 * i] = cbFirst ? yuv(2 * i).u : yuv(2 * i).v
                    row[2 * i + 1] = cbFirst ? yuv(2 * i).v : yuv(2 * i).u
                }
            }
            if multi {
                return ImagingTestFrame(format: format, width: width, height: height, planes: [y, c], bytesPerLine: [stride, stride])
            }
            return ImagingTestFrame(format: format, width: width, height: height, planes: [y + c], bytesPerLine: [stride])
        case .yuv420, .yvu420, .yuv420m, .yuv422p:
            let half = format != .yuv422p
            let ch = half ? (height + 1) / 2 : height
            let stride = width + padding
            let cstride = multi ? cw + padding / 2 : (stride + 1) / 2
            let y = plane(rows: height, stride: stride) { _, row in for x in 0..<width { row[x] = yuv(x).y } }
            let u = plane(rows: ch, stride: cstride) { _, row in for i in 0..<cw { row[i] = yuv(2 * i).u } }
            let v = plane(rows: ch, stride: cstride) { _, row in for i in 0..<cw { row[i] = yuv(2 * i).v } }
            if multi {
                return ImagingTestFrame(
                    format: format, width: width, height: height, planes: [y, u, v], bytesPerLine: [stride, cstride, cstride])
            }
            let single = format == .yvu420 ? y + v + u : y + u + v
            return ImagingTestFrame(format: format, width: width, height: height, planes: [single], bytesPerLine: [stride])
        case .rgb24, .bgr24, .xbgr32:
            let bpp = format == .xbgr32 ? 4 : 3
            let stride = width * bpp + padding
            let p = plane(rows: height, stride: stride) { _, row in
                for x in 0..<width {
                    let c = barsRGB[bar(x, width: width)]
                    let px = row + bpp * x
                    if format == .rgb24 {
                        px[0] = UInt8(c.r); px[1] = UInt8(c.g); px[2] = UInt8(c.b)
                    } else {
                        px[0] = UInt8(c.b); px[1] = UInt8(c.g); px[2] = UInt8(c.r)
                    }
                    if bpp == 4 { px[3] = 0 }
                }
            }
            return ImagingTestFrame(format: format, width: width, height: height, colorRange: .full, planes: [p], bytesPerLine: [stride])
        case .grey:
            let stride = width + padding
            let p = plane(rows: height, stride: stride) { _, row in for x in 0..<width { row[x] = yuv(x).y } }
            return ImagingTestFrame(format: format, width: width, height: height, planes: [p], bytesPerLine: [stride])
        default:
            fatalError("no generator for \(format)")
        }
    }

    func withImage<R>(_ body: (ImageBuffer) throws -> R) rethrows -> R {
        func view(_ b: UnsafeBufferPointer<UInt8>, _ bpl: Int) -> PlaneView {
            PlaneView(base: UnsafeRawPointer(b.baseAddress), count: b.count, bytesPerLine: bpl)
        }
        return try planes[0].withUnsafeBufferPointer { p0 in
            var image = ImageBuffer(
                pixelFormat: format, width: width, height: height, colorRange: colorRange, plane0: view(p0, bytesPerLine[0]))
            guard planes.count > 1 else { return try body(image) }
            return try planes[1].withUnsafeBufferPointer { p1 in
                image.plane1 = view(p1, bytesPerLine[1])
                image.planeCount = 2
                guard planes.count > 2 else { return try body(image) }
                return try planes[2].withUnsafeBufferPointer { p2 in
                    image.plane2 = view(p2, bytesPerLine[2])
                    image.planeCount = 3
                    return try body(image)
                }
            }
        }
    }
}

/// Deterministic random numbers for the hostile-input tests.
struct ImagingTestRandom: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// Checks the decoded bars at the centre of each bar, on a middle row.
func expectBars(
    _ pixels: [UInt8], width: Int, height: Int, bytesPerPixel: Int = 3, grey: Bool = false,
    tolerance: Int = 12, sourceLocation: SourceLocation = #_sourceLocation
) {
    let row = height / 2
    for bar in 0..<8 {
        let x = (2 * bar + 1) * width / 16
        let p = (row * width + x) * bytesPerPixel
        if grey {
            let want = ImagingTestFrame.barsFullLuma[bar]
            #expect(abs(Int(pixels[p]) - want) <= tolerance, "bar \(bar): grey \(pixels[p]), want \(want)", sourceLocation: sourceLocation)
        } else {
            let want = ImagingTestFrame.barsRGB[bar]
            let got = (Int(pixels[p]), Int(pixels[p + 1]), Int(pixels[p + 2]))
            let ok = abs(got.0 - want.r) <= tolerance && abs(got.1 - want.g) <= tolerance && abs(got.2 - want.b) <= tolerance
            #expect(ok, "bar \(bar) at x=\(x): got \(got), want \(want)", sourceLocation: sourceLocation)
        }
    }
}

@Suite struct ImagingEncoderTests {
    static let formats: [PixelFormat] = [
        .yuyv, .uyvy, .yvyu, .vyuy, .nv12, .nv21, .nv16, .nv61, .nv12m, .nv21m,
        .yuv420, .yvu420, .yuv420m, .yuv422p, .rgb24, .bgr24, .xbgr32, .grey,
    ]

    func encodeAndDecode(_ frame: ImagingTestFrame, encoder: JPEGEncoder) throws -> (JPEGMarkers, JPEGDecoder.Header, [UInt8]) {
        let jpeg = try frame.withImage { try encoder.encodeData($0) }
        let markers = try JPEGMarkers(parsing: jpeg)
        let decoded = try JPEGDecoder().decode(jpeg, as: .rgb)
        return (markers, decoded.header, decoded.pixels)
    }

    @Test(arguments: formats)
    func everyFormatEncodesTheRightSizeAndColours(_ format: PixelFormat) throws {
        let frame = ImagingTestFrame.bars(format, width: 320, height: 240)
        let (markers, header, pixels) = try encodeAndDecode(frame, encoder: JPEGEncoder(quality: 95))
        #expect(header.width == 320 && header.height == 240)
        let native = try ImageLayout.nativeSubsampling(of: format)
        #expect(markers.frame.subsampling == native)
        #expect(markers.hasHuffmanTables && markers.jfifSegment != nil)
        expectBars(pixels, width: 320, height: 240, grey: format == .grey)
    }

    @Test(arguments: [PixelFormat.yuyv, .uyvy, .nv12, .nv16, .yuv420, .yuv420m, .nv12m, .yuv422p, .grey, .bgr24, .xbgr32])
    func paddedRowsAndOddSizes(_ format: PixelFormat) throws {
        for (w, h) in [(321, 239), (17, 9), (1, 1), (2, 3), (33, 16)] {
            let frame = ImagingTestFrame.bars(format, width: w, height: h, padding: 40)
            let (_, header, pixels) = try encodeAndDecode(frame, encoder: JPEGEncoder(quality: 95))
            #expect(header.width == w && header.height == h, "\(format) \(w)x\(h)")
            if w >= 64 { expectBars(pixels, width: w, height: h, grey: format == .grey) }
            // Padding (0xEE) must never reach the picture: the right edge keeps the last bar's colour.
            if w >= 64 {
                let last = pixels[((h / 2) * w + (w - 1)) * 3]
                #expect(last <= 12, "\(format) \(w)x\(h): the right edge is \(last), not the black bar")
            }
        }
    }

    @Test func limitedRangeIsExpandedAndFullRangePassesUnchanged() throws {
        // 75 % white in limited range (Y 180) must decode as 191, black (16) as 0.
        let frame = ImagingTestFrame.bars(.yuyv, width: 256, height: 64)
        let (_, _, pixels) = try encodeAndDecode(frame, encoder: JPEGEncoder(quality: 100))
        let white = Int(pixels[(32 * 256 + 16) * 3]), black = Int(pixels[(32 * 256 + 240) * 3])
        #expect(abs(white - 191) <= 2, "white decodes as \(white)")
        #expect(black <= 2, "black decodes as \(black)")

        var full = ImagingTestFrame.bars(.yuyv, width: 256, height: 64)
        full.colorRange = .full
        let (_, _, fullPixels) = try encodeAndDecode(full, encoder: JPEGEncoder(quality: 100))
        let fullWhite = Int(fullPixels[(32 * 256 + 16) * 3]), fullBlack = Int(fullPixels[(32 * 256 + 240) * 3])
        #expect(abs(fullWhite - 180) <= 2, "full-range 180 decodes as \(fullWhite)")
        #expect(abs(fullBlack - 16) <= 2, "full-range 16 decodes as \(fullBlack)")
    }

    @Test func expansionMatchesTheExactFormula() {
        var luma = [UInt8](0...255), chroma = [UInt8](0...255)
        luma.withUnsafeMutableBufferPointer { cv4l2_expand_luma($0.baseAddress, $0.count) }
        chroma.withUnsafeMutableBufferPointer { cv4l2_expand_chroma($0.baseAddress, $0.count) }
        for v in 0...255 {
            let y = min(255, max(0, (Double(v) - 16) * 255 / 219)), c = min(255, max(0, (Double(v) - 128) * 255 / 224 + 128))
            #expect(abs(Double(luma[v]) - y) <= 1, "luma \(v) → \(luma[v]), exact \(y)")
            #expect(abs(Double(chroma[v]) - c) <= 1, "chroma \(v) → \(chroma[v]), exact \(c)")
        }
    }

    @Test func subsamplingOptions() throws {
        let cases: [(PixelFormat, ChromaSubsampling?, (Int, Int, Int))] = [
            (.yuyv, nil, (3, 2, 1)), (.yuyv, .s420, (3, 2, 2)), (.yuyv, .s444, (3, 1, 1)), (.yuyv, .grey, (1, 1, 1)),
            (.nv12, nil, (3, 2, 2)), (.nv12, .s422, (3, 2, 1)), (.nv12, .s444, (3, 1, 1)), (.yuv420, .grey, (1, 1, 1)),
            (.nv16, .s420, (3, 2, 2)), (.yuv422p, .s420, (3, 2, 2)), (.grey, .s422, (3, 2, 1)), (.rgb24, .s420, (3, 2, 2)),
        ]
        for (format, sampling, want) in cases {
            let frame = ImagingTestFrame.bars(format, width: 160, height: 48)
            let (markers, header, pixels) = try encodeAndDecode(frame, encoder: JPEGEncoder(quality: 95, subsampling: sampling))
            let got = (markers.frame.componentCount, markers.frame.lumaHorizontalSampling, markers.frame.lumaVerticalSampling)
            #expect(got == want, "\(format) → \(String(describing: sampling)): \(got)")
            #expect(header.width == 160 && header.height == 48)
            let greyPicture = sampling == .grey || format == .grey
            if !greyPicture { expectBars(pixels, width: 160, height: 48, tolerance: 14) }
        }
    }

    @Test func steadyStateEncodingAllocatesNothing() throws {
        let frame = ImagingTestFrame.bars(.yuyv, width: 640, height: 480)
        let encoder = JPEGEncoder(quality: 85)
        try frame.withImage { image in
            _ = try encoder.encode(image)
            _ = try encoder.encode(image)
            let before = encoder.allocationCount
            var sizes: Set<Int> = []
            for _ in 0..<5 { sizes.insert(try encoder.encode(image).count) }
            #expect(encoder.allocationCount == before)
            #expect(sizes.count == 1, "the same frame encodes to the same bytes")
            // EXIF on the still path reuses the encoder's buffers too.
            _ = try encoder.encode(
                image, exif: EXIFInfo(orientation: .right, make: "Make", model: "Model", dateTime: "2026:12:02 10:00:00"))
            let withExif = encoder.allocationCount
            _ = try encoder.encode(
                image, exif: EXIFInfo(orientation: .right, make: "Make", model: "Model", dateTime: "2026:12:02 10:00:00"))
            #expect(encoder.allocationCount == withExif)
        }
    }

    @Test func oneEncoderServesChangingFormatsAndSizes() throws {
        let encoder = JPEGEncoder(quality: 92)
        let sequence: [(PixelFormat, Int, Int, ChromaSubsampling?)] = [
            (.yuyv, 640, 480, nil), (.nv12, 96, 64, .grey), (.rgb24, 200, 40, .s420), (.yuyv, 64, 16, .s444),
            (.grey, 128, 32, nil), (.yuyv, 640, 480, .s420), (.yuv420, 66, 34, nil),
        ]
        for (format, w, h, sampling) in sequence {
            encoder.subsampling = sampling
            let frame = ImagingTestFrame.bars(format, width: w, height: h)
            let (markers, header, pixels) = try encodeAndDecode(frame, encoder: encoder)
            #expect(header.width == w && header.height == h)
            let want = try sampling ?? ImageLayout.nativeSubsampling(of: format)
            #expect(markers.frame.subsampling == want)
            let grey = sampling == .grey || format == .grey
            if grey {
                expectBars(pixels, width: w, height: h, grey: true, tolerance: 14)
            } else {
                expectBars(pixels, width: w, height: h, tolerance: 14)
            }
        }
    }

    @Test func rawMemoryEntryPoint() throws {
        let frame = ImagingTestFrame.bars(.nv12, width: 64, height: 32)
        let jpeg = try frame.planes[0].withUnsafeBytes { raw in
            try JPEGEncoder().encodeData(raw, pixelFormat: .nv12, width: 64, height: 32)
        }
        let decoded = try JPEGDecoder().decode(jpeg, as: .rgb)
        #expect(decoded.header.width == 64 && decoded.header.height == 32)
        expectBars(decoded.pixels, width: 64, height: 32, tolerance: 16)
    }

    @Test func badFramesAreRejectedWithTypedErrors() throws {
        let encoder = JPEGEncoder()
        let frame = ImagingTestFrame.bars(.yuyv, width: 64, height: 16)
        func code(_ image: ImageBuffer) -> CaptureError.Code? {
            do { _ = try encoder.encode(image); return nil } catch { return error.code }
        }
        frame.withImage { good in
            var short = good
            short.plane0.count -= 1
            #expect(code(short) == .corruptFrame)
            var empty = good
            empty.plane0.count = 0
            #expect(code(empty) == .corruptFrame)
            var noMemory = good
            noMemory.plane0.base = nil
            #expect(code(noMemory) == .corruptFrame)
            var narrow = good
            narrow.plane0.bytesPerLine = 64 * 2 - 2
            #expect(code(narrow) == .invalidArgument)
            var zero = good
            zero.width = 0
            #expect(code(zero) == .invalidArgument)
            var huge = good
            huge.width = 65_000; huge.height = 65_000; huge.plane0.bytesPerLine = 0
            #expect(code(huge) == .corruptFrame)
            var tooBig = good
            tooBig.width = 70_000
            #expect(code(tooBig) == .invalidArgument)
            var overflow = good
            overflow.height = 60_000; overflow.plane0.bytesPerLine = 1 << 30
            #expect(code(overflow) == .corruptFrame)
            var mjpeg = good
            mjpeg.pixelFormat = .mjpeg
            #expect(code(mjpeg) == .unsupportedFormat)
            // The encoder still works after every rejection.
            #expect(code(good) == nil)
        }
        // NV12 whose chroma plane is missing.
        let nv12 = ImagingTestFrame.bars(.nv12, width: 64, height: 16)
        let lumaOnly = Array(nv12.planes[0].prefix(64 * 16))
        lumaOnly.withUnsafeBufferPointer { p in
            let image = ImageBuffer(
                pixelFormat: .nv12, width: 64, height: 16, colorRange: .limited,
                plane0: PlaneView(base: UnsafeRawPointer(p.baseAddress), count: p.count, bytesPerLine: 64))
            #expect(code(image) == .corruptFrame)
        }
    }
}
