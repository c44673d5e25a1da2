// The mmap stream: REQBUFS → QUERYBUF → mmap → QBUF → STREAMON → poll/DQBUF → requeue →
// STREAMOFF → munmap → REQBUFS 0. A pool's mappings live as long as the pool object, and every
// FrameBuffer holds the pool, so memory stays readable after the stream stopped.
import CaptureBackend
import CaptureSystem
#if canImport(Glibc)
import Glibc
#endif
internal import CV4L2Shim

/// A device's buffer queue. It records which pool owns the driver's buffers, so that a pool
/// freed late (its frames were held) never releases buffers of a newer stream.
package final class V4L2Queue: Sendable {
    package let fd: FileDescriptor
    package let type: V4L2BufferType
    private struct State {
        /// Generation of the pool owning the driver's buffers (0: none).
        package var owner: UInt64 = 0
        package var nextGeneration: UInt64 = 1
    }
    private let state = Locked(State())

    package init(fd: FileDescriptor, type: V4L2BufferType) {
        self.fd = fd
        self.type = type
    }

    /// Runs `body` with the queue locked; `body` gets a fresh generation number and returns
    /// whether it now owns the driver's buffers.
    fileprivate func allocate<T>(_ body: (_ generation: UInt64, _ previousOwnerAlive: Bool) throws(BackendError) -> T)
        throws(BackendError) -> T
    {
        try state.withLock { s throws(BackendError) -> T in
            let generation = s.nextGeneration
            s.nextGeneration += 1
            let previous = s.owner != 0
            s.owner = 0
            let result = try body(generation, previous)
            s.owner = generation
            return result
        }
    }

    /// Releases the driver's buffers (REQBUFS 0) if `generation` still owns them.
    fileprivate func release(_ generation: UInt64) {
        state.withLock { s in
            guard s.owner == generation else { return }
            s.owner = 0
            _ = requestBuffers(0)
        }
    }

    /// Lets go of the driver's buffers a stopped pool still owns because clients hold its frames
    /// (`REQBUFS 0` orphans them: they stay mapped until let go), so that the format can change.
    /// Throws `.previousStreamHeld` where the driver cannot orphan buffers (EBUSY).
    package func orphanStoppedBuffers() throws(BackendError) {
        try state.withLock { s throws(BackendError) in
            guard s.owner != 0 else { return }
            if case .failure(let e) = requestBuffers(0) {
                if e == .resourceBusy {
                    throw BackendError.video(.previousStreamHeld, fd.path, operation: "VIDIOC_REQBUFS", errno: e)
                }
                throw BackendError.video(e, "VIDIOC_REQBUFS", fd.path)
            }
            s.owner = 0
        }
    }

    /// Whether some pool of this queue holds the driver's buffers.
    package var isAllocated: Bool { state.withLock { $0.owner != 0 } }

    /// `VIDIOC_REQBUFS` with MMAP memory; returns the granted count and capabilities, or the errno.
    fileprivate func requestBuffers(_ count: Int) -> Result<(count: Int, capabilities: UInt32), Errno> {
        var r = v4l2_requestbuffers()
        r.count = UInt32(clamping: count)
        r.type = type.rawValue
        r.memory = V4L2_MEMORY_MMAP.rawValue
        if let e = withUnsafeMutablePointer(to: &r, { fd.ioctlErrno(.requestBuffers, $0) }) { return .failure(e) }
        return .success((Int(r.count), r.capabilities))
    }

    /// Checks that no other process streams from the device (`REQBUFS 0` answers `EBUSY` then),
    /// without claiming anything. A stream of our own counts as available.
    package func checkAvailable() throws(BackendError) {
        try state.withLock { s throws(BackendError) in
            guard s.owner == 0 else { return }
            if case .failure(let e) = requestBuffers(0) {
                throw BackendError.video(e, "VIDIOC_REQBUFS", fd.path)
            }
        }
    }
}

/// Why a dequeued buffer must not be delivered.
package enum V4L2BufferDefect: UInt8, Sendable {
    case none
    /// `V4L2_BUF_FLAG_ERROR`.
    case errorFlag
    /// `bytesused` is 0.
    case empty
    /// `bytesused` is larger than the mapped length.
    case overrun
    /// `data_offset` is beyond `bytesused`.
    case badDataOffset
    /// Fewer bytes than the format's `sizeimage` for an uncompressed format.
    case truncated

    package var reason: String {
        switch self {
        case .none: "none"
        case .errorFlag: "the driver flagged the buffer as damaged (V4L2_BUF_FLAG_ERROR)"
        case .empty: "the driver returned an empty buffer (bytesused 0)"
        case .overrun: "bytesused is larger than the buffer"
        case .badDataOffset: "data_offset is beyond bytesused"
        case .truncated: "the frame is shorter than the format's image size"
        }
    }
}

/// The format snapshot a pool streams with: what each frame's `ImageBuffer` says.
package struct V4L2StreamFormat: Sendable {
    package var pixelFormat: PixelFormat
    package var width: Int
    package var height: Int
    package var colorRange: ColorRange
    package var planeCount: Int
    package var bytesPerLine: (Int, Int, Int)
    package var sizeImage: (Int, Int, Int)
    package var isCompressed: Bool

    package init(_ f: ActiveFormat) {
        pixelFormat = f.pixelFormat
        width = f.width
        height = f.height
        colorRange = f.colorRange
        planeCount = max(1, min(3, f.planes.count))
        func at(_ i: Int) -> PlaneFormat { i < f.planes.count ? f.planes[i] : PlaneFormat(bytesPerLine: 0, sizeImage: 0) }
        bytesPerLine = (at(0).bytesPerLine, at(1).bytesPerLine, at(2).bytesPerLine)
        sizeImage = (at(0).sizeImage, at(1).sizeImage, at(2).sizeImage)
        isCompressed = f.pixelFormat.isCompressed
    }
}

/// A buffer taken from the driver by `DQBUF`. It goes back exactly once: turned into a
/// `FrameBuffer` (which requeues when released) or requeued when this value is dropped.
package struct DequeuedBuffer: ~Copyable {
    package let index: Int
    package let sequence: UInt32
    package let timestamp: CaptureTime
    package let timestampClock: V4L2TimestampClock
    package let flags: V4L2BufferFlags
    package let field: V4L2Field
    /// Why the pixels must not be delivered, or `.none`.
    package let defect: V4L2BufferDefect
    package let planeCount: Int
    /// Valid data per plane (after `data_offset`), inside the mapping.
    package let plane0: PlaneView
    package let plane1: PlaneView
    package let plane2: PlaneView
    // Retained; trivially destructible so `discard self` can hand it to a FrameBuffer.
    private let pool: Unmanaged<V4L2BufferPool>

    fileprivate init(
        index: Int, sequence: UInt32, timestamp: CaptureTime, flags: V4L2BufferFlags, field: V4L2Field,
        defect: V4L2BufferDefect, planeCount: Int, planes: (PlaneView, PlaneView, PlaneView),
        pool: V4L2BufferPool
    ) {
        self.index = index
        self.sequence = sequence
        self.timestamp = timestamp
        self.timestampClock = flags.timestampClock
        self.flags = flags
        self.field = field
        self.defect = defect
        self.planeCount = planeCount
        (plane0, plane1, plane2) = planes
        self.pool = Unmanaged.passRetained(pool)
    }

    deinit {
        let p = pool.takeRetainedValue()
        p.recycle(index: index)
    }

    package var metadata: FrameMetadata { FrameMetadata(sequence: sequence, timestamp: timestamp, bufferIndex: index) }

    /// Hands the buffer to a `FrameBuffer` that views the mapping (no copy) and requeues it
    /// when its last reference goes away.
    consuming func frameBuffer() -> FrameBuffer {
        let p = pool.takeRetainedValue()
        let f = p.format
        var image = ImageBuffer(
            pixelFormat: f.pixelFormat, width: f.width, height: f.height, colorRange: f.colorRange,
            plane0: plane0)
        image.planeCount = planeCount
        image.plane1 = plane1
        image.plane2 = plane2
        let frame = FrameBuffer(image: image, metadata: metadata, pool: p)
        discard self
        return frame
    }

    /// Gives the buffer back to the driver now (what dropping it does too).
    consuming func requeue() {}
}

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
