import Capture
import CaptureBackend
import CaptureSystem
import Foundation
import Synchronization

/// The H.264 encode of one running input for one `H264Settings`, shared by every consumer that
/// asks for those settings: each frame is encoded once, on the stage's own thread, and each unit
/// goes to all of them.
///
/// The capture thread hands frames in: the first waiting frame as a hold on its driver buffer,
/// and, while a consumer keeps every frame (a file), the ones after it copied (`DetachedFrames`,
/// about a second of them), so the camera's buffers go back at once. Without such a consumer
/// the newest frame wins. Frames the stage cannot keep are reported to its consumers as
/// `.frameWasLate`, each once, and the camera's losses come through it too: every report reaches
/// the consumers after the units of the frames before it and before those of the frames after
/// it, so that a file that counts its losses by sequence number counts each once (a report ahead
/// of the frames still queued would fall before a recording's first frame, or past its end). A
/// slow stage never stalls the camera or the session's other consumers, and a consumer stalls
/// nothing either: it gets units by a call and holds what it keeps.
final class H264Stage: EncodedStage, @unchecked Sendable {
    /// Frames that wait at most while a consumer keeps every frame (the copies' budget).
    static let backlog = 30
    private let outlet: EncodedStageOutlet
    /// Guards the queue, `key`, `pending` and `stopping`; the encoder thread waits on it.
    private let condition = NSCondition()
    /// The frames waiting for the encoder, oldest first (a ring of `backlog + 1` places), each
    /// with the losses to report before it.
    private let queue = (0...H264Stage.backlog).map { _ in FrameSlot() }
    private var head = 0
    private var count = 0
    private var key = false
    /// Losses since the newest frame queued (replaced, beyond the backlog, or the camera's),
    /// in order: the next frame queued takes them, else they go out once the queue is empty.
    private var pending = LossList()
    private var stopping = false
    /// The camera's buffers the stage holds (a frame waiting, or one the encoder reads).
    private var leases = 0
    /// A frame is with the encoder, or a loss being reported (taken from the queue, not all
    /// delivered yet).
    private var busy = false
    private let finished = DispatchSemaphore(value: 0)
    private let copies = DetachedFrames(maxFrames: H264Stage.backlog)
    /// What the stage has still to encode or report, for consumers that wait for it.
    let progress = H264StageProgress()

    // The encoder thread's.
    private let working = FrameSlot()
    private var reporting = LossList()
    private let encoder: H264FrameEncoder
    private var failure: H264StageError?
    /// The consumers that had a key frame from this stage (the encoder thread's).
    private var started = Set<ObjectIdentifier>()
    private var current: [ObjectIdentifier] = {
        var c: [ObjectIdentifier] = []; c.reserveCapacity(8); return c
    }()

    init(settings: H264Settings, outlet: EncodedStageOutlet) {
        self.outlet = outlet
        encoder = H264FrameEncoder(settings, interval: outlet.frameInterval, progress: progress)
        NamedThread.start("cap h264", qualityOfService: .userInteractive) { [self] in run() }
    }

    func submit(_ sample: SampleBuffer, keyFrame: Bool, keepsEveryFrame: Bool) {
        condition.lock()
        key = key || keyFrame
        // At most one of the camera's buffers is the stage's (waiting or being read): a frame
        // held beyond that, or kept behind another, is copied (outside the lock).
        let replacing = !keepsEveryFrame && count > 0
        let tail = queue[(head + count + queue.count - 1) % queue.count]
        let leasesLeft = leases - (replacing && !tail.isCopy ? 1 : 0)
        if leasesLeft == 0, !(keepsEveryFrame && count > 0) {
            let replaced = put(sample.heldFrame(), isCopy: false, replacing: replacing)
            condition.unlock()
            // A replaced frame's buffer goes back here, outside the lock.
            _ = consume replaced
            return
        }
        condition.unlock()
        let copy = copies.detach(sample)
        guard let copy else {
            condition.withLock {
                noteLate(sample)
                updateProgress()
            }
            return
        }
        let held = copy.heldFrame()
        copy.release()
        condition.lock()
        let replaced: HeldFrame?
        if !keepsEveryFrame, count > 0 {
            replaced = put(consume held, isCopy: true, replacing: true)
        } else if count < H264Stage.backlog {
            replaced = put(consume held, isCopy: true, replacing: false)
        } else {
            noteLate(sample)
            updateProgress()
            replaced = consume held
        }
        condition.unlock()
        _ = consume replaced
    }

    /// Queues `frame` (or puts it in the place of the last one waiting, which it returns, noted
    /// lost). Under the lock.
    private func put(_ frame: consuming HeldFrame, isCopy: Bool, replacing: Bool) -> HeldFrame? {
        var replaced: HeldFrame?
        let slot: FrameSlot
        if replacing {
            // The frame in its place keeps the losses before the one it replaces, then those
            // since, then that one.
            slot = queue[(head + count - 1) % queue.count]
            if let s = slot.frame?.sample { slot.before.append(Self.late(s)) }
            if !slot.isCopy { leases -= 1 }
            replaced = slot.frame.take()
        } else {
            slot = queue[(head + count) % queue.count]
            slot.before.removeAll()
            count += 1
            condition.signal()
        }
        slot.before.take(from: &pending)
        slot.frame = consume frame
        slot.isCopy = isCopy
        if !isCopy {
            leases += 1
            progress.notePeak(leases)
        }
        updateProgress()
        return replaced
    }

    func submitDrop(_ drop: DroppedFrames) {
        condition.withLock {
            pending.append(drop)
            updateProgress()
            condition.signal()
        }
    }

    func shutdown() {
        condition.withLock {
            stopping = true
            // What waits is not encoded (nobody may want it any more): reported lost, in order,
            // before the losses after it.
            var lost = LossList()
            while count > 0 {
                let slot = queue[head]
                lost.take(from: &slot.before)
                if let s = slot.frame?.sample { lost.append(Self.late(s)) }
                if !slot.isCopy { leases -= 1 }
                // (Its buffer goes back here, under the stage's lock: no one else waits for it now.)
                _ = slot.frame.take()
                head = (head + 1) % queue.count
                count -= 1
            }
            lost.take(from: &pending)
            pending = lost
            condition.signal()
        }
        finished.wait()
    }

    // Under the lock.
    private func noteLate(_ sample: SampleBuffer) { pending.append(Self.late(sample)) }
    /// `sample`, lost late (at its capture time).
    private static func late(_ sample: SampleBuffer) -> DroppedFrames {
        DroppedFrames(reason: .frameWasLate, count: 1, sequenceNumber: sample.sequenceNumber, time: sample.presentationTimeStamp)
    }
    private func updateProgress() {
        progress.waiting.store(count + (busy ? 1 : 0) + (pending.isEmpty ? 0 : 1), ordering: .releasing)
    }

    private func run() {
        defer { finished.signal() }
        while true {
            condition.lock()
            while count == 0, pending.isEmpty, !stopping { condition.wait() }
            let stop = stopping && count == 0
            // The losses before the next frame, or, with none waiting, those after the last.
            reporting.removeAll()
            if count > 0 {
                reporting.take(from: &queue[head].before)
                working.frame = queue[head].frame.take()
                working.isCopy = queue[head].isCopy
                head = (head + 1) % queue.count
                count -= 1
                // Still waiting, for a consumer, while it is encoded and delivered.
                busy = true
            } else {
                reporting.take(from: &pending)
            }
            let key = self.key
            self.key = false
            // (Until its units and these reports are delivered, the consumers wait for them.)
            if !reporting.isEmpty { busy = true }
            updateProgress()
            condition.unlock()
            for d in reporting.reports { outlet.drop(d) }
            if working.frame != nil { encode(key: key) }
            condition.withLock {
                busy = false
                updateProgress()
            }
            if stop { return }
        }
    }

    /// Encodes the working frame and delivers its units; the frame's hold goes back once it is
    /// copied into the encoder.
    private func encode(key: Bool) {
        guard let sample = working.frame?.sample else { return }
        let sequence = sample.sequenceNumber
        if let failure {
            letGoOfWorking()
            // A consumer that joined since learns of it too.
            if key { fail(failure) }
            return
        }
        do throws(H264FrameEncoder.Failure) {
            try encoder.load(sample)
        } catch {
            letGoOfWorking()
            switch error {
            case .frame: outlet.drop(DroppedFrames(reason: .corrupt, count: 1, sequenceNumber: sequence))
            case .encoder(let e):
                failure = e
                fail(e)
            }
            return
        }
        letGoOfWorking()
        outlet.countEncode()
        do {
            try encoder.encode(keyFrame: key) { unit in deliver(unit) }
        } catch {
            failure = error
            fail(error)
        }
    }

    /// Hands `unit` to every consumer that has had a key frame: one that joined while an older
    /// frame was with the encoder starts at the key frame its joining asked for.
    private func deliver(_ unit: H264AccessUnit) {
        current.removeAll(keepingCapacity: true)
        outlet.forEachConsumer { c, connection in
            guard let c = c as? H264Consumer else { return }
            let id = ObjectIdentifier(c)
            if unit.isKeyFrame {
                started.insert(id)
            } else if !started.contains(id) {
                return
            }
            current.append(id)
            c.consume(unit, from: connection)
        }
        // Those that left are forgotten (one that comes back starts anew, at a key frame).
        if started.count > current.count { started = started.filter { current.contains($0) } }
    }

    /// Gives back the frame the encoder read (a camera buffer goes back to the driver here).
    private func letGoOfWorking() {
        let wasLease = !working.isCopy
        _ = working.frame.take()
        if wasLease { condition.withLock { leases -= 1 } }
    }

    private func fail(_ error: H264StageError) {
        outlet.forEachConsumer { c, connection in (c as? H264Consumer)?.h264StageFailed(error, from: connection) }
    }
}

/// How many frames a stage has still to encode or report lost (queued, being encoded, losses
/// not yet reported): a consumer that finishes at a stop waits until it has what was captured
/// before it. Any thread.
package final class H264StageProgress: Sendable {
    let waiting = Atomic<Int>(0)
    private let peak = Atomic<Int>(0)
    package var framesWaiting: Int { waiting.load(ordering: .acquiring) }
    /// The most camera buffers the stage held at once (at most one).
    package var buffersHeldPeak: Int { peak.load(ordering: .relaxed) }
    func notePeak(_ held: Int) {
        var p = peak.load(ordering: .relaxed)
        while held > p {
            let (done, now) = peak.compareExchange(expected: p, desired: held, ordering: .relaxed)
            if done { break }
            p = now
        }
    }
}

/// A place for one held frame (the hold is a move-only value, kept in a class so that it can sit
/// in a ring and be moved in and out under a lock).
private final class FrameSlot {
    var frame: HeldFrame?
    /// The frame is a copy of the stage's, not a camera buffer.
    var isCopy = false
    /// Losses to report before the frame's units.
    var before = LossList()
}

/// Loss reports in frame order, a run of one reason merged into one report (its first frame's
/// number and time, the run's count). Grows only when reasons alternate: steady losses allocate
/// nothing.
struct LossList {
    private var drops: [DroppedFrames] = {
        var d: [DroppedFrames] = []; d.reserveCapacity(4); return d
    }()

    var isEmpty: Bool { drops.isEmpty }

    mutating func append(_ drop: DroppedFrames) {
        if let last = drops.indices.last, drops[last].reason == drop.reason {
            drops[last].count += drop.count
        } else {
            drops.append(drop)
        }
    }

    /// Appends `other`'s reports, in order, and empties it.
    mutating func take(from other: inout LossList) {
        for d in other.drops { append(d) }
        other.removeAll()
    }

    mutating func removeAll() { drops.removeAll(keepingCapacity: true) }

    /// The reports, in order.
    var reports: [DroppedFrames] { drops }
}
