// The `capture` tool on real drivers in the VM, as a user runs it: vivid unplugged (its
// `disconnect` control, set by v4l2-ctl from another process) under `stream`, `record`,
// `preview` and `serve`, and `capture audio` from snd-aloop's capture side while a tone plays into
// its playback side. Runs in a configuration of its own ("tool": one vivid device, snd-aloop),
// alone in its test process: vivid brings a disconnected node back only once every descriptor on
// it is closed, so this process never opens the camera (the tool's exit closes its own), and
// another suite's devices (RecordingDriverTests unbinds vivid) must not be held here.
import CaptureTestSupport
import Foundation
import Testing

@Suite(.serialized) struct ToolDriverTests {
    static func require() throws {
        let env = ProcessInfo.processInfo.environment
        try #require(
            env["CAPTURE_VM"] == "1" && env["CAPTURE_VM_VIVID"] != nil && env["CAPTURE_VM_ALOOP"] != nil,
            "run through scripts/test (VM with vivid and snd-aloop)")
    }

    /// vivid's video capture node, found through sysfs (without opening it).
    static func vividNode() throws -> String {
        let base = "/sys/class/video4linux"
        for node in try FileManager.default.contentsOfDirectory(atPath: base).sorted() {
            let name = (try? String(contentsOfFile: "\(base)/\(node)/name", encoding: .utf8)) ?? ""
            if name.hasPrefix("vivid-") && name.contains("vid-cap") { return "/dev/\(node)" }
        }
        throw TestFailure("no vivid capture node in \(base)")
    }

    /// Runs v4l2-ctl with `arguments`; its exit status.
    @discardableResult
    static func v4l2ctl(_ arguments: [String]) throws -> Int32 {
        try runProcess("/usr/bin/v4l2-ctl", arguments, timeout: 20).status
    }

    /// Waits until `pid` has `node`'s buffers mapped: it streams.
    static func waitStreaming(_ pid: Int32, _ node: String, timeout: Double = 60) -> Bool {
        let end = Date().addingTimeInterval(timeout)
        while Date() < end {
            if let maps = try? String(contentsOfFile: "/proc/\(pid)/maps", encoding: .utf8), maps.contains(node) { return true }
            usleep(50_000)
        }
        return false
    }

    /// Waits until the node is back after an unplug (every descriptor closed) and answers.
    static func waitReconnected(_ node: String) throws {
        let end = Date().addingTimeInterval(20)
        while Date() < end {
            if FileManager.default.fileExists(atPath: node), (try? v4l2ctl(["-d", node, "--get-fmt-video"])) == 0 { return }
            usleep(100_000)
        }
        throw TestFailure("\(node) did not come back after the unplug")
    }

    /// Starts `capture COMMAND` on vivid at 320x180, waits until it streams and a second more,
    /// then sets vivid's `control` from another process (v4l2-ctl). Returns the tool, the movie
    /// path (record) and when the control had been set.
    static func runAndInject(_ command: String, _ control: String) throws -> (RunningProcess, String, Date) {
        let node = try vividNode()
        try waitReconnected(node)
        let movie = FileManager.default.temporaryDirectory.appendingPathComponent("fault-\(UUID().uuidString.prefix(8)).mp4").path
        let common = ["--device", node, "--size", "320x180"]
        var env = ProcessInfo.processInfo.environment
        let arguments: [String]
        switch command {
        case "stream": arguments = ["stream"] + common + ["--frames", "100000", "--json"]
        case "record": arguments = ["record"] + common + ["--codec", "mjpeg", movie]
        case "preview":
            // SDL's dummy video driver: a real window without a display server.
            env["SDL_VIDEODRIVER"] = "dummy"
            arguments = ["preview"] + common + ["--window", "160x90"]
        default: arguments = ["serve"] + common + ["--port", "0"]
        }
        let tool = try RunningProcess(tool: "capture", arguments, environment: env)
        try #require(waitStreaming(tool.process.processIdentifier, node), "\(command) never streamed: \(tool.stderr)")
        if command == "serve" { #expect(tool.servedURL() != nil, "\(tool.stdout)") }
        // Frames for a moment first: the fault lands on a running stream.
        Thread.sleep(forTimeInterval: 0.5)
        try #require(try v4l2ctl(["-d", node, "-c", "\(control)=1"]) == 0, "v4l2-ctl could not set \(control) on \(node)")
        // From the control's return: v4l2-ctl's own start (slow under emulation) is not the tool's.
        return (tool, movie, Date())
    }

    /// Waits for the tool's end; its status, the seconds since `pressed`, and its "capture: " lines.
    static func ending(_ tool: RunningProcess, _ pressed: Date) -> (Int32?, Double, [Substring]) {
        let status = tool.exitStatus(timeout: 20)
        let took = Date().timeIntervalSince(pressed)
        return (status, took, tool.stderr.split(separator: "\n").filter { $0.hasPrefix("capture: ") })
    }

    /// Unplugging the camera under `stream`, `record` and `preview` ends each within 2 s with one
    /// typed "disconnected" line and exit status 1 (record keeping what it wrote, readable);
    /// `serve` says "offline" within 2 s and keeps serving.
    @Test(arguments: ["stream", "record", "preview", "serve"])
    func unplugEndsTheCommand(_ command: String) throws {
        try Self.require()
        let (tool, movie, pressed) = try Self.runAndInject(command, "disconnect")
        defer { try? FileManager.default.removeItem(atPath: movie) }
        if command == "serve" {
            let offline = tool.waitFor(timeout: 10) { $0.contains("offline: ") }
            let took = Date().timeIntervalSince(pressed)
            print("tool: serve offline after \(String(format: "%.3f", took)) s")
            #expect(offline && took < 2, "serve: offline \(offline) after \(took) s: \(tool.stdout) \(tool.stderr)")
            #expect(tool.process.isRunning, "serve ended: \(tool.stderr)")
            #expect(tool.terminate() == 0, "\(tool.stderr)")
        } else {
            let (status, took, lines) = Self.ending(tool, pressed)
            print("tool: \(command) ended after \(String(format: "%.3f", took)) s, status \(String(describing: status))")
            #expect(status == 1 && took < 2, "\(command): status \(String(describing: status)) after \(took) s")
            #expect(lines.count == 1 && lines[0].contains("was disconnected"), "\(command): \(tool.stderr)")
            if command == "record" {
                #expect(lines.first?.contains("the file holds what was recorded") == true, "\(tool.stderr)")
                let probe = try runProcess("/usr/bin/ffprobe", ["-v", "error", movie], timeout: 30)
                #expect(probe.status == 0, "ffprobe: \(probe.stderr)")
            }
        }
        try Self.waitReconnected(try Self.vividNode())
    }

    /// A fatal driver error (vivid's injected one) ends `record` the same way, with the
    /// library's words for it rather than "the session stopped" (`stream` and `preview` take the
    /// same path as for an unplug).
    @Test func aFatalStreamingErrorEndsARecording() throws {
        try Self.require()
        let command = "record"
        let (tool, movie, pressed) = try Self.runAndInject(command, "inject_fatal_streaming_error")
        defer { try? FileManager.default.removeItem(atPath: movie) }
        let (status, took, lines) = Self.ending(tool, pressed)
        print("tool: \(command) ended after a fatal error in \(String(format: "%.3f", took)) s: \(lines)")
        #expect(status == 1 && took < 2, "\(command): status \(String(describing: status)) after \(took) s")
        #expect(lines.count == 1 && !lines[0].contains("disconnected") && !lines[0].contains("the session stopped"), "\(tool.stderr)")
        #expect(lines.first?.contains("the file holds what was recorded") == true, "\(tool.stderr)")
    }

    /// A 440 Hz tone at -9 dBFS played into hw:Loopback,0,N is recorded from hw:Loopback,1,N at
    /// the player's rate, pitch and level, for two subdevices and two rates (the player opens
    /// first, so its format is the pair's).
    @Test(arguments: [(5, 44_100), (6, 48_000)])
    func audioRecordsTheLoopbackTone(_ subdevice: Int, _ rate: Int) throws {
        try Self.require()
        let player = try TonePlayer(device: "hw:Loopback,0,\(subdevice)", frequency: 440, decibels: -9, rate: rate)
        defer { player.stop() }
        let wav = FileManager.default.temporaryDirectory.appendingPathComponent("tone-\(subdevice).wav").path
        defer { try? FileManager.default.removeItem(atPath: wav) }
        let r = try runProcess(
            try builtTool().path, ["audio", "--device", "hw:Loopback,1,\(subdevice)", "--seconds", "1", "--output", wav, "--json"],
            timeout: 60)
        try #require(r.status == 0, "\(r.stderr)")
        let json = try #require(try JSONSerialization.jsonObject(with: r.stdout) as? [String: Any], "\(r.text)")
        #expect(json["sample_rate"] as? Int == rate, "\(json)")
        let data = try Data(contentsOf: URL(fileURLWithPath: wav))
        let dataAt = try #require(data.range(of: Data("data".utf8))).lowerBound + 8
        let channels = json["channels"] as? Int ?? 1
        #expect(json["sample_format"] as? String == "s16", "\(json)")
        // The first channel, after the first 0.1 s (the player's start).
        let all = data[dataAt...].withUnsafeBytes { Array($0.bindMemory(to: Int16.self)) }
        let first = stride(from: 0, to: all.count, by: channels).map { Float(all[$0]) / 32768 }.dropFirst(rate / 10)
        let samples = Array(first)
        let pitch = estimateFrequency(samples, rate: rate)
        let rms = (samples.reduce(0) { $0 + Double($1 * $1) } / Double(max(1, samples.count))).squareRoot()
        // A sine's RMS is its peak over √2 (-3.01 dB).
        let level = 20 * log10(rms) + 3.0103
        print("tool: hw:Loopback,1,\(subdevice) at \(rate) Hz: \(String(format: "%.2f", pitch)) Hz, \(String(format: "%.2f", level)) dBFS")
        #expect(abs(pitch - 440) < 2, "pitch \(pitch) Hz")
        #expect(abs(level + 9) < 0.5, "level \(level) dBFS")
    }

    /// Nothing plays into the loopback: every sample is 0, which the tool reports in one typed
    /// line with exit status 1 and no file, not as a recording.
    @Test func audioOfPureDigitalSilenceIsAnError() throws {
        try Self.require()
        let wav = FileManager.default.temporaryDirectory.appendingPathComponent("silence.wav").path
        let r = try runProcess(
            try builtTool().path, ["audio", "--device", "hw:Loopback,1,7", "--seconds", "0.5", "--output", wav], timeout: 60)
        #expect(r.status == 1, "\(r.status): \(r.text)")
        #expect(r.stderr.hasPrefix("capture: ") && r.stderr.contains("only digital silence"), "\(r.stderr)")
        #expect(!FileManager.default.fileExists(atPath: wav), "a silent file was left")
    }

    /// The issue's case: `capture audio` opens the capture side first (48 kHz stereo), so a
    /// player that opens second at 44.1 kHz mono cannot play into the pair; the recording is
    /// all zeros and the tool says so (exit 1) instead of writing a silent file.
    @Test func aPlayerShutOutByTheCaptureSidesFormatIsReported() throws {
        try Self.require()
        let wav = FileManager.default.temporaryDirectory.appendingPathComponent("shut-out.wav").path
        let tool = try RunningProcess(
            tool: "capture", ["audio", "--device", "hw:Loopback,1,4", "--seconds", "1.5", "--output", wav])
        // The pair's format is fixed once the capture side has its hardware parameters (ALSA's
        // proc file says "closed" until then).
        let params = "/proc/asound/Loopback/pcm1c/sub4/hw_params"
        let end = Date().addingTimeInterval(30)
        var configured = false
        while !configured, Date() < end, tool.process.isRunning {
            let text = (try? String(contentsOfFile: params, encoding: .utf8)) ?? ""
            configured = text.contains("rate:")
            if !configured { usleep(20_000) }
        }
        try #require(configured, "the tool never configured the capture side: \(tool.stderr)")
        let player = try? TonePlayer(device: "hw:Loopback,0,4", frequency: 440, decibels: -9, rate: 44_100, channels: 1)
        defer { player?.stop() }
        #expect(player == nil, "the player opened second in another format and was not refused")
        let status = tool.exitStatus(timeout: 30)
        #expect(status == 1, "\(String(describing: status)): \(tool.stdout)")
        #expect(tool.stderr.contains("only digital silence"), "\(tool.stderr)")
        #expect(!FileManager.default.fileExists(atPath: wav), "a silent file was left")
    }
}
