import Capture
import CaptureTestSupport
import CaptureWebRTC
import Foundation
import Testing

/// The publisher's answers, limits and clean-up, with offers made here (no browser on the other
/// side: ICE never completes, which the answer does not wait for).
extension WebRTCSuites {
    @Suite struct WebRTCPublisherTests {
        /// Garbage, a 1 MB offer, one without video and one without H.264 packetization-mode 1 each
        /// throw their typed error, and the publisher answers a good offer after them.
        @Test func badOffersThrowTypedErrorsAndThePublisherKeepsServing() async throws {
            let rig = try WebRTCRig("bad offers", audio: false)
            defer { rig.stop() }
            let publisher = try WebRTCPublisher(session: rig.session, configuration: .loopback)
            defer { publisher.stop() }
            let cases: [(String, WebRTCError.Code)] = [
                ("hello, this is not SDP", .invalidOffer),
                ("", .invalidOffer),
                ("v=0\r\n" + String(repeating: "a=x\r\n", count: 210_000), .invalidOffer),
                (syntheticOffer(video: false), .noVideo),
                (syntheticOffer(packetizationMode: 0), .noH264),
                (syntheticOffer().replacingOccurrences(of: "H264/90000", with: "VP8/90000"), .noH264),
            ]
            for (offer, code) in cases {
                do {
                    _ = try await publisher.answer(offer: offer)
                    Issue.record("an offer of \(offer.utf8.count) bytes was answered; \(code) expected")
                } catch {
                    #expect(error.code == code, "\(error)")
                    #expect(!error.message.isEmpty)
                }
                #expect(publisher.viewerCount == 0)
            }
            let (id, answer) = try await publisher.answer(offer: syntheticOffer())
            #expect(answer.contains("a=rtpmap:102 H264/90000"))
            #expect(answer.contains("a=candidate:"), "the answer carries its ICE candidates")
            #expect(!publisher.sendsAudio)
            #expect(publisher.viewerCount == 1)
            #expect(publisher.end(id: id))
        }

        /// Offers with different H.264 payload types each get their own in the answer, at once.
        @Test func eachViewerGetsThePayloadTypeItOffered() async throws {
            let rig = try WebRTCRig("payload types")
            defer { rig.stop() }
            let publisher = try WebRTCPublisher(session: rig.session, configuration: .loopback)
            defer { publisher.stop() }
            let a = try await publisher.answer(offer: syntheticOffer(videoPayloadType: 102))
            let b = try await publisher.answer(offer: syntheticOffer(videoPayloadType: 125, profile: "42001f"))
            #expect(a.answer.contains("a=rtpmap:102 H264/90000"))
            #expect(b.answer.contains("a=rtpmap:125 H264/90000"))
            #expect(a.answer.lowercased().contains("opus/48000"))
            #expect(publisher.viewerCount == 2)
            #expect(publisher.viewers.allSatisfy { $0.hasAudio })
            #expect(publisher.end(id: a.id) && publisher.end(id: b.id))
        }

        /// Beyond `maxViewers` an offer is refused with `.tooManyViewers`; one ended makes room.
        @Test func aFullHouseRefusesMoreViewers() async throws {
            let rig = try WebRTCRig("full house", audio: false)
            defer { rig.stop() }
            let publisher = try WebRTCPublisher(session: rig.session, configuration: .init(maxViewers: 2, iceAddresses: ["127.0.0.1"]))
            defer { publisher.stop() }
            let first = try await publisher.answer(offer: syntheticOffer())
            _ = try await publisher.answer(offer: syntheticOffer())
            await #expect(throws: WebRTCError.self) { _ = try await publisher.answer(offer: syntheticOffer()) }
            do {
                _ = try await publisher.answer(offer: syntheticOffer())
            } catch {
                #expect(error.code == .tooManyViewers)
            }
            #expect(publisher.end(id: first.id))
            _ = try await publisher.answer(offer: syntheticOffer())
            #expect(publisher.viewerCount == 2)
            publisher.stop()
            #expect(publisher.viewerCount == 0)
            do {
                _ = try await publisher.answer(offer: syntheticOffer())
                Issue.record("a stopped publisher answered")
            } catch {
                #expect(error.code == .stopped)
            }
        }

        /// `stop()` with viewers watching frees them, the graph and its threads.
        @Test func stopGivesEverythingBack() async throws {
            let rig = try WebRTCRig("stop")
            defer { rig.stop() }
            let before = Resources.now
            let publisher = try WebRTCPublisher(session: rig.session, configuration: .loopback)
            for _ in 0..<3 { _ = try await publisher.answer(offer: syntheticOffer()) }
            let during = Resources.now
            #expect(during.udpSockets > before.udpSockets)
            publisher.stop()
            let back = await eventually(timeout: 10) {
                let now = Resources.now
                return now.udpSockets <= before.udpSockets && now.gstreamerThreads <= before.gstreamerThreads + Resources.idlePoolThreads
            }
            #expect(back, "before: \(before); with 3 viewers: \(during); after stop: \(Resources.now)")
        }

        /// 30 viewers that join and leave give back every descriptor and thread they took (each
        /// webrtcbin has about 20 sockets and 5 threads), although their offers carry an mDNS
        /// candidate (which GStreamer 1.22 would resolve in a way that keeps the ICE agent alive).
        @Test func joinAndLeaveCyclesGiveEverythingBack() async throws {
            let rig = try WebRTCRig("cycles")
            defer { rig.stop() }
            let publisher = try WebRTCPublisher(session: rig.session, configuration: .loopback)
            defer { publisher.stop() }
            // One cycle first: GStreamer loads its plugins and starts its shared threads once.
            let warm = try await publisher.answer(offer: syntheticOffer())
            publisher.end(id: warm.id)
            // (Its threads wind down: the baseline is taken once they did.)
            try await Task.sleep(for: .milliseconds(500))
            let before = Resources.now
            for _ in 0..<30 {
                let v = try await publisher.answer(offer: syntheticOffer())
                #expect(publisher.viewerCount == 1)
                #expect(publisher.end(id: v.id))
            }
            var after = Resources.now
            let back = await eventually(timeout: 10) {
                let now = Resources.now
                return now.udpSockets <= before.udpSockets && now.gstreamerThreads <= before.gstreamerThreads
            }
            after = Resources.now
            print("webrtc cycles: before \(before), after 30 cycles \(after)")
            #expect(back, "before: \(before); after 30 cycles: \(after)")
            #expect(publisher.viewerCount == 0)
        }
    }
}
