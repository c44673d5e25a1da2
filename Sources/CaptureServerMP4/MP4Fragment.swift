import Capture
import CaptureCodecs
import CaptureSystem

/// One frame as every `/stream.mp4` client sends it after its own moof: an mdat box with the
/// access unit's NAL units, each after its 4-byte length (the parameter sets and access unit
/// delimiters left out: they are in the init segment). Made once per frame for all clients, in a
/// buffer that is reused once nobody holds it (the ring, a client sending it). Read-only for its
/// holders; written by the pool only while nobody holds it. Guarded by the routes' lock.
final class MP4Fragment: @unchecked Sendable {
    /// The mdat's bytes and their holders.
    private let buffer: HeldBuffer
    private(set) var time = CaptureTime(nanoseconds: 0)
    private(set) var isKey = false
    /// The frame's nominal duration in `MP4Boxes.timescale` ticks.
    private(set) var duration: UInt32 = 3000

    init(capacity: Int) { buffer = HeldBuffer(capacity: max(capacity, 4096)) }

    func hold() { buffer.hold() }
    func letGo() { buffer.letGo() }
    var isHeld: Bool { buffer.isHeld }
    /// The mdat box, valid inside `body`.
    func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R { try buffer.withUnsafeBytes(body) }
    /// The sample's size (the mdat's payload).
    var sampleSize: Int { buffer.count - MP4Boxes.mdatHeaderSize }

    /// Rewrites the fragment from `unit`. Only while nobody holds it.
    func fill(_ unit: H264AccessUnit) {
        unit.withUnsafeBytes { annexB in
            var needed = MP4Boxes.mdatHeaderSize
            MP4Boxes.forEachNAL(annexB) { nal in if Self.keeps(nal) { needed += 4 + nal.count } }
            let base = buffer.reserve(needed)
            let out = UnsafeMutableRawBufferPointer(start: base, count: needed)
            out.storeBytes(of: UInt32(needed).bigEndian, toByteOffset: 0, as: UInt32.self)
            out.storeBytes(of: UInt32(0x6D64_6174).bigEndian, toByteOffset: 4, as: UInt32.self)  // "mdat"
            var p = MP4Boxes.mdatHeaderSize
            MP4Boxes.forEachNAL(annexB) { nal in
                guard Self.keeps(nal) else { return }
                out.storeBytes(of: UInt32(nal.count).bigEndian, toByteOffset: p, as: UInt32.self)
                if let src = nal.baseAddress { (base + p + 4).copyMemory(from: src, byteCount: nal.count) }
                p += 4 + nal.count
            }
            buffer.setCount(needed)
        }
        time = unit.presentationTimeStamp
        isKey = unit.isKeyFrame
        let i = unit.frameInterval
        duration = UInt32(clamping: MP4Boxes.timescale * UInt64(max(1, i.numerator)) / UInt64(max(1, i.denominator)))
    }

    /// Whether a NAL unit goes into the mdat: not SPS (7), PPS (8) or an access unit delimiter (9).
    private static func keeps(_ nal: UnsafeRawBufferPointer) -> Bool {
        guard let first = nal.first else { return false }
        let type = first & 0x1F
        return type != 7 && type != 8 && type != 9
    }
}

/// Reused fragments: one nobody holds is refilled, so that steady streaming allocates nothing.
/// Not thread-safe: used under the routes' lock.
struct MP4FragmentPool {
    private var fragments: [MP4Fragment] = []
    let limit: Int

    init(limit: Int) { self.limit = limit }

    mutating func take(_ unit: H264AccessUnit) -> MP4Fragment {
        var chosen = fragments.first { !$0.isHeld }
        if chosen == nil {
            let f = MP4Fragment(capacity: unit.count + 1024)
            if fragments.count < limit { fragments.append(f) }
            chosen = f
        }
        chosen!.fill(unit)
        return chosen!
    }
}
