/// Writes a finished fragmented MP4's durations into its `moov`, in place: the movie's (`mvhd`)
/// and each track's (`tkhd`, `mdhd`). The muxer leaves them 0 (the moov goes first, before any
/// frame), and readers that do not walk every fragment (GStreamer, a browser given no byte
/// ranges) then take the first fragment's or the last keyframe's time for the whole file. Only
/// the duration fields change, so the file stays as readable as it was at any moment before.
enum MP4Durations {
    /// A box: its type, where its payload starts and where it ends.
    private struct Box {
        var type: String
        var payload: Int
        var end: Int
    }

    /// The boxes in `bytes[from..<to]` (stops at one that does not fit).
    private static func boxes(_ bytes: [UInt8], from: Int, to: Int) -> [Box] {
        var out: [Box] = []
        var at = from
        while at + 8 <= to {
            var size = Int(be32(bytes, at))
            var header = 8
            if size == 1, at + 16 <= to {
                size = Int(clamping: be64(bytes, at + 8))
                header = 16
            } else if size == 0 {
                size = to - at
            }
            guard size >= header, at + size <= to else { break }
            let type = String(decoding: bytes[(at + 4)..<(at + 8)], as: UTF8.self)
            out.append(Box(type: type, payload: at + header, end: at + size))
            at += size
        }
        return out
    }

    private static func be32(_ b: [UInt8], _ at: Int) -> UInt32 {
        b[at..<(at + 4)].reduce(0) { $0 << 8 | UInt32($1) }
    }
    private static func be64(_ b: [UInt8], _ at: Int) -> UInt64 {
        b[at..<(at + 8)].reduce(0) { $0 << 8 | UInt64($1) }
    }

    /// The duration field of a full box (`mvhd`, `tkhd`, `mdhd`): its offset, its width, and
    /// the timescale beside it (nil for `tkhd`, which counts in the movie's).
    private static func field(_ b: [UInt8], _ box: Box) -> (offset: Int, wide: Bool, timescale: UInt32?)? {
        guard box.payload < box.end else { return nil }
        let wide = b[box.payload] == 1
        let p = box.payload + 4
        let (offset, scale): (Int, Int?) =
            switch box.type {
            case "tkhd": (wide ? p + 24 : p + 16, nil)
            default: (wide ? p + 20 : p + 12, wide ? p + 16 : p + 8)
            }
        guard offset + (wide ? 8 : 4) <= box.end else { return nil }
        return (offset, wide, scale.map { be32(b, $0) })
    }

    /// The new bytes for the moov at the start of the file (`head`: the file's first bytes, at
    /// least through the moov): the movie lasts `seconds(handler)` per track, keyed by its
    /// handler (`vide`, `soun`), the longest for the movie. Returns (offset, bytes) to write, or
    /// nil when the head holds no moov this understands (then nothing is written).
    static func patches(head: [UInt8], seconds: (String) -> Double?) -> [(offset: Int, bytes: [UInt8])]? {
        let top = boxes(head, from: 0, to: head.count)
        guard let moov = top.first(where: { $0.type == "moov" }) else { return nil }
        let inMoov = boxes(head, from: moov.payload, to: moov.end)
        guard let mvhd = inMoov.first(where: { $0.type == "mvhd" }), let movie = field(head, mvhd),
            let movieScale = movie.timescale, movieScale > 0
        else { return nil }
        var out: [(offset: Int, bytes: [UInt8])] = []
        func put(_ f: (offset: Int, wide: Bool, timescale: UInt32?), _ value: Double, scale: UInt32) {
            let ticks = (value * Double(scale)).rounded()
            // A 32-bit field that cannot hold it stays 0 (unknown), as the muxer left it.
            guard ticks >= 0, ticks < (f.wide ? 9.2e18 : 4_294_967_295) else { return }
            let v = UInt64(ticks)
            let bytes = (0..<(f.wide ? 8 : 4)).reversed().map { UInt8(truncatingIfNeeded: v >> (8 * UInt64($0))) }
            out.append((f.offset, bytes))
        }
        var longest = 0.0
        for trak in inMoov where trak.type == "trak" {
            let parts = boxes(head, from: trak.payload, to: trak.end)
            guard let tkhd = parts.first(where: { $0.type == "tkhd" }), let mdia = parts.first(where: { $0.type == "mdia" })
            else { continue }
            let media = boxes(head, from: mdia.payload, to: mdia.end)
            guard let hdlr = media.first(where: { $0.type == "hdlr" }), hdlr.payload + 12 <= hdlr.end,
                let mdhd = media.first(where: { $0.type == "mdhd" })
            else { continue }
            let handler = String(decoding: head[(hdlr.payload + 8)..<(hdlr.payload + 12)], as: UTF8.self)
            guard let s = seconds(handler), s > 0 else { continue }
            longest = max(longest, s)
            if let f = field(head, tkhd) { put(f, s, scale: movieScale) }
            if let f = field(head, mdhd), let scale = f.timescale, scale > 0 { put(f, s, scale: scale) }
        }
        guard longest > 0 else { return nil }
        put(movie, longest, scale: movieScale)
        return out
    }
}
