import Capture
import CaptureServer
import CaptureTestSupport
import CaptureWebRTC
import Foundation
import Testing

/// Offers that are the client's fault get 400 with words, never a trap or a 500: payload types
/// outside RTP's 0-127 (a 155-byte offer with 2147483648 used to kill the server), H.264 or Opus
/// off the dynamic 96-127 and 35-63, no ICE credentials, no DTLS fingerprint, a thousand m-lines.
extension WebRTCSuites {
    @Suite struct WHEPOfferValidationTests {
        typealias Served = WHEPServerTests.Served

        /// The red team's offer (issue 39, item 7): H.264 on payload type 2147483648, nothing else.
        static func bareOffer(payloadType: String) -> String {
            [
                "v=0", "o=- 1 2 IN IP4 127.0.0.1", "s=-", "t=0 0", "m=video 9 UDP/TLS/RTP/SAVPF \(payloadType)",
                "a=rtpmap:\(payloadType) H264/90000", "a=fmtp:\(payloadType) packetization-mode=1",
            ].joined(separator: "\r\n") + "\r\n"
        }

        /// Out-of-range payload types, in the m-line, `a=rtpmap` and `a=fmtp`, for video and audio:
        /// each a 400 that names the payload type; the server answers a good offer after them.
        @Test func payloadTypesOutsideRTPsRangeGet400AndTheServerServesOn() async throws {
            let s = try Served("whep payload types")
            defer { s.stop() }
            let offers: [(String, String)] = [
                ("the 155-byte offer, 2147483648", Self.bareOffer(payloadType: "2147483648")),
                ("H.264 2147483648", syntheticOffer(videoPayloadType: 2_147_483_648)),
                ("H.264 -5", syntheticOffer(videoPayloadType: -5)),
                ("H.264 200", syntheticOffer(videoPayloadType: 200)),
                ("H.264 128", syntheticOffer(videoPayloadType: 128)),
                ("H.264 on static 34", syntheticOffer(videoPayloadType: 34)),
                ("H.264 on 72, an RTCP packet type under rtcp-mux", syntheticOffer(videoPayloadType: 72)),
                ("Opus 4294967296", syntheticOffer().replacingOccurrences(of: "111", with: "4294967296")),
                ("Opus -1", syntheticOffer().replacingOccurrences(of: "111", with: "-1")),
                ("Opus on static 8", syntheticOffer().replacingOccurrences(of: "111", with: "8")),
            ]
            #expect(Self.bareOffer(payloadType: "2147483648").utf8.count == 155)
            for (name, offer) in offers {
                let r = try WHEPServerTests.post(s, offer)
                #expect(r.status == 400, "\(name): \(r.status) \(r.body)")
                #expect(r.body.contains("payload type"), "\(name): \(r.body)")
            }
            #expect(s.publisher.viewerCount == 0)
            // The edges of the dynamic ranges are fine (Chromium gives H.264 35-63 as often as not).
            for pt in [35, 63, 96, 127] {
                let r = try WHEPServerTests.post(s, syntheticOffer(videoPayloadType: pt))
                #expect(r.status == 201, "payload type \(pt): \(r.status) \(r.body)")
                #expect(r.body.contains("a=rtpmap:\(pt) H264/90000"))
                _ = try WHEPServerTests.request(s.base + (WHEPServerTests.location(r.headers) ?? "/whep/x"), ["-X", "DELETE"])
            }
        }

        /// No ICE user fragment or password, no DTLS fingerprint, 1,000 m-lines: 400 saying what
        /// is missing (they were 500, "GStreamer could not answer the offer"); a session-level
        /// attribute serves every m-line.
        @Test func offersWithoutICEOrDTLSOrWithAThousandMLinesGet400() async throws {
            let s = try Served("whep malformed")
            defer { s.stop() }
            let offer = syntheticOffer()
            func without(_ prefix: String) -> String {
                offer.components(separatedBy: "\r\n").filter { !$0.hasPrefix(prefix) }.joined(separator: "\r\n")
            }
            // (Short m-lines: the thousand fit in the 64 KiB an offer may have.)
            let thousand = offer + (0..<1000).map { "m=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=mid:m\($0)\r\n" }.joined()
            #expect(thousand.utf8.count < 64 * 1024)
            let cases: [(String, String, String)] = [
                ("no a=ice-ufrag", without("a=ice-ufrag:"), "ICE user fragment"),
                ("no a=ice-pwd", without("a=ice-pwd:"), "ICE password"),
                ("no a=fingerprint", without("a=fingerprint:"), "fingerprint"),
                ("1,000 m-lines", thousand, "m-lines"),
            ]
            for (name, bad, words) in cases {
                let r = try WHEPServerTests.post(s, bad)
                #expect(r.status == 400, "\(name): \(r.status) \(r.body)")
                #expect(r.body.contains(words), "\(name): \(r.body)")
            }
            #expect(s.publisher.viewerCount == 0)
            // ICE and DTLS given once for the session (before the first m-line) are enough.
            let fingerprint = try #require(offer.components(separatedBy: "\r\n").first { $0.hasPrefix("a=fingerprint:") })
            let sessionLevel = without("a=fingerprint:").replacingOccurrences(of: "t=0 0\r\n", with: "t=0 0\r\n\(fingerprint)\r\n")
            let r = try WHEPServerTests.post(s, sessionLevel)
            #expect(r.status == 201, "\(r.status) \(r.body)")
            _ = try WHEPServerTests.request(s.base + (WHEPServerTests.location(r.headers) ?? "/whep/x"), ["-X", "DELETE"])
        }
    }
}
