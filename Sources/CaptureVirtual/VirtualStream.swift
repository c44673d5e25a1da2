// A virtual camera's running stream: its buffer pool, its queue of filled buffers, its thread.
import CaptureImaging
import CaptureBackend
import CaptureSystem
#if canImport(Glibc)
import Glibc
#endif

/// The buffers of one stream. Outlives the stream while any `FrameBuffer` holds it, so held
/// frames stay readable after `stopStreaming`. State is guarded by the source's lock.
package final class VirtualBufferPool: BufferPool, @unchecked Sendable {
    package enum SlotState { case free, filling, done, held }
    package struct Slot {
        package var state = SlotState.free
        package var metadata = FrameMetadata(sequence: 0, timestamp: CaptureTime(nanoseconds: 0), bufferIndex: 0)
        package var bytesUsed = 0
        package var corrupt = false
    }

    package let signal: StreamCondition
    package let memory: [UnsafeMutableRawPointer]
    package let capacity: Int
    package var slots: [Slot]
    package var count: Int { memory.count }

    package init(signal: StreamCondition, count: Int, capacity: Int) {
        self.signal = signal
        self.capacity = capacity
        // Not cleared: a buffer is drawn whole before it is handed out, and its pages are taken
        // from the system only when first drawn into (as a driver's), so a stream that ends after
        // a frame or two (a still) costs one or two buffers of memory, not all of them.
        memory = (0..<count).map { _ in UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 64) }
        slots = Array(repeating: Slot(), count: count)
    }

    deinit { for p in memory { p.deallocate() } }

    package func recycle(index: Int) {
        signal.withLock { slots[index].state = .free }
    }

    /// A free buffer, lowest index first. Lock held.
    package func takeFree() -> Int? {
        for i in slots.indices where slots[i].state == .free {
            slots[i].state = .filling
            return i
        }
        return nil
    }

    package var hasFree: Bool { slots.contains { $0.state == .free } }
}

/// One running stream: its pool, its queue of filled buffers and its producer thread.
/// Fields are guarded by the source's lock except where noted.
package final class VirtualStream: @unchecked Sendable {
    package let camera: VirtualCamera
    package let generation: UInt64
    package let signal: StreamCondition
    package let mode: VirtualCamera.Mode
    package let format: ActiveFormat
    package let interval: FrameInterval
    package let pool: VirtualBufferPool

    package var stopping = false
    package var disconnected = false
    /// Filled buffers in capture order: a ring of buffer indices.
    private var queue: [Int]
    private var queueHead = 0
    private var queueCount = 0
    private var thread: pthread_t?

    /// The driver's frame counter (next sequence number to use).
    package var sequence: UInt32 = 0

    package init(
        camera: VirtualCamera, generation: UInt64, signal: StreamCondition, mode: VirtualCamera.Mode,
        interval: FrameInterval, bufferCount: Int
    ) throws(CaptureError) {
        self.camera = camera
        self.generation = generation
        self.signal = signal
        self.mode = mode
        self.interval = interval
        format = VirtualVideoSource.activeFormat(mode)
        let size = format.sizeImage
        pool = VirtualBufferPool(signal: signal, count: bufferCount, capacity: size)
        queue = Array(repeating: 0, count: bufferCount)
    }

    package func enqueue(_ index: Int) {
        queue[(queueHead + queueCount) % queue.count] = index
        queueCount += 1
    }

    package func dequeue() -> Int? {
        guard queueCount > 0 else { return nil }
        let i = queue[queueHead]
        queueHead = (queueHead + 1) % queue.count
        queueCount -= 1
        return i
    }

    /// Gives queued, undelivered buffers back to the pool (on stop). Lock held.
    package func discardQueued() {
        while let i = dequeue() { pool.slots[i].state = .free }
    }

    /// Starts the producer thread. Lock held by the caller; the thread waits for it.
    package func start() throws(CaptureError) {
        // The producer is built before the thread exists so set-up failures surface here.
        let producer = try FrameProducer(stream: self)
        let box = Unmanaged.passRetained(producer)
        var tid = pthread_t()
        let rc = pthread_create(
            &tid, nil,
            { arg in
                let producer = Unmanaged<FrameProducer>.fromOpaque(arg!).takeRetainedValue()
                NamedThread.nameCurrentThread("cap virtual")
                producer.run()
                return nil
            }, box.toOpaque())
        guard rc == 0 else {
            box.release()
            throw CaptureError(
                .driverError, "could not start the virtual camera's frame thread", errno: rc,
                operation: "pthread_create")
        }
        thread = tid
    }

    /// Waits for the producer thread to end. Call with the lock not held, after `stopping`.
    package func join() {
        if let t = thread {
            pthread_join(t, nil)
            thread = nil
        }
    }
}
