import Capture
import CapturePreview
import CaptureVision
import CaptureVisionPreview
import Foundation
import Testing

/// Metadata objects in a preview layer's coordinates (`transformedMetadataObject(for:)`).
struct TransformedObjectTests {
    static let face = MetadataFaceObject(
        faceID: 7, time: CaptureTime(nanoseconds: 5), sequenceNumber: 3, bounds: CGRect(x: 0.5, y: 0.5, width: 0.25, height: 0.25))
    static let code = MetadataMachineReadableCodeObject(
        type: .qr, time: CaptureTime(nanoseconds: 5), sequenceNumber: 3,
        corners: [CGPoint(x: 0.1, y: 0.2), CGPoint(x: 0.3, y: 0.2), CGPoint(x: 0.3, y: 0.4), CGPoint(x: 0.1, y: 0.4)], stringValue: "X")

    @Test func aFaceInAPillarboxedMirroredLayer() throws {
        // 640x480 in 480x270, aspect: the picture spans x 60...420 (360 wide), the full height.
        var g = PreviewGeometry(
            bounds: CGRect(x: 0, y: 0, width: 480, height: 270), videoSize: CGSize(width: 640, height: 480), gravity: .resizeAspect)
        let plain = try #require(g.transformed(Self.face) as? MetadataFaceObject)
        #expect(plain.bounds == CGRect(x: 240, y: 135, width: 90, height: 67.5))
        #expect(plain.faceID == 7 && plain.sequenceNumber == 3 && plain.time == Self.face.time)
        g.isMirrored = true
        #expect(g.transformed(Self.face).bounds == CGRect(x: 150, y: 135, width: 90, height: 67.5))
    }

    @Test(arguments: VideoGravity.allCases, [false, true])
    func objectsFollowTheLayersOwnConversions(_ gravity: VideoGravity, _ mirrored: Bool) throws {
        let g = PreviewGeometry(
            bounds: CGRect(x: 0, y: 0, width: 400, height: 300), videoSize: CGSize(width: 1280, height: 720), gravity: gravity,
            orientation: .portrait, isMirrored: mirrored)
        #expect(g.transformed(Self.face).bounds == g.layerRect(fromMetadataOutputRect: Self.face.bounds))
        let code = try #require(g.transformed(Self.code) as? MetadataMachineReadableCodeObject)
        #expect(code.corners == Self.code.corners.map { g.layerPoint(fromCaptureDevicePoint: $0) })
        #expect(code.stringValue == "X" && code.type == .qr)
        // Back again: the layer rect converts to the object's own bounds.
        let back = g.metadataOutputRect(fromLayerRect: code.bounds)
        #expect(abs(back.minX - 0.1) < 1e-9 && abs(back.minY - 0.2) < 1e-9 && abs(back.width - 0.2) < 1e-9)
    }
}
