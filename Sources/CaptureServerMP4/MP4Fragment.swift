import Capture
import CaptureCodecs
import Synchronization

/// One frame as every `/stream.mp4` client sends it after its own moof: an mdat box with the
/// access unit's NAL units, each after its 4-byte length (the parameter sets and access unit
/// delimiters left out: they are in the init segment). Made once per frame for all clients, in a
/// buffer that is reused once nobody holds it (the ring, a client sending it). Read-only for its
/// holders; written by the pool only while nobody holds it. Guarded by the routes' lock.
final class MP4Fragment: @unchecked Sendable {
    private let holds = Atomic<Int>(0)
    private(set) var base: UnsafeMutableRawPointer
    private(set) var capacity: Int
    /// Bytes of the mdat box (header included).
    private(set) var count = 0
    /// The fragments' own count (1, 2, ...), across encoder changes.
    private(set) var serial: UInt64 = 0
    private(set) var time = CaptureTime(nanoseconds: 0)
    private(set) var isKey = false
    /// The frame's nominal duration in `MP4Boxes.timescale` ticks.
    private(set) var duration: UInt32 = 3000
    /// The init segment it belongs to (`FragmentedMP4Routes.generation`).
    private(set) var generation = 0

    init(capacity: Int) {
        self.capacity = max(capacity, 4096)
        base = .allocate(byteCount: self.capacity, alignment: 16)
    }

    deinit { base.deallocate() }

    func hold() { holds.wrappingAdd(1, ordering: .relaxed) }
    func letGo() { holds.wrappingSubtract(1, ordering: .releasing) }
    var isHeld: Bool { holds.load(ordering: .acquiring) > 0 }

    /// The mdat box.
    var bytes: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: base, count: count) }
    /// The sample's size (the mdat's payload).
    var sampleSize: Int { count - MP4Boxes.mdatHeaderSize }

    /// Rewrites the fragment from `unit`. Only while nobody holds it.
    func fill(_ unit: H264AccessUnit, serial: UInt64, generation: Int) {
        unit.withUnsafeBytes { annexB in
            var needed = MP4Boxes.mdatHeaderSize
            MP4Boxes.forEachNAL(annexB) { nal in if Self.keeps(nal) { needed += 4 + nal.count } }
            if needed > capacity {
                base.deallocate()
                capacity = needed + needed / 4
                base = .allocate(byteCount: capacity, alignment: 16)
            }
            let out = UnsafeMutableRawBufferPointer(start: base, count: capacity)
            out.storeBytes(of: UInt32(needed).bigEndian, toByteOffset: 0, as: UInt32.self)
            out.storeBytes(of: UInt32(0x6D64_6174).bigEndian, toByteOffset: 4, as: UInt32.self)  // "mdat"
            var p = MP4Boxes.mdatHeaderSize
            MP4Boxes.forEachNAL(annexB) { nal in
                guard Self.keeps(nal) else { return }
                out.storeBytes(of: UInt32(nal.count).bigEndian, toByteOffset: p, as: UInt32.self)
                if let src = nal.baseAddress { (base + p + 4).copyMemory(from: src, byteCount: nal.count) }
                p += 4 + nal.count
            }
            count = needed
        }
        self.serial = serial
        self.generation = generation
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

    mutating func take(_ unit: H264AccessUnit, serial: UInt64, generation: Int) -> MP4Fragment {
        var chosen = fragments.first { !$0.isHeld }
        if chosen == nil {
            let f = MP4Fragment(capacity: unit.count + 1024)
            if fragments.count < limit { fragments.append(f) }
            chosen = f
        }
        chosen!.fill(unit, serial: serial, generation: generation)
        return chosen!
    }
}
