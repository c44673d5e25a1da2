import CaptureTestSupport
import Foundation
import Testing

/// `capture serve`'s WebRTC viewers as a user meets them: `--max-viewers`, the red team's
/// 155-byte offer answered 400 (it killed the tool), and a viewer that never connects giving its
/// place back (curl POSTs and does no ICE).
@Suite struct ServeViewersToolTests {
    /// A browser-shaped offer with everything webrtcbin needs, for a client that then does nothing.
    static let offer =
        [
            "v=0", "o=- 1 2 IN IP4 127.0.0.1", "s=-", "t=0 0", "a=group:BUNDLE 0", "m=video 9 UDP/TLS/RTP/SAVPF 102",
            "c=IN IP4 0.0.0.0", "a=ice-ufrag:Ab12", "a=ice-pwd:abcdefghijklmnopqrstuvwx",
            "a=fingerprint:sha-256 EF:F5:F9:C3:E7:E5:4B:1E:F9:32:79:61:39:80:03:35:7B:9C:19:95:43:6F:9D:D6:E8:5A:72:39:68:80:26:26",
            "a=setup:actpass", "a=mid:0", "a=recvonly", "a=rtcp-mux", "a=rtpmap:102 H264/90000",
            "a=fmtp:102 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f",
        ].joined(separator: "\r\n") + "\r\n"

    static func post(_ url: String, _ body: String) throws -> Int {
        try curl(url + "whep", ["-X", "POST", "-H", "Content-Type: application/sdp", "--data-binary", body]).status
    }

    /// `--max-viewers 1`: one viewer, then 503; /state says 1; the 155-byte offer with payload
    /// type 2147483648 gets 400 and the tool serves on; within 15 s of its answer the viewer that
    /// never connected is ended and the next gets in. `--max-viewers 0` is a one-line error.
    @Test func maxViewersHoldsAndAViewerThatNeverConnectsGivesItsPlaceBack() throws {
        let serving = try RunningProcess(["serve", "--port", "0", "--max-viewers", "1"], freshHome: true)
        let url = try #require(serving.servedURL(), "no URL: \(serving.output.stderr)")
        let answered = Date()
        #expect(try Self.post(url, Self.offer) == 201)
        #expect(try Self.post(url, Self.offer) == 503, "a second viewer beyond --max-viewers 1")
        let state = try JSONSerialization.jsonObject(with: try curl(url + "state").body) as? [String: Any]
        let whep = ((state?["result"] as? [String: Any])?["routes"] as? [String: Any])?["whep"] as? [String: Any]
        #expect(whep?["max_viewers"] as? Int == 1, "\(String(describing: whep))")
        let killer =
            [
                "v=0", "o=- 1 2 IN IP4 127.0.0.1", "s=-", "t=0 0", "m=video 9 UDP/TLS/RTP/SAVPF 2147483648",
                "a=rtpmap:2147483648 H264/90000", "a=fmtp:2147483648 packetization-mode=1",
            ].joined(separator: "\r\n") + "\r\n"
        #expect(try Self.post(url, killer) == 400)
        #expect(try curl(url + "state").status == 200, "the tool serves on: \(serving.output.stderr)")
        var status = 503
        while status == 503, Date().timeIntervalSince(answered) < 15 {
            usleep(250_000)
            status = try Self.post(url, Self.offer)
        }
        let freed = Date().timeIntervalSince(answered)
        #expect(status == 201, "the next viewer after \(freed) s: \(status)")
        print("capture serve: a viewer that never connected gave its place back after \(String(format: "%.1f", freed)) s")
        kill(serving.process.processIdentifier, SIGTERM)
        #expect(serving.exitStatus() == 0, "\(serving.output.stderr)")

        // (A value out of range is a usage error: status 2.)
        let bad = try RunningProcess(["serve", "--port", "0", "--max-viewers", "0"], freshHome: true)
        #expect(bad.exitStatus() == 2)
        let lines = bad.output.stderr.split(separator: "\n").filter { !$0.contains("using the virtual camera") }
        #expect(lines.count == 1 && lines[0].contains("max-viewers"), "\(bad.output.stderr)")
    }
}
