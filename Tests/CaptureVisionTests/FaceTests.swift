import Capture
import CaptureTestSupport
import CaptureVision
import Foundation
import Testing

@Suite(.serialized) struct FaceTests {
    static func iou(_ a: CGRect, _ b: CGRect) -> Double {
        let i = a.intersection(b)
        guard !i.isNull else { return 0 }
        return Double(i.width * i.height) / Double(a.width * a.height + b.width * b.height - i.width * i.height)
    }

    /// How many labelled faces of the picture a frame's boxes overlap (IoU at least 0.3).
    static func found(_ name: String, in objects: [MetadataObject]) throws -> (found: Int, labelled: Int) {
        let label = try #require(VisionPictures.labels[name])
        let truth = (label.faces ?? []).map { VisionPictures.normalized($0, in: label) }
        let boxes = objects.filter { $0.type == .face }.map(\.bounds)
        return (truth.filter { t in boxes.contains { iou($0, t) >= 0.3 } }.count, truth.count)
    }

    @Test func faces90PercentFoundWhereLabelled() throws {
        #expect(VisionPictures.labels["astronaut"] != nil, "make-pictures.py made nothing (scikit-image installed?)")
        let rig = try VisionRig("faces", picture: nil, types: [.face])
        var found = 0, labelled = 0
        for name in ["astronaut", "lfw0", "lfw1", "lfw2", "lfw3", "lfw4"] {
            rig.show(try VisionPictures.picture(name))
            // Wait for a frame with the new picture's faces (the old picture's may still come).
            let objects = rig.firstFrame { (try? Self.found(name, in: $0).found) ?? 0 > 0 } ?? []
            let r = try Self.found(name, in: objects)
            found += r.found
            labelled += r.labelled
        }
        #expect(labelled == 101)
        #expect(Double(found) >= 0.9 * Double(labelled), "found \(found) of \(labelled) faces")
    }

    @Test func atMostOneFalseFacePer100FramesWithoutFaces() throws {
        let names =
            (0..<5).map { "nonface\($0)" }
            + ["coffee", "rocket", "hubble_deep_field", "coins", "page", "brick", "horse"].map { "noface_\($0)" }
        let rig = try VisionRig("nofaces", picture: nil, types: [.face])
        var boxes = 0, frames = 0
        for name in names {
            rig.show(try VisionPictures.picture(name))
            _ = rig.objects(overFrames: 2)  // frames of the previous picture
            let start = rig.output.statistics.framesDetected
            boxes += rig.objects(overFrames: 9).filter { $0.type == .face }.count
            frames += rig.output.statistics.framesDetected - start
        }
        #expect(frames >= 100)
        #expect(Double(boxes) <= Double(frames) / 100, "\(boxes) false boxes in \(frames) frames")
    }

    @Test func aFaceKeepsItsIDWhileInView() throws {
        let rig = try VisionRig("faceid", picture: try VisionPictures.picture("astronaut"), types: [.face])
        let seen = rig.objects(overFrames: 6).compactMap { $0 as? MetadataFaceObject }
        #expect(seen.count >= 5)
        #expect(Set(seen.map(\.faceID)).count == 1, "IDs \(seen.map(\.faceID))")
    }
}
