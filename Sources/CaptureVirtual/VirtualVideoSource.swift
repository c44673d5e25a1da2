import CaptureImaging
import CaptureBackend
import CaptureSystem
#if canImport(Glibc)
import Glibc
#endif

/// An opened virtual camera: the `VideoSource` the object model streams from, like
/// `V4L2VideoSource` for a `/dev/video` node.
///
/// A stream owns a fixed pool of buffers and one producer thread that wakes at each frame tick
/// (monotonic clock), takes a free buffer, draws the frame into it and queues it. The capture
/// thread dequeues with `nextFrame`; the `FrameBuffer` gives the buffer back when released.
/// With no free buffer at a tick the frame is lost and its sequence number skipped, as V4L2
/// drivers do.
///
/// Locking: one `StreamCondition` guards the source, its stream and its pool. Lock order is
/// that lock, then the camera's state mutex; the camera never takes this lock.
package final class VirtualVideoSource: VideoSource, @unchecked Sendable {
    package let camera: VirtualCamera
    package let info: SourceInfo
    private let generation: UInt64
    private let signal = StreamCondition()
    /// Serialises start and stop, so that two stops never join the producer twice.
    // (Its value is unused but not empty on purpose: see `Locked`.)
    private let lifecycle = Locked(0)

    // Guarded by `signal`.
    private var mode: VirtualCamera.Mode
    private var interval: FrameInterval
    private var stream: VirtualStream?
    private var wakePending = false

    package init(camera: VirtualCamera, generation: UInt64) {
        self.camera = camera
        self.generation = generation
        info = camera.info
        mode = camera.formats[0]
        interval = camera.formats[0].defaultInterval
    }

    deinit { stopStreaming() }

    /// Runs a protocol call. The virtual camera describes its own conditions (disconnect and
    /// busy as its public API documents them, injected faults): they travel to the object model
    /// as `.described` and keep their words.
    private func described<T: ~Copyable>(_ body: () throws(CaptureError) -> T) throws(BackendError) -> T {
        try BackendError.describing(device: info.path, kind: .video, body)
    }

    // MARK: Formats

    package func formats() throws(BackendError) -> [SourceFormat] {
        try described { () throws(CaptureError) -> [SourceFormat] in
            try camera.checkConnected(generation)
            return camera.formats.map { m in
                SourceFormat(
                    pixelFormat: m.pixelFormat, description: Self.describe(m.pixelFormat),
                    width: m.dimensions.width, height: m.dimensions.height,
                    intervals: FrameIntervalSet(kind: .discrete(m.intervals)),
                    isCompressed: m.pixelFormat.isCompressed, isEmulated: false)
            }
        }
    }

    package static func describe(_ f: PixelFormat) -> String {
        switch f {
        case .yuyv: "YUYV 4:2:2"
        case .uyvy: "UYVY 4:2:2"
        case .yvyu: "YVYU 4:2:2"
        case .vyuy: "VYUY 4:2:2"
        case .nv12: "Y/UV 4:2:0"
        case .nv21: "Y/VU 4:2:0"
        case .nv16: "Y/UV 4:2:2"
        case .nv61: "Y/VU 4:2:2"
        case .yuv420: "Planar YUV 4:2:0"
        case .yvu420: "Planar YVU 4:2:0"
        case .yuv422p: "Planar YUV 4:2:2"
        case .rgb24: "24-bit RGB 8-8-8"
        case .bgr24: "24-bit BGR 8-8-8"
        case .grey: "8-bit Greyscale"
        case .mjpeg: "Motion-JPEG"
        default: f.description
        }
    }

    /// The mode a request lands on: the asked pixel format (else the first mode's), at the
    /// nearest size; as a driver adjusts `S_FMT`.
    private func resolve(pixelFormat: PixelFormat, width: Int, height: Int) -> VirtualCamera.Mode {
        let all = camera.formats
        let format = all.contains { $0.pixelFormat == pixelFormat } ? pixelFormat : all[0].pixelFormat
        let candidates = all.filter { $0.pixelFormat == format }
        return candidates.min { a, b in
            abs(a.dimensions.width - width) + abs(a.dimensions.height - height)
                < abs(b.dimensions.width - width) + abs(b.dimensions.height - height)
        }!
    }

    package static func activeFormat(_ m: VirtualCamera.Mode) -> ActiveFormat {
        let w = m.dimensions.width, h = m.dimensions.height
        if m.pixelFormat == .mjpeg {
            return ActiveFormat(
                pixelFormat: .mjpeg, width: w, height: h,
                planes: [PlaneFormat(bytesPerLine: 0, sizeImage: MJPEGFrameEncoder.bufferSize(width: w, height: h))],
                colorRange: .full)
        }
        let layout = PatternLayout(m.pixelFormat)!
        return ActiveFormat(
            pixelFormat: m.pixelFormat, width: w, height: h,
            planes: [layout.planeFormat(width: w, height: h)], colorRange: layout.colorRange)
    }

    package func setFormat(pixelFormat: PixelFormat, width: Int, height: Int) throws(BackendError) -> ActiveFormat {
        try described { () throws(CaptureError) -> ActiveFormat in
            try camera.checkConnected(generation)
            return try signal.withLock { () throws(CaptureError) -> ActiveFormat in
                guard stream == nil else {
                    throw CaptureError(
                        .deviceBusy, "the virtual camera \"\(camera.name)\" is streaming; stop it before changing the format",
                        operation: "VIDIOC_S_FMT")
                }
                let m = resolve(pixelFormat: pixelFormat, width: width, height: height)
                mode = m
                // Keep the rate where the new mode has it, as drivers do; else its default.
                if !m.intervals.contains(interval) { interval = m.defaultInterval }
                return Self.activeFormat(m)
            }
        }
    }

    package func tryFormat(pixelFormat: PixelFormat, width: Int, height: Int) throws(BackendError) -> ActiveFormat {
        try described { () throws(CaptureError) -> ActiveFormat in
            try camera.checkConnected(generation)
            return Self.activeFormat(resolve(pixelFormat: pixelFormat, width: width, height: height))
        }
    }

    package func currentFormat() throws(BackendError) -> ActiveFormat {
        try described { () throws(CaptureError) -> ActiveFormat in
            try camera.checkConnected(generation)
            return signal.withLock { Self.activeFormat(mode) }
        }
    }

    package func setFrameInterval(_ requested: FrameInterval) throws(BackendError) -> FrameInterval {
        try described { () throws(CaptureError) -> FrameInterval in
            try camera.checkConnected(generation)
            return try signal.withLock { () throws(CaptureError) -> FrameInterval in
                guard stream == nil else {
                    throw CaptureError(
                        .deviceBusy, "the virtual camera \"\(camera.name)\" is streaming; stop it before changing the frame rate",
                        operation: "VIDIOC_S_PARM")
                }
                let want = requested.seconds
                let best = mode.intervals.min { abs($0.seconds - want) < abs($1.seconds - want) } ?? interval
                interval = best
                return best
            }
        }
    }

    package func frameInterval() throws(BackendError) -> FrameInterval {
        try described { () throws(CaptureError) -> FrameInterval in
            try camera.checkConnected(generation)
            return signal.withLock { interval }
        }
    }

    // MARK: Controls

    package func controls() throws(BackendError) -> [SourceControl] {
        try described { () throws(CaptureError) -> [SourceControl] in
            try camera.checkConnected(generation)
            return camera.controls()
        }
    }

    package func controlValue(_ id: UInt32) throws(BackendError) -> Int64 {
        try described { () throws(CaptureError) -> Int64 in
            try camera.checkConnected(generation)
            return try camera.controlValue(id)
        }
    }

    package func setControlValue(_ id: UInt32, _ value: Int64) throws(BackendError) {
        try described { () throws(CaptureError) in
            try camera.checkConnected(generation)
            try camera.setControlValue(id, value)
        }
    }

    // MARK: Streaming

    package func startStreaming(bufferCount: Int) throws(BackendError) {
        try described { () throws(CaptureError) in
            let result = lifecycle.withLock { _ -> Result<Void, CaptureError> in
                do throws(CaptureError) { try start(bufferCount: bufferCount); return .success(()) } catch { return .failure(error) }
            }
            try result.get()
        }
    }

    private func start(bufferCount: Int) throws(CaptureError) {
        try signal.withLock { () throws(CaptureError) in
            guard stream == nil else {
                throw CaptureError(.invalidState, "the virtual camera \"\(camera.name)\" is already streaming on this input")
            }
            try camera.claimStream(owner: ObjectIdentifier(self), signal: signal, generation: generation)
            do throws(CaptureError) {
                let s = try VirtualStream(
                    camera: camera, generation: generation, signal: signal, mode: mode,
                    interval: interval, bufferCount: min(32, max(2, bufferCount)))
                try s.start()
                stream = s
            } catch {
                camera.releaseStream(owner: ObjectIdentifier(self))
                throw error
            }
        }
    }

    package func nextFrame(timeout: Duration) throws(BackendError) -> FrameEvent {
        try described { () throws(CaptureError) -> FrameEvent in
            signal.lock()
            defer { signal.unlock() }
            guard let stream else {
                throw CaptureError(.invalidState, "the virtual camera \"\(camera.name)\" is not streaming")
            }
            let deadline = StreamCondition.time(.now(), plus: timeout)
            while true {
                if stream.disconnected {
                    throw VirtualCamera.disconnectedError(camera.name)
                }
                try camera.checkConnected(generation)
                // A stop from another thread also ends the wait.
                if wakePending || stream.stopping {
                    wakePending = false
                    return .interrupted
                }
                if let index = stream.dequeue() {
                    let pool = stream.pool
                    let slot = pool.slots[index]
                    if slot.corrupt {
                        pool.slots[index].state = .free
                        return .corrupt(
                            sequence: slot.metadata.sequence, reason: "the virtual camera flagged the frame as damaged (injected)")
                    }
                    pool.slots[index].state = .held
                    let image = ImageBuffer(
                        pixelFormat: stream.format.pixelFormat, width: stream.format.width,
                        height: stream.format.height, colorRange: stream.format.colorRange,
                        plane0: PlaneView(
                            base: UnsafeRawPointer(pool.memory[index]), count: slot.bytesUsed,
                            bytesPerLine: stream.format.planes[0].bytesPerLine))
                    return .frame(FrameBuffer(image: image, metadata: slot.metadata, pool: pool))
                }
                if CaptureTime.now().nanoseconds >= deadline.nanoseconds { return .timeout }
                signal.wait(until: deadline)
            }
        }
    }

    package func wakeUp() {
        signal.withLock { wakePending = true }
        signal.broadcast()
    }

    package func stopStreaming() {
        lifecycle.withLock { _ in stop() }
    }

    private func stop() {
        let s: VirtualStream? = signal.withLock {
            let s = stream
            s?.stopping = true
            return s
        }
        guard let s else { return }
        signal.broadcast()
        s.join()
        signal.withLock {
            s.discardQueued()
            stream = nil
        }
        camera.releaseStream(owner: ObjectIdentifier(self))
    }

    package func checkAvailable() throws(BackendError) {
        try described { () throws(CaptureError) in
            try camera.checkAvailable(owner: ObjectIdentifier(self), generation: generation)
        }
    }

    package var bufferCount: Int { signal.withLock { stream?.pool.count ?? 0 } }

    package var buffersHeldByClients: Int {
        signal.withLock { stream?.pool.slots.reduce(0) { $0 + ($1.state == .held ? 1 : 0) } ?? 0 }
    }

    package var nextSequenceNumber: UInt32? { signal.withLock { stream?.sequence } }
}

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
        memory = (0..<count).map { _ in
            let p = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 64)
            memset(p, 0, capacity)
            return p
        }
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

/// The producer thread's own state: renderer, encoder, and which buffers already hold the
/// static part of the picture. Only the producer thread touches it.
package final class FrameProducer: @unchecked Sendable {
    private let stream: VirtualStream
    private let layout: PatternLayout?
    private let encoder: MJPEGFrameEncoder?
    private var renderer: PatternRenderer
    private var version: UInt64
    private var rendered: [UInt64]

    package init(stream: VirtualStream) throws(CaptureError) {
        self.stream = stream
        let m = stream.mode
        let w = m.dimensions.width, h = m.dimensions.height
        if m.pixelFormat == .mjpeg {
            layout = nil
            encoder = MJPEGFrameEncoder(width: w, height: h, omitsHuffmanTables: m.omitsHuffmanTables)
        } else {
            layout = PatternLayout(m.pixelFormat)
            encoder = nil
        }
        let settings = stream.camera.patternSettings()
        version = settings.version
        renderer = PatternRenderer(
            width: w, height: h, range: stream.format.colorRange, kind: settings.kind,
            adjust: settings.adjust, label: settings.label)
        rendered = Array(repeating: .max, count: stream.pool.count)
    }

    package func run() {
        let s = stream, signal = s.signal, period = s.interval.duration
        signal.lock()
        var next = StreamCondition.time(.now(), plus: period)
        while !s.stopping {
            let now = CaptureTime.now()
            if now.nanoseconds < next.nanoseconds {
                signal.wait(until: next)
                continue
            }
            switch s.camera.tick(generation: s.generation, hasFreeBuffer: s.pool.hasFree, now: now) {
            case .disconnected:
                s.disconnected = true
                signal.broadcast()
                signal.unlock()
                return
            case .stalled(let until):
                if let until { signal.wait(until: until) } else { signal.wait() }
                next = StreamCondition.time(.now(), plus: period)
                continue
            case .produce(let drops, let corrupt, let damage):
                let sequence = s.sequence &+ UInt32(truncatingIfNeeded: drops)
                s.sequence = sequence &+ 1
                if let index = s.pool.takeFree() {
                    signal.unlock()
                    let timestamp = CaptureTime.now()
                    var used = draw(index: index, sequence: sequence)
                    if let damage, let u = used { used = spoil(index: index, used: u, damage, sequence: sequence) }
                    signal.lock()
                    let slot = VirtualBufferPool.Slot(
                        state: .done, metadata: FrameMetadata(sequence: sequence, timestamp: timestamp, bufferIndex: index),
                        bytesUsed: used ?? 0, corrupt: corrupt || used == nil)
                    s.pool.slots[index] = slot
                    s.enqueue(index)
                    signal.broadcast()
                }
            }
            // Next tick on the sensor's grid; after falling behind by more than a frame (slow
            // encode, descheduled), restart the grid instead of bursting.
            next = StreamCondition.time(next, plus: period)
            let late = CaptureTime.now()
            if late - next > Int64(s.interval.seconds * 1e9) { next = StreamCondition.time(late, plus: period) }
        }
        signal.unlock()
    }

    /// Applies an injected payload fault; returns the bytes used it leaves.
    private func spoil(index: Int, used: Int, _ damage: VirtualCamera.FrameDamage, sequence: UInt32) -> Int {
        let base = stream.pool.memory[index]
        switch damage {
        case .empty:
            return 0
        case .truncated:
            var n = used / 2
            // Never end on an EOI marker by chance.
            if n >= 2, base.load(fromByteOffset: n - 2, as: UInt8.self) == 0xFF,
                base.load(fromByteOffset: n - 1, as: UInt8.self) == 0xD9
            {
                n -= 1
            }
            return n
        case .scrambledHeader:
            // xorshift noise after the first two bytes (SOI for MJPEG); allocation-free.
            var x = UInt64(sequence) &* 0x9E37_79B9_7F4A_7C15 | 1
            // MJPEG: the header region; raw: the counter rows, which the next frame redraws.
            let rows = PatternGeometry(width: stream.format.width, height: stream.format.height).counterRows
            let span = encoder != nil ? 1024 : rows * stream.format.planes[0].bytesPerLine
            for i in 2..<max(2, min(used, span)) {
                x ^= x << 13; x ^= x >> 7; x ^= x << 17
                base.storeBytes(of: UInt8(truncatingIfNeeded: x), toByteOffset: i, as: UInt8.self)
            }
            return used
        }
    }

    /// Draws frame `sequence` into buffer `index`; returns the bytes used, nil if encoding
    /// failed (the frame then goes out flagged corrupt).
    private func draw(index: Int, sequence: UInt32) -> Int? {
        let settings = stream.camera.patternSettings()
        if settings.version != version {
            version = settings.version
            renderer = PatternRenderer(
                width: stream.format.width, height: stream.format.height,
                range: stream.format.colorRange, kind: settings.kind, adjust: settings.adjust,
                label: settings.label)
        }
        let base = stream.pool.memory[index]
        if let encoder {
            return try? encoder.encode(
                renderer: renderer, version: version, sequence: sequence, into: base,
                capacity: stream.pool.capacity)
        }
        let canvas = PatternCanvas(base: base, width: stream.format.width, height: stream.format.height, layout: layout!)
        if rendered[index] != version {
            renderer.drawBackground(canvas)
            rendered[index] = version
        }
        renderer.drawFrame(canvas, sequence: sequence)
        return stream.format.sizeImage
    }
}
