import Capture
import CaptureTestSupport
import CaptureVision
import Foundation
import Testing

@Suite(.serialized) struct CodeTests {
    static let texts = [
        "HELLO",
        "https://example.com/a/long/path?" + String(repeating: "0123456789", count: 12),
        "Grüße aus Köln — 東京 ✓",
    ]

    @Test func qrCodesAreReadWithTheirTextAndCorners() throws {
        let rig = try VisionRig("qr", picture: nil, types: [.qr])
        let placements: [(size: Double, centre: CGPoint, degrees: Double)] = [
            (220, CGPoint(x: 320, y: 240), 0), (170, CGPoint(x: 170, y: 150), 30), (260, CGPoint(x: 430, y: 280), 90),
        ]
        for text in Self.texts {
            for place in placements {
                let (picture, drawn) = try qrPicture(text, size: place.size, centre: place.centre, degrees: place.degrees)
                rig.show(picture)
                let objects = rig.firstFrame { $0.contains { ($0 as? MetadataMachineReadableCodeObject)?.stringValue == text } }
                let code = try #require(
                    objects?.compactMap { $0 as? MetadataMachineReadableCodeObject }.first { $0.stringValue == text },
                    "no QR code read for \(text.prefix(20)) at \(place)")
                #expect(code.type == .qr)
                // Each drawn corner has a read corner within 3 % of the frame.
                for d in drawn {
                    let nearest = code.corners.map { max(abs($0.x - d.x), abs($0.y - d.y)) }.min() ?? 1
                    #expect(nearest < 0.03, "corner \(d) of \(text.prefix(20)) at \(place): read \(code.corners)")
                }
            }
        }
    }

    @Test(arguments: ["ean13", "code128"]) func barcodesAreReadWhereTheyAreDrawn(_ name: String) throws {
        let label = try #require(VisionPictures.labels[name], "make-pictures.py made no \(name) (python-barcode installed?)")
        let rig = try VisionRig(name, picture: try VisionPictures.picture(name), types: [.ean13, .code128])
        let drawn = VisionPictures.normalized(try #require(label.box), in: label)
        let objects = rig.firstFrame { !$0.isEmpty }
        let code = try #require(objects?.first as? MetadataMachineReadableCodeObject, "no \(name) read")
        #expect(code.type == (name == "ean13" ? .ean13 : .code128))
        #expect(code.stringValue == label.text)
        // A 1-D code's corners are on its scan line(s): within the drawn bars (3 % slack), across most of them.
        let slack = drawn.insetBy(dx: -0.03, dy: -0.03)
        for p in code.corners { #expect(slack.contains(p), "\(p) outside \(drawn)") }
        #expect(code.bounds.width > drawn.width * 0.8, "\(code.bounds) spans too little of \(drawn)")
    }

    @Test func aRectOfInterestThatLeavesTheCodeOutFindsNothing() throws {
        // The code sits in the right half; the rect is the left half.
        let (picture, _) = try qrPicture("OUTSIDE", size: 200, centre: CGPoint(x: 480, y: 240), degrees: 0)
        let rig = try VisionRig("roi", picture: picture, types: [.qr])
        #expect(rig.firstFrame { !$0.isEmpty } != nil, "the code is not read with the whole frame")
        rig.output.rectOfInterest = CGRect(x: 0, y: 0, width: 0.5, height: 1)
        // A frame looked at before the change may still report it: only later frames count.
        rig.forgetEarlierFrames()
        #expect(rig.objects(overFrames: 10).isEmpty)
        rig.output.rectOfInterest = CGRect(x: 0.5, y: 0, width: 0.5, height: 1)
        rig.forgetEarlierFrames()
        let again = rig.firstFrame { !$0.isEmpty }?.first as? MetadataMachineReadableCodeObject
        #expect(again?.stringValue == "OUTSIDE")
        // Coordinates stay those of the whole frame.
        #expect(abs((again?.bounds.midX ?? 0) - 0.75) < 0.03)
    }
}
