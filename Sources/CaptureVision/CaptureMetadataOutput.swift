import Capture
import CaptureBackend
import CaptureSystem
import Foundation

/// Receives the metadata objects of a ``CaptureMetadataOutput``, as
/// `AVCaptureMetadataOutputObjectsDelegate`.
public protocol CaptureMetadataOutputObjectsDelegate: AnyObject, Sendable {
    /// Objects found in one frame (codes first, then faces). Called for every frame the output
    /// looked at that had objects, and once with an empty array when the objects are gone. Runs
    /// on the queue given to `setMetadataObjectsDelegate(_:queue:)`.
    func metadataOutput(_ output: CaptureMetadataOutput, didOutput metadataObjects: [MetadataObject], from connection: CaptureConnection)
}

/// Finds QR codes, barcodes and faces in a session's frames, as `AVCaptureMetadataOutput`.
///
/// ```swift
/// let metadata = CaptureMetadataOutput()
/// session.addOutput(metadata)               // beside the other outputs, with a camera input
/// metadata.metadataObjectTypes = [.qr, .ean13, .face]
/// metadata.setMetadataObjectsDelegate(self, queue: .main)
/// ```
///
/// Detection runs beside capture, never in front of it: the output is a frame consumer of the
/// session, and its own thread takes the newest frame whenever it is free, copies its luma (or
/// decodes an MJPEG frame's), lets the camera's buffer go, and runs the readers on the copy.
/// Frames that pass while it is busy are skipped for this output alone (``Statistics``); the
/// other outputs and the camera lose nothing to it. Codes are read by zxing-cpp (which shrinks
/// large frames itself), faces found by OpenCV's Haar cascade on the frame shrunk to 360 pixels.
///
/// Coordinates (``MetadataObject/bounds``, corners, ``rectOfInterest``) are AVFoundation's
/// metadata coordinates: 0...1 over the frame as the camera delivers it (the sensor's landscape
/// buffer, before a connection's or preview's rotation and mirroring), origin top left.
///
/// Thread-safe: every property and method may be used from any thread.
public final class CaptureMetadataOutput: CaptureOutput, @unchecked Sendable {
    /// The output's port in the session's graph: raw frames, newest wins.
    let port: FrameConsumerPort
    let detector: MetadataDetector
    private let state = Locked(State())

    private struct State {
        var types: [MetadataObjectType] = []
        /// `types` as the detection thread reads them (made once per change: no allocation per frame).
        var settings = DetectionSettings(types: [], rectOfInterest: CGRect(x: 0, y: 0, width: 1, height: 1))
        var rect = CGRect(x: 0, y: 0, width: 1, height: 1)
        weak var delegate: (any CaptureMetadataOutputObjectsDelegate)?
        var queue: DispatchQueue?
        var streams: [UUID: AsyncStream<[MetadataObject]>.Continuation] = [:]
        /// Package observers (the server's `/metadata`), called on the detection thread.
        var observers: [(id: UUID, call: @Sendable (MetadataBatch) -> Void)] = []
        /// Whether the last delivery had objects (an empty one follows when they go).
        var hadObjects = false
    }

    public init() {
        let detector = MetadataDetector()
        self.detector = detector
        let port = FrameConsumerPort(detector)
        self.port = port
        super.init(hosting: [port])
        detector.output = self
    }

    deinit {
        detector.stop()
        port.session?.removeFrameConsumer(port)
        for c in state.withLock({ $0.streams.values }) { c.finish() }
    }

    // (`session`, `connections` (one per camera of its session) and `connection(with:)` are
    // CaptureOutput's, through its port.)

    // MARK: Types

    /// The types ``metadataObjectTypes`` may hold: none until the output is in a session with a
    /// camera input (as AVFoundation's), then the codes zxing-cpp reads and `.face` when
    /// OpenCV's face cascade is installed (Debian's opencv-data).
    public var availableMetadataObjectTypes: [MetadataObjectType] {
        guard port.connection(with: .video) != nil else { return [] }
        return BarcodeReader.availableTypes + (FaceDetector.isAvailable ? [.face] : [])
    }

    /// The types to look for; none by default (as AVFoundation: set it after adding the output
    /// to a session with a camera). Types not in ``availableMetadataObjectTypes`` are left out
    /// (AVFoundation raises an exception; a capture app here never stops for it): read the
    /// property back to see what was taken, or call ``setMetadataObjectTypes(_:)``, which throws
    /// an error naming them and changes nothing.
    public var metadataObjectTypes: [MetadataObjectType] {
        get { state.withLock { $0.types } }
        set {
            let available = availableMetadataObjectTypes
            try? setMetadataObjectTypes(newValue.filter { available.contains($0) })
        }
    }

    /// Sets ``metadataObjectTypes``, throwing `.invalidArgument` (and changing nothing) when a
    /// type is not in ``availableMetadataObjectTypes``. Takes effect from the next frame looked at.
    public func setMetadataObjectTypes(_ types: [MetadataObjectType]) throws(CaptureError) {
        let available = availableMetadataObjectTypes
        if let bad = types.first(where: { !available.contains($0) }) {
            let why =
                available.isEmpty
                ? "the output has no camera yet: add it to a session with a camera input first"
                : "available: \(available.map(\.name).joined(separator: ", "))"
            throw CaptureError(.invalidArgument, "metadata object type \(bad.name) (\(bad.rawValue)) is not available; \(why)")
        }
        var unique: [MetadataObjectType] = []
        for t in types where !unique.contains(t) { unique.append(t) }
        state.withLock {
            $0.types = unique
            $0.settings.types = Set(unique)
        }
    }

    /// The part of the frame to look in, normalized (see the class's discussion); the whole frame
    /// by default. Codes and faces outside it are not found (it is cut out before detection, which
    /// also makes detection cheaper). Parts outside 0...1 are ignored.
    public var rectOfInterest: CGRect {
        get { state.withLock { $0.rect } }
        set {
            state.withLock {
                $0.rect = newValue.standardized
                $0.settings.rectOfInterest = $0.rect
            }
        }
    }

    var detectionSettings: DetectionSettings {
        state.withLock { $0.settings }
    }

    // MARK: Delivery

    /// Sets the delegate and the serial queue its method runs on (nil removes it; without a
    /// queue, a private serial one). The output holds the delegate weakly, as AVFoundation does.
    public func setMetadataObjectsDelegate(_ delegate: (any CaptureMetadataOutputObjectsDelegate)?, queue: DispatchQueue?) {
        let q = delegate == nil ? nil : (queue ?? DispatchQueue(label: "swift-capture.metadata"))
        state.withLock {
            $0.delegate = delegate
            $0.queue = q
        }
    }

    /// The delegate, if one is set and still alive.
    public var metadataObjectsDelegate: (any CaptureMetadataOutputObjectsDelegate)? { state.withLock { $0.delegate } }

    /// The detections as an async sequence: each element the objects of one frame, as the
    /// delegate gets them (an empty array when objects went away). `bufferingNewest` detections
    /// wait for a slow reader; older ones are dropped. Ends when the output is released.
    public func detections(bufferingNewest limit: Int = 16) -> AsyncStream<[MetadataObject]> {
        let id = UUID()
        let (stream, cont) = AsyncStream<[MetadataObject]>.makeStream(bufferingPolicy: .bufferingNewest(max(1, limit)))
        state.withLock { $0.streams[id] = cont }
        cont.onTermination = { [weak self] _ in _ = self?.state.withLock { $0.streams.removeValue(forKey: id) } }
        return stream
    }

    /// Called by the detection thread after each frame it looked at (`time` and `sequence` are
    /// that frame's).
    func deliver(_ objects: [MetadataObject], from connection: CaptureConnection, time: CaptureTime, sequence: UInt64) {
        let target = state.withLock {
            s -> (
                delegate: (any CaptureMetadataOutputObjectsDelegate)?, queue: DispatchQueue?,
                streams: [AsyncStream<[MetadataObject]>.Continuation],
                observers: [(id: UUID, call: @Sendable (MetadataBatch) -> Void)]
            )? in
            guard !objects.isEmpty || s.hadObjects else { return nil }
            s.hadObjects = !objects.isEmpty
            return (s.delegate, s.queue, s.streams.isEmpty ? [] : Array(s.streams.values), s.observers)
        }
        guard let target else { return }
        if !target.observers.isEmpty {
            let batch = MetadataBatch(objects: objects, time: time, sequenceNumber: sequence)
            for o in target.observers { o.call(batch) }
        }
        for c in target.streams { c.yield(objects) }
        if let delegate = target.delegate, let queue = target.queue {
            queue.async { delegate.metadataOutput(self, didOutput: objects, from: connection) }
        }
    }

    /// Calls `observer` on the detection thread with each delivery the delegate gets (it must
    /// return at once: detection waits for it). For products of this package (the server's
    /// `/metadata`); returns the key that removes it.
    package func addObserver(_ observer: @escaping @Sendable (MetadataBatch) -> Void) -> UUID {
        let id = UUID()
        state.withLock { $0.observers.append((id, observer)) }
        return id
    }

    /// Removes an observer added with `addObserver(_:)` (a delivery under way may still call it
    /// once).
    package func removeObserver(_ id: UUID) {
        state.withLock { $0.observers.removeAll { $0.id == id } }
    }

    // MARK: Statistics

    /// What the output did with the frames it was offered.
    public struct Statistics: Sendable, Hashable {
        /// Frames the session offered the output.
        public var framesOffered: Int
        /// Frames it looked at.
        public var framesDetected: Int
        /// Frames that passed while it was busy with an earlier one (newest wins).
        public var framesSkipped: Int
        /// Frames it could not read (an undecodable JPEG, a failure in a library).
        public var framesFailed: Int
        /// CPU time its thread spent per frame looked at (luma copy and detection; not the making
        /// of the readers when the types change), in seconds.
        public var cpuSecondsPerFrame: Double
    }

    /// The counts so far. Any thread.
    public var statistics: Statistics {
        let detected = detector.framesDetected.load(ordering: .relaxed)
        let failed = detector.framesFailed.load(ordering: .relaxed)
        let ns = detector.detectionNanoseconds.load(ordering: .relaxed)
        return Statistics(
            framesOffered: detector.framesOffered.load(ordering: .relaxed), framesDetected: detected,
            framesSkipped: detector.framesSkipped.load(ordering: .relaxed), framesFailed: failed,
            cpuSecondsPerFrame: detected + failed == 0 ? 0 : Double(ns) / 1e9 / Double(detected + failed))
    }
}

/// One delivery as an observer sees it: the objects of one frame (none when they went away) and
/// that frame's time and sequence number. A value; any thread.
package struct MetadataBatch: Sendable {
    package var objects: [MetadataObject]
    package var time: CaptureTime
    package var sequenceNumber: UInt64
}
