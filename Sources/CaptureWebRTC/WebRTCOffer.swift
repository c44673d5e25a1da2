import Foundation
/// What the publisher needs from a browser's SDP offer: whether it is SDP at all, and the payload
/// types of its H.264 (packetization-mode 1) and Opus. Read before GStreamer sees the offer, so
/// that bad input (the client's fault) gets a typed error in words and a 400, never a 500 or a
/// trap: payload types outside RTP's 7 bits, H.264 or Opus on a static payload type, no ICE
/// credentials or DTLS fingerprint, more m-lines than a viewer uses. Plain value; any thread.
struct WebRTCOffer: Sendable, Equatable {
    /// An offer is a few kilobytes; beyond this it is not one.
    static let maxBytes = 64 * 1024
    /// A viewer uses two m-lines (video, audio); a browser may add a data channel or a few more.
    static let maxMediaSections = 16
    /// RTP's payload type field is 7 bits (RFC 3550).
    static let payloadTypes = 0...127
    /// Where H.264 and Opus (given by `a=rtpmap`) may sit: the dynamic 96-127 (RFC 3551) and
    /// 35-63, which Chromium takes too when 96-127 run out; not 0-34 (static, PCMU and others)
    /// nor 64-95, which a multiplexed RTCP packet's type would be read as (RFC 5761, section 4).
    static func isDynamic(_ payloadType: Int) -> Bool { (96...127).contains(payloadType) || (35...63).contains(payloadType) }

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
        let media = try Self.sections(lines)
        try Self.checkTransport(lines, media)
        guard let video = media.first(where: { $0.kind == "video" }), video.port != 0 else {
            throw WebRTCError(.noVideo, "the offer has no video: offer a recvonly video transceiver (H.264)")
        }
        for codec in media.flatMap(\.codecs) where ["h264", "opus"].contains(codec.name.lowercased()) {
            guard Self.isDynamic(codec.payloadType) else {
                throw WebRTCError(
                    .invalidOffer,
                    "the offer maps \(codec.name) to payload type \(codec.payloadType): give it a dynamic payload type (96-127 or 35-63)")
            }
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
        /// Its own `a=` lines.
        var attributes: [String] = []
    }

    /// A payload type as the offer writes it, within RTP's 0-127, or a typed error.
    private static func payloadType(_ text: Substring, in line: String) throws(WebRTCError) -> Int {
        guard let pt = Int(text), payloadTypes.contains(pt) else {
            throw WebRTCError(
                .invalidOffer,
                "the offer's payload type \(text.prefix(24)) (in \"\(line.prefix(60))\") is not one of RTP's 0-127 (RFC 3550)")
        }
        return pt
    }

    /// Every m-line has ICE credentials (`a=ice-ufrag`, `a=ice-pwd`) and a DTLS fingerprint, of
    /// its own or the session's: webrtcbin cannot answer without them.
    private static func checkTransport(_ lines: [String], _ media: [Section]) throws(WebRTCError) {
        let session = lines.prefix { !$0.hasPrefix("m=") }
        for (name, prefix) in [
            ("ICE user fragment", "a=ice-ufrag:"), ("ICE password", "a=ice-pwd:"), ("DTLS fingerprint", "a=fingerprint:"),
        ] {
            let has: ([String]) -> Bool = { $0.contains { $0.hasPrefix(prefix) && $0.count > prefix.count } }
            if has(Array(session)) { continue }
            if let bare = media.first(where: { $0.port != 0 && !has($0.attributes) }) {
                throw WebRTCError(
                    .invalidOffer,
                    "the offer's \(bare.kind) has no \(name) (\(prefix)...): send the offer as the browser's RTCPeerConnection made it")
            }
        }
    }

    /// The m-lines with their codecs (`a=rtpmap`) and format parameters (`a=fmtp`).
    private static func sections(_ lines: [String]) throws(WebRTCError) -> [Section] {
        var out: [Section] = []
        for line in lines {
            if line.hasPrefix("m=") {
                guard out.count < maxMediaSections else {
                    throw WebRTCError(
                        .invalidOffer, "the offer has more than \(maxMediaSections) m-lines: offer one video and at most one audio")
                }
                let f = line.dropFirst(2).split(separator: " ")
                // The formats of an RTP m-line are its payload types (a data channel's are not).
                if f.count > 2, f[2].contains("RTP") {
                    for format in f.dropFirst(3) { _ = try payloadType(format, in: line) }
                }
                out.append(Section(kind: f.first.map(String.init) ?? "", port: f.count > 1 ? Int(f[1]) ?? 0 : 0, codecs: []))
            } else if line.hasPrefix("a="), !out.isEmpty {
                out[out.count - 1].attributes.append(line)
            }
            if line.hasPrefix("a=rtpmap:"), !out.isEmpty {
                let f = line.dropFirst(9).split(separator: " ", maxSplits: 1)
                guard f.count == 2 else { continue }
                let pt = try payloadType(f[0], in: line)
                let enc = f[1].split(separator: "/")
                out[out.count - 1].codecs.append(
                    Codec(payloadType: pt, name: enc.first.map(String.init) ?? "", clockRate: enc.count > 1 ? Int(enc[1]) ?? 0 : 0))
            } else if line.hasPrefix("a=fmtp:"), !out.isEmpty {
                let f = line.dropFirst(7).split(separator: " ", maxSplits: 1)
                guard f.count == 2 else { continue }
                let pt = try payloadType(f[0], in: line)
                guard let i = out[out.count - 1].codecs.firstIndex(where: { $0.payloadType == pt })
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
