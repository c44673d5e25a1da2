import Capture
import CaptureTestSupport
import CaptureWebRTC
import Foundation
import Testing

/// The publisher against a real browser: Debian's chromium (Playwright) as the WHEP client.
@Suite(.serialized) struct WebRTCBrowserTests {
    /// One viewer: connected within 3 s, H.264 decoded at >= 90 % of the camera's rate, the bars
    /// on its picture and the microphone's tone in its audio.
    @Test func oneViewerSeesTheCameraAndHearsTheMicrophone() async throws {
        let rig = try WebRTCRig("one", tone: 1000)
        defer { rig.stop() }
        let publisher = try WebRTCPublisher(session: rig.session)
        defer { publisher.stop() }
        #expect(publisher.sendsAudio)
        let peer = try BrowserPeer(viewers: 1, window: 3)
        let offers = try await peer.offers()
        let (id, answer) = try await publisher.answer(offer: offers[0])
        #expect(answer.contains("H264/90000"))
        try peer.send(answers: [answer])
        let viewers = try await peer.report()
        let v = try #require(viewers.first)
        print("webrtc one viewer:", v.filter { $0.key != "latencyMs" }, "stats:", publisher.viewers)
        let connect = try #require(v["connectMs"] as? Double)
        #expect(connect < 3000, "connected after \(connect) ms")
        #expect((v["codec"] as? String)?.lowercased() == "video/h264")
        let fps = v["fps"] as? Double ?? 0
        #expect(fps >= 27, "decoded \(fps) frames per second of the camera's 30")
        #expect(wrongBars(v).isEmpty, "bars: \(wrongBars(v))")
        let pitch = v["audioPeakHz"] as? Double ?? 0
        #expect(abs(pitch - 1000) < 30, "the audio's pitch is \(pitch) Hz, the tone 1000 Hz")
        #expect((v["audioEnergy"] as? Double ?? 0) > 0)
        #expect(publisher.viewers.first?.framesSent ?? 0 > 0)
        #expect(publisher.end(id: id))
        #expect(publisher.viewerCount == 0)
        #expect(!publisher.end(id: id))
    }
}
