import CaptureTestSupport
import Foundation
import Testing

/// `capture serve` as a user runs it: the URL, status lines, real clients, a clean stop on
/// SIGINT/SIGTERM, and one-line errors.
@Suite struct ServeToolTests {
    /// `capture serve ARGS` with a fresh HOME (its album).
    static func serve(_ args: [String]) throws -> RunningProcess { try RunningProcess(["serve"] + args, freshHome: true) }

    @Test(arguments: [SIGTERM, SIGINT])
    func servesUntilASignalAndStopsWithStatus0(_ sig: Int32) throws {
        let serving = try Self.serve(["--port", "0", "--size", "640x480", "--quality", "70"])
        let url = try #require(serving.servedURL(), "no URL: \(serving.output.stderr)")
        #expect(url.hasPrefix("http://127.0.0.1:"), "binds this machine only by default")
        let snapshot = try curl(url + "snapshot")
        #expect(snapshot.status == 200)
        let image = try #require(TestJPEG.decode(snapshot.body))
        #expect(image.width == 640 && image.height == 480)
        let state = try curl(url + "state")
        let json = try JSONSerialization.jsonObject(with: state.body) as? [String: Any]
        #expect(((json?["result"] as? [String: Any])?["encoder"] as? [String: Any])?["quality"] as? Int == 70)
        let probe = try runProcess("/usr/bin/ffprobe", ["-v", "error", "-show_streams", "-of", "json", url + "?action=stream"])
        #expect(probe.status == 0 && probe.text.contains("\"mjpeg\""), "\(probe.stderr)")
        kill(serving.process.processIdentifier, sig)
        #expect(serving.exitStatus() == 0, "\(serving.output.stderr)")
    }

    /// A stop ends every stream cleanly: the multipart close delimiter, the last chunk; curl
    /// exits 0, not 18 ("transfer closed with outstanding read data").
    @Test func sigtermEndsEveryStreamCleanly() throws {
        // (At 1280x720 a stop finds clients mid-frame; before the fix curl saw error 18 there.)
        let serving = try Self.serve(["--port", "0", "--size", "1280x720", "--metadata", "qr"])
        let url = try #require(serving.servedURL(), "no URL: \(serving.output.stderr)")
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent(
            "clean-end-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let routes = ["stream", "stream.mp4", "metadata", "stream", "stream.mp4", "metadata"]
        let clients = try routes.enumerated().map { i, route -> (Process, URL) in
            let out = folder.appendingPathComponent("\(i)")
            let p = Process()
            p.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
            p.arguments = ["-sS", "-N", "-o", out.path, url + route]
            try p.run()
            return (p, out)
        }
        // Each has bytes of its stream before the signal.
        let deadline = Date(timeIntervalSinceNow: 60)
        func size(_ u: URL) -> Int { ((try? FileManager.default.attributesOfItem(atPath: u.path))?[.size] as? Int) ?? 0 }
        while Date() < deadline, clients.contains(where: { size($0.1) == 0 }) { usleep(50_000) }
        for (route, c) in zip(routes, clients) { #expect(size(c.1) > 0, "no bytes from /\(route)") }
        kill(serving.process.processIdentifier, SIGTERM)
        #expect(serving.exitStatus() == 0, "\(serving.output.stderr)")
        for (route, c) in zip(routes, clients) {
            c.0.waitForExit()
            #expect(c.0.terminationStatus == 0, "curl of /\(route) exited \(c.0.terminationStatus) (18: cut mid-chunk)")
        }
        let mjpeg = try Data(contentsOf: clients[0].1)
        #expect(String(decoding: mjpeg.suffix(64), as: UTF8.self).contains("--"), "the MJPEG stream ends with the close delimiter")
    }

    @Test func printsAStatusLineEveryFewSeconds() throws {
        let serving = try Self.serve(["--port", "0"])
        _ = try #require(serving.servedURL())
        let deadline = Date(timeIntervalSinceNow: 60)
        while Date() < deadline, !serving.output.text.contains(" fps, ") { usleep(100_000) }
        #expect(serving.output.text.contains("clients"), "\(serving.output.text)")
        kill(serving.process.processIdentifier, SIGTERM)
        #expect(serving.exitStatus() == 0)
    }

    @Test func fpsSetsTheCameraRateOrIsAOneLineError() throws {
        let serving = try Self.serve(["--port", "0", "--size", "640x480", "--fps", "15"])
        let url = try #require(serving.servedURL(), "\(serving.output.stderr)")
        let state = try curl(url + "state")
        let source =
            ((try JSONSerialization.jsonObject(with: state.body) as? [String: Any])?["result"] as? [String: Any])?["source"]
            as? [String: Any]
        #expect(source?["desired_fps"] as? Double == 15, "\(String(describing: source))")
        kill(serving.process.processIdentifier, SIGTERM)
        #expect(serving.exitStatus() == 0)
        // A rate the camera lacks is a run-time failure (1); one that is no rate, a usage error (2).
        for (bad, status) in [("7", 1), ("0", 2), ("fast", 2)] as [(String, Int32)] {
            let s = try Self.serve(["--port", "0", "--size", "640x480", "--fps", bad])
            #expect(s.exitStatus() == status, "--fps \(bad)")
            let l = s.output.stderr.split(separator: "\n").filter { !$0.contains("using the virtual camera") }
            #expect(l.count == 1 && l[0].hasPrefix("capture: ") && l[0].contains("fps"), "--fps \(bad): \(s.output.stderr)")
        }
    }

    @Test func credentialsAndOriginFromTheCommandLine() throws {
        let serving = try Self.serve(["--port", "0", "--user", "u", "--password", "p", "--allow-origin", "*", "--max-clients", "1"])
        let url = try #require(serving.servedURL())
        #expect(try curl(url + "state").status == 401)
        let ok = try curl(url + "state", ["-u", "u:p"])
        #expect(ok.status == 200 && ok.headers.contains("Access-Control-Allow-Origin: *"))
        kill(serving.process.processIdentifier, SIGTERM)
        #expect(serving.exitStatus() == 0)
        // A password on the command line is readable by every user: said on stderr.
        #expect(serving.output.stderr.contains("warning: --password is visible to every user"), "\(serving.output.stderr)")
    }

    @Test func allowHostAddsNamesTheServerAnswersTo() throws {
        let serving = try Self.serve(["--port", "0", "--allow-host", "camera.example, other.example"])
        let url = try #require(serving.servedURL())
        for host in ["camera.example", "OTHER.example:8080", "localhost"] {
            #expect(try curl(url + "state", ["-H", "Host: \(host)"]).status == 200, "\(host)")
        }
        #expect(try curl(url + "snapshot", ["-H", "Host: attacker.example"]).status == 403)
        kill(serving.process.processIdentifier, SIGTERM)
        #expect(serving.exitStatus() == 0)
    }

    @Test func aPortInUseIsAOneLineError() throws {
        let first = try Self.serve(["--port", "0"])
        let url = try #require(first.servedURL())
        let port = try #require(url.split(separator: ":").last.flatMap { Int($0.dropLast()) })
        let second = try Self.serve(["--port", String(port)])
        #expect(second.exitStatus() == 1)
        let lines = second.output.stderr.split(separator: "\n").filter { !$0.contains("using the virtual camera") }
        #expect(lines.count == 1 && lines[0].contains("in use") && lines[0].contains("--port"), "\(second.output.stderr)")
        // An address not on this machine fails at run time (1); the others are usage errors (2).
        for (bad, status) in [(["--host", "10.255.255.1"], 1), (["--quality", "0"], 2), (["--user", "u"], 2), (["--port", "70000"], 2)]
            as [([String], Int32)]
        {
            let s = try Self.serve(["--port", "0"] + bad)
            #expect(s.exitStatus() == status, "\(bad)")
            let l = s.output.stderr.split(separator: "\n").filter { !$0.contains("using the virtual camera") }
            #expect(l.count == 1 && l[0].hasPrefix("capture: "), "\(bad): \(s.output.stderr)")
        }
        kill(first.process.processIdentifier, SIGTERM)
        #expect(first.exitStatus() == 0)
    }
}
