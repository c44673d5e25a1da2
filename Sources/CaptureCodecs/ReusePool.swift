import CaptureSystem

/// What a stage hands to its consumers and reuses once the last holder let go (an H.264 unit,
/// an audio packet).
protocol Reusable: AnyObject {
    init()
    /// No one holds it.
    var isFree: Bool { get }
    func hold()
}

/// The reusable items of one stage: a free one is taken again; more are made only while
/// consumers hold every one. Used by the stage's thread alone.
final class ReusePool<Item: Reusable> {
    private var items: [Item] = []
    private var next = 0

    init() { items.reserveCapacity(64) }

    /// A free item, with one hold (the stage's, while it fills and delivers it).
    func take() -> Item {
        // Round the ring from after the last one taken: the oldest are the likeliest free.
        for k in 0..<items.count {
            let item = items[(next + k) % items.count]
            if item.isFree {
                next = (next + k + 1) % items.count
                item.hold()
                return item
            }
        }
        let item = Item()
        items.append(item)
        item.hold()
        return item
    }
}

/// Bytes a stage hands to every consumer and reuses (an H.264 unit, an audio packet): refilled
/// only once every holder let go (explicit holds, no copies), so the bytes are fixed while
/// anyone holds them. Filled by the stage's thread; read and held on any.
package class HeldBytes: Reusable, @unchecked Sendable {
    private let buffer = HeldBuffer()

    required init() {}

    package var count: Int { buffer.count }
    /// The bytes, valid inside `body`.
    package func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R { try buffer.withUnsafeBytes(body) }
    /// Keeps it past the call it came in; each hold needs its `letGo()`. Any thread.
    package func hold() { buffer.hold() }
    /// Gives a hold back; the stage reuses it once none is left. Any thread.
    package func letGo() { buffer.letGo() }
    var isFree: Bool { !buffer.isHeld }
    /// Copies `bytes` in. Stage's thread, while free.
    func store(_ bytes: UnsafeRawBufferPointer) { buffer.store(bytes) }
}
