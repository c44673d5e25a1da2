@testable import CapturePreview
import CaptureTestSupport
import Foundation
import Testing

/// Layer images made from text and PNG bytes, read back pixel by pixel (no display needed).
@Suite struct LayerImageTests {
    static func rgba(_ image: LayerImage, _ x: Int, _ y: Int) -> [UInt8] {
        let o = (y * image.width + x) * 4
        return Array(image.pixels[o..<(o + 4)])
    }

    @Test func textIsDrawnWithTheBitmapFont() {
        // "1" at scale 1 without padding: the glyph's own 5x7 cells.
        let one = LayerImage(text: "1", color: .white, backgroundColor: .black, scale: 1, padding: 0)
        #expect(one.width == 5 && one.height == 7)
        let cells = BitmapFont.glyph("1")
        var wrong: [String] = []
        for y in 0..<7 {
            for x in 0..<5 {
                let want: [UInt8] = cells[y * 5 + x] ? [255, 255, 255, 255] : [0, 0, 0, 255]
                if Self.rgba(one, x, y) != want { wrong.append("(\(x),\(y))") }
            }
        }
        #expect(wrong.isEmpty, "cells that differ from the glyph: \(wrong)")
        // The stem of the 1 is set, the corner is not.
        #expect(cells[2] && !cells[0])

        // Two lines of different lengths, scale 3, padding 2: sized by the longest line.
        let two = LayerImage(text: "AB\nC", scale: 3, padding: 2)
        #expect(two.width == (2 * 6 - 1 + 4) * 3 && two.height == (2 * 8 - 1 + 4) * 3)
        // The padding is background (default: translucent black).
        #expect(Self.rgba(two, 0, 0) == [0, 0, 0, 179])
        // Lower case draws as upper case; an unknown character as "?".
        #expect(BitmapFont.glyph("x") == BitmapFont.glyph("X"))
        #expect(BitmapFont.glyph("€") == BitmapFont.glyph("?"))
        #expect(BitmapFont.glyph("0") != BitmapFont.glyph("O"))
    }

    /// A PNG made by ImageMagick.
    static func png(_ args: [String]) throws -> Data {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/convert")
        p.arguments = args
        let out = Pipe()
        p.standardOutput = out
        p.standardError = FileHandle.nullDevice
        try p.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        p.waitForExit()
        guard p.terminationStatus == 0, !data.isEmpty else { throw TestFailure("convert \(args) failed") }
        return data
    }

    @Test func pngOfEveryKindDecodesToRGBA() throws {
        let cases: [(name: String, args: [String], pixel: [UInt8])] = [
            ("RGB", ["-size", "7x5", "xc:#ff8000", "PNG24:-"], [255, 128, 0, 255]),
            ("RGBA", ["-size", "7x5", "xc:rgba(0,0,255,0.5)", "PNG32:-"], [0, 0, 255, 128]),
            ("palette", ["-size", "7x5", "xc:#00ff00", "PNG8:-"], [0, 255, 0, 255]),
            ("grey", ["-size", "7x5", "xc:gray(50%)", "-colorspace", "Gray", "-depth", "8", "PNG:-"], [128, 128, 128, 255]),
            ("16-bit RGB", ["-size", "7x5", "xc:#ff0000", "-depth", "16", "PNG48:-"], [255, 0, 0, 255]),
        ]
        for c in cases {
            let data = try Self.png(c.args)
            let image = try LayerImage(pngData: data)
            #expect(image.width == 7 && image.height == 5, "\(c.name): \(image.width)x\(image.height)")
            let p = Self.rgba(image, 3, 2)
            #expect(zip(p, c.pixel).allSatisfy { abs(Int($0) - Int($1)) <= 1 }, "\(c.name): \(p), not \(c.pixel)")
            // The signature picks the decoder.
            #expect(try LayerImage(data: data).pixels == image.pixels, "\(c.name)")
        }
    }

    @Test func badImageBytesAreATypedError() throws {
        let good = try Self.png(["-size", "64x64", "plasma:", "PNG24:-"])
        func code(_ body: () throws(PreviewError) -> LayerImage) -> PreviewError.Code? {
            do throws(PreviewError) {
                _ = try body()
                return nil
            } catch {
                #expect(!error.message.contains("\n") && error.message.contains("PNG"), "\(error.message)")
                return error.code
            }
        }
        // Cut short, signature only, not a PNG at all, and bytes neither PNG nor JPEG.
        #expect(code { () throws(PreviewError) in try LayerImage(pngData: good.prefix(good.count / 2)) } == .invalidImage)
        #expect(code { () throws(PreviewError) in try LayerImage(pngData: Data(PNGDecoding.signature)) } == .invalidImage)
        #expect(code { () throws(PreviewError) in try LayerImage(pngData: Data("GIF89a".utf8)) } == .invalidImage)
        #expect(code { () throws(PreviewError) in try LayerImage(data: Data([1, 2, 3, 4])) } == .invalidImage)
        // Damaged image data (the IDAT chunk's CRC no longer matches).
        guard let idat = good.range(of: Data("IDAT".utf8)) else { throw TestFailure("no IDAT chunk in the PNG") }
        var damaged = good
        damaged[idat.upperBound + 8] ^= 0xFF
        #expect(code { () throws(PreviewError) in try LayerImage(pngData: damaged) } == .invalidImage)
    }
}
