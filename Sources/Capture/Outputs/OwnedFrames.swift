import CaptureBackend
import CaptureSystem

/// Frames the video data output makes itself (converted to another pixel format, or turned),
/// in buffers it owns: a pool of four per kind, handed out as frame leases whose buffer comes
/// back when the last holder lets go. Used under the output's `conversion` lock.
final class OwnedFrames {
    /// What the made frames look like.
    struct Shape: Equatable {
        var pixelFormat: PixelFormat
        var width: Int
        var height: Int
        var colorRange: ColorRange
        var bytesPerLine: Int
        var byteCount: Int
        var frameInterval: FrameInterval?
    }

    private var pool: ConvertedBufferPool?
    /// The format of the frames made, kept so that a frame does not allocate its plane list.
    private var format: (shape: Shape, active: ActiveFormat)?
    private let leases = FrameLeasePool(capacity: 4)

    /// A frame lease of `shape`, `fill` writing its bytes, with `metadata`'s sequence and time.
    /// Throws what `fill` throws, or `.invalidState` when the app holds every buffer.
    func make(
        _ shape: Shape, metadata: FrameMetadata, fill: (UnsafeMutableRawBufferPointer) throws(CaptureError) -> Void
    ) throws(CaptureError) -> SampleBuffer {
        if pool?.byteCount != shape.byteCount {
            leases.abandon()
            pool = ConvertedBufferPool(byteCount: shape.byteCount, count: 4)
        }
        guard let pool, let index = pool.take() else {
            throw CaptureError(.invalidState, "every buffer of the output's own frames is held by the app")
        }
        let buffer = pool.buffer(index)
        do {
            try fill(buffer)
        } catch {
            pool.recycle(index: index)
            throw error
        }
        var image = ImageBuffer(
            pixelFormat: shape.pixelFormat, width: shape.width, height: shape.height, colorRange: shape.colorRange,
            plane0: PlaneView(base: UnsafeRawPointer(buffer.baseAddress), count: shape.byteCount, bytesPerLine: shape.bytesPerLine))
        image.planeCount = 1
        var meta = metadata
        meta.bufferIndex = index
        let active: ActiveFormat
        if let f = format, f.shape == shape {
            active = f.active
        } else {
            var f = ActiveFormat(
                pixelFormat: shape.pixelFormat, width: shape.width, height: shape.height,
                planes: [PlaneFormat(bytesPerLine: shape.bytesPerLine, sizeImage: shape.byteCount)], colorRange: shape.colorRange)
            f.frameInterval = shape.frameInterval
            active = f
            format = (shape, f)
        }
        return leases.wrap(FrameBuffer(image: image, metadata: meta, pool: pool), format: active)
    }
}

/// Buffers the video data output converts frames into; a frame's buffer comes back when the
/// last hold on its lease goes back.
final class ConvertedBufferPool: BufferPool, @unchecked Sendable {
    let byteCount: Int
    private let storage: [UnsafeMutableRawBufferPointer]
    private let free: Locked<[Int]>

    init(byteCount: Int, count: Int) {
        self.byteCount = byteCount
        storage = (0..<count).map { _ in UnsafeMutableRawBufferPointer.allocate(byteCount: byteCount, alignment: 64) }
        free = Locked(Array(0..<count))
    }
    deinit { for b in storage { b.deallocate() } }

    func take() -> Int? { free.withLock { $0.popLast() } }
    func buffer(_ i: Int) -> UnsafeMutableRawBufferPointer { storage[i] }
    func recycle(index: Int) { free.withLock { $0.append(index) } }
}
