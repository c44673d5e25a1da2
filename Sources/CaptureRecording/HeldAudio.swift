import Capture
import CaptureCodecs

/// Audio stage packets the recorder keeps before a file can take them (pre-record's past, the
/// audio that comes before a recording's first frame), each with a hold that goes back when it
/// leaves the list (or the list goes). Recording queue only.
final class HeldAudio {
    private(set) var packets: [AudioPacket] = []

    deinit { for p in packets { p.letGo() } }

    var first: AudioPacket? { packets.first }

    /// Keeps `packet` (takes a hold of its own).
    func append(_ packet: AudioPacket) {
        packet.hold()
        packets.append(packet)
    }

    func removeAll() {
        for p in packets { p.letGo() }
        packets = []
    }

    /// Keeps the packets from the one playing at `from` on (the newest half second when nil),
    /// and 10 s of them at most.
    func trim(from: CaptureTime?) {
        var drop = 0
        if let from, let last = packets.last {
            let floor = CaptureTime(nanoseconds: last.endTime.nanoseconds &- 10_000_000_000)
            let from = from < floor ? floor : from
            while drop + 1 < packets.count, !(from < packets[drop + 1].presentationTimeStamp) { drop += 1 }
        } else if let last = packets.last {
            let keep = CaptureTime(nanoseconds: last.endTime.nanoseconds &- 500_000_000)
            while drop + 1 < packets.count, packets[drop + 1].presentationTimeStamp < keep { drop += 1 }
        }
        guard drop > 0 else { return }
        for p in packets[..<drop] { p.letGo() }
        packets.removeFirst(drop)
    }
}
