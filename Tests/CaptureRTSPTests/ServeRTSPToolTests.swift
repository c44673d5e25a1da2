import CaptureTestSupport
import Foundation
import Testing

/// `capture serve --rtsp` as a user runs it: the RTSP URL printed beside the HTTP one, --user's
/// credentials asked for, the stream read, its client counted in `/state`, and a clean stop with
/// an RTSP client on it.
@Suite struct ServeRTSPToolTests {
    @Test func serveWithRTSPServesTheCameraWithTheUsersCredentials() throws {
        var environment = ProcessInfo.processInfo.environment
        environment["CAPTURE_PASSWORD"] = "pw-rtsp"
        let serving = try RunningProcess(
            tool: "capture",
            [
                "serve", "--device", "virtual", "--port", "0", "--size", "640x480", "--user", "viewer", "--rtsp", "--rtsp-port", "0",
            ], environment: environment, freshHome: true)
        var found: String?
        _ = serving.waitFor(timeout: 60) { text in
            guard let r = text.range(of: "RTSP rtsp://") else { return false }
            found = String(text[text.index(r.lowerBound, offsetBy: 5)...].prefix { $0 != ")" && !$0.isWhitespace })
            return true
        }
        let url = try #require(found, "no RTSP URL: \(serving.stdout) \(serving.output.stderr)")
        #expect(url.hasPrefix("rtsp://127.0.0.1:") && url.hasSuffix("/camera"), "\(url)")
        let (refused, r0) = try probe(url, transport: "tcp")
        #expect(refused.isEmpty && r0.stderr.contains("401"), "without credentials: \(refused) \(r0.stderr)")
        let withCredentials = url.replacingOccurrences(of: "rtsp://", with: "rtsp://viewer:pw-rtsp@")
        let (stream, r1) = try probe(withCredentials, transport: "tcp")
        #expect(stream == "h264,640,480", "\(stream): \(r1.stderr)")
        // A client reading when the tool stops: the tool still stops cleanly.
        let reading = try RunningProcess(
            URL(fileURLWithPath: "/usr/bin/ffmpeg"), decodeArguments(withCredentials, transport: "tcp", frames: 100_000))
        let counted = serving.waitFor(timeout: 60) { $0.contains("1 RTSP clients") }
        #expect(counted, "the tool never counted the reading client: \(reading.stderr.suffix(2000))")
        // /state counts it under result.routes.rtsp.
        let http = try #require(serving.servedURL(), "no HTTP URL: \(serving.stdout)")
        let state = try runProcess("/usr/bin/curl", ["-sS", "-u", "viewer:pw-rtsp", http + "state"])
        let json = try JSONSerialization.jsonObject(with: state.stdout) as? [String: Any]
        let rtsp = ((json?["result"] as? [String: Any])?["routes"] as? [String: Any])?["rtsp"] as? [String: Any]
        #expect(rtsp?["clients"] as? Int == 1, "\(state.text)")
        #expect(rtsp?["url"] as? String == url, "\(state.text)")
        #expect(serving.terminate(timeout: 30) == 0, "\(serving.output.stderr)")
        _ = reading.terminate()
    }
}
