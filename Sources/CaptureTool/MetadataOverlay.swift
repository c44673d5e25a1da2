// `capture preview --metadata`: boxes over the picture where the metadata output finds codes and
// faces, in a layer above the preview as seed 000's face-outline layer (CaptureVisionPreview
// converts each object to the preview layer's coordinates).
import Capture
import CapturePreview
import CaptureVision
import CaptureVisionPreview
import Foundation

/// Draws the objects of each detection as outlined boxes (codes green, faces yellow) in a layer
/// over the preview; boxes of objects gone are hidden. Its delegate method runs on the main queue.
final class MetadataOverlay: CaptureMetadataOutputObjectsDelegate, @unchecked Sendable {
    static let codeColor = Color(red: 0, green: 1, blue: 0)
    static let faceColor = Color(red: 1, green: 1, blue: 0)
    /// The overlay, sized as the preview layer; its sublayers are the boxes.
    let layer = Layer()
    private let preview: CaptureVideoPreviewLayer
    private var boxes: [Layer] = []

    init(preview: CaptureVideoPreviewLayer) {
        self.preview = preview
        layer.frame = preview.frame
        layer.zPosition = 1
    }

    func metadataOutput(_ output: CaptureMetadataOutput, didOutput objects: [MetadataObject], from connection: CaptureConnection) {
        layer.frame = preview.frame
        let shown = objects.compactMap { preview.transformedMetadataObject(for: $0) }
        while boxes.count < shown.count {
            let box = Layer()
            box.borderWidth = 3
            layer.addSublayer(box)
            boxes.append(box)
        }
        for (i, box) in boxes.enumerated() {
            guard i < shown.count else {
                box.isHidden = true
                continue
            }
            box.frame = shown[i].bounds
            box.borderColor = shown[i].type == .face ? Self.faceColor : Self.codeColor
            box.isHidden = false
        }
    }
}

/// The types `--types` or `--metadata` names (a comma-separated list of short names), each one the
/// output has; all it has when `list` is nil.
func metadataTypes(_ list: String?, option: String, available: [MetadataObjectType]) throws -> [MetadataObjectType] {
    guard let list else { return available }
    return try list.split(separator: ",").map { name -> MetadataObjectType in
        guard let t = MetadataObjectType(name: String(name)), available.contains(t) else {
            throw ToolError(message: "--\(option): '\(name)' is not one of \(available.map(\.name).joined(separator: ", "))")
        }
        return t
    }
}
