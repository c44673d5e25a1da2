import CaptureVirtual
import CaptureImaging
import CaptureBackend
import CaptureSystem
import Foundation

/// Encodes camera frames to JPEG on several threads, each with its own `JPEGEncoder`, and hands
/// the results out in the order the frames were submitted.
///
/// The capture thread calls `submit`; it only ever takes a lock and moves a reference, and never
/// runs the `deliver` closure. Frames wait in one bounded queue (`queueDepth`). When the queue is
/// full the oldest waiting frame is dropped (its driver buffer goes back at once) so that the
/// newest frame wins; the drop is delivered, in sequence, as `.dropped`.
///
/// Results are delivered on the worker threads, one at a time, in submission order, as JPEG
/// sample buffers of the pool's ring: each worker encodes straight into a sample nobody holds
/// (no copy, and nothing allocated per frame once the ring is warm), so a frame that finished
/// ahead of its turn just waits in its sample. `deliver` should return promptly because the
/// frames after it wait for it; a consumer that keeps a sample beyond `deliver` takes a hold on
/// it (`hold`), which keeps it out of the ring until released. The pool's own hold goes back
/// once `deliver` returns.
///
/// Thread-safe. Do not call `shutdown` from inside `deliver`.
package final class JPEGEncoderPool: @unchecked Sendable {
    /// One result, in submission order.
    package enum Output {
        /// A frame's JPEG. `shared` is false when consumers held every sample of the ring: the
        /// JPEG is then in a sample of its own (allocated), to be given only to consumers that
        /// must not miss it (stills); the others should count the frame as `.outOfBuffers`.
        case encoded(SampleBuffer, shared: Bool)
        /// Frames replaced by newer ones because every worker was busy (reason `.frameWasLate`),
        /// or lost before the pool and passed through it in order (`submitDrop`).
        case dropped(DroppedFrames)
        /// A frame that could not be encoded.
        case failed(sequence: UInt32, error: CaptureError)
    }

    /// What `submit` does when the queue is full.
    package enum WhenFull: Sendable {
        /// Drop the oldest waiting frame (live capture: the newest frame wins).
        case dropOldest
        /// Block until a worker takes a frame (replaying recorded frames, benchmarks).
        case wait
    }

    /// Frames submitted, encoded (or failed) and dropped so far.
    package struct Statistics: Sendable, Hashable {
        package var submitted = 0
        package var encoded = 0
        package var failed = 0
        package var dropped = 0
    }

    private let core: Core

    /// Starts `workers` threads (at least 1). `queueDepth` (default: one per worker) bounds the
    /// frames waiting for a worker. `subsampling` nil keeps each frame's own. `heldSamples` is how
    /// many delivered samples consumers may keep at once before frames count as out of buffers.
    package init(
        workers: Int, queueDepth: Int? = nil, quality: Int = 85, subsampling: ChromaSubsampling? = nil,
        heldSamples: Int = 4, deliver: @escaping @Sendable (Output) -> Void
    ) {
        let n = max(1, workers)
        core = Core(
            workers: n, depth: max(1, queueDepth ?? n), quality: quality, subsampling: subsampling,
            heldSamples: max(1, heldSamples), deliver: deliver)
        for i in 0..<n {
            NamedThread.start("cap jpeg \(i)", qualityOfService: .userInteractive) { [core] in core.work(i) }
        }
    }

    deinit { core.shutdown() }

    /// Number of encoder threads.
    package var workerCount: Int { core.workerCount }

    /// Queues a video sample buffer's frame (zero-copy: the driver buffer is held until it is
    /// encoded). Returns false for samples that are not raw video frames, and after `shutdown`.
    @discardableResult
    package func submit(_ sample: SampleBuffer, whenFull: WhenFull = .dropOldest) -> Bool {
        guard sample.videoImage != nil else { return false }
        return core.submit(sample, whenFull: whenFull)
    }

    /// Frames lost before the pool (a camera's gap, a damaged frame), delivered as `.dropped` in
    /// their place among the frames submitted: after those submitted before, before those
    /// submitted after. False after `shutdown`.
    @discardableResult
    package func submitDrop(_ drop: DroppedFrames) -> Bool { core.submitDrop(drop) }

    /// Encodes and delivers what is queued, then stops the workers and waits for them. Later
    /// submissions are refused. Idempotent.
    package func shutdown() { core.shutdown() }

    package var statistics: Statistics { core.statistics }
}

// The shared state lives apart from the pool so that the worker threads do not keep the pool
// alive: the pool's deinit shuts them down.
//
// Ordering without idling: a worker whose frame is next delivers its sample at once. A worker
// that finishes ahead of its turn parks the sample in one of its two result slots and goes on
// with the next frame; whoever delivers the frame before it delivers it. Only when both of its
// slots wait does a worker wait. The ring has a sample for each worker's frame in hand and each
// slot, plus those consumers may hold.
private final class Core: @unchecked Sendable {
    /// Consecutive tickets that are drops of one reason and of consecutive frames.
    private struct DropRange {
        var start: UInt64
        var tickets: Int
        var frames: Int
        var firstSequence: UInt64?
        var reason: DropReason
    }

    /// A finished frame waiting for its turn, in a worker's slot.
    private struct Ready {
        var ticket: UInt64 = 0
        var sequence: UInt32 = 0
        var sample: SampleBuffer?
        var shared = false
        var failure: CaptureError?
        var inUse = false
    }

    static let slotsPerWorker = 2

    let workerCount: Int
    private let quality: Int
    private let subsampling: ChromaSubsampling?
    private let deliver: @Sendable (JPEGEncoderPool.Output) -> Void
    private let ring: JPEGSampleRing

    // Everything below is guarded by `mutex`; one condition serves every wait (few threads).
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let cond = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private var queue: [SampleBuffer?]
    private var queueTickets: [UInt64]
    private var head = 0, queued = 0
    private var nextTicket: UInt64 = 0
    private var nextDeliver: UInt64 = 0
    private var delivering = false
    // Dropped tickets not yet reported, as ranges, oldest first. Ranges are separated by tickets
    // still queued or held by a worker, or by a change of reason or a jump in sequence numbers
    // (drops passed through): the ring grows (rarely: past its high-water mark only) when full.
    private var drops: [DropRange]
    private var dropHead = 0, dropCount = 0
    private var ready: [Ready]
    private var closing = false
    private var workerThreads: [pthread_t?]
    private var stats = JPEGEncoderPool.Statistics()
    // Workers that have not yet left `work`; every `shutdown` not on a worker waits for 0.
    private var running: Int

    init(
        workers: Int, depth: Int, quality: Int, subsampling: ChromaSubsampling?, heldSamples: Int,
        deliver: @escaping @Sendable (JPEGEncoderPool.Output) -> Void
    ) {
        ring = JPEGSampleRing(count: workers * (1 + Self.slotsPerWorker) + heldSamples)
        workerCount = workers
        running = workers
        self.quality = quality
        self.subsampling = subsampling
        self.deliver = deliver
        queue = Array(repeating: nil, count: depth)
        queueTickets = Array(repeating: 0, count: depth)
        let slots = workers * Self.slotsPerWorker
        drops = Array(
            repeating: DropRange(start: 0, tickets: 0, frames: 0, firstSequence: nil, reason: .frameWasLate),
            count: 2 * (depth + workers + slots + 2))
        ready = Array(repeating: Ready(), count: slots)
        workerThreads = Array(repeating: nil, count: workers)
        pthread_mutex_init(mutex, nil)
        pthread_cond_init(cond, nil)
    }

    deinit {
        pthread_cond_destroy(cond)
        pthread_mutex_destroy(mutex)
        cond.deallocate()
        mutex.deallocate()
    }

    private func lock() { pthread_mutex_lock(mutex) }
    private func unlock() { pthread_mutex_unlock(mutex) }
    private func wait() { pthread_cond_wait(cond, mutex) }
    private func wakeAll() { pthread_cond_broadcast(cond) }

    var statistics: JPEGEncoderPool.Statistics {
        lock()
        defer { unlock() }
        return stats
    }

    func submit(_ frame: SampleBuffer, whenFull: JPEGEncoderPool.WhenFull) -> Bool {
        var evicted: SampleBuffer?
        lock()
        while queued == queue.count && !closing {
            if whenFull == .wait {
                wait()
                continue
            }
            // Newest wins: the oldest waiting frame goes; its ticket is reported in order.
            let old = queue[head]
            let ticket = queueTickets[head]
            queue[head] = nil
            head = (head + 1) % queue.count
            queued -= 1
            stats.dropped += 1
            recordDrop(ticket: ticket, frames: 1, sequence: old?.sequenceNumber, reason: .frameWasLate)
            evicted = old
        }
        guard !closing else {
            unlock()
            evicted?.release()
            return false
        }
        let slot = (head + queued) % queue.count
        // Held until encoded (or evicted): the encoder reads the driver's buffer in place.
        frame.hold()
        queue[slot] = frame
        queueTickets[slot] = nextTicket
        nextTicket += 1
        queued += 1
        stats.submitted += 1
        wakeAll()
        unlock()
        // Released outside the lock: the last hold queues the buffer back to the driver.
        evicted?.release()
        return true
    }

    func submitDrop(_ drop: DroppedFrames) -> Bool {
        lock()
        guard !closing else {
            unlock()
            return false
        }
        let ticket = nextTicket
        nextTicket += 1
        recordDrop(ticket: ticket, frames: drop.count, sequence: drop.sequenceNumber, reason: drop.reason)
        // Due now if nothing before it is in flight; a worker delivers it.
        wakeAll()
        unlock()
        return true
    }

    /// With the lock held: `ticket` is a drop of `frames` frames from `sequence` on. Ranges stay in
    /// ticket order (a frame replaced in the queue is older than a loss passed through after it
    /// was queued); a drop joins the range before it when it continues it in tickets, reason and
    /// sequence numbers, so each report says which frames went.
    private func recordDrop(ticket: UInt64, frames: Int, sequence: UInt64?, reason: DropReason) {
        func at(_ i: Int) -> Int { (dropHead + i) % drops.count }
        var k = dropCount
        while k > 0 && drops[at(k - 1)].start > ticket { k -= 1 }
        if k > 0 {
            let r = drops[at(k - 1)]
            if r.start + UInt64(r.tickets) == ticket, r.reason == reason,
                let first = r.firstSequence, let sequence, first &+ UInt64(r.frames) == sequence
            {
                drops[at(k - 1)].tickets += 1
                drops[at(k - 1)].frames += frames
                return
            }
        }
        if dropCount == drops.count {
            // Unrolled into a ring twice the size, oldest first.
            drops = (0..<dropCount).map { drops[at($0)] } + drops
            dropHead = 0
        }
        var i = dropCount
        while i > k {
            drops[at(i)] = drops[at(i - 1)]
            i -= 1
        }
        drops[at(k)] = DropRange(start: ticket, tickets: 1, frames: frames, firstSequence: sequence, reason: reason)
        dropCount += 1
    }

    /// With the lock held: delivers whatever is next in order and already done (dropped frames,
    /// frames waiting in slots). Returns whether it delivered anything.
    @discardableResult
    private func deliverDue() -> Bool {
        var did = false
        while !delivering {
            if dropCount > 0, drops[dropHead].start == nextDeliver {
                let range = drops[dropHead]
                dropHead = (dropHead + 1) % drops.count
                dropCount -= 1
                delivering = true
                nextDeliver += UInt64(range.tickets)
                unlock()
                deliver(.dropped(DroppedFrames(reason: range.reason, count: range.frames, sequenceNumber: range.firstSequence)))
                lock()
            } else if let i = ready.firstIndex(where: { $0.inUse && $0.ticket == nextDeliver }) {
                let r = ready[i]
                ready[i].sample = nil
                delivering = true
                unlock()
                if let sample = r.sample {
                    deliver(.encoded(sample, shared: r.shared))
                    // The pool's hold on the ring's sample: consumers that keep it took their own.
                    sample.release()
                } else {
                    deliver(.failed(sequence: r.sequence, error: r.failure ?? CaptureError(.ioError, "no JPEG")))
                }
                lock()
                if r.sample != nil { stats.encoded += 1 } else { stats.failed += 1 }
                ready[i].inUse = false
                nextDeliver = r.ticket + 1
            } else {
                break
            }
            delivering = false
            wakeAll()
            did = true
        }
        return did
    }

    func work(_ index: Int) {
        let encoder = JPEGEncoder(quality: quality, subsampling: subsampling)
        let mySlots = (index * Self.slotsPerWorker)..<((index + 1) * Self.slotsPerWorker)
        lock()
        workerThreads[index] = pthread_self()
        while true {
            deliverDue()
            guard queued > 0 else {
                if closing { break }
                wait()
                continue
            }
            var frame = queue[head]
            let ticket = queueTickets[head]
            queue[head] = nil
            head = (head + 1) % queue.count
            queued -= 1
            wakeAll()
            unlock()

            let sequence = frame.map { UInt32(truncatingIfNeeded: $0.sequenceNumber) } ?? 0
            var sample: SampleBuffer?
            var shared = true
            var failure: CaptureError?
            if let f = frame {
                do throws(CaptureError) {
                    (sample, shared) = try f.withVideoImage { image throws(CaptureError) in
                        guard let image else { throw CaptureError(.invalidArgument, "not a raw video sample") }
                        return try encode(image, of: f, with: encoder)
                    }
                } catch {
                    failure = error
                }
            }
            // The driver buffer goes back before this frame waits for its turn.
            frame?.release()
            frame = nil

            lock()
            while true {
                if nextDeliver == ticket && !delivering {
                    // Our turn: delivered at once.
                    delivering = true
                    unlock()
                    if let sample {
                        deliver(.encoded(sample, shared: shared))
                        sample.release()
                    } else {
                        deliver(.failed(sequence: sequence, error: failure ?? CaptureError(.ioError, "no JPEG")))
                    }
                    lock()
                    if sample != nil { stats.encoded += 1 } else { stats.failed += 1 }
                    delivering = false
                    nextDeliver = ticket + 1
                    wakeAll()
                    break
                }
                if deliverDue() { continue }
                if let free = mySlots.first(where: { !ready[$0].inUse }) {
                    // Ahead of our turn: the sample waits in a slot; on with the next frame.
                    ready[free] = Ready(
                        ticket: ticket, sequence: sequence, sample: sample, shared: shared,
                        failure: failure, inUse: true)
                    wakeAll()
                    break
                }
                wait()
            }
            sample = nil
        }
        running -= 1
        wakeAll()
        unlock()
    }

    /// `image`'s JPEG, written straight into a sample of the ring; when consumers hold every one,
    /// into a sample of its own (`shared` false).
    private func encode(_ image: ImageBuffer, of frame: SampleBuffer, with encoder: JPEGEncoder) throws(CaptureError)
        -> (SampleBuffer, shared: Bool)
    {
        let dimensions = VideoDimensions(width: image.width, height: image.height)
        let metadata = FrameMetadata(
            sequence: UInt32(truncatingIfNeeded: frame.sequenceNumber),
            timestamp: frame.presentationTimeStamp, bufferIndex: -1)
        let bound = encoder.encodedSizeBound(for: image)
        if let s = try ring.sample(
            capacity: bound, dimensions: dimensions, metadata: metadata,
            write: {
                (out: UnsafeMutableRawBufferPointer) throws(CaptureError) -> Int in try encoder.encode(image, into: out)
            })
        {
            return (s, true)
        }
        return (SampleBuffer(jpeg: Data(try encoder.encode(image)), dimensions: dimensions, metadata: metadata), false)
    }

    func shutdown() {
        lock()
        closing = true
        wakeAll()
        let caller = pthread_self()
        let onWorker = workerThreads.contains { $0.map { pthread_equal($0, caller) != 0 } ?? false }
        // A worker cannot wait for itself; the others stop on their own. Every other caller
        // waits, not only the first: a second `shutdown` (say one made from inside `deliver`
        // got there first) must not return while frames are still being delivered.
        if !onWorker {
            while running > 0 { wait() }
        }
        unlock()
    }
}
