import Capture
import CaptureCodecs
import Foundation

/// The movie output's frames from the session, through its port: the shared H.264 stage's units
/// (held, not copied) or JPEG frames (the JPEG stage's, or an MJPEG camera's completed), and drop
/// reports wait here, in order, for the recording queue. It is the recorder's backpressure, so
/// that the encoders, the camera and the session's other consumers never wait for it: at most
/// `heldFrameLimit` JPEG frames wait in the buffers they came in, later ones are copied
/// (`DetachedFrames`), and what does not fit (a slow destination) is lost to the recording alone,
/// counted once as `.frameWasLate`; after a lost unit it waits for a key frame it asks the stage for.
/// The microphone's audio comes as the packets of the session's shared audio stage (held).
final class RecordingFeed: H264Consumer, AudioPacketConsumer, @unchecked Sendable {
    enum Entry {
        case unit(H264AccessUnit)
        /// A JPEG frame; a copy of the feed's (`DetachedFrames`) holds its slot until released.
        case frame(SampleBuffer, isCopy: Bool)
        case drop(DroppedFrames)
        case failed(H264StageError)
        case audioFailed(AudioStageError)
    }

    /// Entries waiting at most; units stop 16 short, so drop reports find room.
    static let capacity = 256
    /// Units waiting at most: about 8 s at 30 fps, a small part of what their raw frames were.
    static let unitLimit = capacity - 16
    private let lock = NSLock()
    // Guarded by `lock`: a ring of entries, preallocated (queuing allocates nothing).
    private var ring = [Entry?](repeating: nil, count: capacity)
    private var head = 0
    private var count = 0
    /// Units lost to a full ring (or after one, until a key frame), not yet queued as a drop.
    private var lost: (count: Int, sequence: UInt64, time: CaptureTime)?
    private var awaitingKey = false
    /// Drop reports that found the ring full (a recorder stuck far behind), queued next.
    private var overflow: [DroppedFrames] = []
    /// The stage failed: no unit will come; the recording ends before anything else waiting.
    private var failure: H264StageError?
    /// The audio stage failed: no packet will come.
    private var audioFailure: AudioStageError?
    // Set once, by `setDrain`, before the port is in a session.
    private var wakeup: DispatchSourceUserDataAdd?
    /// Set once, before the port is in a session.
    weak var port: FrameConsumerPort?

    /// Seconds of audio that wait at most: audio shares the recording queue with video that may
    /// be seconds behind, and is small (10 s of AAC is about 80 kB), so it waits rather than
    /// being lost.
    static let audioLimit = 10.0
    // Guarded by `lock`: the audio stage's packets waiting (held), and their samples.
    private var audio: [AudioPacket] = {
        var a: [AudioPacket] = []; a.reserveCapacity(512); return a
    }()
    private var audioFrames = 0

    /// JPEG frames that wait in the buffers they came in at most (see `CaptureMovieFileOutput.heldFrameLimit`).
    private let heldLimit: Int
    /// Copies of the JPEG frames beyond `heldLimit`.
    private let copies = DetachedFrames()
    /// JPEG frames waiting in the buffers they came in, and the most there ever were.
    private var held = 0
    private var heldPeak = 0

    init(heldLimit: Int) { self.heldLimit = heldLimit }

    /// `drain` runs on `queue` whenever entries came (coalesced: one call may find many; a
    /// dispatch source, so that waking it allocates nothing). Called once, before the port is
    /// in a session.
    func setDrain(on queue: DispatchQueue, _ drain: @escaping @Sendable () -> Void) {
        let source = DispatchSource.makeUserDataAddSource(queue: queue)
        source.setEventHandler(handler: drain)
        source.activate()
        wakeup = source
    }

    deinit { wakeup?.cancel() }

    /// The stage of the last unit (what it has still to deliver counts as waiting).
    private var stage: H264StageProgress?

    /// The most camera buffers a stage of an earlier recording held at once.
    private var peakBefore = 0
    /// The most camera buffers (or JPEG samples) held at once for this feed: by the feed, or by
    /// the stages of its recordings. Any thread.
    var buffersHeldPeak: Int { lock.withLock { max(heldPeak, peakBefore, stage?.buffersHeldPeak ?? 0) } }

    /// Units and drops waiting for the recording queue, and frames waiting in its stage. Any thread.
    var waiting: Int { lock.withLock { count + (stage?.framesWaiting ?? 0) } }

    func consume(_ unit: H264AccessUnit, from connection: CaptureConnection) {
        let queued: Bool = lock.withLock {
            // After a loss the file can only go on from a key frame.
            if awaitingKey, !unit.isKeyFrame {
                lose(unit)
                return false
            }
            flushLost()
            guard count < Self.unitLimit else {
                lose(unit)
                awaitingKey = true
                return false
            }
            awaitingKey = false
            if stage !== unit.stageProgress { stage = unit.stageProgress }
            unit.hold()
            push(.unit(unit))
            return true
        }
        if queued {
            wakeup?.add(data: 1)
        } else {
            port?.requestKeyFrame()
        }
    }

    /// A JPEG frame: kept as it came while fewer than `heldLimit` wait so, else copied (outside
    /// the lock); lost when the copies' budget or the ring is full.
    func consume(_ sample: SampleBuffer, from connection: CaptureConnection) {
        let keep: Bool = lock.withLock {
            guard held < heldLimit, count < Self.unitLimit else { return false }
            flushLost()
            held += 1
            heldPeak = max(heldPeak, held)
            // (A hold keeps a JPEG slot from being rewritten, a lease's buffer out.)
            sample.hold()
            push(.frame(sample, isCopy: false))
            return true
        }
        if keep {
            wakeup?.add(data: 1)
            return
        }
        let copy = copies.detach(sample)
        let queued: Bool = lock.withLock {
            guard let copy, count < Self.unitLimit else {
                lose(sample.sequenceNumber, sample.presentationTimeStamp)
                return false
            }
            flushLost()
            push(.frame(copy, isCopy: true))
            return true
        }
        if queued { wakeup?.add(data: 1) } else { copy?.release() }
    }

    /// The recording queue is done with a frame `next()` gave it.
    func done(_ sample: SampleBuffer, isCopy: Bool) {
        sample.release()
        if !isCopy { lock.withLock { held -= 1 } }
    }

    /// Frames the camera (or a stage) lost. (A microphone's losses are not counted as frames:
    /// the file fills them with silence, from the buffers' times.)
    func consumeDrop(_ drop: DroppedFrames, from connection: CaptureConnection) {
        guard connection.mediaType == .video else { return }
        enqueue(drop)
    }

    /// A packet of the audio stage (the recorder's audio port): it waits too, up to `audioLimit`
    /// of audio; beyond that it is lost (a recorder seconds behind), and the file has silence in
    /// its place.
    func consumeAudioPacket(_ packet: AudioPacket, from connection: CaptureConnection) {
        let limit = Int(Double(packet.format?.sampleRate ?? 48_000) * Self.audioLimit)
        let queued: Bool = lock.withLock {
            guard audioFrames + packet.duration <= limit else { return false }
            packet.hold()
            audio.append(packet)
            audioFrames += packet.duration
            return true
        }
        if queued { wakeup?.add(data: 1) }
    }

    /// The audio stage's next packet, in order, with the feed's hold (the caller lets go), or
    /// nil. Recording queue.
    func nextAudio() -> AudioPacket? {
        lock.withLock {
            guard !audio.isEmpty else { return nil }
            let p = audio.removeFirst()
            audioFrames -= p.duration
            return p
        }
    }

    func audioStageFailed(_ error: AudioStageError, from connection: CaptureConnection) {
        lock.withLock { audioFailure = error }
        wakeup?.add(data: 1)
    }

    func h264StageFailed(_ error: H264StageError, from connection: CaptureConnection) {
        lock.withLock { failure = error }
        wakeup?.add(data: 1)
    }

    /// The next entry, in order, or nil. Recording queue. A unit comes with the feed's hold,
    /// which the caller lets go of.
    func next() -> Entry? {
        lock.withLock {
            if let f = failure {
                failure = nil
                return .failed(f)
            }
            if let f = audioFailure {
                audioFailure = nil
                return .audioFailed(f)
            }
            guard count > 0 else { return nil }
            defer {
                ring[head] = nil
                head = (head + 1) % Self.capacity
                count -= 1
            }
            return ring[head]
        }
    }

    /// Lets go of every unit and frame waiting (the recording ended). Recording queue.
    func discard() {
        while let e = next() {
            switch e {
            case .unit(let u): u.letGo()
            case .frame(let s, let isCopy): done(s, isCopy: isCopy)
            default: break
            }
        }
        while let p = nextAudio() { p.letGo() }
        lock.withLock {
            lost = nil
            overflow = []
            failure = nil
            audioFailure = nil
            peakBefore = max(peakBefore, stage?.buffersHeldPeak ?? 0)
            stage = nil
            awaitingKey = false
        }
    }

    private func enqueue(_ drop: DroppedFrames) {
        lock.withLock {
            flushLost()
            if count < Self.capacity, overflow.isEmpty { push(.drop(drop)) } else { overflow.append(drop) }
        }
        wakeup?.add(data: 1)
    }

    // Under the lock.
    private func push(_ entry: Entry) {
        ring[(head + count) % Self.capacity] = entry
        count += 1
    }

    private func lose(_ unit: H264AccessUnit) { lose(unit.sequenceNumber, unit.presentationTimeStamp) }
    private func lose(_ sequence: UInt64, _ time: CaptureTime) {
        if let l = lost {
            lost = (l.count + 1, l.sequence, l.time)
        } else {
            lost = (1, sequence, time)
        }
    }

    private func flushLost() {
        while !overflow.isEmpty, count < Self.capacity { push(.drop(overflow.removeFirst())) }
        guard let l = lost, overflow.isEmpty, count < Self.capacity else { return }
        lost = nil
        push(.drop(DroppedFrames(reason: .frameWasLate, count: l.count, sequenceNumber: l.sequence, time: l.time)))
    }
}
