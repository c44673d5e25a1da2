import Capture
import CaptureTestSupport
import Foundation
import Testing

@testable import CaptureVision

/// The virtual camera's picture in every format it draws: letterboxed, levels right, controls
/// applied (read back through the metadata output's own luma reader).
@Suite(.serialized) struct VirtualPictureTests {
    /// The luma of the first frame a 320x240 `format` camera showing `picture` delivers.
    static func firstFrameLuma(
        _ format: PixelFormat, picture: VirtualCamera.Picture, fit: VirtualCamera.PictureFit = .letterbox,
        configure: (CaptureDevice) throws -> Void = { _ in }
    ) async throws -> (LumaPlane, ColorRange?) {
        let camera = VirtualCamera(
            name: "Picture \(format) \(UUID().uuidString.prefix(6))", formats: [.init(format, width: 320, height: 240)])
        camera.picture = picture
        camera.pictureFit = fit
        VirtualCamera.install(camera)
        defer { VirtualCamera.uninstall(camera) }
        let device = try #require(CaptureDevice.device(withUniqueID: camera.uniqueID))
        try configure(device)
        let session = CaptureSession()
        session.beginConfiguration()
        session.addInput(try CaptureDeviceInput(device: device))
        let output = CaptureVideoDataOutput()
        output.videoSettings = .init(pixelFormat: format)
        session.addOutput(output)
        if case .rejected(let e) = session.commitConfiguration() { throw e }
        try session.start()
        defer { session.stopRunning() }
        let luma = LumaPlane()
        var range: ColorRange?
        for await sample in output.sampleBuffers() {
            try luma.load(sample)
            range = sample.colorRange
            break
        }
        return (luma, range)
    }

    static func at(_ l: LumaPlane, _ x: Int, _ y: Int) -> Int { Int(l.bytes![y * l.width + x]) }

    /// A white square with a black left half: letterboxed into 320x240 it spans x 40..<280.
    static let square: VirtualCamera.Picture = {
        var rgb = [UInt8](repeating: 255, count: 100 * 100 * 3)
        for y in 0..<100 { for x in 0..<50 { for c in 0..<3 { rgb[(y * 100 + x) * 3 + c] = 0 } } }
        return try! VirtualCamera.Picture(rgb: rgb, width: 100, height: 100)
    }()

    @Test(arguments: VirtualCamera.supportedPixelFormats)
    func thePictureIsLetterboxedInEveryFormat(_ format: PixelFormat) async throws {
        let (l, _) = try await Self.firstFrameLuma(format, picture: Self.square)
        #expect(l.width == 320 && l.height == 240)
        let white = Self.at(l, 230, 120), black = Self.at(l, 100, 120), bar = Self.at(l, 10, 120)
        #expect(white >= 225, "\(format): white half reads \(white)")
        #expect(black <= 24, "\(format): black half reads \(black)")
        #expect(bar <= 24, "\(format): the letterbox bar reads \(bar)")
        // The picture's edges: bars end at x = 40 and 280.
        #expect(Self.at(l, 44, 120) <= 24 && Self.at(l, 276, 120) >= 225 && Self.at(l, 284, 120) <= 24)
    }

    @Test func fillAndStretchPlaceThePictureAsTheySay() async throws {
        let fill = VirtualCamera.PictureFit.fill.placement(pictureWidth: 100, pictureHeight: 100, frameWidth: 320, frameHeight: 240)
        #expect(fill.x == 0 && fill.width == 320 && fill.y == -40 && fill.height == 320)
        let (l, _) = try await Self.firstFrameLuma(.nv12, picture: Self.square, fit: .stretch)
        #expect(Self.at(l, 10, 120) <= 24 && Self.at(l, 310, 120) >= 225 && Self.at(l, 158, 120) <= 24 && Self.at(l, 162, 120) >= 225)
    }

    @Test func brightnessChangesThePicture() async throws {
        let grey = try VirtualCamera.Picture(grey: [UInt8](repeating: 128, count: 64 * 64), width: 64, height: 64)
        let (plain, _) = try await Self.firstFrameLuma(.yuyv, picture: grey)
        let (bright, _) = try await Self.firstFrameLuma(.yuyv, picture: grey) { device in
            let control = try #require(device.control(.brightness))
            try device.lockForConfiguration()
            defer { device.unlockForConfiguration() }
            try device.setValue(control.maximum, for: .brightness)
        }
        #expect(Self.at(bright, 160, 120) > Self.at(plain, 160, 120) + 30)
    }

    @Test func badPicturesAreRefusedWithAReason() throws {
        #expect(throws: CaptureError.self) { try VirtualCamera.Picture(rgb: [1, 2, 3], width: 2, height: 2) }
        let png = FileManager.default.temporaryDirectory.appendingPathComponent("vision-\(getpid()).png")
        try Data([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]).write(to: png)
        defer { try? FileManager.default.removeItem(at: png) }
        do {
            _ = try VirtualCamera.Picture(contentsOfFile: png.path)
            Issue.record("a PNG was taken")
        } catch {
            #expect(error.description.contains("PNG"))
        }
    }
}
