import Foundation
/// What the publisher needs from a browser's SDP offer: whether it is SDP at all, and the payload
/// types of its H.264 (packetization-mode 1) and Opus. Read before GStreamer sees the offer, so
/// that bad input gets a typed error in words. Plain value; any thread.
struct WebRTCOffer: Sendable, Equatable {
    /// An offer is a few kilobytes; beyond this it is not one.
    static let maxBytes = 64 * 1024

    /// The H.264 payload type chosen (packetization-mode 1, constrained baseline preferred).
    var videoPayloadType: Int
    /// Its profile-level-id as offered (e.g. "42e01f").
    var videoProfile: String?
    /// The Opus payload type of the first audio m-line, or nil (no audio asked for).
    var audioPayloadType: Int?

    init(_ text: String) throws(WebRTCError) {
        guard text.utf8.count <= Self.maxBytes else {
            throw WebRTCError(.invalidOffer, "the offer is \(text.utf8.count) bytes; an SDP offer is at most \(Self.maxBytes / 1024) KiB")
        }
        let lines = text.split(whereSeparator: \.isNewline).map(String.init)
        guard lines.first == "v=0", lines.contains(where: { $0.hasPrefix("o=") }),
            lines.allSatisfy({ $0.utf8.count >= 2 && $0.utf8.dropFirst().first == UInt8(ascii: "=") })
        else {
            throw WebRTCError(.invalidOffer, "the offer is not SDP (it must start with v=0 and have one field=value per line)")
        }
        let media = Self.sections(lines)
        guard let video = media.first(where: { $0.kind == "video" }), video.port != 0 else {
            throw WebRTCError(.noVideo, "the offer has no video: offer a recvonly video transceiver (H.264)")
        }
        let h264 = video.codecs.filter {
            $0.name.lowercased() == "h264" && $0.clockRate == 90000 && $0.fmtp["packetization-mode"] == "1"
        }
        // Constrained baseline (what the shared encoder makes) first, then baseline, then any.
        let rank: (Codec) -> Int = { c in
            switch c.fmtp["profile-level-id"]?.lowercased().prefix(4) {
            case "42e0": 0
            case "4200": 1
            case .some(let p) where p.hasPrefix("42"): 2
            default: 3
            }
        }
        guard let best = h264.min(by: { rank($0) < rank($1) }) else {
            throw WebRTCError(
                .noH264, "the offer's video has no H.264 with packetization-mode=1 (the only video sent): allow H.264 in the browser")
        }
        videoPayloadType = best.payloadType
        videoProfile = best.fmtp["profile-level-id"]
        let audio = media.first(where: { $0.kind == "audio" && $0.port != 0 })
        audioPayloadType = audio?.codecs.first { $0.name.lowercased() == "opus" && $0.clockRate == 48000 }?.payloadType
    }

    struct Codec {
        var payloadType: Int
        var name: String
        var clockRate: Int
        var fmtp: [String: String] = [:]
    }

    struct Section {
        var kind: String
        var port: Int
        var codecs: [Codec]
    }

    /// The m-lines with their codecs (`a=rtpmap`) and format parameters (`a=fmtp`).
    private static func sections(_ lines: [String]) -> [Section] {
        var out: [Section] = []
        for line in lines {
            if line.hasPrefix("m=") {
                let f = line.dropFirst(2).split(separator: " ")
                out.append(Section(kind: f.first.map(String.init) ?? "", port: f.count > 1 ? Int(f[1]) ?? 0 : 0, codecs: []))
            } else if line.hasPrefix("a=rtpmap:"), !out.isEmpty {
                let f = line.dropFirst(9).split(separator: " ", maxSplits: 1)
                guard f.count == 2, let pt = Int(f[0]) else { continue }
                let enc = f[1].split(separator: "/")
                out[out.count - 1].codecs.append(
                    Codec(payloadType: pt, name: enc.first.map(String.init) ?? "", clockRate: enc.count > 1 ? Int(enc[1]) ?? 0 : 0))
            } else if line.hasPrefix("a=fmtp:"), !out.isEmpty {
                let f = line.dropFirst(7).split(separator: " ", maxSplits: 1)
                guard f.count == 2, let pt = Int(f[0]), let i = out[out.count - 1].codecs.firstIndex(where: { $0.payloadType == pt })
                else { continue }
                for pair in f[1].split(separator: ";") {
                    let kv = pair.split(separator: "=", maxSplits: 1)
                    guard kv.count == 2 else { continue }
                    out[out.count - 1].codecs[i].fmtp[kv[0].trimmingCharacters(in: .whitespaces)] = String(kv[1])
                }
            }
        }
        return out
    }
}
