package import CFFmpeg
import Capture
import Foundation

/// Storage for frames a consumer (the recorder, an H.264 stage that keeps every frame) is behind
/// on, so that the camera's buffers (and the JPEG rings' samples) go back at once and no other
/// output of the session loses a frame to a slow encoder.
///
/// A frame is copied once, on the delivering thread, into a reused slot: raw frames and JPEG
/// bytes as they are (a memcpy; a YUYV frame is converted for H.264 later, on the recording
/// queue, as before). An H.264 writer encodes an NV12 or I420 copy straight from the slot (its
/// buffer is an `AVBufferRef`, so x264 reads it where it lies): the one copy of that frame. Slots are made as
/// the backlog first needs them, up to about a second of frames within `byteBudget`, and reused;
/// beyond that the frame is lost to the recorder alone (`.frameWasLate`).
///
/// Thread-safe: `detach` runs on the delivering thread, `buffer(containing:)` on the recording
/// queue, `recycle` wherever the last hold of a copy goes.
package final class DetachedFrames: @unchecked Sendable {
    /// At most this many bytes of copies.
    package let byteBudget: Int
    /// At most this many copies (about a second of frames at the usual rates).
    package let maxFrames: Int
    private let lock = NSLock()
    private var pool: SlotPool?
    private var leases = FrameLeasePool(capacity: 32)

    package init(byteBudget: Int = 96 << 20, maxFrames: Int = 30) {
        self.byteBudget = byteBudget
        self.maxFrames = maxFrames
    }

    /// A copy of `sample` in a slot, as a lease with one hold; nil when every slot the budget
    /// allows is taken.
    package func detach(_ sample: SampleBuffer) -> SampleBuffer? {
        lock.lock()
        defer { lock.unlock() }
        guard let pixelFormat = sample.pixelFormat, let dims = sample.dimensions else { return nil }
        if pixelFormat == .jpeg {
            let count = sample.withUnsafeBytes { $0.count }
            // Room for any JPEG of this size (4:4:4 at top quality stays well below).
            let capacity = max(count, dims.width * dims.height * 2 + 65536)
            guard let (pool, index) = slot(bytes: capacity, key: .init(pixelFormat: .jpeg, width: dims.width, height: dims.height)),
                count <= pool.byteCount
            else { return nil }
            let base = pool.base(index)
            sample.withUnsafeBytes { b in if let s = b.baseAddress { base.copyMemory(from: s, byteCount: b.count) } }
            var image = ImageBuffer(
                pixelFormat: .jpeg, width: dims.width, height: dims.height, colorRange: .full,
                plane0: PlaneView(base: UnsafeRawPointer(base), count: count, bytesPerLine: 0))
            image.planeCount = 1
            return wrap(image, sample, pool, index)
        }
        return sample.withVideoImage { (image: ImageBuffer?) -> SampleBuffer? in
            guard let image else { return nil }
            // As it is, each plane after the one before with its own row pitch (a memcpy; a
            // conversion the consumer makes stays on its queue, off the delivering thread).
            let planes = max(1, min(3, image.planeCount))
            var total = 0
            for p in 0..<planes { total += (image.plane(p).count + 63) & ~63 }
            guard
                let (pool, index) = slot(bytes: total, key: .init(pixelFormat: image.pixelFormat, width: image.width, height: image.height))
            else { return nil }
            let base = pool.base(index)
            var out = image
            var at = 0
            for p in 0..<planes {
                let src = image.plane(p)
                if let s = src.base { (base + at).copyMemory(from: s, byteCount: src.count) }
                let view = PlaneView(base: UnsafeRawPointer(base + at), count: src.count, bytesPerLine: src.bytesPerLine)
                switch p {
                case 0: out.plane0 = view
                case 1: out.plane1 = view
                default: out.plane2 = view
                }
                at += (src.count + 63) & ~63
            }
            return wrap(out, sample, pool, index)
        }
    }

    /// The slot buffer `pointer` lies in (for an encoder to read the copy where it lies), or nil.
    package func buffer(containing pointer: UnsafeRawPointer) -> UnsafeMutablePointer<AVBufferRef>? {
        lock.lock()
        defer { lock.unlock() }
        return pool?.buffer(containing: pointer)
    }

    private func wrap(_ image: ImageBuffer, _ sample: SampleBuffer, _ pool: SlotPool, _ index: Int) -> SampleBuffer {
        let meta = FrameMetadata(
            sequence: UInt32(truncatingIfNeeded: sample.sequenceNumber), timestamp: sample.presentationTimeStamp,
            bufferIndex: index)
        return leases.wrap(FrameBuffer(image: image, metadata: meta, pool: pool), format: pool.format(for: image))
    }

    /// A free slot of at least `bytes` for frames of `key` (a new pool when the frames changed).
    private func slot(bytes: Int, key: SlotPool.Key) -> (SlotPool, Int)? {
        if let p = pool, p.key != key || p.byteCount < bytes {
            pool = nil
            // The old pool's slots go when the last copy in one does.
            leases = FrameLeasePool(capacity: 32)
        }
        if pool == nil {
            let count = max(2, min(maxFrames, byteBudget / max(1, bytes)))
            pool = SlotPool(key: key, byteCount: bytes, capacity: count)
        }
        guard let p = pool, let i = p.take() else { return nil }
        return (p, i)
    }
}

/// Slots of one size, made when first needed (`av_buffer_alloc`, so an encoder can take a
/// reference), given back by `recycle`.
private final class SlotPool: BufferPool, @unchecked Sendable {
    struct Key: Hashable {
        var pixelFormat: PixelFormat
        var width: Int
        var height: Int
    }
    let key: Key
    let byteCount: Int
    let capacity: Int
    private let lock = NSLock()
    private var slots: [UnsafeMutablePointer<AVBufferRef>] = []
    private var free: [Int] = []
    private var formatCache: ActiveFormat?

    init(key: Key, byteCount: Int, capacity: Int) {
        self.key = key
        self.byteCount = byteCount
        self.capacity = capacity
        slots.reserveCapacity(capacity)
        free.reserveCapacity(capacity)
    }

    deinit {
        // A reference an encoder still holds keeps its slot's bytes until it lets go.
        for s in slots {
            var ref: UnsafeMutablePointer<AVBufferRef>? = s
            av_buffer_unref(&ref)
        }
    }

    func base(_ i: Int) -> UnsafeMutableRawPointer { lock.withLock { UnsafeMutableRawPointer(slots[i].pointee.data!) } }

    /// A free slot whose bytes no encoder still reads; a new one while under `capacity`.
    func take() -> Int? {
        lock.withLock {
            if let at = free.lastIndex(where: { av_buffer_get_ref_count(slots[$0]) == 1 }) {
                return free.remove(at: at)
            }
            guard slots.count < capacity, let ref = av_buffer_alloc(byteCount) else { return nil }
            slots.append(ref)
            return slots.count - 1
        }
    }

    func recycle(index: Int) { lock.withLock { free.append(index) } }

    func buffer(containing pointer: UnsafeRawPointer) -> UnsafeMutablePointer<AVBufferRef>? {
        lock.withLock {
            slots.first { s in
                guard let d = s.pointee.data else { return false }
                return pointer >= UnsafeRawPointer(d) && pointer < UnsafeRawPointer(d + byteCount)
            }
        }
    }

    /// The format of copies like `image` (made once: it holds an array).
    func format(for image: ImageBuffer) -> ActiveFormat {
        lock.withLock {
            if let f = formatCache, f.pixelFormat == image.pixelFormat, f.width == image.width, f.height == image.height,
                f.planes.first?.bytesPerLine == image.plane0.bytesPerLine
            {
                return f
            }
            let planes = (0..<max(1, image.planeCount)).map {
                PlaneFormat(bytesPerLine: image.plane($0).bytesPerLine, sizeImage: image.plane($0).count)
            }
            let f = ActiveFormat(
                pixelFormat: image.pixelFormat, width: image.width, height: image.height, planes: planes,
                colorRange: image.colorRange)
            formatCache = f
            return f
        }
    }
}
