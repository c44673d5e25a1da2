import Capture
import Foundation

/// How a video picture fills its layer, as `AVLayerVideoGravity`. Plain value; any thread.
public enum VideoGravity: String, Sendable, Hashable, CaseIterable {
    /// The whole picture, aspect ratio kept, centred; the rest of the layer shows its background
    /// (letterbox or pillarbox).
    case resizeAspect
    /// The layer covered, aspect ratio kept, centred; the picture's edges are cut off.
    case resizeAspectFill
    /// The picture stretched to the layer's bounds.
    case resize
}

/// The pure geometry of a video picture in a layer: where the picture lands for a gravity, an
/// orientation and mirroring, and the conversions between AVFoundation's normalized capture
/// device coordinates and layer coordinates. Plain value; any thread.
///
/// Device coordinates are those of the sensor's picture as delivered (landscape): (0, 0) its
/// top-left corner, (1, 1) its bottom-right, whatever the orientation and mirroring shown.
public struct PreviewGeometry: Sendable, Hashable {
    /// The layer's bounds.
    public var bounds: CGRect
    /// The size of the frames as delivered by the camera (before any turn).
    public var videoSize: CGSize
    public var gravity: VideoGravity
    /// How the picture is turned for display (`landscapeRight`: as delivered).
    public var orientation: VideoOrientation
    /// Mirrored left to right on screen (after the turn).
    public var isMirrored: Bool

    public init(
        bounds: CGRect, videoSize: CGSize, gravity: VideoGravity,
        orientation: VideoOrientation = .landscapeRight, isMirrored: Bool = false
    ) {
        self.bounds = bounds
        self.videoSize = videoSize
        self.gravity = gravity
        self.orientation = orientation
        self.isMirrored = isMirrored
    }

    /// Whether the turn swaps width and height.
    var isQuarterTurn: Bool { orientation == .portrait || orientation == .portraitUpsideDown }

    /// The picture's size as shown, before scaling (width and height swapped for portrait).
    public var displayedVideoSize: CGSize {
        isQuarterTurn ? CGSize(width: videoSize.height, height: videoSize.width) : videoSize
    }

    /// Where the whole (turned) picture lands in layer coordinates; may extend past the bounds
    /// for `.resizeAspectFill`.
    public var videoRect: CGRect {
        let shown = displayedVideoSize
        guard shown.width > 0, shown.height > 0, bounds.width > 0, bounds.height > 0 else { return bounds }
        switch gravity {
        case .resize:
            return bounds
        case .resizeAspect, .resizeAspectFill:
            let sx = bounds.width / shown.width, sy = bounds.height / shown.height
            let scale = gravity == .resizeAspect ? min(sx, sy) : max(sx, sy)
            let w = shown.width * scale, h = shown.height * scale
            return CGRect(x: bounds.midX - w / 2, y: bounds.midY - h / 2, width: w, height: h)
        }
    }

    /// Turns and mirrors a normalized device point into a normalized point of the picture as
    /// shown.
    func displayed(fromDevice p: CGPoint) -> CGPoint {
        var q: CGPoint
        switch orientation {
        case .landscapeRight: q = p
        case .portrait: q = CGPoint(x: 1 - p.y, y: p.x)  // 90° clockwise
        case .portraitUpsideDown: q = CGPoint(x: p.y, y: 1 - p.x)  // 90° counter-clockwise
        case .landscapeLeft: q = CGPoint(x: 1 - p.x, y: 1 - p.y)  // 180°
        }
        if isMirrored { q.x = 1 - q.x }
        return q
    }

    /// The inverse of `displayed(fromDevice:)`.
    func device(fromDisplayed d: CGPoint) -> CGPoint {
        var q = d
        if isMirrored { q.x = 1 - q.x }
        switch orientation {
        case .landscapeRight: return q
        case .portrait: return CGPoint(x: q.y, y: 1 - q.x)
        case .portraitUpsideDown: return CGPoint(x: 1 - q.y, y: q.x)
        case .landscapeLeft: return CGPoint(x: 1 - q.x, y: 1 - q.y)
        }
    }

    /// A layer point for a normalized device point, as
    /// `AVCaptureVideoPreviewLayer.layerPointConverted(fromCaptureDevicePoint:)`.
    public func layerPoint(fromCaptureDevicePoint p: CGPoint) -> CGPoint {
        let d = displayed(fromDevice: p), r = videoRect
        return CGPoint(x: r.minX + d.x * r.width, y: r.minY + d.y * r.height)
    }

    /// The normalized device point under a layer point (the inverse of `layerPoint`); outside
    /// 0...1 for a point off the picture.
    public func captureDevicePoint(fromLayerPoint p: CGPoint) -> CGPoint {
        let r = videoRect
        guard r.width > 0, r.height > 0 else { return .zero }
        return device(fromDisplayed: CGPoint(x: (p.x - r.minX) / r.width, y: (p.y - r.minY) / r.height))
    }

    /// The layer rectangle of a normalized device rectangle (a metadata output's face bounds).
    public func layerRect(fromMetadataOutputRect rect: CGRect) -> CGRect {
        let a = layerPoint(fromCaptureDevicePoint: CGPoint(x: rect.minX, y: rect.minY))
        let b = layerPoint(fromCaptureDevicePoint: CGPoint(x: rect.maxX, y: rect.maxY))
        return CGRect(x: min(a.x, b.x), y: min(a.y, b.y), width: abs(a.x - b.x), height: abs(a.y - b.y))
    }

    /// The normalized device rectangle under a layer rectangle.
    public func metadataOutputRect(fromLayerRect rect: CGRect) -> CGRect {
        let a = captureDevicePoint(fromLayerPoint: CGPoint(x: rect.minX, y: rect.minY))
        let b = captureDevicePoint(fromLayerPoint: CGPoint(x: rect.maxX, y: rect.maxY))
        return CGRect(x: min(a.x, b.x), y: min(a.y, b.y), width: abs(a.x - b.x), height: abs(a.y - b.y))
    }

    /// SDL's drawing of the texture: the unturned destination rectangle (centred on `videoRect`),
    /// the clockwise angle and the texture-space flips that give the turned, mirrored picture.
    var textureDrawing: (rect: CGRect, angle: Double, flipHorizontal: Bool, flipVertical: Bool) {
        let r = videoRect
        let unturned =
            isQuarterTurn
            ? CGRect(x: r.midX - r.height / 2, y: r.midY - r.width / 2, width: r.height, height: r.width) : r
        let angle: Double =
            switch orientation {
            case .landscapeRight: 0
            case .portrait: 90
            case .portraitUpsideDown: 270
            case .landscapeLeft: 180
            }
        // A left-right mirror on screen after a quarter turn is an up-down flip of the texture.
        return (unturned, angle, isMirrored && !isQuarterTurn, isMirrored && isQuarterTurn)
    }
}
