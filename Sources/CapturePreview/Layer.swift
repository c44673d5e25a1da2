import Capture
import Foundation
import Synchronization

/// A colour with straight (not premultiplied) alpha, each component 0...1. Plain value; any thread.
public struct Color: Sendable, Hashable {
    public var red: Double
    public var green: Double
    public var blue: Double
    public var alpha: Double

    public init(red: Double, green: Double, blue: Double, alpha: Double = 1) {
        self.red = red
        self.green = green
        self.blue = blue
        self.alpha = alpha
    }

    public static let black = Color(red: 0, green: 0, blue: 0)
    public static let white = Color(red: 1, green: 1, blue: 1)
    public static let clear = Color(red: 0, green: 0, blue: 0, alpha: 0)
}

/// How a layer's `contents` image fills its bounds, as `CALayerContentsGravity`.
public enum ContentsGravity: String, Sendable, Hashable, CaseIterable {
    /// Stretched to the bounds (CALayer's default).
    case resize
    /// Whole image, aspect kept, centred.
    case resizeAspect
    /// Bounds covered, aspect kept, centred, edges cut.
    case resizeAspectFill
    /// Unscaled, centred.
    case center
}

/// An image for `Layer.contents`: RGBA pixels (straight alpha, 4 bytes a pixel, rows without
/// padding), made from pixels, PNG or JPEG bytes, a colour or text. Plain value; any thread.
public struct LayerImage: Sendable {
    public let width: Int
    public let height: Int
    /// R, G, B, A bytes, `width * height * 4` of them.
    public let pixels: [UInt8]
    /// Tells images apart for the renderer's texture cache.
    let id: UInt64

    private static let ids = Atomic<UInt64>(0)
    private static func nextID() -> UInt64 { ids.add(1, ordering: .relaxed).newValue }

    /// An image from RGBA pixels. Throws `.invalidImage` when the byte count is not
    /// `width * height * 4` or a side is not positive.
    public init(rgbaPixels: [UInt8], width: Int, height: Int) throws(PreviewError) {
        guard width > 0, height > 0, rgbaPixels.count == width * height * 4 else {
            throw PreviewError(
                .invalidImage, "an RGBA image of \(width)x\(height) needs \(max(0, width * height * 4)) bytes, not \(rgbaPixels.count)")
        }
        self.width = width
        self.height = height
        pixels = rgbaPixels
        id = Self.nextID()
    }

    /// An image decoded from JPEG bytes (with TurboJPEG). Throws `.invalidImage` for bytes that
    /// are not a readable JPEG.
    public init(jpegData: Data) throws(PreviewError) {
        do {
            let (header, pixels) = try JPEGDecoder().decode(jpegData, as: .rgba)
            try self.init(rgbaPixels: pixels, width: header.width, height: header.height)
        } catch let e as CaptureError {
            throw PreviewError(.invalidImage, "not a usable JPEG image (\(e.message)): pass JPEG bytes or RGBA pixels")
        } catch let e as PreviewError {
            throw e
        } catch {
            throw PreviewError(.invalidImage, "not a usable JPEG image: pass JPEG bytes or RGBA pixels")
        }
    }

    /// An image decoded from PNG bytes (with libpng; any colour type and bit depth, transparency
    /// kept as alpha). Throws `.invalidImage` for bytes that are not a readable PNG.
    public init(pngData: Data) throws(PreviewError) {
        let decoded = PNGDecoding.decode(pngData)
        switch decoded {
        case .success(let (width, height, pixels)):
            try self.init(rgbaPixels: pixels, width: width, height: height)
        case .failure(let why):
            throw PreviewError(.invalidImage, "not a usable PNG image (\(why)): pass PNG or JPEG bytes or RGBA pixels")
        }
    }

    /// An image decoded from PNG or JPEG bytes, told apart by their signature. Throws
    /// `.invalidImage` for anything else.
    public init(data: Data) throws(PreviewError) {
        if data.starts(with: PNGDecoding.signature) {
            try self.init(pngData: data)
        } else if data.starts(with: [0xFF, 0xD8]) {
            try self.init(jpegData: data)
        } else {
            throw PreviewError(.invalidImage, "neither PNG nor JPEG bytes (\(data.count) bytes): pass PNG or JPEG bytes or RGBA pixels")
        }
    }

    /// A single-colour image.
    public init(color: Color, width: Int, height: Int) {
        func byte(_ v: Double) -> UInt8 { UInt8(max(0, min(255, (v * 255).rounded()))) }
        let px = [byte(color.red), byte(color.green), byte(color.blue), byte(color.alpha)]
        // A positive size always makes a valid image.
        self = try! LayerImage(
            rgbaPixels: Array([[UInt8]](repeating: px, count: max(1, width) * max(1, height)).joined()),
            width: max(1, width), height: max(1, height))
    }
}

/// A rectangle in a tree of layers, drawn by a `PreviewWindow`: the part of `CALayer` a camera
/// screen uses (frame and bounds, background, border, an image, opacity, hiding, z order,
/// sublayers and hit testing).
///
/// Thread-safe: any thread may read or change any layer. Every layer's state sits behind one
/// lock for the whole tree, so a change (a move between superlayers too) is atomic; the window
/// takes a snapshot of the tree under that lock at each drawn frame and draws from the snapshot,
/// so changes show at the next frame. Coordinates are points with the origin at the top left and
/// y downwards, as in UIKit.
open class Layer: @unchecked Sendable {
    /// Guards every layer's stored state below (recursive: a subclass's accessor may read others).
    static let tree = NSRecursiveLock()

    private var _frame: CGRect = .zero
    private var _boundsOrigin: CGPoint = .zero
    private var _backgroundColor: Color?
    private var _borderColor: Color = .black
    private var _borderWidth: CGFloat = 0
    private var _cornerRadius: CGFloat = 0
    private var _contents: LayerImage?
    private var _contentsGravity: ContentsGravity = .resize
    private var _opacity: Float = 1
    private var _isHidden = false
    private var _zPosition: CGFloat = 0
    private var _masksToBounds = false
    private var _name: String?
    private weak var _superlayer: Layer?
    private var _sublayers: [Layer] = []

    public init() {}

    static func locked<T>(_ body: () throws -> T) rethrows -> T {
        tree.lock()
        defer { tree.unlock() }
        return try body()
    }

    /// The layer's rectangle in its superlayer's coordinates.
    public var frame: CGRect {
        get { Self.locked { _frame } }
        set { Self.locked { _frame = newValue.standardized } }
    }
    /// The layer's own coordinate space: the origin is what its top-left corner shows (sublayers
    /// move by minus it); the size is the frame's. Setting a new size keeps the frame's centre.
    public var bounds: CGRect {
        get { Self.locked { CGRect(origin: _boundsOrigin, size: _frame.size) } }
        set {
            Self.locked {
                let b = newValue.standardized
                _boundsOrigin = b.origin
                _frame = CGRect(x: _frame.midX - b.width / 2, y: _frame.midY - b.height / 2, width: b.width, height: b.height)
            }
        }
    }
    /// Fills the bounds under the contents and sublayers; nil draws nothing.
    public var backgroundColor: Color? {
        get { Self.locked { _backgroundColor } }
        set { Self.locked { _backgroundColor = newValue } }
    }
    /// The border's colour (black by default).
    public var borderColor: Color {
        get { Self.locked { _borderColor } }
        set { Self.locked { _borderColor = newValue } }
    }
    /// The border's width in points, drawn inside the bounds, above the contents and sublayers.
    public var borderWidth: CGFloat {
        get { Self.locked { _borderWidth } }
        set { Self.locked { _borderWidth = max(0, newValue) } }
    }
    /// Rounds the corners of the background and the border, in points (at most half a side),
    /// as `CALayer.cornerRadius`. Contents and sublayers are not rounded (`masksToBounds` clips to
    /// the rectangle).
    public var cornerRadius: CGFloat {
        get { Self.locked { _cornerRadius } }
        set { Self.locked { _cornerRadius = max(0, newValue) } }
    }
    /// An image drawn over the background, placed by `contentsGravity`.
    public var contents: LayerImage? {
        get { Self.locked { _contents } }
        set { Self.locked { _contents = newValue } }
    }
    /// How `contents` fills the bounds.
    public var contentsGravity: ContentsGravity {
        get { Self.locked { _contentsGravity } }
        set { Self.locked { _contentsGravity = newValue } }
    }
    /// 0 (invisible) ... 1 (opaque); multiplies down the tree.
    public var opacity: Float {
        get { Self.locked { _opacity } }
        set { Self.locked { _opacity = min(1, max(0, newValue)) } }
    }
    /// A hidden layer and its sublayers are neither drawn nor hit.
    public var isHidden: Bool {
        get { Self.locked { _isHidden } }
        set { Self.locked { _isHidden = newValue } }
    }
    /// Drawing order among siblings: higher draws later (on top); equal values keep the
    /// sublayer order.
    public var zPosition: CGFloat {
        get { Self.locked { _zPosition } }
        set { Self.locked { _zPosition = newValue } }
    }
    /// Clips the contents and sublayers to the bounds.
    public var masksToBounds: Bool {
        get { Self.locked { _masksToBounds } }
        set { Self.locked { _masksToBounds = newValue } }
    }
    /// A name for finding the layer (e.g. in `hitTest` results).
    public var name: String? {
        get { Self.locked { _name } }
        set { Self.locked { _name = newValue } }
    }

    /// The layer this one is a sublayer of.
    public var superlayer: Layer? { Self.locked { _superlayer } }

    /// The sublayers, back to front in sublayer order (nil when there are none). Setting the list
    /// takes each layer out of its old superlayer.
    public var sublayers: [Layer]? {
        get { Self.locked { _sublayers.isEmpty ? nil : _sublayers } }
        set {
            Self.locked {
                for l in _sublayers { l._superlayer = nil }
                _sublayers = []
                for l in newValue ?? [] { insertLocked(l, at: _sublayers.count) }
            }
        }
    }

    /// Appends `layer` to the sublayers (after taking it out of its superlayer).
    public func addSublayer(_ layer: Layer) {
        Self.locked { insertLocked(layer, at: _sublayers.count) }
    }

    /// Inserts `layer` at `index` of the sublayers (clamped to 0...count).
    public func insertSublayer(_ layer: Layer, at index: Int) {
        Self.locked { insertLocked(layer, at: index) }
    }

    /// Inserts `layer` just below `sibling` (appends it when `sibling` is not a sublayer).
    public func insertSublayer(_ layer: Layer, below sibling: Layer?) {
        Self.locked {
            guard let sibling, sibling !== layer else { return insertLocked(layer, at: 0) }
            detachLocked(layer)
            let i = _sublayers.firstIndex { $0 === sibling } ?? _sublayers.count
            insertLocked(layer, at: i)
        }
    }

    /// Inserts `layer` just above `sibling` (appends it when `sibling` is not a sublayer).
    public func insertSublayer(_ layer: Layer, above sibling: Layer?) {
        Self.locked {
            guard let sibling, sibling !== layer else { return insertLocked(layer, at: _sublayers.count) }
            detachLocked(layer)
            let i = _sublayers.firstIndex { $0 === sibling }.map { $0 + 1 } ?? _sublayers.count
            insertLocked(layer, at: i)
        }
    }

    /// Takes the layer out of its superlayer.
    public func removeFromSuperlayer() {
        Self.locked { detachLocked(self) }
    }

    private func insertLocked(_ layer: Layer, at index: Int) {
        precondition(layer !== self && !isDescendantLocked(of: layer), "a layer cannot be its own sublayer")
        detachLocked(layer)
        _sublayers.insert(layer, at: min(max(0, index), _sublayers.count))
        layer._superlayer = self
    }

    private func detachLocked(_ layer: Layer) {
        guard let parent = layer._superlayer else { return }
        parent._sublayers.removeAll { $0 === layer }
        layer._superlayer = nil
    }

    private func isDescendantLocked(of other: Layer) -> Bool {
        var p = _superlayer
        while let l = p {
            if l === other { return true }
            p = l._superlayer
        }
        return false
    }

    /// Whether `point`, in this layer's own coordinates, is inside its bounds.
    public func contains(_ point: CGPoint) -> Bool { bounds.contains(point) }

    /// The frontmost visible layer at `point` (in the superlayer's coordinates) among this layer
    /// and its descendants, or nil, as `CALayer.hitTest(_:)`.
    public func hitTest(_ point: CGPoint) -> Layer? {
        Self.locked { hitTestLocked(point) }
    }

    private func hitTestLocked(_ point: CGPoint) -> Layer? {
        guard !_isHidden, _opacity > 0 else { return nil }
        let local = CGPoint(x: point.x - _frame.minX + _boundsOrigin.x, y: point.y - _frame.minY + _boundsOrigin.y)
        let inside = CGRect(origin: _boundsOrigin, size: _frame.size).contains(local)
        if _masksToBounds && !inside { return nil }
        for l in drawOrderLocked().reversed() {
            if let hit = l.hitTestLocked(local) { return hit }
        }
        return inside ? self : nil
    }

    /// Sublayers back to front: by `zPosition`, then sublayer order.
    func drawOrderLocked() -> [Layer] {
        _sublayers.enumerated().sorted { a, b in
            a.element._zPosition != b.element._zPosition ? a.element._zPosition < b.element._zPosition : a.offset < b.offset
        }.map(\.element)
    }

    /// Converts `point` from this layer's coordinates to `layer`'s (nil: the root of the tree).
    public func convert(_ point: CGPoint, to layer: Layer?) -> CGPoint {
        Self.locked {
            let a = originInRootLocked(), b = layer?.originInRootLocked() ?? .zero
            return CGPoint(x: point.x + a.x - b.x, y: point.y + a.y - b.y)
        }
    }

    /// Converts `point` from `layer`'s coordinates (nil: the root of the tree) to this layer's.
    public func convert(_ point: CGPoint, from layer: Layer?) -> CGPoint {
        Self.locked {
            let a = originInRootLocked(), b = layer?.originInRootLocked() ?? .zero
            return CGPoint(x: point.x - a.x + b.x, y: point.y - a.y + b.y)
        }
    }

    /// Where this layer's coordinate origin sits in the root layer's superlayer space.
    private func originInRootLocked() -> CGPoint {
        var x = -_boundsOrigin.x + _frame.minX, y = -_boundsOrigin.y + _frame.minY
        var p = _superlayer
        while let l = p {
            x += l._frame.minX - l._boundsOrigin.x
            y += l._frame.minY - l._boundsOrigin.y
            p = l._superlayer
        }
        return CGPoint(x: x, y: y)
    }

    // MARK: Drawing snapshot

    /// Appends this layer and its visible descendants, back to front, as drawing commands in
    /// window coordinates. Runs under the tree lock.
    func snapshotLocked(into list: inout [DrawCommand], origin: CGPoint, opacity: Double, clip: CGRect?) {
        guard !_isHidden, _opacity > 0 else { return }
        let alpha = opacity * Double(_opacity)
        let rect = CGRect(x: origin.x + _frame.minX, y: origin.y + _frame.minY, width: _frame.width, height: _frame.height)
        let ownClip = _masksToBounds || clipsVideo ? (clip.map { $0.intersection(rect) } ?? rect) : clip
        list.append(
            DrawCommand(
                layer: ObjectIdentifier(self), rect: rect, clip: clip, opacity: alpha,
                background: _backgroundColor, contents: _contents, contentsGravity: _contentsGravity,
                video: videoSnapshotLocked(bounds: CGRect(origin: .zero, size: _frame.size)),
                videoClip: ownClip, isBorder: false, borderColor: _borderColor, borderWidth: 0,
                cornerRadius: _cornerRadius))
        let child = CGPoint(x: rect.minX - _boundsOrigin.x, y: rect.minY - _boundsOrigin.y)
        for l in drawOrderLocked() { l.snapshotLocked(into: &list, origin: child, opacity: alpha, clip: _masksToBounds ? ownClip : clip) }
        if _borderWidth > 0 {
            list.append(
                DrawCommand(
                    layer: ObjectIdentifier(self), rect: rect, clip: clip, opacity: alpha, background: nil,
                    contents: nil, contentsGravity: .resize, video: nil, videoClip: nil, isBorder: true,
                    borderColor: _borderColor, borderWidth: _borderWidth, cornerRadius: _cornerRadius))
        }
    }

    /// A video picture to draw (preview layers).
    func videoSnapshotLocked(bounds: CGRect) -> VideoDrawing? { nil }
    /// Whether the layer's own picture is clipped to its bounds even without `masksToBounds`.
    var clipsVideo: Bool { false }
}

/// One thing a window draws for a layer, in window coordinates.
struct DrawCommand {
    var layer: ObjectIdentifier
    var rect: CGRect
    var clip: CGRect?
    var opacity: Double
    var background: Color?
    var contents: LayerImage?
    var contentsGravity: ContentsGravity
    var video: VideoDrawing?
    var videoClip: CGRect?
    var isBorder: Bool
    var borderColor: Color
    var borderWidth: CGFloat
    var cornerRadius: CGFloat
}

extension DrawCommand {
    /// Whether drawing `other` puts the same pixels on screen as drawing this (images by their
    /// id, pictures by their source and geometry; a picture's new frame is the source's to say).
    func drawsTheSame(as other: DrawCommand) -> Bool {
        layer == other.layer && rect == other.rect && clip == other.clip && opacity == other.opacity && background == other.background
            && contents?.id == other.contents?.id && contentsGravity == other.contentsGravity && video?.source === other.video?.source
            && video?.geometry == other.video?.geometry && videoClip == other.videoClip && isBorder == other.isBorder
            && borderColor == other.borderColor && borderWidth == other.borderWidth && cornerRadius == other.cornerRadius
    }
}

/// What a preview layer's picture needs at drawing time.
struct VideoDrawing {
    var source: PreviewFrameSink
    var geometry: PreviewGeometry
}
