import Capture
import CaptureBackend
import CaptureSystem
import Foundation
import Synchronization

/// The metadata output's consumer of frames and its detection thread. The capture thread only
/// offers frames: when the detector is idle it takes a hold on the newest one and wakes the
/// thread; while it is busy, frames pass it by (counted as skipped), so a slow detector costs
/// nobody else a frame. The thread copies the luma out, lets the buffer go at once, and then runs
/// the readers on its copy. It runs at nice 10 (`.utility`): on a busy machine capture and the
/// encoders take the cores first and the detector skips more frames, not they.
///
/// `consume` runs on capture threads; everything else on the detection thread.
final class MetadataDetector: FrameConsumer, @unchecked Sendable {
    /// The frame waiting for the thread, and whether the thread is at work.
    private struct Slot: ~Copyable {
        var frame: HeldFrame?
        var connection: CaptureConnection?
        var busy = false
        var stopping = false
    }

    private let slot = Locked(Slot())
    private let wake = DispatchSemaphore(value: 0)
    /// Where results go (the output owns the detector; the thread holds the detector only).
    weak var output: CaptureMetadataOutput?

    let framesOffered = Atomic<Int>(0)
    let framesSkipped = Atomic<Int>(0)
    let framesDetected = Atomic<Int>(0)
    let framesFailed = Atomic<Int>(0)
    /// Detection thread CPU time, nanoseconds (luma copy and readers).
    let detectionNanoseconds = Atomic<Int>(0)

    init() {
        NamedThread.start("cap metadata", qualityOfService: .utility) { [self] in run() }
    }

    /// Ends the thread once it is idle (it holds the detector until then).
    func stop() {
        let frame = slot.withLock { s -> HeldFrame? in
            s.stopping = true
            return s.frame.take()
        }
        _ = consume frame
        wake.signal()
    }

    func consume(_ sample: SampleBuffer, from connection: CaptureConnection) {
        framesOffered.add(1, ordering: .relaxed)
        let taken = slot.withLock { s -> Bool in
            guard !s.busy, !s.stopping else { return false }
            s.busy = true
            s.frame = sample.heldFrame()
            s.connection = connection
            return true
        }
        if taken { wake.signal() } else { framesSkipped.add(1, ordering: .relaxed) }
    }

    func consumeDrop(_ drop: DroppedFrames, from connection: CaptureConnection) {}

    private func run() {
        let luma = LumaPlane()
        var engine = DetectionEngine()
        while true {
            wake.wait()
            var connection: CaptureConnection?
            var stopping = false
            let frame = slot.withLock { s -> HeldFrame? in
                connection = s.connection.take()
                stopping = s.stopping
                return s.frame.take()
            }
            if stopping { return }
            switch consume frame {
            case .some(let held):
                if let connection { process(held, connection, luma: luma, engine: &engine) }
            case .none:
                break
            }
            slot.withLock { $0.busy = false }
        }
    }

    /// Copies the frame's luma, lets the frame go, detects, and hands the objects to the output.
    private func process(_ frame: consuming HeldFrame, _ connection: CaptureConnection, luma: LumaPlane, engine: inout DetectionEngine) {
        let settings = output?.detectionSettings
        // Readers made for new settings (a cascade loaded: tens of ms, once) are not a frame's cost;
        // a failure here fails the frame below.
        if let settings { try? engine.prepare(for: settings) }
        let start = Self.threadCPU()
        let time = frame.sample.presentationTimeStamp, sequence = frame.sample.sequenceNumber
        var loaded = true
        do { try luma.load(frame.sample) } catch { loaded = false }
        // The driver buffer goes back before detection starts.
        _ = consume frame
        var objects: [MetadataObject] = []
        if loaded, let settings {
            do {
                objects = try engine.detect(luma, settings: settings, time: time, sequence: sequence)
                framesDetected.add(1, ordering: .relaxed)
            } catch {
                framesFailed.add(1, ordering: .relaxed)
            }
        } else {
            framesFailed.add(1, ordering: .relaxed)
        }
        detectionNanoseconds.add(Self.threadCPU() - start, ordering: .relaxed)
        output?.deliver(objects, from: connection, time: time, sequence: sequence)
    }

    /// This thread's CPU time in nanoseconds.
    static func threadCPU() -> Int {
        var ts = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts)
        return ts.tv_sec * 1_000_000_000 + ts.tv_nsec
    }
}

/// What the detection thread needs from the output's settings, read once a frame.
struct DetectionSettings: Sendable, Equatable {
    var types: Set<MetadataObjectType>
    var rectOfInterest: CGRect
}

/// The readers for the current settings (remade when the types change) and the face tracker.
///
/// Owned by the detection thread.
struct DetectionEngine {
    private var types: Set<MetadataObjectType> = []
    private var barcodes: BarcodeReader?
    private var faces: FaceDetector?
    private var tracker = FaceTracker()

    /// Makes the readers `settings` asks for, unless they are made already.
    mutating func prepare(for settings: DetectionSettings) throws(CaptureError) {
        guard settings.types != types else { return }
        let codes = settings.types.subtracting([.face])
        barcodes = codes.isEmpty ? nil : try BarcodeReader(types: codes)
        faces = settings.types.contains(.face) ? try FaceDetector() : nil
        types = settings.types
        tracker.reset()
    }

    /// Runs the readers the settings ask for on `luma` (within the rect of interest) and makes
    /// the objects, in normalized coordinates of the whole frame.
    mutating func detect(
        _ luma: LumaPlane, settings: DetectionSettings, time: CaptureTime, sequence: UInt64
    ) throws(CaptureError) -> [MetadataObject] {
        try prepare(for: settings)
        guard let base = luma.bytes, barcodes != nil || faces != nil else { return [] }
        let w = luma.width, h = luma.height
        let r = settings.rectOfInterest.intersection(CGRect(x: 0, y: 0, width: 1, height: 1))
        guard !r.isNull else { return [] }
        let x0 = Int((r.minX * CGFloat(w)).rounded(.down)), y0 = Int((r.minY * CGFloat(h)).rounded(.down))
        let x1 = min(w, Int((r.maxX * CGFloat(w)).rounded(.up))), y1 = min(h, Int((r.maxY * CGFloat(h)).rounded(.up)))
        guard x1 - x0 >= 16, y1 - y0 >= 16 else { return [] }
        let origin = base + y0 * w + x0
        let sx = 1 / CGFloat(w), sy = 1 / CGFloat(h)
        var objects: [MetadataObject] = []
        if let barcodes {
            for code in try barcodes.read(origin, width: x1 - x0, height: y1 - y0, stride: w) where types.contains(code.type) {
                let corners = code.corners.map { CGPoint(x: ($0.x + CGFloat(x0)) * sx, y: ($0.y + CGFloat(y0)) * sy) }
                objects.append(
                    MetadataMachineReadableCodeObject(
                        type: code.type, time: time, sequenceNumber: sequence, corners: corners, stringValue: code.text))
            }
        }
        if let faces {
            let boxes = try faces.detect(origin, width: x1 - x0, height: y1 - y0, stride: w).map {
                CGRect(x: ($0.minX + CGFloat(x0)) * sx, y: ($0.minY + CGFloat(y0)) * sy, width: $0.width * sx, height: $0.height * sy)
            }
            for (id, box) in tracker.track(boxes) {
                objects.append(MetadataFaceObject(faceID: id, time: time, sequenceNumber: sequence, bounds: box))
            }
        }
        return objects
    }
}
