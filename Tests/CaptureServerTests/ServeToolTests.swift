import CaptureTestSupport
import Foundation
import Testing

/// `capture serve` as a user runs it: the URL, status lines, real clients, a clean stop on
/// SIGINT/SIGTERM, and one-line errors.
@Suite struct ServeToolTests {
    static func tool() throws -> String {
        let dir = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        for candidate in [dir.appendingPathComponent("capture"), dir.deletingLastPathComponent().appendingPathComponent("capture")]
        where FileManager.default.isExecutableFile(atPath: candidate.path) {
            return candidate.path
        }
        throw TestFailure("no capture beside \(CommandLine.arguments[0]): build with 'swift build --build-tests'")
    }

    /// A running `capture serve` with its output collected as it comes.
    final class Serving: @unchecked Sendable {
        let process = Process()
        let home: URL
        private let collected = Collected()

        init(_ args: [String]) throws {
            home = FileManager.default.temporaryDirectory.appendingPathComponent("serve-home-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: home, withIntermediateDirectories: true)
            process.executableURL = URL(fileURLWithPath: try ServeToolTests.tool())
            process.arguments = ["serve"] + args
            var env = ProcessInfo.processInfo.environment
            env["HOME"] = home.path
            process.environment = env
            let o = Pipe(), e = Pipe()
            process.standardOutput = o
            process.standardError = e
            let c = collected
            o.fileHandleForReading.readabilityHandler = { c.add(out: $0.availableData) }
            e.fileHandleForReading.readabilityHandler = { c.add(err: $0.availableData) }
            try process.run()
        }

        deinit {
            if process.isRunning { process.terminate() }
            try? FileManager.default.removeItem(at: home)
        }

        var output: ProcessResult { collected.result(status: process.isRunning ? -1 : process.terminationStatus) }

        /// The URL printed, once it is.
        func url(timeout: Double = 60) -> String? {
            let deadline = Date(timeIntervalSinceNow: timeout)
            while Date() < deadline {
                let text = output.text
                if let r = text.range(of: " at http://"), let end = text[r.upperBound...].firstIndex(of: " ") {
                    return "http://" + text[r.upperBound..<end]
                }
                if !process.isRunning { return nil }
                usleep(50_000)
            }
            return nil
        }

        /// Waits for the exit (killing it after the deadline: nil).
        func exitStatus(timeout: Double = 30) -> Int32? {
            let deadline = Date(timeIntervalSinceNow: timeout)
            while process.isRunning, Date() < deadline { usleep(50_000) }
            if process.isRunning {
                kill(process.processIdentifier, SIGKILL)
                process.waitUntilExit()
                return nil
            }
            return process.terminationStatus
        }
    }

    @Test(arguments: [SIGTERM, SIGINT])
    func servesUntilASignalAndStopsWithStatus0(_ sig: Int32) throws {
        let serving = try Serving(["--port", "0", "--size", "640x480", "--quality", "70"])
        let url = try #require(serving.url(), "no URL: \(serving.output.stderr)")
        #expect(url.hasPrefix("http://127.0.0.1:"), "binds this machine only by default")
        let snapshot = try curl(url + "snapshot")
        #expect(snapshot.status == 200)
        let image = try #require(TestJPEG.decode(snapshot.body))
        #expect(image.width == 640 && image.height == 480)
        let state = try curl(url + "state")
        let json = try JSONSerialization.jsonObject(with: state.body) as? [String: Any]
        #expect(((json?["result"] as? [String: Any])?["encoder"] as? [String: Any])?["quality"] as? Int == 70)
        let probe = try run("/usr/bin/ffprobe", ["-v", "error", "-show_streams", "-of", "json", url + "?action=stream"])
        #expect(probe.status == 0 && probe.text.contains("\"mjpeg\""), "\(probe.stderr)")
        kill(serving.process.processIdentifier, sig)
        #expect(serving.exitStatus() == 0, "\(serving.output.stderr)")
    }

    @Test func printsAStatusLineEveryFewSeconds() throws {
        let serving = try Serving(["--port", "0"])
        _ = try #require(serving.url())
        let deadline = Date(timeIntervalSinceNow: 60)
        while Date() < deadline, !serving.output.text.contains(" fps, ") { usleep(100_000) }
        #expect(serving.output.text.contains("clients"), "\(serving.output.text)")
        kill(serving.process.processIdentifier, SIGTERM)
        #expect(serving.exitStatus() == 0)
    }

    @Test func fpsSetsTheCameraRateOrIsAOneLineError() throws {
        let serving = try Serving(["--port", "0", "--size", "640x480", "--fps", "15"])
        let url = try #require(serving.url(), "\(serving.output.stderr)")
        let state = try curl(url + "state")
        let source = ((try JSONSerialization.jsonObject(with: state.body) as? [String: Any])?["result"] as? [String: Any])?["source"] as? [String: Any]
        #expect(source?["desired_fps"] as? Double == 15, "\(String(describing: source))")
        kill(serving.process.processIdentifier, SIGTERM)
        #expect(serving.exitStatus() == 0)
        for bad in ["7", "0", "fast"] {
            let s = try Serving(["--port", "0", "--size", "640x480", "--fps", bad])
            #expect(s.exitStatus() == 1, "--fps \(bad)")
            let l = s.output.stderr.split(separator: "\n").filter { !$0.contains("using the virtual camera") }
            #expect(l.count == 1 && l[0].hasPrefix("capture: ") && l[0].contains("fps"), "--fps \(bad): \(s.output.stderr)")
        }
    }

    @Test func credentialsAndOriginFromTheCommandLine() throws {
        let serving = try Serving(["--port", "0", "--user", "u", "--password", "p", "--allow-origin", "*", "--max-clients", "1"])
        let url = try #require(serving.url())
        #expect(try curl(url + "state").status == 401)
        let ok = try curl(url + "state", ["-u", "u:p"])
        #expect(ok.status == 200 && ok.headers.contains("Access-Control-Allow-Origin: *"))
        kill(serving.process.processIdentifier, SIGTERM)
        #expect(serving.exitStatus() == 0)
    }

    @Test func aPortInUseIsAOneLineError() throws {
        let first = try Serving(["--port", "0"])
        let url = try #require(first.url())
        let port = try #require(url.split(separator: ":").last.flatMap { Int($0.dropLast()) })
        let second = try Serving(["--port", String(port)])
        #expect(second.exitStatus() == 1)
        let lines = second.output.stderr.split(separator: "\n").filter { !$0.contains("using the virtual camera") }
        #expect(lines.count == 1 && lines[0].contains("in use") && lines[0].contains("--port"), "\(second.output.stderr)")
        for bad in [["--host", "10.255.255.1"], ["--quality", "0"], ["--user", "u"], ["--port", "70000"]] {
            let s = try Serving(["--port", "0"] + bad)
            #expect(s.exitStatus() == 1, "\(bad)")
            let l = s.output.stderr.split(separator: "\n").filter { !$0.contains("using the virtual camera") }
            #expect(l.count == 1 && l[0].hasPrefix("capture: "), "\(bad): \(s.output.stderr)")
        }
        kill(first.process.processIdentifier, SIGTERM)
        #expect(first.exitStatus() == 0)
    }
}
