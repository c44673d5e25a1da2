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
