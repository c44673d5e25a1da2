import Capture
import CaptureTestSupport
import CaptureWebRTC
import Foundation
import Testing

/// The playout-delay RTP header extension: in the answer when the offer has it (with the offer's
/// ID), not otherwise, and on every video packet that leaves for the browser.
extension WebRTCSuites {
    @Suite struct PlayoutDelayTests {
        static let uri = "http://www.webrtc.org/experiments/rtp-hdrext/playout-delay"

        /// A synthetic offer whose video asks for the extension with `id`.
        static func offer(playoutDelayID id: Int) -> String {
            syntheticOffer(audio: false).replacingOccurrences(of: "a=mid:0\r\n", with: "a=mid:0\r\na=extmap:\(id) \(uri)\r\n")
        }

        static func extmaps(_ sdp: String) -> [String] {
            sdp.split(separator: "\r\n").filter { $0.hasPrefix("a=extmap:") }.map(String.init)
        }

        /// Offered at ID 6 or 14, the answer has it at that ID (and no other extension); not
        /// offered, the answer has none.
        @Test func theAnswerHasItOnlyWhenTheOfferAsks() async throws {
            let rig = try WebRTCRig("playout delay sdp", audio: false)
            defer { rig.stop() }
            let publisher = try WebRTCPublisher(session: rig.session, configuration: .loopback)
            defer { publisher.stop() }
            for id in [6, 14] {
                let answer = try await publisher.answer(offer: Self.offer(playoutDelayID: id)).answer
                #expect(Self.extmaps(answer) == ["a=extmap:\(id) \(Self.uri)"], "\(answer)")
            }
            let plain = try await publisher.answer(offer: syntheticOffer(audio: false)).answer
            #expect(Self.extmaps(plain).isEmpty, "\(plain)")
        }

        /// Chromium offers the extension; every video RTP packet sent to it carries it (minimum 0,
        /// maximum 200 ms), read from the packets as they leave the viewer's queue for webrtcbin.
        @Test func everyVideoPacketToChromiumCarriesIt() async throws {
            let rig = try WebRTCRig("playout delay rtp", audio: false)
            defer { rig.stop() }
            let publisher = try WebRTCPublisher(session: rig.session, configuration: .loopback)
            defer { publisher.stop() }
            let peer = try BrowserPeer(viewers: 1, window: 1, audio: false)
            let offer = try #require(try await peer.offers().first)
            #expect(offer.contains(Self.uri), "Chromium's offer has no playout-delay extension")
            let answer = try await publisher.answer(offer: offer).answer
            #expect(Self.extmaps(answer).contains { $0.hasSuffix(" " + Self.uri) }, "\(answer)")
            try peer.send(answers: [answer], measure: false)
            let flowing = await eventually(timeout: 20) { (publisher.viewers.first?.videoPacketsSent ?? 0) >= 100 }
            #expect(flowing, "\(publisher.viewers)")
            // (The two counts are read one after the other: equal once no packet is between them.)
            let all = await eventually(timeout: 5) {
                publisher.viewers.first.map { $0.videoPacketsWithPlayoutDelay == $0.videoPacketsSent } ?? false
            }
            #expect(all, "\(publisher.viewers)")
            print("playout delay in the packets sent:", publisher.viewers.map { ($0.videoPacketsSent, $0.videoPacketsWithPlayoutDelay) })
        }
    }
}
