import CaptureImaging
import CaptureV4L2
import CaptureBackend
import Foundation
import Testing
@testable import Capture

@Suite struct ImagingConversionTests {
    func convert(_ image: ImageBuffer, to format: PixelFormat, converter: PixelFormatConverter = PixelFormatConverter()) throws -> [UInt8] {
        let size = try #require(PixelFormatConverter.frameSize(format, width: image.width, height: image.height))
        var out = [UInt8](repeating: 0x55, count: size.byteCount)
        try out.withUnsafeMutableBytes { raw in try converter.convert(image, to: format, into: raw) }
        return out
    }

    /// BGRA bytes → RGB triples, for `expectBars`.
    func rgb(fromBGRA p: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(p.count / 4 * 3)
        for i in stride(from: 0, to: p.count, by: 4) { out += [p[i + 2], p[i + 1], p[i]] }
        return out
    }

    @Test(arguments: [
        PixelFormat.yuyv, .uyvy, .yvyu, .vyuy, .nv12, .nv21, .nv16, .nv61, .nv12m, .yuv420, .yvu420, .yuv420m,
        .yuv422p, .rgb24, .bgr24, .xbgr32, .grey,
    ])
    func toBGRA(_ format: PixelFormat) throws {
        let frame = ImagingTestFrame.bars(format, width: 64, height: 6, padding: 8)
        let bgra = try frame.withImage { try convert($0, to: PixelFormatConverter.bgra32) }
        #expect(stride(from: 3, to: bgra.count, by: 4).allSatisfy { bgra[$0] == 255 })
        if format == .grey {
            let want = ImagingTestFrame.barsYUV.map { Int($0.y) }
            for bar in 0..<8 {
                let x = (2 * bar + 1) * 4
                // GREY holds luma as is: limited-range bytes read as limited, 180 → 191.
                #expect(abs(Int(bgra[(3 * 64 + x) * 4]) - (want[bar] - 16) * 255 / 219) <= 2)
            }
        } else {
            expectBars(rgb(fromBGRA: bgra), width: 64, height: 6, tolerance: 3)
        }
    }

    @Test(arguments: [PixelFormat.yuyv, .uyvy, .nv12, .nv21, .nv16, .yuv420, .yvu420, .yuv422p])
    func toNV12AndYUYVKeepTheSamples(_ format: PixelFormat) throws {
        let frame = ImagingTestFrame.bars(format, width: 64, height: 8, padding: 4)
        let nv12 = try frame.withImage { try convert($0, to: .nv12) }
        let yuyv = try frame.withImage { try convert($0, to: .yuyv) }
        for bar in 0..<8 {
            let want = ImagingTestFrame.barsYUV[bar]
            let x = (2 * bar + 1) * 4  // even: a chroma pair starts here
            #expect(nv12[3 * 64 + x] == want.y)
            #expect(nv12[64 * 8 + 2 * 64 + x] == want.u && nv12[64 * 8 + 2 * 64 + x + 1] == want.v)
            let p = 3 * 128 + 2 * x
            #expect(yuyv[p] == want.y && yuyv[p + 1] == want.u && yuyv[p + 3] == want.v)
        }
        // And back: the converted frames encode and decode to the same bars.
        let back = ImagingTestFrame(format: .nv12, width: 64, height: 8, planes: [nv12], bytesPerLine: [64])
        let bgra = try back.withImage { try convert($0, to: PixelFormatConverter.bgra32) }
        expectBars(rgb(fromBGRA: bgra), width: 64, height: 8, tolerance: 3)
    }

    @Test func oddSizesConvert() throws {
        let frame = ImagingTestFrame.bars(.yuyv, width: 65, height: 7)
        let nv12 = try frame.withImage { try convert($0, to: .nv12) }
        #expect(nv12.count == 66 * 7 + 66 * 4)
        let bgra = try frame.withImage { try convert($0, to: .xbgr32) }
        #expect(bgra.count == 65 * 7 * 4)
    }

    @Test func mjpegToBGRAAndNV12() throws {
        for subsampling in [ChromaSubsampling.s422, .s420, .grey] {
            let jpeg = try ImagingTestFrame.bars(.yuyv, width: 64, height: 16).withImage {
                try JPEGEncoder(quality: 95, subsampling: subsampling).encodeData($0)
            }
            let converter = PixelFormatConverter()
            try jpeg.withUnsafeBytes { raw in
                let image = ImageBuffer(
                    pixelFormat: .mjpeg, width: 64, height: 16, colorRange: .full,
                    plane0: PlaneView(base: raw.baseAddress, count: raw.count, bytesPerLine: 0))
                let bgra = try convert(image, to: PixelFormatConverter.bgra32, converter: converter)
                let nv12 = try convert(image, to: .nv12, converter: converter)
                if subsampling != .grey {
                    expectBars(rgb(fromBGRA: bgra), width: 64, height: 16, tolerance: 12)
                    // Decoded JPEG is full range; NV12 comes out in limited range like a camera's.
                    #expect(abs(Int(nv12[8 * 64 + 4]) - 180) <= 4, "white luma \(nv12[8 * 64 + 4])")
                    #expect(abs(Int(nv12[8 * 64 + 60]) - 16) <= 4, "black luma \(nv12[8 * 64 + 60])")
                } else {
                    #expect(nv12[64 * 16 + 10] == 128)
                }
                // The wrong size is a corrupt frame, not a garbled picture.
                var wrong = image
                wrong.width = 32
                #expect(throws: CaptureError.self) { _ = try convert(wrong, to: .nv12, converter: converter) }
            }
        }
    }

    @Test func unsupportedPairsAndSmallBuffers() throws {
        #expect(!PixelFormatConverter.canConvert(from: .rgb24, to: .nv12))
        #expect(!PixelFormatConverter.canConvert(from: .yuyv, to: .rgb24))
        #expect(PixelFormatConverter.canConvert(from: .mjpeg, to: .yuyv))
        let frame = ImagingTestFrame.bars(.yuyv, width: 16, height: 4)
        frame.withImage { image in
            var small = [UInt8](repeating: 0, count: 16 * 4 * 4 - 1)
            let error = small.withUnsafeMutableBytes { raw in
                Result { () throws(CaptureError) in try PixelFormatConverter().convert(image, to: .xbgr32, into: raw) }
            }
            #expect(throws: CaptureError.self) { try error.get() }
        }
    }
}
