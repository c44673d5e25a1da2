// The mmap stream: REQBUFS → QUERYBUF → mmap → QBUF → STREAMON → poll/DQBUF → requeue →
// STREAMOFF → munmap → REQBUFS 0. A pool's mappings live as long as the pool object, and every
// FrameBuffer holds the pool, so memory stays readable after the stream stopped.
import CaptureBackend
import CaptureSystem
#if canImport(Glibc)
import Glibc
#endif
internal import CV4L2Shim

/// The mapped buffers of one stream. Lives until the last `FrameBuffer` from it is released;
/// then it unmaps and, if no newer stream took over, frees the driver's buffers (REQBUFS 0).
///
/// Threading: `dequeue` from the capture thread, `recycle` from any thread, `stop` from the
/// configuration thread; all bookkeeping is under one lock (DQBUF and QBUF are non-blocking).
package final class V4L2BufferPool: BufferPool {
    private enum Owner: UInt8 { case driver, client, free }

    /// Mapping addresses and scratch memory; only touched under `state`'s lock or at init/deinit.
    private struct Storage: @unchecked Sendable {
        package var bases: UnsafeMutablePointer<UnsafeMutableRawPointer?>
        package var lengths: UnsafeMutablePointer<Int>
        package var planeScratch: UnsafeMutablePointer<v4l2_plane>
    }
    private struct State {
        package var streaming = false
        package var owners: [Owner]
        package var queued = 0
        package var held = 0
        /// Buffers that a failed QBUF left with us while streaming; retried by `requeuePending`.
        package var pending = 0
        /// Called when a recycled buffer is queued while none was: a capture thread waiting for
        /// one (poll on the device would only answer POLLERR) is woken by it.
        package var onRequeue: (@Sendable () -> Void)?
        package var dequeue = v4l2_buffer()
    }

    package let queue: V4L2Queue
    package let count: Int
    package let planesPerBuffer: Int
    package let format: V4L2StreamFormat
    /// Capabilities the driver reported in `REQBUFS` (`V4L2_BUF_CAP_*`).
    package let bufferCapabilities: UInt32
    private let generation: UInt64
    private let storage: Storage
    private let state: Locked<State>

    private init(
        queue: V4L2Queue, generation: UInt64, count: Int, planes: Int, format: V4L2StreamFormat,
        capabilities: UInt32, storage: Storage
    ) {
        self.queue = queue
        self.generation = generation
        self.count = count
        self.planesPerBuffer = planes
        self.format = format
        self.bufferCapabilities = capabilities
        self.storage = storage
        // Created only after every buffer was queued and STREAMON succeeded.
        self.state = Locked(State(streaming: true, owners: Array(repeating: .driver, count: count), queued: count))
    }

    private var fd: FileDescriptor { queue.fd }
    private var type: V4L2BufferType { queue.type }

    /// Allocates and maps `requestedCount` buffers, queues them all and starts streaming. On any
    /// failure everything done so far is undone (munmap, REQBUFS 0) and the typed error thrown.
    package static func start(queue: V4L2Queue, requestedCount: Int, format: ActiveFormat) throws(BackendError) -> V4L2BufferPool {
        let fd = queue.fd
        let type = queue.type
        let streamFormat = V4L2StreamFormat(format)
        let planes = type.isMultiplanar ? max(1, min(Int(VIDEO_MAX_PLANES), format.planes.count)) : 1
        return try queue.allocate { generation, previousOwnerAlive throws(BackendError) -> V4L2BufferPool in
            if previousOwnerAlive {
                // Frames of an earlier stream are still held: orphan its buffers (they stay mapped).
                if case .failure(let e) = queue.requestBuffers(0) {
                    if e == .resourceBusy {
                        throw BackendError.video(.previousStreamHeld, fd.path, operation: "VIDIOC_REQBUFS", errno: e)
                    }
                    throw BackendError.video(e, "VIDIOC_REQBUFS", fd.path)
                }
            }
            let granted: (count: Int, capabilities: UInt32)
            switch queue.requestBuffers(max(1, requestedCount)) {
            case .success(let g): granted = g
            case .failure(let e): throw BackendError.video(e, "VIDIOC_REQBUFS", fd.path)
            }
            let count = granted.count
            guard count > 0 else {
                _ = queue.requestBuffers(0)
                throw BackendError.video(.noBuffersGranted, fd.path, operation: "VIDIOC_REQBUFS")
            }
            let total = count * planes
            let storage = Storage(
                bases: .allocate(capacity: total), lengths: .allocate(capacity: total),
                planeScratch: .allocate(capacity: Int(VIDEO_MAX_PLANES)))
            storage.bases.initialize(repeating: nil, count: total)
            storage.lengths.initialize(repeating: 0, count: total)
            storage.planeScratch.initialize(repeating: v4l2_plane(), count: Int(VIDEO_MAX_PLANES))

            func unwind() {
                for i in 0..<total { if let b = storage.bases[i] { fd.unmap(b, length: storage.lengths[i]) } }
                _ = queue.requestBuffers(0)
                storage.bases.deallocate()
                storage.lengths.deallocate()
                storage.planeScratch.deallocate()
            }

            do throws(BackendError) {
                // QUERYBUF and map exactly `length` at `m.offset`, per plane.
                for index in 0..<count {
                    var b = v4l2_buffer()
                    b.index = UInt32(index)
                    b.type = type.rawValue
                    b.memory = V4L2_MEMORY_MMAP.rawValue
                    if type.isMultiplanar {
                        b.m.planes = storage.planeScratch
                        b.length = UInt32(VIDEO_MAX_PLANES)
                    }
                    try fd.ioctl(.queryBuffer, &b)
                    if type.isMultiplanar {
                        guard Int(b.length) >= planes else {
                            throw BackendError.video(
                                .planeCountMismatch(reported: Int(b.length), expected: planes), fd.path,
                                operation: "VIDIOC_QUERYBUF")
                        }
                        for p in 0..<planes {
                            let pl = storage.planeScratch[p]
                            let length = Int(pl.length)
                            storage.bases[index * planes + p] = try fd.map(length: length, offset: Int(pl.m.mem_offset))
                            storage.lengths[index * planes + p] = length
                        }
                    } else {
                        let length = Int(b.length)
                        storage.bases[index] = try fd.map(length: length, offset: Int(b.m.offset))
                        storage.lengths[index] = length
                    }
                }
                // QBUF all, then STREAMON; the pool object exists only once this worked, so a
                // failure is undone here alone.
                for index in 0..<count {
                    if let e = queueBuffer(index, fd: fd, type: type, planes: planes, storage: storage) {
                        throw BackendError.video(e, "VIDIOC_QBUF", fd.path)
                    }
                }
                var t = Int32(bitPattern: type.rawValue)
                try fd.ioctl(.streamOn, &t)
                return V4L2BufferPool(
                    queue: queue, generation: generation, count: count, planes: planes,
                    format: streamFormat, capabilities: granted.capabilities, storage: storage)
            } catch {
                unwind()
                throw error
            }
        }
    }

    /// QBUF one buffer. Callers hold the pool's lock (or own the storage alone, at start): the
    /// plane scratch is shared.
    private static func queueBuffer(
        _ index: Int, fd: FileDescriptor, type: V4L2BufferType, planes: Int,
        storage: Storage
    ) -> Errno? {
        var b = v4l2_buffer()
        b.index = UInt32(index)
        b.type = type.rawValue
        b.memory = V4L2_MEMORY_MMAP.rawValue
        if type.isMultiplanar {
            for p in 0..<planes {
                storage.planeScratch[p] = v4l2_plane()
                storage.planeScratch[p].length = UInt32(storage.lengths[index * planes + p])
            }
            b.m.planes = storage.planeScratch
            b.length = UInt32(planes)
        }
        return withUnsafeMutablePointer(to: &b) { fd.ioctlErrno(.queueBuffer, $0) }
    }

    private func queueBuffer(_ index: Int) -> Errno? {
        Self.queueBuffer(index, fd: fd, type: type, planes: planesPerBuffer, storage: storage)
    }

    private struct Dequeued {
        package var index: Int
        package var flags: UInt32
        package var field: UInt32
        package var sequence: UInt32
        package var timestamp: timeval
        package var used: (Int, Int, Int)
        package var offset: (Int, Int, Int)
    }

    /// Takes the next filled buffer, or nil when none is ready or the stream stopped. Throws the
    /// failed `DQBUF`: `ENODEV` when the device is gone, `EIO` on a fatal stream error.
    package func dequeue() throws(BackendError) -> DequeuedBuffer? {
        let d = try state.withLock { s throws(BackendError) -> Dequeued? in
            // Stopped meanwhile (from another thread): nothing to take; the caller checks `isStreaming`.
            guard s.streaming else { return nil }
            s.dequeue = v4l2_buffer()
            s.dequeue.type = type.rawValue
            s.dequeue.memory = V4L2_MEMORY_MMAP.rawValue
            if type.isMultiplanar {
                s.dequeue.m.planes = storage.planeScratch
                s.dequeue.length = UInt32(planesPerBuffer)
            }
            guard try fd.ioctlUnlessWouldBlock(.dequeueBuffer, &s.dequeue) else { return nil }
            let b = s.dequeue
            let index = Int(b.index)
            guard index < count, s.owners[index] == .driver else {
                throw BackendError.video(.bufferNotHeld(Int(b.index)), fd.path, operation: "VIDIOC_DQBUF")
            }
            s.owners[index] = .client
            s.queued -= 1
            s.held += 1
            var out = Dequeued(
                index: index, flags: b.flags, field: b.field, sequence: b.sequence, timestamp: b.timestamp,
                used: (Int(b.bytesused), 0, 0), offset: (0, 0, 0))
            if type.isMultiplanar {
                let ps = storage.planeScratch
                out.used = (
                    Int(ps[0].bytesused), planesPerBuffer > 1 ? Int(ps[1].bytesused) : 0,
                    planesPerBuffer > 2 ? Int(ps[2].bytesused) : 0
                )
                out.offset = (
                    Int(ps[0].data_offset), planesPerBuffer > 1 ? Int(ps[1].data_offset) : 0,
                    planesPerBuffer > 2 ? Int(ps[2].data_offset) : 0
                )
            }
            return out
        }
        guard let d else { return nil }

        // Validate against what was mapped: data_offset <= bytesused <= length, bytesused > 0.
        var defect = V4L2BufferDefect.none
        let flags = V4L2BufferFlags(rawValue: d.flags)
        if flags.contains(.error) { defect = .errorFlag }
        let n = min(planesPerBuffer, 3)
        func view(_ p: Int, _ used: Int, _ offset: Int, _ sizeImage: Int) -> PlaneView {
            guard p < n else { return .empty }
            let slot = d.index * planesPerBuffer + p
            let length = storage.lengths[slot]
            let planeDefect = Self.planeDefect(
                used: used, offset: offset, length: length, sizeImage: sizeImage,
                isCompressed: format.isCompressed)
            if defect == .none { defect = planeDefect }
            if planeDefect != .none && planeDefect != .truncated { return .empty }
            let bpl = p == 0 ? format.bytesPerLine.0 : (p == 1 ? format.bytesPerLine.1 : format.bytesPerLine.2)
            return PlaneView(
                base: UnsafeRawPointer(storage.bases[slot]! + offset), count: used - offset,
                bytesPerLine: format.isCompressed ? 0 : bpl)
        }
        let planes = (
            view(0, d.used.0, d.offset.0, format.sizeImage.0),
            view(1, d.used.1, d.offset.1, format.sizeImage.1),
            view(2, d.used.2, d.offset.2, format.sizeImage.2)
        )
        return DequeuedBuffer(
            index: d.index, sequence: d.sequence, timestamp: CaptureTime(d.timestamp), flags: flags,
            field: V4L2Field(rawValue: d.field), defect: defect, planeCount: n, planes: planes, pool: self)
    }

    /// Checks one plane of a dequeued buffer against its mapping: `bytesused` must be non-zero
    /// and within the mapped `length`, `data_offset` within `bytesused`, and an uncompressed
    /// plane must hold at least `sizeimage` bytes.
    package static func planeDefect(used: Int, offset: Int, length: Int, sizeImage: Int, isCompressed: Bool) -> V4L2BufferDefect {
        if used == 0 { return .empty }
        if used > length { return .overrun }
        if offset > used { return .badDataOffset }
        if !isCompressed, sizeImage > 0, used - offset < sizeImage { return .truncated }
        return .none
    }

    /// Gives buffer `index` back: QBUF while streaming, else just marks it free. Any thread.
    package func recycle(index: Int) {
        let wake: (@Sendable () -> Void)? = state.withLock { s in
            guard index >= 0, index < count, s.owners[index] == .client else {
                assertionFailure("buffer \(index) recycled twice or never dequeued")
                return nil
            }
            s.held -= 1
            guard s.streaming else {
                s.owners[index] = .free
                return nil
            }
            if queueBuffer(index) == nil {
                s.owners[index] = .driver
                s.queued += 1
                return s.queued == 1 ? s.onRequeue : nil
            } else {
                // Stays with us; `requeuePending` tries again (ENODEV/EIO surface at the next DQBUF).
                s.owners[index] = .free
                s.pending += 1
                return nil
            }
        }
        wake?()
    }

    /// Sets what `recycle` calls when it queues a buffer while none was queued.
    package func setRequeueHandler(_ handler: @escaping @Sendable () -> Void) { state.withLock { $0.onRequeue = handler } }

    /// Buffers a failed QBUF left with us, waiting for `requeuePending`.
    package var pendingCount: Int { state.withLock { $0.pending } }

    /// Retries QBUF for buffers a failed QBUF left with us. Cheap when there are none.
    package func requeuePending() {
        state.withLock { s in
            guard s.streaming, s.pending > 0 else { return }
            for index in 0..<count where s.owners[index] == .free {
                guard queueBuffer(index) == nil else { return }
                s.owners[index] = .driver
                s.queued += 1
                s.pending -= 1
            }
        }
    }

    /// Buffers the driver holds (queued or filled, not yet dequeued).
    package var queuedCount: Int { state.withLock { $0.queued } }
    /// Buffers handed out and not yet recycled.
    package var heldCount: Int { state.withLock { $0.held } }
    package var isStreaming: Bool { state.withLock { $0.streaming } }

    /// STREAMOFF; every buffer the driver held becomes free. Held frames stay readable.
    package func stop() {
        state.withLock { s in
            guard s.streaming else { return }
            var t = Int32(bitPattern: type.rawValue)
            // Errors (ENODEV after an unplug) change nothing: the stream is over either way.
            _ = withUnsafeMutablePointer(to: &t) { fd.ioctlErrno(.streamOff, $0) }
            s.streaming = false
            for i in 0..<count where s.owners[i] != .client { s.owners[i] = .free }
            s.queued = 0
            s.pending = 0
        }
    }

    deinit {
        stop()
        let total = count * planesPerBuffer
        for i in 0..<total { if let b = storage.bases[i] { fd.unmap(b, length: storage.lengths[i]) } }
        queue.release(generation)
        storage.bases.deallocate()
        storage.lengths.deallocate()
        storage.planeScratch.deallocate()
    }
}
