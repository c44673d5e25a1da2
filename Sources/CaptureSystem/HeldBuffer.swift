import Synchronization

/// Bytes handed to several holders at once and reused once they all let go: the explicit count
/// of holds, and storage that grows only for more bytes than ever before (no copy, no allocation
/// per refill in steady state). The pieces that share encoded frames keep their bytes in one:
/// the codecs' units and audio packets, the server's multipart parts, `/stream.mp4`'s fragments
/// (each made once by its pool, so the buffer's own allocation is once too).
///
/// Filled by its owner (a stage, a pool) only while nobody holds it; read and held on any thread
/// (`hold()`/`letGo()` are atomic); the bytes are fixed while anyone holds it.
package final class HeldBuffer: @unchecked Sendable {
    private let holds = Atomic<Int>(0)
    /// The storage (nil until the first fill).
    package private(set) var base: UnsafeMutableRawPointer?
    package private(set) var capacity = 0
    /// Bytes in use, from `base`.
    package private(set) var count = 0

    /// Empty; the storage comes with the first fill (or `capacity` bytes now).
    package init(capacity: Int = 0) {
        if capacity > 0 { reserve(capacity) }
    }

    deinit { base?.deallocate() }

    /// Keeps it past the call it came in; each hold needs its `letGo()`. Any thread.
    package func hold() { holds.wrappingAdd(1, ordering: .relaxed) }
    /// Gives a hold back; its owner refills it once none is left. Any thread.
    package func letGo() { holds.wrappingSubtract(1, ordering: .releasing) }
    /// Whether anyone holds it (the owner's test before it refills it).
    package var isHeld: Bool { holds.load(ordering: .acquiring) > 0 }

    /// The bytes in use, valid inside `body`.
    package func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try body(UnsafeRawBufferPointer(start: base, count: count))
    }

    /// Storage for at least `bytes` bytes, for the owner to write into (then `setCount`). It grows
    /// (at least doubling) only past the largest ever asked for; what it held is not kept. Owner, while nobody holds it.
    @discardableResult
    package func reserve(_ bytes: Int) -> UnsafeMutableRawPointer {
        if let base, capacity >= bytes { return base }
        base?.deallocate()
        capacity = max(bytes, capacity * 2, 64)
        let b = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 16)
        base = b
        return b
    }

    /// Says how many bytes the owner wrote (at most what it reserved). Owner, while nobody holds it.
    package func setCount(_ bytes: Int) {
        precondition(bytes <= capacity, "more bytes than reserved")
        count = bytes
    }

    /// Copies `bytes` in. Owner, while nobody holds it.
    package func store(_ bytes: UnsafeRawBufferPointer) {
        let b = reserve(bytes.count)
        if let src = bytes.baseAddress, bytes.count > 0 { b.copyMemory(from: src, byteCount: bytes.count) }
        count = bytes.count
    }
}
