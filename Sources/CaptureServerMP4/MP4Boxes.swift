// The boxes of a fragmented MP4 (ISO/IEC 14496-12) with an H.264 track and, with a microphone,
// an AAC track, written directly: the init segment (ftyp, moov with avcC, and esds) once per
// encoder, one mdat per frame for every client, and a small moof per client and sample (its own
// sequence number and decode time).
import CaptureCodecs
import Foundation

enum MP4Boxes {
    /// The track's timescale (ticks per second): 90 kHz, as RTP and MPEG-TS count.
    static let timescale: UInt64 = 90_000

    /// SPS and PPS out of Annex B parameter sets (start codes of 3 or 4 bytes); nil without both.
    static func parameterSets(_ annexB: [UInt8]) -> (sps: [UInt8], pps: [UInt8])? {
        var sps: [UInt8]?, pps: [UInt8]?
        annexB.withUnsafeBytes { b in
            forEachNAL(b) { nal in
                guard let first = nal.first else { return }
                switch first & 0x1F {
                case 7 where sps == nil: sps = Array(nal)
                case 8 where pps == nil: pps = Array(nal)
                default: break
                }
            }
        }
        guard let sps, let pps, sps.count >= 4 else { return nil }
        return (sps, pps)
    }

    /// Calls `body` with each NAL unit of an Annex B stream (without its start code).
    static func forEachNAL(_ b: UnsafeRawBufferPointer, _ body: (UnsafeRawBufferPointer) -> Void) {
        let n = b.count
        var i = 0
        var start = -1
        while i + 2 < n {
            if b[i] == 0, b[i + 1] == 0, b[i + 2] == 1 {
                if start >= 0 {
                    // A zero before the start code belongs to a 4-byte start code.
                    var end = i
                    while end > start, b[end - 1] == 0 { end -= 1 }
                    body(UnsafeRawBufferPointer(rebasing: b[start..<end]))
                }
                i += 3
                start = i
            } else {
                i += 1
            }
        }
        if start >= 0, start < n { body(UnsafeRawBufferPointer(rebasing: b[start..<n])) }
    }

    /// The MIME codec of the track, e.g. `avc1.64001F`.
    static func codec(sps: [UInt8]) -> String {
        String(format: "avc1.%02X%02X%02X", sps[1], sps[2], sps[3])
    }

    /// The track IDs: video, and audio when there is a microphone.
    static let videoTrack: UInt32 = 1
    static let audioTrack: UInt32 = 2

    /// ftyp and moov for a `width` x `height` H.264 track with these parameter sets, and an AAC
    /// track of `audio` (track 2) when given.
    static func initSegment(sps: [UInt8], pps: [UInt8], width: Int, height: Int, audio: AudioStreamFormat? = nil) -> [UInt8] {
        var w = BoxWriter()
        w.box("ftyp") {
            $0.fourCC("iso6")
            $0.u32(0x200)
            for brand in ["iso6", "isom", "iso2", "avc1", "mp41"] { $0.fourCC(brand) }
        }
        w.box("moov") { w in
            w.fullBox("mvhd", version: 0, flags: 0) {
                $0.u32(0)
                $0.u32(0)
                $0.u32(1000)  // timescale
                $0.u32(0)  // duration: unknown (live)
                $0.u32(0x0001_0000)  // rate 1.0
                $0.u16(0x0100)  // volume 1.0
                $0.zeros(10)
                $0.matrix()
                $0.zeros(24)
                $0.u32(audio == nil ? 2 : 3)  // next track ID
            }
            w.box("trak") { w in
                w.fullBox("tkhd", version: 0, flags: 3) {
                    $0.u32(0)
                    $0.u32(0)
                    $0.u32(1)  // track ID
                    $0.u32(0)
                    $0.u32(0)  // duration
                    $0.zeros(8)
                    $0.u16(0)  // layer
                    $0.u16(0)  // alternate group
                    $0.u16(0)  // volume (video)
                    $0.u16(0)
                    $0.matrix()
                    $0.u32(UInt32(width) << 16)
                    $0.u32(UInt32(height) << 16)
                }
                w.box("mdia") { w in
                    w.mediaHeader(timescale: UInt32(timescale), handler: "vide", name: "VideoHandler")
                    w.box("minf") { w in
                        w.fullBox("vmhd", version: 0, flags: 1) { $0.zeros(8) }
                        w.samples { w in
                            w.box("avc1") { w in
                                w.zeros(6)
                                w.u16(1)  // data reference index
                                w.zeros(16)
                                w.u16(UInt16(width))
                                w.u16(UInt16(height))
                                w.u32(0x0048_0000)  // 72 dpi
                                w.u32(0x0048_0000)
                                w.u32(0)
                                w.u16(1)  // frame count
                                w.zeros(32)  // compressor name
                                w.u16(0x0018)  // depth
                                w.u16(0xFFFF)
                                w.box("avcC") { avcC(&$0, sps: sps, pps: pps) }
                            }
                        }
                    }
                }
            }
            if let audio { audioTrak(&w, audio) }
            w.box("mvex") { w in
                for track in audio == nil ? [videoTrack] : [videoTrack, audioTrack] {
                    w.fullBox("trex", version: 0, flags: 0) {
                        $0.u32(track)
                        $0.u32(1)  // sample description
                        $0.u32(0)
                        $0.u32(0)
                        $0.u32(0)
                    }
                }
            }
        }
        return w.bytes
    }

    /// The AVC decoder configuration record (ISO/IEC 14496-15), with the High profiles' fields
    /// (4:2:0, 8 bits: what the H.264 stage encodes).
    private static func avcC(_ w: inout BoxWriter, sps: [UInt8], pps: [UInt8]) {
        w.bytes([1, sps[1], sps[2], sps[3], 0xFF, 0xE1])
        w.u16(UInt16(sps.count))
        w.bytes(sps)
        w.bytes([1])
        w.u16(UInt16(pps.count))
        w.bytes(pps)
        if [100, 110, 122, 144].contains(sps[1]) { w.bytes([0xFC | 1, 0xF8, 0xF8, 0]) }
    }

    /// Bytes of a moof for one sample (`writeMoof`), and where the mdat's payload starts after it.
    static let moofSize = 100
    static let mdatHeaderSize = 8

    /// A moof for one sample of `size` bytes of `track`, into `out` (at least `moofSize` bytes);
    /// `decodeTime` and `duration` in the track's timescale (90 kHz for video, the sample rate
    /// for audio). Audio samples are all key samples.
    static func writeMoof(
        into out: UnsafeMutableRawBufferPointer, track: UInt32 = videoTrack, sequence: UInt32, decodeTime: UInt64, duration: UInt32,
        size: UInt32, isKey: Bool
    ) {
        var p = 0
        func u32(_ v: UInt32) {
            out.storeBytes(of: v.bigEndian, toByteOffset: p, as: UInt32.self)
            p += 4
        }
        func tag(_ s: StaticString) {
            s.withUTF8Buffer { for b in $0 { out[p] = b; p += 1 } }
        }
        u32(UInt32(moofSize)); tag("moof")
        u32(16); tag("mfhd"); u32(0); u32(sequence)
        u32(76); tag("traf")
        // default-base-is-moof: data offsets count from this moof.
        u32(16); tag("tfhd"); u32(0x02_0000); u32(track)
        u32(20); tag("tfdt"); u32(0x0100_0000)
        u32(UInt32(decodeTime >> 32)); u32(UInt32(truncatingIfNeeded: decodeTime))
        // data offset, sample duration, size and flags present.
        u32(32); tag("trun"); u32(0x0000_0701); u32(1)
        u32(UInt32(moofSize + mdatHeaderSize))
        u32(duration); u32(size)
        // A key frame depends on none; another depends on others and is no sync sample.
        u32(isKey ? 0x0200_0000 : 0x0101_0000)
    }
}

/// Writes boxes into a byte array: sizes are filled in when a box closes.
struct BoxWriter {
    private(set) var bytes: [UInt8] = []

    mutating func u16(_ v: UInt16) { bytes += [UInt8(v >> 8), UInt8(v & 0xFF)] }
    mutating func u32(_ v: UInt32) { bytes += [UInt8(v >> 24), UInt8((v >> 16) & 0xFF), UInt8((v >> 8) & 0xFF), UInt8(v & 0xFF)] }
    mutating func fourCC(_ s: String) { bytes += Array(s.utf8.prefix(4)) }
    mutating func zeros(_ n: Int) { bytes += [UInt8](repeating: 0, count: n) }
    mutating func bytes(_ b: [UInt8]) { bytes += b }
    /// The unity matrix of mvhd and tkhd.
    mutating func matrix() {
        for v: UInt32 in [0x0001_0000, 0, 0, 0, 0x0001_0000, 0, 0, 0, 0x4000_0000] { u32(v) }
    }

    mutating func box(_ type: String, _ body: (inout BoxWriter) -> Void) {
        let start = bytes.count
        u32(0)
        fourCC(type)
        body(&self)
        let size = UInt32(bytes.count - start)
        for k in 0..<4 { bytes[start + k] = UInt8((size >> (24 - 8 * UInt32(k))) & 0xFF) }
    }

    mutating func fullBox(_ type: String, version: UInt8, flags: UInt32, _ body: (inout BoxWriter) -> Void) {
        box(type) { w in
            w.u32(UInt32(version) << 24 | flags)
            body(&w)
        }
    }

    /// A track's mdhd (its timescale) and hdlr (its kind of media).
    mutating func mediaHeader(timescale: UInt32, handler: String, name: String) {
        fullBox("mdhd", version: 0, flags: 0) {
            $0.u32(0)
            $0.u32(0)
            $0.u32(timescale)
            $0.u32(0)
            $0.u16(0x55C4)  // "und"
            $0.u16(0)
        }
        fullBox("hdlr", version: 0, flags: 0) {
            $0.u32(0)
            $0.fourCC(handler)
            $0.zeros(12)
            $0.bytes(Array(name.utf8) + [0])
        }
    }

    /// A track's dinf (its samples in this file) and stbl with one sample entry (`entry`) and
    /// no samples (they come in fragments).
    mutating func samples(_ entry: (inout BoxWriter) -> Void) {
        box("dinf") { w in
            w.fullBox("dref", version: 0, flags: 0) { w in
                w.u32(1)
                w.fullBox("url ", version: 0, flags: 1) { _ in }
            }
        }
        box("stbl") { w in
            w.fullBox("stsd", version: 0, flags: 0) { w in
                w.u32(1)
                entry(&w)
            }
            for empty in ["stts", "stsc", "stco"] { w.fullBox(empty, version: 0, flags: 0) { $0.u32(0) } }
            w.fullBox("stsz", version: 0, flags: 0) {
                $0.u32(0)
                $0.u32(0)
            }
        }
    }
}
