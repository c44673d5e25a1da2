// A V4L2 camera as a `VideoSource`: the object model's view of one open node.
import CaptureBackend
import CaptureSystem
#if canImport(Glibc)
import Glibc
#endif
internal import CV4L2Shim

/// An open V4L2 capture node that streams through an mmap buffer pool.
///
/// Threading: configuration from the session's lock; `nextFrame` from one capture thread;
/// `wakeUp` and frame recycling from any thread.
package final class V4L2VideoSource: VideoSource {
    package let info: SourceInfo
    package let device: V4L2Device
    private let queue: V4L2Queue
    private let wake: FileDescriptor
    /// Signalled when a holder queues a buffer back while the driver had none.
    private let requeued: FileDescriptor
    private let pool = Locked<V4L2BufferPool?>(nil)

    package init(device: V4L2Device, info: SourceInfo) throws(BackendError) {
        guard let type = device.bufferType else {
            throw BackendError.video(
                .notACamera(card: device.capability.card, nodeKind: device.capability.nodeKind), device.path,
                operation: "VIDIOC_QUERYCAP")
        }
        self.device = device
        self.info = info
        self.queue = V4L2Queue(fd: device.fd, type: type)
        self.wake = try FileDescriptor.eventFD(for: device.path)
        self.requeued = try FileDescriptor.eventFD(for: device.path)
    }

    deinit { stopStreaming() }

    package func formats() throws(BackendError) -> [SourceFormat] { try device.sourceFormats() }

    package func setFormat(pixelFormat: PixelFormat, width: Int, height: Int) throws(BackendError) -> ActiveFormat {
        // S_FMT answers EBUSY while the driver has buffers: a stopped stream whose frames an
        // output or the app still holds keeps them until they are let go (a reconfiguration of a
        // running session would fail). Orphan them first, as a new stream's start does.
        if pool.withLock({ $0 == nil }) { try queue.orphanStoppedBuffers() }
        return try device.setFormat(pixelFormat, width: width, height: height)
    }

    package func tryFormat(pixelFormat: PixelFormat, width: Int, height: Int) throws(BackendError) -> ActiveFormat {
        try device.tryFormat(pixelFormat, width: width, height: height)
    }

    package func currentFormat() throws(BackendError) -> ActiveFormat { try device.format() }

    package func setFrameInterval(_ interval: FrameInterval) throws(BackendError) -> FrameInterval {
        try device.setFrameInterval(interval)
    }

    package func frameInterval() throws(BackendError) -> FrameInterval {
        guard let i = try device.frameInterval() else {
            throw BackendError.video(.noFrameInterval, device.path, operation: "VIDIOC_G_PARM")
        }
        return i
    }

    package func controls() throws(BackendError) -> [SourceControl] { try device.controls() }
    package func controlValue(_ id: UInt32) throws(BackendError) -> Int64 { try device.controlValue(id) }
    package func setControlValue(_ id: UInt32, _ value: Int64) throws(BackendError) { try device.setControlValue(id, value) }

    package func startStreaming(bufferCount: Int) throws(BackendError) {
        try pool.withLock { p throws(BackendError) in
            guard p == nil else {
                throw BackendError.video(.alreadyStreaming, device.path, operation: "VIDIOC_STREAMON")
            }
            let format = try device.format()
            let started = try V4L2BufferPool.start(queue: queue, requestedCount: bufferCount, format: format)
            let requeued = self.requeued
            started.setRequeueHandler { requeued.signal() }
            p = started
        }
    }

    package func nextFrame(timeout: Duration) throws(BackendError) -> FrameEvent {
        guard let pool = pool.withLock({ $0 }) else {
            throw BackendError.video(.notStreaming, device.path, operation: "VIDIOC_DQBUF")
        }
        let clock = ContinuousClock()
        let deadline = clock.now.advanced(by: timeout)
        var errorWithoutFrame = false
        while true {
            // Stopped from another thread (STREAMOFF also wakes a poll in progress).
            guard pool.isStreaming else { return .interrupted }
            pool.requeuePending()
            if let buffer = try pool.dequeue() { return Self.event(buffer) }
            let now = clock.now
            if now >= deadline { return .timeout }
            let remaining = Self.milliseconds(now.duration(to: deadline))
            if pool.queuedCount == 0 || errorWithoutFrame {
                // Nothing queued: poll on the device would answer POLLERR at once. Wait until a
                // holder queues a buffer back (it signals `requeued`) or a wake-up; only a failed
                // QBUF waiting for its retry, or a POLLERR without a frame, waits in 10 ms slices.
                let slice = errorWithoutFrame || pool.pendingCount > 0 ? min(remaining, 10) : remaining
                errorWithoutFrame = false
                let (back, woke) = try requeued.poll(
                    events: Int16(POLLIN), other: wake.rawValue, timeoutMilliseconds: slice,
                    device: device.path)
                if woke & Int16(POLLIN) != 0 {
                    wake.drain()
                    return .interrupted
                }
                if back & Int16(POLLIN) != 0 { requeued.drain() }
                continue
            }
            let (events, woke) = try device.fd.poll(
                events: Int16(POLLIN | POLLPRI), other: wake.rawValue,
                timeoutMilliseconds: remaining)
            if woke & Int16(POLLIN) != 0 {
                wake.drain()
                return .interrupted
            }
            if events & Int16(POLLERR | POLLHUP | POLLNVAL) != 0 {
                // POLLERR alone is ambiguous: the next DQBUF's errno decides (ENODEV: gone,
                // EIO: fatal stream error); both throw from `dequeue`.
                if let buffer = try pool.dequeue() { return Self.event(buffer) }
                errorWithoutFrame = true
            }
        }
    }

    private static func event(_ buffer: consuming DequeuedBuffer) -> FrameEvent {
        if buffer.defect != .none {
            let sequence = buffer.sequence
            let reason = buffer.defect.reason
            buffer.requeue()
            return .corrupt(sequence: sequence, reason: reason)
        }
        return .frame(buffer.frameBuffer())
    }

    private static func milliseconds(_ d: Duration) -> Int32 {
        let (s, atto) = d.components
        let ms = s * 1000 + (atto + 999_999_999_999_999) / 1_000_000_000_000_000  // round up
        return Int32(clamping: max(0, ms))
    }

    package func wakeUp() { wake.signal() }

    package func stopStreaming() {
        let p = pool.withLock { p in
            defer { p = nil }
            return p
        }
        p?.stop()
    }

    package func checkAvailable() throws(BackendError) { try queue.checkAvailable() }

    package var bufferCount: Int { pool.withLock { $0?.count ?? 0 } }
    package var buffersHeldByClients: Int { pool.withLock { $0?.heldCount ?? 0 } }

    /// The running stream's pool (tests and diagnostics).
    package var activePool: V4L2BufferPool? { pool.withLock { $0 } }
}
