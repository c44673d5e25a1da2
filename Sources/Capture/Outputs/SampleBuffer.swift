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
/// Each frame is handed out as a sample of its own (a small object, as AVFoundation makes a
/// `CMSampleBuffer` per frame), which holds the frame until you let go of it: the library learns
/// that you did from the sample's end, never by asking the runtime, so a sample you keep is
/// never rewritten, and one you keep only through a `weak` reference ends when the callback
/// returns. The driver buffers under the samples are reused.
public final class SampleBuffer: @unchecked Sendable {
    enum Kind {
        case video(ImageBuffer, ActiveFormat)
        case audio(AudioPCMBuffer)
        case jpeg(Data, VideoDimensions)
    }
    /// What a sample is to the library, fixed when it is made. Leases and JPEG slots are reused
    /// from explicit hand-back (their count of holds); an app only ever sees their face.
    private enum Role {
        /// Holds a driver (or owned) buffer until its last hold goes; reused by a `FrameLeasePool`.
        case lease
        /// A `JPEGSampleRing`'s bytes; the ring reuses it once its last hold goes.
        case jpegSlot
        /// What an app is handed for a lease or a slot, one per hand-out: holds it once until the
        /// face ends.
        case face
        /// Holds nothing (audio, a JPEG of its own).
        case plain
    }
    private struct Contents: ~Copyable {
        var kind: Kind
        var timestamp: CaptureTime
        var sequence: UInt64
        /// The driver buffer of a frame lease; nil once given back (or for other samples).
        var lease: FrameBuffer?
    }
    // Written only while the writer holds the sole hold (refill, release); the lock makes that
    // hand-over between threads explicit. A face has none of its own (`contents`).
    private let ownContents: Locked<Contents>?
    /// A face's lease or slot, held once by the face until it ends; nil for other samples.
    private let viewed: SampleBuffer?
    /// What this sample shows: a face shows its lease's or slot's, which cannot change while the
    /// face holds it (they are refilled only once unheld), so a face costs one object, no lock.
    private var contents: Locked<Contents> { (viewed ?? self).ownContents! }
    /// Holds on a lease or a JPEG slot (see `hold`); unused by other samples.
    private let holds = Atomic<Int>(0)
    private let role: Role

    /// `.video` or `.audio`.
    public let mediaType: MediaType

    /// A frame lease for `frame` with one hold, the caller's (dropping the sample gives it back too).
    package init(frame: consuming FrameBuffer, format: ActiveFormat) {
        let image = frame.image, meta = frame.metadata
        ownContents = Locked(
            Contents(
                kind: .video(image, format), timestamp: meta.timestamp, sequence: UInt64(meta.sequence),
                lease: consume frame))
        viewed = nil
        holds.store(1, ordering: .relaxed)
        role = .lease
        mediaType = .video
    }

    /// A JPEG of its own (`slot`: a `JPEGSampleRing`'s, with one hold, the ring's caller's).
    init(jpeg: Data, dimensions: VideoDimensions, metadata: FrameMetadata, slot: Bool = false) {
        ownContents = Locked(
            Contents(
                kind: .jpeg(jpeg, dimensions), timestamp: metadata.timestamp,
                sequence: UInt64(metadata.sequence), lease: nil))
        viewed = nil
        if slot { holds.store(1, ordering: .relaxed) }
        role = slot ? .jpegSlot : .plain
        mediaType = .video
    }

    /// A face showing `viewed`'s frame; the caller gave it a hold of its own for the face.
    private init(faceOf viewed: SampleBuffer) {
        ownContents = nil
        self.viewed = viewed
        role = .face
        mediaType = .video
    }

    init(audio: AudioPCMBuffer, timestamp: CaptureTime, firstFrame: UInt64) {
        ownContents = Locked(Contents(kind: .audio(audio), timestamp: timestamp, sequence: firstFrame, lease: nil))
        viewed = nil
        role = .plain
        mediaType = .audio
    }

    deinit {
        // A face's last holder let go (the app, or the library after the callback): its hold goes
        // back (the buffer too, if it was the last).
        viewed?.release()
    }

    // MARK: Frame leases and JPEG slots

    /// Whether holds count: leases and slots (a face holds its lease; other samples hold nothing).
    private var isHeldByCount: Bool { role == .lease || role == .jpegSlot }

    /// Adds a hold on this frame lease or JPEG slot: a lease's driver buffer stays out, and a
    /// slot is not rewritten, until every hold is released. For holders inside the library that
    /// keep a frame beyond the call that gave it (a queue, an encoder); each `hold` is paired
    /// with exactly one `release`. A no-op for other samples. Any thread.
    package func hold() {
        guard isHeldByCount else { return }
        holds.wrappingAdd(1, ordering: .relaxed)
    }

    /// Gives one hold back; a lease's last one gives the driver buffer back at once, on this
    /// thread, and a slot's lets its ring reuse it. A no-op for other samples. Any thread.
    package func release() {
        guard isHeldByCount, holds.wrappingSubtract(1, ordering: .acquiringAndReleasing).newValue == 0,
            role == .lease
        else { return }
        let frame: FrameBuffer? = contents.withLock { $0.lease.take() }
        _ = consume frame
    }

    /// A hold of the caller's own on the frame this sample shows, for a consumer inside the
    /// package that keeps the frame beyond its callback (a preview's newest frame): it keeps the
    /// lease or slot, not the face, so that nothing is allocated per frame. The hold goes back
    /// when the `HeldFrame` ends.
    package func heldFrame() -> HeldFrame {
        if let owner = viewed {
            owner.hold()
            return HeldFrame(sample: owner, holds: true)
        }
        if isHeldByCount {
            hold()
            return HeldFrame(sample: self, holds: true)
        }
        return HeldFrame(sample: self, holds: false)
    }

    /// Whether this is a frame lease whose buffer is still out (held).
    var isFrameLease: Bool { role == .lease && contents.withLock { $0.lease != nil } }

    /// Whether this is a face (what an app is handed for a lease or slot).
    var isView: Bool { role == .face }

    /// Whether nobody holds this lease and its buffer went back, so that it may be refilled (the
    /// last `release` counts down before it gives the buffer back).
    var isUnheld: Bool { holds.load(ordering: .acquiring) <= 0 && contents.withLock { $0.lease == nil } }

    /// Takes an unheld JPEG slot for its ring, with one hold, the ring's caller's.
    fileprivate func takeUnheldSlot() -> Bool {
        role == .jpegSlot && holds.compareExchange(expected: 0, desired: 1, ordering: .acquiringAndReleasing).exchanged
    }

    // MARK: Faces

    /// What an app is handed for this sample: for a lease or a slot, a new face showing its frame
    /// with a hold of its own, given back when the face ends (when its last holder, the app or the
    /// library, lets go: explicit hand-back through `deinit`, no question to the runtime); other
    /// samples are their own. One small allocation per hand-out, as a `CMSampleBuffer` is; the
    /// lease, the slot and their buffers are reused. The caller holds this sample meanwhile.
    /// Any thread.
    func handOut() -> SampleBuffer {
        guard isHeldByCount else { return self }
        // The face's hold (this sample is held by the caller, so it cannot go back meanwhile).
        hold()
        return SampleBuffer(faceOf: self)
    }

    /// The lease or slot a face shows (nil for other samples).
    var faceOwner: SampleBuffer? { viewed }

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

    /// Reuses a JPEG slot for new bytes. Only for its ring's caller, which holds it alone.
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
        case .audio: return nil
        }
    }
    /// Dimensions of a video sample; nil for audio.
    public var dimensions: VideoDimensions? {
        switch kind {
        case .video(let image, _): return VideoDimensions(width: image.width, height: image.height)
        case .jpeg(_, let d): return d
        case .audio: return nil
        }
    }
    /// Number of planes: a planar format's colour planes, as ``imageBuffer`` counts them (2 for
    /// NV12 and NV16, 3 for I420, YV12 and 4:2:2 planar, wherever the driver put them); 1 for a
    /// packed or compressed format (the picture); 0 for audio.
    public var planeCount: Int {
        switch kind {
        case .video(let image, _): return Self.colourPlaneCount(image)
        case .jpeg: return 1
        case .audio: return 0
        }
    }
    /// Bytes per row of a plane (0 for compressed formats and past the last plane).
    public func bytesPerRow(plane: Int = 0) -> Int {
        if case .video(let image, _) = kind, let p = Self.colourPlane(image, plane) { return p.bytesPerRow }
        return 0
    }
    /// Whether the pixels use the full 0-255 range.
    public var colorRange: ColorRange? {
        if case .video(let image, _) = kind { return image.colorRange }
        return nil
    }

    /// Calls `body` with the bytes of one plane, straight from the driver's buffer (no copy):
    /// of a planar format, one colour plane from its first row to the end of its last row's
    /// samples (Cb before Cr, as ``imageBuffer``); otherwise the whole picture. Empty past the
    /// last plane. The pointer is valid only inside `body`.
    public func withUnsafeBytes<R>(plane: Int = 0, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        switch kind {
        case .video(let image, _):
            defer {
                contents.withLock { _ in }
                withExtendedLifetime(self) {}
            }
            return try body(Self.colourPlane(image, plane)?.bytes ?? UnsafeRawBufferPointer(start: nil, count: 0))
        case .audio(let a):
            return try a.data.withUnsafeBytes(body)
        case .jpeg(let d, _):
            return try d.withUnsafeBytes(body)
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

/// Reused JPEG slots (JPEG stages, MJPEG completion, stills): a slot's bytes are written in place
/// by the producer (an encoder writes straight into it), so handing a JPEG out costs no copy and,
/// in steady state, no allocation. A slot is reused once its last hold went back: the producer's,
/// given with it, and those its consumers took (an app sees its face, which holds it once).
/// Thread-safe: several producers may write at once (each into its own slot).
package final class JPEGSampleRing: @unchecked Sendable {
    private struct Slot {
        var sample: SampleBuffer?
        /// The bytes a slot shows a prefix of; out of the slot while its producer writes them.
        var storage = Data()
    }
    private let slots: Locked<[Slot]>

    package init(count: Int) { slots = Locked(Array(repeating: Slot(), count: max(1, count))) }

    /// A slot whose bytes `write` fills (up to `capacity` bytes, returning how many it wrote),
    /// with one hold, the caller's: give it back (`release()`) once the slot is handed on. Nil
    /// when others hold every slot. `write` runs outside the ring's lock.
    package func sample<E: Error>(
        capacity: Int, dimensions: VideoDimensions, metadata: FrameMetadata,
        write: (UnsafeMutableRawBufferPointer) throws(E) -> Int
    ) throws(E) -> SampleBuffer? {
        var storage = Data()
        let reserved: (index: Int, sample: SampleBuffer)? = slots.withLock { slots in
            for i in slots.indices {
                let s: SampleBuffer
                if let old = slots[i].sample {
                    // Held (by a consumer, its producer, or a face an app kept): not ours.
                    guard old.takeUnheldSlot() else { continue }
                    // It lets go of its old bytes, so that the storage is the slot's alone and
                    // is written in place, not copied.
                    old.refill(jpeg: Data(), dimensions: dimensions, metadata: metadata)
                    s = old
                } else {
                    s = SampleBuffer(jpeg: Data(), dimensions: dimensions, metadata: metadata, slot: true)
                    slots[i].sample = s
                }
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
            reserved.sample.release()
            if case .failure(let error) = result { throw error }
            return nil
        }
        reserved.sample.refill(jpeg: storage[0..<written], dimensions: dimensions, metadata: metadata)
        slots.withLock { $0[reserved.index].storage = storage }
        return reserved.sample
    }

    /// A slot holding a copy of `jpeg`, with one hold, the caller's; nil when others hold every slot.
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

extension SampleBuffer {
    /// Colour planes of `image` (see ``planeCount``): from its layout for a format the imaging
    /// layer reads, else the driver's memory planes as they are.
    fileprivate static func colourPlaneCount(_ image: ImageBuffer) -> Int {
        guard !image.pixelFormat.isCompressed, let layout = try? ImageLayout(image) else { return image.planeCount }
        switch layout.kind {
        case .semiPlanar: return 2
        case .planar: return 3
        default: return 1
        }
    }

    /// Colour plane `i` of `image`: its bytes and bytes per row; nil past the last plane.
    fileprivate static func colourPlane(_ image: ImageBuffer, _ i: Int) -> (bytes: UnsafeRawBufferPointer, bytesPerRow: Int)? {
        guard i >= 0 else { return nil }
        guard !image.pixelFormat.isCompressed, let layout = try? ImageLayout(image) else {
            return i < image.planeCount ? (image.plane(i).bytes, image.plane(i).bytesPerLine) : nil
        }
        let w = layout.width, h = layout.height, cw = layout.chromaWidth, ch = layout.chromaHeight
        func plane(_ p: UnsafeRawPointer?, stride: Int, rows: Int, rowBytes: Int) -> (UnsafeRawBufferPointer, Int)? {
            p.map { (UnsafeRawBufferPointer(start: $0, count: stride * (rows - 1) + rowBytes), stride) }
        }
        switch (layout.kind, i) {
        case (.semiPlanar, 0), (.planar, 0): return plane(layout.y, stride: layout.yStride, rows: h, rowBytes: w)
        case (.semiPlanar, 1): return plane(layout.cb, stride: layout.cbStride, rows: ch, rowBytes: 2 * cw)
        case (.planar, 1): return plane(layout.cb, stride: layout.cbStride, rows: ch, rowBytes: cw)
        case (.planar, 2): return plane(layout.cr, stride: layout.crStride, rows: ch, rowBytes: cw)
        case (.semiPlanar, _), (.planar, _): return nil
        default: return i == 0 ? (image.plane0.bytes, image.plane0.bytesPerLine) : nil
        }
    }
}
