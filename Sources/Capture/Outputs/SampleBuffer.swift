import Foundation

/// One captured sample: a video frame or a block of audio, with its timing.
///
/// A video sample buffer is a zero-copy view of the driver's buffer: while you hold it, that
/// buffer stays out of the driver's queue (as in AVFoundation). Release it promptly; a caller
/// that keeps every buffer sees drops with reason `.outOfBuffers`. Safe to pass between threads.
///
/// Video sample buffers are reused: once nobody holds a sample any more, the session gives its
/// driver buffer back and may hand the same object out again for a later frame. Keep a strong
/// reference for as long as you use a sample (a `weak` or `unowned` one may later show another frame).
public final class SampleBuffer: @unchecked Sendable {
    enum Kind {
        case video(ImageBuffer, ActiveFormat)
        case audio(AudioPCMBuffer)
        case jpeg(Data, VideoDimensions)
        /// A video sample whose frame went back to the driver (seen only through a weak reference).
        case empty
    }
    private struct Contents: ~Copyable {
        var kind: Kind
        var timestamp: CaptureTime
        var sequence: UInt64
        /// The driver buffer a video sample holds; nil once given back (or for other samples).
        var lease: FrameBuffer?
    }
    // Written only while the writer holds the sole reference (refill, reclaim); the lock makes
    // that hand-over between threads explicit.
    private let contents: Locked<Contents>

    /// `.video` or `.audio`.
    public let mediaType: MediaType

    init(frame: consuming FrameBuffer, format: ActiveFormat) {
        let image = frame.image, meta = frame.metadata
        contents = Locked(Contents(kind: .video(image, format), timestamp: meta.timestamp, sequence: UInt64(meta.sequence),
                                  lease: consume frame))
        mediaType = .video
    }

    init(jpeg: Data, dimensions: VideoDimensions, metadata: FrameMetadata) {
        contents = Locked(Contents(kind: .jpeg(jpeg, dimensions), timestamp: metadata.timestamp,
                                  sequence: UInt64(metadata.sequence), lease: nil))
        mediaType = .video
    }

    init(audio: AudioPCMBuffer, timestamp: CaptureTime, firstFrame: UInt64) {
        contents = Locked(Contents(kind: .audio(audio), timestamp: timestamp, sequence: firstFrame, lease: nil))
        mediaType = .audio
    }

    /// Reuses a video sample for a new frame. Only for the holder of the sole reference.
    func refill(with frame: consuming FrameBuffer, format: ActiveFormat) {
        let image = frame.image, meta = frame.metadata
        var incoming: FrameBuffer? = consume frame
        contents.withLock { c in
            c.kind = .video(image, format)
            c.timestamp = meta.timestamp
            c.sequence = UInt64(meta.sequence)
            c.lease = incoming.take()
        }
    }

    /// Reuses a still sample for new JPEG bytes. Only for the holder of the sole reference.
    func refill(jpeg: Data, dimensions: VideoDimensions, metadata: FrameMetadata) {
        contents.withLock { c in
            c.kind = .jpeg(jpeg, dimensions)
            c.timestamp = metadata.timestamp
            c.sequence = UInt64(metadata.sequence)
        }
    }

    /// Gives the driver buffer back now. Only for the holder of the sole reference.
    func releaseFrame() {
        let lease: FrameBuffer? = contents.withLock { c in
            let l = c.lease.take()
            c.kind = .empty
            return l
        }
        _ = consume lease
    }

    var kind: Kind { contents.withLock { $0.kind } }

    /// When the sample was captured, on the monotonic clock shared by video and audio.
    public var presentationTimeStamp: CaptureTime { contents.withLock { $0.timestamp } }
    /// The driver's frame sequence number (video), or the running frame count of the first
    /// audio frame in this buffer (audio).
    public var sequenceNumber: UInt64 { contents.withLock { $0.sequence } }

    // MARK: Video

    /// Pixel format of a video sample; nil for audio.
    public var pixelFormat: PixelFormat? {
        switch kind {
        case .video(let image, _): return image.pixelFormat
        case .jpeg: return .jpeg
        case .audio, .empty: return nil
        }
    }
    /// Dimensions of a video sample; nil for audio.
    public var dimensions: VideoDimensions? {
        switch kind {
        case .video(let image, _): return VideoDimensions(width: image.width, height: image.height)
        case .jpeg(_, let d): return d
        case .audio, .empty: return nil
        }
    }
    /// Number of planes (1 for packed and single-buffer formats).
    public var planeCount: Int {
        switch kind {
        case .video(let image, _): return image.planeCount
        case .jpeg: return 1
        case .audio, .empty: return 0
        }
    }
    /// Bytes per row of a plane (0 for compressed formats).
    public func bytesPerRow(plane: Int = 0) -> Int {
        if case .video(let image, _) = kind, plane < image.planeCount { return image.plane(plane).bytesPerLine }
        return 0
    }
    /// Whether the pixels use the full 0-255 range.
    public var colorRange: ColorRange? {
        if case .video(let image, _) = kind { return image.colorRange }
        return nil
    }

    /// Calls `body` with the bytes of one plane, straight from the driver's buffer (no copy).
    /// The pointer is valid only inside `body`.
    public func withUnsafeBytes<R>(plane: Int = 0, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        switch kind {
        case .video(let image, _):
            defer {
                contents.withLock { _ in }
                withExtendedLifetime(self) {}
            }
            return try body(plane < image.planeCount ? image.plane(plane).bytes : UnsafeRawBufferPointer(start: nil, count: 0))
        case .audio(let a):
            return try a.data.withUnsafeBytes(body)
        case .jpeg(let d, _):
            return try d.withUnsafeBytes(body)
        case .empty:
            return try body(UnsafeRawBufferPointer(start: nil, count: 0))
        }
    }

    /// A copy of the bytes of one plane (video) or of the samples (audio).
    public func data(plane: Int = 0) -> Data { withUnsafeBytes(plane: plane) { Data($0) } }

    /// The JPEG bytes of a still taken by `CaptureStillImageOutput`; nil for other samples.
    public var jpegData: Data? {
        if case .jpeg(let d, _) = kind { return d }
        return nil
    }

    // MARK: Audio

    /// The audio of an audio sample; nil for video.
    public var audioBuffer: AudioPCMBuffer? {
        if case .audio(let a) = kind { return a }
        return nil
    }

    // MARK: Internal access to the pixels

    /// The raw image of a video sample (nil for stills and audio). Its planes are valid while
    /// this sample is held; read them inside `withVideoImage`.
    var videoImage: ImageBuffer? {
        if case .video(let image, _) = kind { return image }
        return nil
    }
    /// The format the device delivered a video sample in.
    var videoFormat: ActiveFormat? {
        if case .video(_, let f) = kind { return f }
        return nil
    }
    /// Sequence, timestamp and buffer index of a video sample.
    var videoMetadata: FrameMetadata? {
        contents.withLock { c in
            guard case .video = c.kind else { return nil }
            return FrameMetadata(sequence: UInt32(truncatingIfNeeded: c.sequence), timestamp: c.timestamp,
                                 bufferIndex: c.lease?.metadata.bufferIndex ?? -1)
        }
    }

    /// Runs `body` with the raw image of a video sample (nil for other samples), keeping the
    /// sample, and so the driver buffer, alive meanwhile.
    func withVideoImage<R, E: Error>(_ body: (ImageBuffer?) throws(E) -> R) throws(E) -> R {
        let image = videoImage
        // The reads in `body` come before any later reuse of this sample (which takes the lock).
        defer {
            contents.withLock { _ in }
            withExtendedLifetime(self) {}
        }
        return try body(image)
    }
}

/// Reusable video sample buffers, one per buffer index of a pool, so that handing a frame out
/// allocates nothing once every index was seen. A sample comes back when nobody else holds it:
/// `reclaim()` finds those and gives their buffers back (each exactly once, by consuming the
/// frame). Not thread-safe: one thread (a capture thread, an output's queue) owns it.
final class SampleBufferPool {
    private var slots: [SampleBuffer?] = []
    /// Indices whose samples are handed out.
    private var lent: [Int] = []

    init(capacity: Int = 8) {
        slots.reserveCapacity(capacity)
        lent.reserveCapacity(capacity)
    }

    /// Samples handed out and not yet reclaimed.
    var lentCount: Int { lent.count }
    /// Whether the sample of buffer `index` is handed out (call `reclaim` first for news).
    func isLent(_ index: Int) -> Bool { lent.contains(index) }

    /// A sample holding `frame`: the one of its buffer index when free, else a new one.
    func wrap(_ frame: consuming FrameBuffer, format: ActiveFormat) -> SampleBuffer {
        let i = frame.metadata.bufferIndex
        guard i >= 0 else { return SampleBuffer(frame: frame, format: format) }
        if i >= slots.count { slots.append(contentsOf: repeatElement(nil, count: i + 1 - slots.count)) }
        if let at = lent.firstIndex(of: i) {
            // The index came back while its sample is still out: a pool whose indices are not
            // exclusive (replayed frames). A held sample is left to its holder.
            lent.remove(at: at)
            if isKnownUniquelyReferenced(&slots[i]) { slots[i]?.releaseFrame() } else { slots[i] = nil }
        }
        if isKnownUniquelyReferenced(&slots[i]), let s = slots[i] {
            s.refill(with: frame, format: format)
        } else {
            slots[i] = SampleBuffer(frame: frame, format: format)
        }
        lent.append(i)
        return slots[i]!
    }

    /// Gives back the buffers of samples nobody holds any more; returns how many are still held.
    @discardableResult
    func reclaim() -> Int {
        var k = 0
        while k < lent.count {
            let i = lent[k]
            if isKnownUniquelyReferenced(&slots[i]) {
                slots[i]?.releaseFrame()
                lent.swapAt(k, lent.count - 1)
                lent.removeLast()
            } else {
                k += 1
            }
        }
        return lent.count
    }

    /// Lets go of every sample: held ones now belong to their holders alone and give their
    /// buffers back when released. For the end of a stream.
    func abandon() {
        slots.removeAll()
        lent.removeAll()
    }
}

/// Reused sample buffers for JPEG bytes (video data output in JPEG mode, stills): one is taken when nobody holds it
/// any more, its bytes rewritten in place (see `StillEncoding.store`). Thread-safe.
final class JPEGSampleRing: @unchecked Sendable {
    private struct Slot {
        var sample: SampleBuffer?
        var storage = Data()
    }
    private let slots: Locked<[Slot]>

    init(count: Int) { slots = Locked(Array(repeating: Slot(), count: max(1, count))) }

    /// A sample holding a copy of `jpeg`, or nil when the app holds every one.
    func sample(copying jpeg: UnsafeRawBufferPointer, dimensions: VideoDimensions, metadata: FrameMetadata) -> SampleBuffer? {
        slots.withLock { slots in
            for i in slots.indices {
                if slots[i].sample == nil {
                    let bytes = StillEncoding.store(jpeg, in: &slots[i].storage)
                    let s = SampleBuffer(jpeg: bytes, dimensions: dimensions, metadata: metadata)
                    slots[i].sample = s
                    return s
                }
                guard isKnownUniquelyReferenced(&slots[i].sample) else { continue }
                let s = slots[i].sample!
                // The sample lets go of the old bytes first, so that they are the slot's alone.
                s.refill(jpeg: Data(), dimensions: dimensions, metadata: metadata)
                s.refill(jpeg: StillEncoding.store(jpeg, in: &slots[i].storage), dimensions: dimensions, metadata: metadata)
                return s
            }
            return nil
        }
    }
}

/// The kind of media a device captures or an output accepts.
public enum MediaType: String, Sendable, Hashable, CaseIterable {
    case video
    case audio
}
