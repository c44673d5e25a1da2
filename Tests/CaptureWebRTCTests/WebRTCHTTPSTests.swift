import Capture
import CaptureServer
import CaptureTestSupport
import CaptureWebRTC
import Foundation
import Testing

extension WebRTCSuites {
    /// The web app over HTTPS in Debian's chromium (Tests/browser/https_page.py), opened by a
    /// token link: WHEP's POST and DELETE over TLS, WebRTC playing; the link in an `<img src>`.
    @Suite struct WebRTCHTTPSTests {
        @Test func theWebAppPlaysWebRTCOverHTTPSFromATokenLink() throws {
            let certificates = try TestCertificates()
            defer { certificates.remove() }
            let rig = try WebRTCRig("https", audio: false)
            defer { rig.stop() }
            let publisher = try WebRTCPublisher(session: rig.session)
            var config = CaptureStreamServer.Configuration(port: 0, connectionTimeout: 5)
            config.tls = try .init(certificateFile: certificates.certificateFile, keyFile: certificates.keyFile)
            config.accessToken = "page-token-7"
            let server = try CaptureStreamServer(session: rig.session, configuration: config)
            try server.serveWebRTC(publisher)
            try server.start()
            defer { server.stop() }
            let script = JSONLineProcess.folder.appendingPathComponent("https_page.py").path
            let run = try runProcess("/usr/bin/env", ["python3", script, server.url.absoluteString, "page-token-7"], timeout: 120)
            let line = try #require(run.text.split(separator: "\n").last, "no report: \(run.stderr.suffix(2000))")
            let report = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
            let time = report["time"] as? [Double] ?? [], frames = report["frames"] as? [Int] ?? []
            #expect(report["path"] as? String == "webrtc" && (report["width"] as? Int ?? 0) > 0, "\(report)")
            #expect(time.count == 2 && time[1] > time[0] + 0.5 && frames.count == 2 && frames[1] > frames[0] + 10, "\(report)")
            #expect((report["failures"] as? [String])?.isEmpty == true, "\(report)")
            #expect(report["img"] as? Int == 320, "the token link in an <img>: \(report)")
            #expect(report["badImg"] as? Int == 0, "a wrong token in an <img>: \(report)")
        }
    }
}
