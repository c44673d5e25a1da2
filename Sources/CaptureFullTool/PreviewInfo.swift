import Capture
import CapturePreview
import Foundation

/// `capture preview`'s info overlay (the `i` key): frames drawn per second, frames lost, and the
/// frame's pixel format and size, as text in the window's bottom-left corner above the picture.
/// Main actor: the window's event loop runs its updates.
@MainActor
final class PreviewInfoOverlay {
    let layer = Layer()
    private let preview: CaptureVideoPreviewLayer
    private var last: (time: Double, drawn: Int)?
    private var ticker: Task<Void, Never>?

    init(preview: CaptureVideoPreviewLayer) {
        self.preview = preview
        layer.name = "info"
        layer.isHidden = true
        // Above the picture and anything else the window holds.
        layer.zPosition = 100
        layer.contentsGravity = .resize
    }

    var isShown: Bool { !layer.isHidden }

    /// Shows the overlay (updated twice a second) or hides it.
    func toggle(in root: Layer) {
        if layer.isHidden {
            last = nil
            update(in: root)
            layer.isHidden = false
            ticker = Task { @MainActor [weak self] in
                while !Task.isCancelled {
                    try? await Task.sleep(for: .milliseconds(500))
                    guard let self, !Task.isCancelled else { return }
                    self.update(in: root)
                }
            }
        } else {
            layer.isHidden = true
            ticker?.cancel()
            ticker = nil
        }
    }

    /// The text now, and the overlay placed in the root layer's bottom-left corner.
    func update(in root: Layer) {
        var t = timespec()
        clock_gettime(CLOCK_MONOTONIC, &t)
        let now = Double(t.tv_sec) + Double(t.tv_nsec) * 1e-9
        let s = preview.statistics
        var fps = "--"
        if let last, now > last.time {
            fps = String(format: "%.1f", Double(s.framesDrawn - last.drawn) / (now - last.time))
        }
        last = (now, s.framesDrawn)
        let format = preview.videoFormat.map { "\($0.pixelFormat) \($0.dimensions)" } ?? "NO FRAME YET"
        let image = LayerImage(text: "\(fps) FPS\nDROPS \(s.framesDropped) SKIPPED \(s.framesReplaced)\n\(format)")
        layer.contents = image
        placeIn(root, size: CGSize(width: image.width, height: image.height))
    }

    /// Keeps the overlay in the bottom-left corner (after a resize too).
    func place(in root: Layer) {
        guard let image = layer.contents else { return }
        placeIn(root, size: CGSize(width: image.width, height: image.height))
    }

    private func placeIn(_ root: Layer, size: CGSize) {
        let b = root.bounds
        layer.frame = CGRect(x: b.minX + 8, y: b.maxY - 8 - size.height, width: size.width, height: size.height)
    }
}
