import Capture
@testable import CapturePreview
import Foundation
import Testing

/// The pure geometry of the preview layer: where gravity puts a picture, and the conversions
/// between normalized device points and layer points.
@Suite struct PreviewGeometryTests {
    static let square = CGRect(x: 0, y: 0, width: 300, height: 300)
    static let wide = CGSize(width: 1280, height: 720)

    @Test func aspectLetterboxesAWidePictureInASquare() {
        let g = PreviewGeometry(bounds: Self.square, videoSize: Self.wide, gravity: .resizeAspect)
        #expect(g.videoRect == CGRect(x: 0, y: 65.625, width: 300, height: 168.75))
    }

    @Test func fillCropsAndResizeStretches() {
        let fill = PreviewGeometry(bounds: Self.square, videoSize: Self.wide, gravity: .resizeAspectFill)
        #expect(abs(fill.videoRect.width - 533.333) < 0.01 && fill.videoRect.height == 300)
        #expect(abs(fill.videoRect.midX - 150) < 1e-9)
        let resize = PreviewGeometry(bounds: Self.square, videoSize: Self.wide, gravity: .resize)
        #expect(resize.videoRect == Self.square)
    }

    @Test func portraitTurnsThePictureAndSwapsItsSides() {
        let g = PreviewGeometry(bounds: Self.square, videoSize: Self.wide, gravity: .resizeAspect, orientation: .portrait)
        #expect(g.displayedVideoSize == CGSize(width: 720, height: 1280))
        #expect(abs(g.videoRect.width - 168.75) < 1e-9 && g.videoRect.height == 300)
        // The sensor's top-left corner shows at the top right after a clockwise quarter turn.
        let p = g.layerPoint(fromCaptureDevicePoint: .zero)
        #expect(abs(p.x - g.videoRect.maxX) < 1e-9 && abs(p.y - g.videoRect.minY) < 1e-9)
    }

    @Test func mirroringSwapsLeftAndRight() {
        let g = PreviewGeometry(bounds: Self.square, videoSize: Self.wide, gravity: .resize, isMirrored: true)
        #expect(g.layerPoint(fromCaptureDevicePoint: CGPoint(x: 0, y: 0)) == CGPoint(x: 300, y: 0))
        #expect(g.layerPoint(fromCaptureDevicePoint: CGPoint(x: 0.25, y: 0.5)) == CGPoint(x: 225, y: 150))
    }

    @Test(arguments: VideoGravity.allCases)
    func conversionsInvertEachOtherWithinAPixel(gravity: VideoGravity) {
        for orientation in VideoOrientation.allCases {
            for mirrored in [false, true] {
                for bounds in [Self.square, CGRect(x: 0, y: 0, width: 240, height: 480), CGRect(x: 10, y: 20, width: 640, height: 360)] {
                    let g = PreviewGeometry(
                        bounds: bounds, videoSize: Self.wide, gravity: gravity,
                        orientation: orientation, isMirrored: mirrored)
                    for x in stride(from: 0.0, through: 1.0, by: 0.125) {
                        for y in stride(from: 0.0, through: 1.0, by: 0.125) {
                            let device = CGPoint(x: x, y: y)
                            let layer = g.layerPoint(fromCaptureDevicePoint: device)
                            let back = g.captureDevicePoint(fromLayerPoint: layer)
                            #expect(abs(back.x - x) < 1e-9 && abs(back.y - y) < 1e-9, "\(gravity) \(orientation) mirrored \(mirrored)")
                            // And from the layer side: a layer point comes back within a pixel.
                            let again = g.layerPoint(fromCaptureDevicePoint: g.captureDevicePoint(fromLayerPoint: layer))
                            #expect(hypot(again.x - layer.x, again.y - layer.y) < 1)
                        }
                    }
                    let face = CGRect(x: 0.2, y: 0.3, width: 0.25, height: 0.4)
                    let round = g.metadataOutputRect(fromLayerRect: g.layerRect(fromMetadataOutputRect: face))
                    #expect(abs(round.minX - face.minX) < 1e-9 && abs(round.height - face.height) < 1e-9)
                }
            }
        }
    }

    @Test func textureDrawingCentresTheUnturnedRectangle() {
        let g = PreviewGeometry(bounds: Self.square, videoSize: Self.wide, gravity: .resizeAspect, orientation: .portrait, isMirrored: true)
        let d = g.textureDrawing
        #expect(d.angle == 90 && d.flipVertical && !d.flipHorizontal)
        #expect(abs(d.rect.width - 300) < 1e-9 && abs(d.rect.height - 168.75) < 1e-9)
        #expect(abs(d.rect.midX - 150) < 1e-9 && abs(d.rect.midY - 150) < 1e-9)
    }

    @Test func mjpegIsDecodedAtTheSmallestScaleNotBelowTheDrawnSize() {
        // TurboJPEG scales by n/8: a 640x360 window takes 3/8 (720x405), since 1/4 is 480 wide.
        #expect(ScaledJPEGDecoder.scaledSize(width: 1920, height: 1080, target: (640, 360)) == (720, 405))
        #expect(ScaledJPEGDecoder.scaledSize(width: 1920, height: 1080, target: (480, 270)) == (480, 270))
        #expect(ScaledJPEGDecoder.scaledSize(width: 1920, height: 1080, target: (3000, 2000)) == (1920, 1080))
        #expect(ScaledJPEGDecoder.scaledSize(width: 1920, height: 1080, target: (10, 10)) == (240, 135))
    }

    @Test func noDisplayIsATypedErrorPointingToTheBrowserPreview() {
        #expect(throws: PreviewError.self) { try PreviewWindow.checkDisplay([:]) }
        do {
            try PreviewWindow.checkDisplay(["DISPLAY": ""])
            Issue.record("an empty DISPLAY was taken for a display")
        } catch {
            #expect(error.code == .noDisplay)
            #expect(error.message.contains("capture serve") && !error.message.contains("\n"))
        }
        #expect(throws: Never.self) { try PreviewWindow.checkDisplay(["DISPLAY": ":0"]) }
        #expect(throws: Never.self) { try PreviewWindow.checkDisplay(["WAYLAND_DISPLAY": "wayland-0"]) }
    }
}

/// The layer tree: order, z order, hit testing and coordinate conversion.
@Suite struct LayerTreeTests {
    @Test func insertionOrderAndRemoval() {
        let root = Layer(), a = Layer(), b = Layer(), c = Layer(), d = Layer()
        root.addSublayer(a)
        root.addSublayer(b)
        root.insertSublayer(c, below: b)
        root.insertSublayer(d, at: 0)
        #expect(root.sublayers?.map(ObjectIdentifier.init) == [d, a, c, b].map(ObjectIdentifier.init))
        root.insertSublayer(d, above: b)
        #expect(root.sublayers?.last === d && d.superlayer === root)
        c.removeFromSuperlayer()
        #expect(c.superlayer == nil && root.sublayers?.count == 3)
        // Adding to another layer moves it.
        a.addSublayer(b)
        #expect(b.superlayer === a && root.sublayers?.count == 2)
        root.sublayers = nil
        #expect(root.sublayers == nil && a.superlayer == nil)
    }

    @Test func hitTestFindsTheFrontmostVisibleLayer() {
        let root = Layer()
        root.frame = CGRect(x: 0, y: 0, width: 200, height: 200)
        let low = Layer(), high = Layer(), child = Layer()
        low.frame = CGRect(x: 10, y: 10, width: 100, height: 100)
        high.frame = CGRect(x: 50, y: 50, width: 100, height: 100)
        child.frame = CGRect(x: 5, y: 5, width: 10, height: 10)
        high.zPosition = -1  // below `low` although added after it
        root.addSublayer(low)
        root.addSublayer(high)
        low.addSublayer(child)
        #expect(root.hitTest(CGPoint(x: 60, y: 60)) === low)
        #expect(root.hitTest(CGPoint(x: 140, y: 140)) === high)
        #expect(root.hitTest(CGPoint(x: 17, y: 17)) === child)
        #expect(root.hitTest(CGPoint(x: 190, y: 5)) === root)
        #expect(root.hitTest(CGPoint(x: 250, y: 5)) == nil)
        low.isHidden = true
        #expect(root.hitTest(CGPoint(x: 60, y: 60)) === high)
        #expect(child.convert(CGPoint(x: 1, y: 1), to: nil) == CGPoint(x: 16, y: 16))
        #expect(child.convert(CGPoint(x: 16, y: 16), from: nil) == CGPoint(x: 1, y: 1))
    }

    @Test func imagesCheckTheirBytes() throws {
        #expect(throws: PreviewError.self) { try LayerImage(rgbaPixels: [1, 2, 3], width: 1, height: 1) }
        #expect(throws: PreviewError.self) { try LayerImage(jpegData: Data([0xFF, 0xD8, 0, 0, 0])) }
        let img = LayerImage(color: .white, width: 2, height: 3)
        #expect(img.pixels.count == 24 && img.pixels.allSatisfy { $0 == 255 })
    }
}
