import Capture
import CapturePreview
import CaptureVision
import Foundation

/// Outlines what a metadata output finds over a preview, as seed 000's face-outline layer: a
/// layer above the preview whose sublayers are boxes (codes green, faces yellow), each placed with
/// the preview's ``CaptureVideoPreviewLayer/transformedMetadataObject(for:)``, so that it follows
/// the preview's gravity, turn and mirroring. Boxes of objects gone are hidden.
///
/// ```swift
/// let outlines = MetadataOutlines(preview: preview)
/// window.rootLayer.addSublayer(outlines.layer)
/// metadata.setMetadataObjectsDelegate(outlines, queue: .main)
/// ```
///
/// Thread-safe: ``show(_:)`` (and the delegate method, which calls it) may run on any queue.
public final class MetadataOutlines: CaptureMetadataOutputObjectsDelegate, @unchecked Sendable {
    /// The outline of a code.
    public static let codeColor = Color(red: 0, green: 1, blue: 0)
    /// The outline of a face.
    public static let faceColor = Color(red: 1, green: 1, blue: 0)
    /// The outlines' width, in points.
    public static let lineWidth = 3.0
    /// The overlay, kept the preview's frame (zPosition 1); its sublayers are the boxes. Add it
    /// beside the preview, above it.
    public let layer = Layer()
    private let preview: CaptureVideoPreviewLayer
    private let lock = NSLock()
    private var boxes: [Layer] = []

    /// Outlines for `preview`.
    public init(preview: CaptureVideoPreviewLayer) {
        self.preview = preview
        layer.frame = preview.frame
        layer.zPosition = 1
    }

    /// Shows a box for each of `objects` (a metadata output's, in its coordinates) and hides the rest.
    public func show(_ objects: [MetadataObject]) {
        lock.withLock {
            layer.frame = preview.frame
            let shown = objects.compactMap { preview.transformedMetadataObject(for: $0) }
            while boxes.count < shown.count {
                let box = Layer()
                box.borderWidth = Self.lineWidth
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

    /// Shows the objects of a detection (``show(_:)``).
    public func metadataOutput(_ output: CaptureMetadataOutput, didOutput objects: [MetadataObject], from connection: CaptureConnection) {
        show(objects)
    }
}
