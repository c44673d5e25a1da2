import CaptureVirtual
import CaptureImaging
import CaptureBackend
import CaptureSystem
import Foundation
import Synchronization

/// One captured sample: a video frame or a block of audio, with its timing.
///
/// A video sample buffer is a zero-copy view of the driver's buffer: while you hold it, that
/// buffer stays out of the driver's queue (as in AVFoundation). When the last holder of a frame
/// (your sample, an encoder, another output) lets go, its buffer goes back to the driver at once,
/// on that holder's thread. Release samples promptly; a caller that keeps every buffer sees drops
/// with reason `.outOfBuffers`. Immutable for its holders; safe to pass between threads.
///
/// Video sample buffers are reused: a sample the delegate did not keep beyond its callback is
/// given back at once and may be handed out again for a later frame. Keep a strong reference for
/// as long as you use a sample. A sample seen through a `weak` reference is never reused for
/// another frame (a video frame's weak reference becomes nil once the callback returns).
public final class SampleBuffer: @unchecked Sendable {
    enum Kind {
        case video(ImageBuffer, ActiveFormat)
        case audio(AudioPCMBuffer)
        case jpeg(Data, VideoDimensions)
        /// A view kept for reuse between two frames (nobody outside the library can reach it:
        /// views with weak or unowned references are not reused).
        case empty
    }
    private struct Contents: ~Copyable {
        var kind: Kind
        var timestamp: CaptureTime
        var sequence: UInt64
        /// The driver buffer of a frame lease; nil once given back (or for other samples).
        var lease: FrameBuffer?
        /// The lease a view holds one hold on (views only).
        var viewed: SampleBuffer?
    }
    // Written only while the writer holds the sole reference or the sole hold (refill, release);
    // the lock makes that hand-over between threads explicit.
    private let contents: Locked<Contents>
    /// Holds on the driver buffer of a frame lease (see `hold`); unused by other samples.
    private let holds = Atomic<Int>(0)

    /// `.video` or `.audio`.
    public let mediaType: MediaType

    /// A frame lease for `frame` with one hold, the caller's (dropping the sample gives it back too).
    package init(frame: consuming FrameBuffer, format: ActiveFormat) {
        let image = frame.image, meta = frame.metadata
        contents = Locked(
            Contents(
                kind: .video(image, format), timestamp: meta.timestamp, sequence: UInt64(meta.sequence),
                lease: consume frame, viewed: nil))
        holds.store(1, ordering: .relaxed)
        mediaType = .video
    }

    /// A view of `lease` for an app: it takes a hold, given back when the view goes or is reused.
    init(viewing lease: SampleBuffer) {
        let c = lease.viewContents()
        contents = Locked(Contents(kind: c.kind, timestamp: c.timestamp, sequence: c.sequence, lease: nil, viewed: lease))
        mediaType = .video
    }

    init(jpeg: Data, dimensions: VideoDimensions, metadata: FrameMetadata) {
        contents = Locked(
            Contents(
                kind: .jpeg(jpeg, dimensions), timestamp: metadata.timestamp,
                sequence: UInt64(metadata.sequence), lease: nil, viewed: nil))
        mediaType = .video
    }

    init(audio: AudioPCMBuffer, timestamp: CaptureTime, firstFrame: UInt64) {
        contents = Locked(Contents(kind: .audio(audio), timestamp: timestamp, sequence: firstFrame, lease: nil, viewed: nil))
        mediaType = .audio
    }

    deinit {
        // A view nobody holds any more: its hold goes back (the buffer too, if it was the last).
        let viewed = contents.withLock { $0.viewed.take() }
        viewed?.release()
    }

    // MARK: Frame leases

    /// Adds a hold on this frame lease: its driver buffer stays out until every hold is released.
    /// For holders inside the library that keep a frame beyond the call that gave it (a queue,
    /// an encoder); each `hold` is paired with exactly one `release`. Any thread.
    func hold() { holds.wrappingAdd(1, ordering: .relaxed) }

    /// Gives one hold back; the last one gives the driver buffer back at once, on this thread.
    /// A no-op for samples that are not frame leases (JPEG, audio). Any thread.
    package func release() {
        guard holds.wrappingSubtract(1, ordering: .acquiringAndReleasing).newValue == 0 else { return }
        let frame: FrameBuffer? = contents.withLock { $0.lease.take() }
        _ = consume frame
    }

    /// A hold of the caller's own on the frame this sample shows, for a consumer inside the
    /// package that keeps the frame beyond its callback (a preview's newest frame): it keeps the
    /// lease, not the view, so the view is reused and nothing is allocated per frame. The hold
    /// goes back when the `HeldFrame` ends.
    package func heldFrame() -> HeldFrame {
        if let lease = contents.withLock({ $0.viewed }) {
            lease.hold()
            return HeldFrame(sample: lease, holds: true)
        }
        if isFrameLease {
            hold()
            return HeldFrame(sample: self, holds: true)
        }
        return HeldFrame(sample: self, holds: false)
    }

    /// Whether a `weak` or `unowned` reference to this sample exists (the runtime's counts
    /// start at 1). Such a sample is never reused for another frame.
    var hasWeakOrUnownedReferences: Bool { _getWeakRetainCount(self) > 1 || _getUnownedRetainCount(self) > 1 }

    /// Whether this is a frame lease whose buffer is still out (held).
    var isFrameLease: Bool { contents.withLock { $0.lease != nil } }

    /// Whether this is a view of a frame lease.
    var isView: Bool { contents.withLock { $0.viewed != nil } }

    /// Whether nobody holds this lease and its buffer went back, so that it may be refilled (the
    /// last `release` counts down before it gives the buffer back).
    var isUnheld: Bool { holds.load(ordering: .acquiring) <= 0 && contents.withLock { $0.lease == nil } }

    /// What a view copies of its lease, and the view's hold.
    private func viewContents() -> (kind: Kind, timestamp: CaptureTime, sequence: UInt64) {
        hold()
        return contents.withLock { ($0.kind, $0.timestamp, $0.sequence) }
    }

    /// Reuses a view for another lease. Only for the holder of the sole reference.
    func refill(viewing lease: SampleBuffer) {
        let c = lease.viewContents()
        let old = contents.withLock { v in
            v.kind = c.kind
            v.timestamp = c.timestamp
            v.sequence = c.sequence
            let old = v.viewed
            v.viewed = lease
            return old
        }
        old?.release()
    }

    /// Ends a view: its hold goes back now. Only for the holder of the sole reference.
    func endView() {
        let old = contents.withLock { v in
            v.kind = .empty
            return v.viewed.take()
        }
        old?.release()
    }

    /// Reuses an unheld frame lease for a new frame, with one hold, the caller's. Only for its pool.
    func refill(with frame: consuming FrameBuffer, format: ActiveFormat) {
        let image = frame.image, meta = frame.metadata
        var incoming: FrameBuffer? = consume frame
        // (An unheld lease has given its buffer back: `isUnheld` checks both.)
        contents.withLock { c in
            c.kind = .video(image, format)
            c.timestamp = meta.timestamp
            c.sequence = UInt64(meta.sequence)
            c.lease = incoming.take()
        }
        holds.store(1, ordering: .releasing)
    }

    /// Reuses a still sample for new JPEG bytes. Only for the holder of the sole reference.
    func refill(jpeg: Data, dimensions: VideoDimensions, metadata: FrameMetadata) {
        contents.withLock { c in
            c.kind = .jpeg(jpeg, dimensions)
            c.timestamp = metadata.timestamp
            c.sequence = UInt64(metadata.sequence)
        }
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
    package var videoImage: ImageBuffer? {
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
            return FrameMetadata(
                sequence: UInt32(truncatingIfNeeded: c.sequence), timestamp: c.timestamp,
                bufferIndex: c.lease?.metadata.bufferIndex ?? -1)
        }
    }

    /// Runs `body` with the raw image of a video sample (nil for other samples), keeping the
    /// sample, and so the driver buffer, alive meanwhile.
    package func withVideoImage<R, E: Error>(_ body: (ImageBuffer?) throws(E) -> R) throws(E) -> R {
        let image = videoImage
        // The reads in `body` come before any later reuse of this sample (which takes the lock).
        defer {
            contents.withLock { _ in }
            withExtendedLifetime(self) {}
        }
        return try body(image)
    }
}

/// One hold on a frame (see `SampleBuffer.heldFrame()`), given back exactly once, when it ends.
package struct HeldFrame: ~Copyable, @unchecked Sendable {
    /// The frame: a lease (or a JPEG sample, which needs no hold). Read it while this lives.
    package let sample: SampleBuffer
    private let holds: Bool

    fileprivate init(sample: SampleBuffer, holds: Bool) {
        self.sample = sample
        self.holds = holds
    }

    deinit { if holds { sample.release() } }
}

/// Frame leases, one per buffer index of a pool, reused so that handing a frame out allocates
/// nothing once every index was seen. `wrap` gives a lease with one hold, the caller's; a lease is
/// refilled only once every hold on it went back (which gave its buffer back, so the driver can
/// return that index). Not thread-safe: one thread (a capture thread, an output's queue) owns it.
package final class FrameLeasePool {
    private var slots: [SampleBuffer?] = []

    package init(capacity: Int = 8) { slots.reserveCapacity(capacity) }

    /// A lease holding `frame`, with one hold: the one of its buffer index when unheld, else a new one.
    package func wrap(_ frame: consuming FrameBuffer, format: ActiveFormat) -> SampleBuffer {
        let i = frame.metadata.bufferIndex
        guard i >= 0 else { return SampleBuffer(frame: frame, format: format) }
        if i >= slots.count { slots.append(contentsOf: repeatElement(nil, count: i + 1 - slots.count)) }
        if let s = slots[i], s.isUnheld {
            s.refill(with: frame, format: format)
            return s
        }
        // First use of the index, or an index that came back while its lease is still held (a
        // pool whose indices are not exclusive, as replayed frames): the held one is its holders'.
        let s = SampleBuffer(frame: frame, format: format)
        slots[i] = s
        return s
    }

    /// Whether the lease of buffer `index` is held by someone.
    package func isHeld(_ index: Int) -> Bool { index < slots.count && slots[index].map { !$0.isUnheld } == true }

    /// Lets go of every lease: held ones belong to their holders alone and give their buffers
    /// back when the last hold goes. For the end of a stream.
    func abandon() { slots.removeAll() }
}

/// Reused views of frame leases, for handing frames to an app: a view takes a hold on its lease;
/// `settle` gives it back at once when the app did not keep the view, so the buffer goes back the
/// moment the callback returns. A view the app keeps belongs to the app; its hold goes back when
/// the app lets go of it (`SampleBuffer.deinit`). Not thread-safe: one queue (or lock) owns it.
final class SampleViewPool {
    private var spare: [SampleBuffer] = []
    private let limit: Int

    init(limit: Int = 4) {
        self.limit = limit
        spare.reserveCapacity(limit)
    }

    /// A view of `lease` (which must be held by the caller meanwhile).
    func view(of lease: SampleBuffer) -> SampleBuffer {
        guard let v = spare.popLast() else { return SampleBuffer(viewing: lease) }
        v.refill(viewing: lease)
        return v
    }

    /// After a view was handed out: `view` is this pool's last reference to it. Unless somebody
    /// else kept it, its hold goes back now and it is kept for reuse.
    func settle(_ view: inout SampleBuffer?) {
        guard view != nil else { return }
        // (A JPEG sample handed out instead of a view is left as it is.)
        if isKnownUniquelyReferenced(&view!), view!.isView {
            let v = view!
            view = nil
            // A view the app still sees through a weak or unowned reference is not reused (that
            // reference would show another frame): dropping it here gives its hold back and
            // turns the weak reference nil.
            guard !v.hasWeakOrUnownedReferences else { return }
            v.endView()
            if spare.count < limit { spare.append(v) }
        } else {
            view = nil
        }
    }
}

/// Reused sample buffers for JPEG bytes (JPEG stages, MJPEG completion, stills): a sample is
/// reused once nobody else references it, its bytes written in place by the producer (an encoder
/// writes straight into it), so handing a JPEG out costs no copy and, in steady state, no
/// allocation. Thread-safe: several producers may write at once (each into its own sample).
package final class JPEGSampleRing: @unchecked Sendable {
    private struct Slot {
        var sample: SampleBuffer?
        /// The bytes a sample shows a prefix of; out of the slot while its producer writes them.
        var storage = Data()
    }
    private let slots: Locked<[Slot]>

    package init(count: Int) { slots = Locked(Array(repeating: Slot(), count: max(1, count))) }

    /// A sample whose bytes `write` fills (up to `capacity` bytes, returning how many it wrote),
    /// or nil when others hold every sample. `write` runs outside the ring's lock.
    package func sample<E: Error>(
        capacity: Int, dimensions: VideoDimensions, metadata: FrameMetadata,
        write: (UnsafeMutableRawBufferPointer) throws(E) -> Int
    ) throws(E) -> SampleBuffer? {
        var storage = Data()
        let reserved: (index: Int, sample: SampleBuffer)? = slots.withLock { slots in
            for i in slots.indices {
                if slots[i].sample == nil {
                    let s = SampleBuffer(jpeg: Data(), dimensions: dimensions, metadata: metadata)
                    slots[i].sample = s
                    storage = slots[i].storage.take()
                    return (i, s)
                }
                // Referenced by the ring alone: free. (While a producer writes one, it holds a
                // reference too, so nobody else picks it.)
                guard isKnownUniquelyReferenced(&slots[i].sample) else { continue }
                if slots[i].sample!.hasWeakOrUnownedReferences {
                    // Someone still sees it weakly: it keeps its bytes, and the slot a new sample
                    // (the storage with it, since the old sample shares it).
                    let s = SampleBuffer(jpeg: Data(), dimensions: dimensions, metadata: metadata)
                    slots[i].sample = s
                    slots[i].storage = Data()
                    return (i, s)
                }
                let s = slots[i].sample!
                // The sample lets go of its old bytes, so that the storage is the slot's alone
                // and is written in place, not copied.
                s.refill(jpeg: Data(), dimensions: dimensions, metadata: metadata)
                // Moved, not copied: a second reference would make the write below copy it.
                storage = slots[i].storage.take()
                return (i, s)
            }
            return nil
        }
        guard let reserved else { return nil }
        // Grows (doubling, as copies of varying size ask) only for more than ever before; steady
        // state allocates nothing.
        if storage.count < capacity { storage = Data(count: max(capacity, storage.count * 2)) }
        // (`withUnsafeMutableBytes` rethrows untyped errors: the typed one is carried out.)
        let result: Result<Int, E> = storage.withUnsafeMutableBytes { raw in
            Result { () throws(E) -> Int in try write(UnsafeMutableRawBufferPointer(rebasing: raw[0..<capacity])) }
        }
        guard case .success(let written) = result else {
            slots.withLock { $0[reserved.index].storage = storage }
            if case .failure(let error) = result { throw error }
            return nil
        }
        reserved.sample.refill(jpeg: storage[0..<written], dimensions: dimensions, metadata: metadata)
        slots.withLock { $0[reserved.index].storage = storage }
        return reserved.sample
    }

    /// A sample holding a copy of `jpeg`, or nil when others hold every sample.
    package func sample(copying jpeg: UnsafeRawBufferPointer, dimensions: VideoDimensions, metadata: FrameMetadata) -> SampleBuffer? {
        sample(capacity: jpeg.count, dimensions: dimensions, metadata: metadata) { (out: UnsafeMutableRawBufferPointer) -> Int in
            if let src = jpeg.baseAddress, !jpeg.isEmpty { out.baseAddress!.copyMemory(from: src, byteCount: jpeg.count) }
            return jpeg.count
        }
    }
}

extension Data {
    /// The value, leaving an empty one behind (so that the taker holds the only reference).
    fileprivate mutating func take() -> Data {
        let d = self
        self = Data()
        return d
    }
}
