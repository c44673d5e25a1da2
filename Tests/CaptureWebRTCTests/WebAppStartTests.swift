import Capture
import CaptureServer
import CaptureTestSupport
import CaptureWebRTC
import Foundation
import Testing

/// The web app in Chromium as it starts (Tests/browser/webapp_start.py): a picture from the JPEG
/// path first, then WebRTC once it plays, with the JPEG's connection closed and the receivers
/// asking for no jitter buffer; without WebRTC, the JPEG stays.
extension WebRTCSuites {
    @Suite struct WebAppStartTests {
        /// The page's report once its picture is live.
        static func report(_ driver: JSONLineProcess) async throws -> [String: Any] {
            try #require(try await driver.next(with: "report", timeout: 90)["report"] as? [String: Any])
        }

        /// WHEP held until the page shows a picture: it comes from /stream; then WebRTC plays and
        /// replaces it with no animation frame blank, the <img> loses its source, and the server's
        /// stream client is gone while the page stays open. The receivers read back a target of 0.
        @Test func theJPEGShowsAtOnceThenWebRTCTakesOver() async throws {
            let s = try WHEPServerTests.Served("web app start", publishing: .loopback)
            defer { s.stop() }
            let driver = try JSONLineProcess("webapp_start.py", [s.base + "/", "--hold-whep"])
            let r = try await Self.report(driver)
            print("web app start:", r)
            #expect(r["pictureFrom"] as? String == "jpeg")
            #expect(r["streamClientsAtPicture"] as? Int == 1)
            #expect(r["path"] as? String == "webrtc")
            #expect(r["picture"] as? String == "video")
            #expect(r["liveSrc"] is NSNull && r["liveHidden"] as? Bool == true, "\(r)")
            #expect(r["videoWidth"] as? Int ?? 0 > 0)
            #expect(r["blankFrames"] as? Int == 0, "\(r)")
            #expect(r["jitterBufferTarget"] as? String == "0,0", "\(r)")
            let closed = await eventually(timeout: 20) { s.server.statistics.clients.isEmpty }
            #expect(closed, "stream clients with WebRTC live: \(s.server.statistics.clients)")
            #expect(s.publisher.viewerCount == 1)
            try driver.send(["done": true])
        }

        /// A server without WebRTC (nor /stream.mp4): the page keeps the JPEG it showed first, on
        /// the one connection it opened for it.
        @Test func withoutWebRTCTheJPEGStays() async throws {
            let rig = try WebRTCRig("web app mjpeg", audio: false)
            defer { rig.stop() }
            let server = try CaptureStreamServer(session: rig.session, configuration: .init(port: 0, connectionTimeout: 5))
            try server.start()
            defer { server.stop() }
            let driver = try JSONLineProcess("webapp_start.py", ["http://127.0.0.1:\(server.port)/"])
            let r = try await Self.report(driver)
            print("web app without WebRTC:", r)
            #expect(r["pictureFrom"] as? String == "jpeg")
            #expect(r["path"] as? String == "mjpeg")
            #expect(r["picture"] as? String == "jpeg")
            #expect((r["liveSrc"] as? String)?.hasPrefix("stream") == true, "\(r)")
            #expect(r["blankFrames"] as? Int == 0, "\(r)")
            #expect(server.statistics.clients.count == 1, "\(server.statistics.clients)")
            try driver.send(["done": true])
        }
    }
}
