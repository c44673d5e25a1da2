// Stills and photos turn their pixels as the connection's orientation and mirroring say
// (TurboJPEG's lossless transform, or turned planes at sizes that are not whole MCUs), with EXIF
// orientation 1; `.exifOnly` keeps the pixels and writes the tag. Read back by TurboJPEG and exiftool.
import CaptureImaging
import CaptureBackend
import CaptureVirtual
import Capture
import CaptureTestSupport
import Foundation
import Testing

@Suite(.serialized) struct StillRotationTests {
    /// Every orientation and mirroring, with the EXIF tag it stands for.
    static let turns: [(VideoOrientation, Bool, Int)] = [
        (.landscapeRight, false, 1), (.landscapeRight, true, 2), (.landscapeLeft, false, 3), (.landscapeLeft, true, 4),
        (.portrait, true, 5), (.portrait, false, 6), (.portraitUpsideDown, true, 7), (.portraitUpsideDown, false, 8),
    ]

    private static func running(_ format: PixelFormat, _ width: Int, _ height: Int, _ output: CaptureStillImageOutput) throws
        -> (CaptureSession, VirtualCamera, CaptureConnection)
    {
        let installed = try InstalledCamera("Rotation", modes: [.init(format, width: width, height: height, frameRates: [30])])
        let session = CaptureSession()
        session.addInput(try installed.input())
        session.addOutput(output)
        try session.start()
        return (session, installed.camera, try #require(output.connection(with: .video)))
    }

    @Test(
        "a still taken in each orientation decodes turned, bars in the turned place, EXIF orientation 1",
        arguments: [(PixelFormat.yuyv, 320, 240), (.yuyv, 1278, 720), (.nv12, 1366, 768), (.mjpeg, 1366, 768), (.mjpeg, 640, 480)])
    func pixelsTurn(format: PixelFormat, width: Int, height: Int) async throws {
        let still = CaptureStillImageOutput()
        let (session, cam, c) = try Self.running(format, width, height, still)
        defer { session.stopRunning(); VirtualCamera.uninstall(cam) }
        #expect(still.outputSettings.orientationMode == .rotatePixels, "pixel rotation is the default")
        for (orientation, mirrored, tag) in Self.turns {
            c.videoOrientation = orientation
            c.isVideoMirrored = mirrored
            let sample = try await still.captureStillImage(from: c)
            let jpeg = try #require(sample.jpegData)
            let image = try #require(TestJPEG.decode(jpeg), "\(orientation) \(mirrored)")
            let swapped = tag >= 5
            #expect(
                image.width == (swapped ? height : width) && image.height == (swapped ? width : height),
                "\(format) \(width)x\(height) tag \(tag): \(image.width)x\(image.height)")
            #expect(sample.dimensions == VideoDimensions(width: image.width, height: image.height))
            #expect(
                ColorBars.mismatches(image, turnedBy: tag, row: height * 3 / 4, width: width, height: height) == [],
                "\(format) \(width)x\(height) tag \(tag)")
            // Upright as stored: orientation 1 when the connection asked for a turn, no EXIF otherwise.
            #expect(TestJPEG.exifOrientation(jpeg) == (tag == 1 ? nil : 1), "tag \(tag)")
        }
    }

    @Test func exifOnlyKeepsThePixelsAndWritesTheTagThatExiftoolReads() async throws {
        let still = CaptureStillImageOutput()
        still.outputSettings.orientationMode = .exifOnly
        let (session, cam, c) = try Self.running(.yuyv, 1278, 720, still)
        defer { session.stopRunning(); VirtualCamera.uninstall(cam) }
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("still-rotation-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        for (orientation, mirrored, tag) in Self.turns where tag != 1 {
            c.videoOrientation = orientation
            c.isVideoMirrored = mirrored
            let jpeg = try #require(try await still.captureStillImage(from: c).jpegData)
            let image = try #require(TestJPEG.decode(jpeg))
            #expect(image.width == 1278 && image.height == 720)
            #expect(ColorBars.mismatches(image, row: 540) == [], "tag \(tag)")
            #expect(TestJPEG.exifOrientation(jpeg) == tag)
            let file = folder.appendingPathComponent("exif-\(tag).jpg")
            try jpeg.write(to: file)
            #expect(try Self.exiftoolOrientation(file) == "\(tag)", "tag \(tag)")
        }
        // The same connection with pixel rotation: exiftool reads 1 and the turned size.
        still.outputSettings.orientationMode = .rotatePixels
        c.videoOrientation = .portrait
        c.isVideoMirrored = false
        let turned = try #require(try await still.captureStillImage(from: c).jpegData)
        let file = folder.appendingPathComponent("turned.jpg")
        try turned.write(to: file)
        #expect(try Self.exiftoolOrientation(file) == "1")
        #expect(try Self.exiftool(["-s3", "-n", "-ImageWidth", "-ImageHeight"], file) == "720\n1278")
    }

    /// exiftool's check of the EXIF standard's rules passes ("OK", no warning such as a missing
    /// required tag) on stills of a few sizes, kept as the sensor made them with each EXIF
    /// orientation and turned in pixels, and ExifImageWidth/Height give the stored size.
    @Test(arguments: [(PixelFormat.yuyv, 320, 240), (.nv12, 1366, 768), (.mjpeg, 640, 480)])
    func exifPassesExiftoolsValidation(format: PixelFormat, width: Int, height: Int) async throws {
        let still = CaptureStillImageOutput()
        let (session, cam, c) = try Self.running(format, width, height, still)
        defer { session.stopRunning(); VirtualCamera.uninstall(cam) }
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("still-validate-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        var files: [URL] = []
        var expected: [String] = []
        for mode in [StillOrientationMode.exifOnly, .rotatePixels] {
            still.outputSettings.orientationMode = mode
            for (orientation, mirrored, tag) in Self.turns where tag != 1 {
                c.videoOrientation = orientation
                c.isVideoMirrored = mirrored
                let file = folder.appendingPathComponent("\(mode)-\(tag).jpg")
                try #require(try await still.captureStillImage(from: c).jpegData).write(to: file)
                let swapped = mode == .rotatePixels && tag >= 5
                files.append(file)
                expected.append("\(file.lastPathComponent)\tOK\t\(swapped ? height : width)\t\(swapped ? width : height)")
            }
        }
        // One exiftool for all (Perl starts slowly): a line per file, "OK" or "N Warnings", then the size.
        let table = try Self.exiftool(["-T", "-FileName", "-validate", "-ExifImageWidth", "-ExifImageHeight"], files)
        #expect(table.split(separator: "\n").map(String.init) == expected, "\(format) \(width)x\(height)")
    }

    static func exiftool(_ args: [String], _ file: URL) throws -> String {
        try exiftool(args, [file])
    }

    static func exiftool(_ args: [String], _ files: [URL]) throws -> String {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/exiftool")
        p.arguments = args + files.map(\.path)
        let pipe = Pipe()
        p.standardOutput = pipe
        try p.run()
        let out = pipe.fileHandleForReading.readDataToEndOfFile()
        p.waitForExit()
        return String(decoding: out, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    static func exiftoolOrientation(_ file: URL) throws -> String {
        try exiftool(["-s3", "-n", "-Orientation"], file)
    }

    @Test func photosTurnTooAndSayTheirStoredSize() async throws {
        let output = CapturePhotoOutput()
        let (session, cam, c) = try Self.running(.nv12, 640, 360, output)
        defer { session.stopRunning(); VirtualCamera.uninstall(cam) }
        c.videoOrientation = .portrait
        let photo = try await output.capturePhoto(with: CapturePhotoSettings())
        let data = try #require(photo.fileDataRepresentation())
        let image = try #require(TestJPEG.decode(data))
        #expect(image.width == 360 && image.height == 640)
        #expect(ColorBars.mismatches(image, turnedBy: 6, row: 270, width: 640, height: 360) == [])
        #expect(photo.metadata["Orientation"] == "1")
        #expect(photo.metadata["PixelXDimension"] == "360" && photo.metadata["PixelYDimension"] == "640")
        var tagOnly = CapturePhotoSettings()
        tagOnly.orientationMode = .exifOnly
        let tagged = try await output.capturePhoto(with: tagOnly)
        #expect(TestJPEG.decode(try #require(tagged.fileDataRepresentation()))?.width == 640)
        #expect(tagged.metadata["Orientation"] == "6" && tagged.metadata["PixelXDimension"] == "640")
    }

    /// The turn is TurboJPEG's lossless transform where the size is whole MCUs: turning right
    /// then left gives back the very same pixels. At other sizes the planes are turned instead.
    @Test func losslessWhereTheSizeIsWholeMCUs() throws {
        let encoder = JPEGEncoder(quality: 85)
        let decoder = JPEGDecoder()
        for (w, h, wholeTurns) in [(320, 240, true), (330, 240, false)] {
            // A frame with detail: a diagonal ramp in YUYV.
            var yuyv = [UInt8](repeating: 128, count: w * h * 2)
            for y in 0..<h { for x in 0..<w { yuyv[(y * w + x) * 2] = UInt8(16 + (x * 3 + y * 5) % 219) } }
            let original = try yuyv.withUnsafeBytes { try encoder.encodeData($0, pixelFormat: .yuyv, width: w, height: h) }
            let orienter = JPEGOrienter()
            let back = JPEGOrienter()
            for o in EXIFOrientation.allCases where o != .up {
                let turned = try original.withUnsafeBytes { Data(try orienter.orient($0, o, quality: 85)) }
                let perfect = JPEGOrienter.isPerfect(o, width: w, height: h, mcu: (16, 8))
                #expect(orienter.lastWasLossless == perfect, "\(w)x\(h) \(o)")
                if wholeTurns { #expect(perfect, "\(o) at \(w)x\(h)") }
                let header = try turned.withUnsafeBytes { try decoder.readHeader($0) }
                #expect(o.swapsDimensions ? (header.width == h && header.height == w) : (header.width == w && header.height == h))
                // Undo the turn (the inverse of 6 is 8, of 8 is 6; the rest undo themselves).
                let inverse: EXIFOrientation = o == .right ? .left : o == .left ? .right : o
                let restored = try turned.withUnsafeBytes { Data(try back.orient($0, inverse, quality: 85)) }
                let a = try decoder.decode(original, as: .rgb).pixels, b = try decoder.decode(restored, as: .rgb).pixels
                if perfect && back.lastWasLossless {
                    #expect(a == b, "\(w)x\(h) \(o): a lossless turn and back changed pixels")
                } else {
                    // Re-encoded once or twice: close, not equal.
                    let diff = zip(a, b).reduce(0) { $0 + abs(Int($1.0) - Int($1.1)) } / a.count
                    #expect(diff <= 3, "\(w)x\(h) \(o): mean difference \(diff)")
                }
            }
        }
    }

    /// A raw frame is turned before its one encode (planes turned, limited range expanded):
    /// the same picture as encoding first and then turning the JPEG.
    @Test(arguments: [PixelFormat.yuyv, .uyvy, .nv12, .nv21, .yuv420, .yuv422p, .grey])
    func rawFramesAreTurnedBeforeTheirOneEncode(format: PixelFormat) throws {
        let (w, h) = (170, 96)
        let size: Int
        switch format {
        case .yuyv, .uyvy, .yuv422p: size = w * h * 2
        case .grey: size = w * h
        default: size = w * h * 3 / 2
        }
        // Smooth ramps in every plane, within the limited range.
        let bytes = (0..<size).map { i in UInt8(16 + ((i % w) + (i / w) * 3) % 200) }
        let encoder = JPEGEncoder(quality: 90)
        let decoder = JPEGDecoder()
        let orienter = JPEGOrienter(), reference = JPEGOrienter()
        try bytes.withUnsafeBytes { raw in
            let stride = format == .yuyv || format == .uyvy ? w * 2 : w
            let image = ImageBuffer(
                pixelFormat: format, width: w, height: h, colorRange: .limited,
                plane0: PlaneView(base: raw.baseAddress, count: raw.count, bytesPerLine: stride))
            let plain = try encoder.encodeData(image)
            for o in EXIFOrientation.allCases where o != .up {
                let turned = try #require(try orienter.encodeTurned(image, o, quality: 90), "\(format) not turned before the encode")
                let direct = try decoder.decode(Data(turned), as: .rgb)
                let viaJPEG = try plain.withUnsafeBytes { try decoder.decode(Data(try reference.orient($0, o, quality: 90)), as: .rgb) }
                #expect(direct.header.width == viaJPEG.header.width && direct.header.height == viaJPEG.header.height)
                let diff = zip(direct.pixels, viaJPEG.pixels).reduce(0) { $0 + abs(Int($1.0) - Int($1.1)) } / max(1, direct.pixels.count)
                #expect(diff <= 3, "\(format) \(o): mean difference \(diff)")
            }
        }
    }
}
