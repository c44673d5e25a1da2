// The producer thread of a virtual stream: draws (and spoils, when asked) each frame into a buffer.
import CaptureImaging
import CaptureBackend
import CaptureSystem
#if canImport(Glibc)
import Glibc
#endif

/// The producer thread's own state: renderer, encoder, and which buffers already hold the
/// static part of the picture. Only the producer thread touches it.
package final class FrameProducer: @unchecked Sendable {
    private let stream: VirtualStream
    private let layout: PatternLayout?
    private let encoder: MJPEGFrameEncoder?
    private var renderer: PatternRenderer
    private var version: UInt64
    private var rendered: [UInt64]
    /// The picture's frame (raw bytes or a JPEG) for `version`, when the camera shows one.
    private var pictureFrame: [UInt8]?

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
        pictureFrame = try Self.renderPicture(settings, stream: stream)
    }

    /// The picture's frame for these settings, or nil when the camera shows the pattern.
    private static func renderPicture(
        _ settings: (
            kind: TestPatternKind, adjust: PatternColor.Adjustments, label: String?, version: UInt64, timeCode: Bool,
            picture: VirtualCamera.Picture?, fit: VirtualCamera.PictureFit
        ),
        stream: VirtualStream
    ) throws(CaptureError) -> [UInt8]? {
        guard let picture = settings.picture else { return nil }
        let m = stream.mode
        return try PictureRenderer.render(
            picture, fit: settings.fit, adjust: settings.adjust, width: m.dimensions.width, height: m.dimensions.height,
            pixelFormat: m.pixelFormat, range: stream.format.colorRange, omitsHuffmanTables: m.omitsHuffmanTables)
    }

    package func run() {
        let s = stream, signal = s.signal, period = s.interval.duration
        signal.lock()
        // The first frame at once, as a sensor already running gives it (a still taken right
        // after start waits for no frame interval); the next ones on the rate's grid.
        var next = CaptureTime.now()
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
            pictureFrame = try? Self.renderPicture(settings, stream: stream)
            rendered = Array(repeating: .max, count: rendered.count)
        }
        let base = stream.pool.memory[index]
        if settings.picture != nil {
            // Whole frames each time: what a fault spoiled never stays.
            guard let frame = pictureFrame, frame.count <= stream.pool.capacity else { return nil }
            frame.withUnsafeBytes { _ = memcpy(base, $0.baseAddress!, frame.count) }
            return frame.count
        }
        // (Taken as the frame is drawn, just before its capture time is.)
        let timeCode = settings.timeCode ? Self.wallClockMilliseconds() : nil
        if let encoder {
            return try? encoder.encode(
                renderer: renderer, version: version, sequence: sequence, timeCode: timeCode, into: base,
                capacity: stream.pool.capacity)
        }
        let canvas = PatternCanvas(base: base, width: stream.format.width, height: stream.format.height, layout: layout!)
        if rendered[index] != version {
            renderer.drawBackground(canvas)
            rendered[index] = version
        }
        renderer.drawFrame(canvas, sequence: sequence, timeCode: timeCode)
        return stream.format.sizeImage
    }

    /// `CLOCK_REALTIME` in milliseconds, modulo 2^32: the time code's value.
    private static func wallClockMilliseconds() -> UInt32 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return UInt32(truncatingIfNeeded: Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000)
    }
}
