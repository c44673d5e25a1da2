import Capture
import CaptureBackend
import CaptureSystem
import Foundation

/// The H.264 encode of one running input for one `H264Settings`, shared by every consumer that
/// asks for those settings: each frame is encoded once, on the stage's own thread, and each unit
/// goes to all of them.
///
/// The capture thread hands frames in (a hold on the driver buffer, never a copy there); the
/// encoder takes the newest one when it is free, so a slow encode loses frames (reported to the
/// consumers as `.frameWasLate`, each once) but never stalls the camera or the session's other
/// consumers. The hold goes back as soon as the frame is copied into the encoder's picture. A
/// consumer stalls nothing either: it gets units by a call and holds what it keeps.
final class H264Stage: EncodedStage, @unchecked Sendable {
    private let settings: H264Settings
    private let outlet: EncodedStageOutlet
    /// Guards `pending`, `key`, `late`, `stopping`.
    private let lock = NSLock()
    /// The frame waiting for the encoder (newest wins) and whether a key frame was asked for.
    private let pending = FrameSlot()
    private var key = false
    /// Frames replaced while waiting, not yet reported.
    private var late: (count: Int, first: UInt64)?
    private var stopping = false
    private let wake = DispatchSemaphore(value: 0)
    private let finished = DispatchSemaphore(value: 0)

    // The encoder thread's.
    private let working = FrameSlot()
    private var encoder: H264Encoder?
    private var failure: H264StageError?
    private let units = H264UnitPool()
    private var index: Int64 = 0
    /// Capture time and sequence number of the last frames encoded, by index: an encoder that
    /// delays units (a hardware one) labels them with the frame they encode.
    private var encoded = [(time: CaptureTime, sequence: UInt64)](repeating: (CaptureTime(nanoseconds: 0), 0), count: 64)

    init(settings: H264Settings, outlet: EncodedStageOutlet) {
        self.settings = settings
        self.outlet = outlet
        NamedThread.start("cap h264", qualityOfService: .userInteractive) { [self] in run() }
    }

    func submit(_ sample: SampleBuffer, keyFrame: Bool) {
        let held = sample.heldFrame()
        lock.lock()
        let waiting: UInt64? = pending.frame?.sample.sequenceNumber
        let replaced = pending.frame.take()
        let wasEmpty = waiting == nil
        if let sequence = waiting {
            late = (late.map { $0.count + 1 } ?? 1, late?.first ?? sequence)
        }
        pending.frame = consume held
        key = key || keyFrame
        lock.unlock()
        // The replaced frame's buffer goes back here, outside the lock.
        _ = consume replaced
        if wasEmpty { wake.signal() }
    }

    func shutdown() {
        lock.withLock { stopping = true }
        wake.signal()
        finished.wait()
    }

    private func run() {
        defer { finished.signal() }
        while true {
            wake.wait()
            lock.lock()
            working.frame = pending.frame.take()
            let key = self.key
            self.key = false
            let late = self.late
            self.late = nil
            let stop = stopping
            lock.unlock()
            if let late {
                outlet.drop(DroppedFrames(reason: .frameWasLate, count: late.count, sequenceNumber: late.first))
            }
            if working.frame != nil { encode(key: key) }
            if stop { return }
        }
    }

    /// Encodes the working frame and delivers its units; the frame's hold goes back once it is
    /// copied into the encoder.
    private func encode(key: Bool) {
        guard let sample = working.frame?.sample else { return }
        let time = sample.presentationTimeStamp, sequence = sample.sequenceNumber
        if let failure {
            // A consumer that joined since learns of it too.
            if key { fail(failure) }
            _ = working.frame.take()
            return
        }
        do throws(CaptureError) {
            try sample.withVideoImage { (image: ImageBuffer?) throws(CaptureError) in
                guard let image else { throw CaptureError(.corruptFrame, "the frame has no image") }
                if encoder == nil {
                    do throws(H264StageError) {
                        encoder = try H264Encoder(
                            settings, dimensions: VideoDimensions(width: image.width, height: image.height),
                            interval: outlet.frameInterval, from: image.pixelFormat)
                    } catch {
                        failure = error
                        return
                    }
                }
                try encoder?.load(image)
            }
        } catch {
            _ = working.frame.take()
            outlet.drop(DroppedFrames(reason: .corrupt, count: 1, sequenceNumber: sequence))
            return
        }
        _ = working.frame.take()
        if let failure {
            fail(failure)
            return
        }
        guard let encoder else { return }
        outlet.countEncode()
        // The first frame is a key frame anyway.
        let asKey = key && index > 0
        encoded[Int(index % 64)] = (time, sequence)
        do {
            try encoder.encode(index: index, key: asKey) { bytes, isKey, at in
                let frame = encoded[Int((at >= 0 && index - at < 64 ? at : index) % 64)]
                let unit = units.unit(
                    bytes, time: frame.time, sequence: frame.sequence, key: isKey, dimensions: encoder.dimensions,
                    interval: outlet.frameInterval, parameterSets: encoder.parameterSets)
                outlet.forEachConsumer { c, connection in (c as? H264Consumer)?.consume(unit, from: connection) }
                unit.letGo()
            }
        } catch {
            failure = error
            fail(error)
        }
        index += 1
    }

    private func fail(_ error: H264StageError) {
        outlet.forEachConsumer { c, connection in (c as? H264Consumer)?.h264StageFailed(error, from: connection) }
    }
}

/// A place for one held frame (the hold is a move-only value, kept in a class so that it can sit
/// in a stored property of a lock-guarded pair without a closure).
private final class FrameSlot {
    var frame: HeldFrame?
}
