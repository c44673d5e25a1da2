import Capture
import Foundation

/// A layer that shows a session's live video, as `AVCaptureVideoPreviewLayer`.
///
/// It takes frames as a frame consumer of the session (beside the app's outputs, which it never
/// slows): straight from the capture thread it keeps only the newest frame, and the window that draws the
/// layer uploads that frame to a texture at its next drawn frame and lets go of it at once (a held
/// frame keeps a driver buffer from the camera). Frames replaced before they were drawn, and
/// frames the session lost, are counted in `statistics`.
///
/// Thread-safe, like every `Layer`. Draw it in one window at a time.
public final class CaptureVideoPreviewLayer: Layer, @unchecked Sendable {
    /// The layer's place in the session's graph; the session hands `sink` each frame directly.
    private let consumer: FrameConsumerPort
    let sink: PreviewFrameSink
    private var _session: CaptureSession?
    private var _videoGravity: VideoGravity = .resizeAspect

    /// A preview of `session` (nil: none yet; set `session` later).
    public init(session: CaptureSession?) {
        let sink = PreviewFrameSink()
        self.sink = sink
        consumer = FrameConsumerPort(sink, showsOrientation: true)
        super.init()
        self.session = session
    }

    /// A preview layer with no session.
    public convenience override init() { self.init(session: nil) }

    deinit {
        _session?.removeFrameConsumer(consumer)
        _ = sink.take()
    }

    /// The session shown. Setting it moves the layer's frame consumer to the new session.
    public var session: CaptureSession? {
        get { Self.locked { _session } }
        set {
            let old: CaptureSession? = Self.locked {
                defer { _session = newValue }
                return _session
            }
            guard old !== newValue else { return }
            old?.removeFrameConsumer(consumer)
            _ = sink.take()
            newValue?.addFrameConsumer(consumer)
        }
    }

    /// How the picture fills the layer (`.resizeAspect` by default, as in AVFoundation).
    public var videoGravity: VideoGravity {
        get { Self.locked { _videoGravity } }
        set { Self.locked { _videoGravity = newValue } }
    }

    /// The connection from the session's camera to this layer (nil until the session has a
    /// camera). Its `videoOrientation` and `isVideoMirrored` turn and mirror the picture shown;
    /// a new camera (toggling) makes a new connection with the defaults.
    public var connection: CaptureConnection? { consumer.connection(with: .video) }

    /// Frames drawn, frames replaced by a newer one before they were drawn, and frames the
    /// session reported lost to this layer.
    public var statistics: (framesDrawn: Int, framesReplaced: Int, framesDropped: Int) { sink.statistics }

    /// The pixel format and size of the newest frame received (nil before the first).
    public var videoFormat: (pixelFormat: PixelFormat, dimensions: VideoDimensions)? { sink.format }

    /// The geometry used now: the layer's bounds, the newest frame's size (else the camera's
    /// active format, else the bounds), the gravity, and the connection's turn and mirroring.
    public var geometry: PreviewGeometry {
        Self.locked { geometryLocked(bounds: bounds) }
    }

    private func geometryLocked(bounds: CGRect) -> PreviewGeometry {
        let c = connection
        var size = sink.format.map { CGSize(width: $0.dimensions.width, height: $0.dimensions.height) }
        if size == nil, let d = c?.device?.activeFormat?.dimensions { size = CGSize(width: d.width, height: d.height) }
        return PreviewGeometry(
            bounds: bounds, videoSize: size ?? bounds.size, gravity: _videoGravity,
            orientation: c?.videoOrientation ?? .landscapeRight, isMirrored: c?.isVideoMirrored ?? false)
    }

    /// The layer point showing a normalized capture device point (AVFoundation's coordinates:
    /// (0, 0) top left, (1, 1) bottom right of the unturned sensor picture), with the gravity,
    /// turn and mirroring applied.
    public func layerPointConverted(fromCaptureDevicePoint point: CGPoint) -> CGPoint {
        geometry.layerPoint(fromCaptureDevicePoint: point)
    }

    /// The normalized capture device point under a layer point (outside 0...1 off the picture).
    public func captureDevicePointConverted(fromLayerPoint point: CGPoint) -> CGPoint {
        geometry.captureDevicePoint(fromLayerPoint: point)
    }

    /// The layer rectangle of a metadata output's normalized rectangle (a face's bounds).
    public func layerRectConverted(fromMetadataOutputRect rect: CGRect) -> CGRect {
        geometry.layerRect(fromMetadataOutputRect: rect)
    }

    /// The normalized metadata output rectangle under a layer rectangle.
    public func metadataOutputRectConverted(fromLayerRect rect: CGRect) -> CGRect {
        geometry.metadataOutputRect(fromLayerRect: rect)
    }

    override func videoSnapshotLocked(bounds: CGRect) -> VideoDrawing? {
        VideoDrawing(source: sink, geometry: geometryLocked(bounds: bounds))
    }

    override var clipsVideo: Bool { true }
}

/// Where the preview layer keeps the newest frame for the window. Frames come from the session's
/// capture thread (`FrameConsumer`), `take` on the window's thread; both are short and never wait
/// for the other's work (only for the lock). Thread-safe.
final class PreviewFrameSink: FrameConsumer, @unchecked Sendable {
    private struct State: ~Copyable {
        /// The newest frame, held by a hold of its own on the frame's lease (nothing is
        /// allocated per frame).
        var newest: HeldFrame?
        var format: (PixelFormat, VideoDimensions)?
        var drawn = 0
        var replaced = 0
        var dropped = 0
    }
    // NSLock: a pthread mutex, which ThreadSanitizer sees.
    private let lock = NSLock()
    private var state = State()
    private func locked<T: ~Copyable>(_ body: (inout State) -> T) -> T {
        lock.lock()
        defer { lock.unlock() }
        return body(&state)
    }

    func consume(_ sampleBuffer: SampleBuffer, from connection: CaptureConnection) {
        guard let f = sampleBuffer.pixelFormat, let d = sampleBuffer.dimensions else { return }
        let held = sampleBuffer.heldFrame()
        // (Not through `locked`: a closure cannot take the held frame over.)
        lock.lock()
        let old = state.newest.take()
        if old != nil { state.replaced += 1 }
        state.newest = consume held
        state.format = (f, d)
        lock.unlock()
        // The replaced frame's buffer goes back here, outside the lock.
        _ = consume old
    }

    func consumeDrop(_ drop: DroppedFrames, from connection: CaptureConnection) {
        locked { $0.dropped += drop.count }
    }

    /// The newest frame not yet drawn, handed over (the sink no longer holds it).
    func take() -> HeldFrame? { locked { st in st.newest.take() } }
    func didDraw() { locked { $0.drawn += 1 } }
    /// Whether a frame waits to be drawn.
    var hasNewFrame: Bool { locked { $0.newest != nil } }

    var format: (pixelFormat: PixelFormat, dimensions: VideoDimensions)? { locked { $0.format.map { ($0.0, $0.1) } } }
    var statistics: (framesDrawn: Int, framesReplaced: Int, framesDropped: Int) {
        locked { ($0.drawn, $0.replaced, $0.dropped) }
    }
}
