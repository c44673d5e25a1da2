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
