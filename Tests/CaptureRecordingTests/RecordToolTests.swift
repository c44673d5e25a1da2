import CaptureTestSupport
import Foundation
import Testing

/// `capture record` as a child process on the virtual camera.
@Suite struct RecordToolTests {
    /// Starts `capture record ... OUTPUT`; waits until ffprobe reads at least `frames` frames
    /// from the growing file (a deadline for hangs only). Returns the process and what it read.
    private func startRecording(_ args: [String], until frames: Int) throws -> (RunningProcess, Int) {
        let p = try RunningProcess(["record"] + args)
        let output = URL(fileURLWithPath: args.last!)
        let end = Date().addingTimeInterval(90)
        var seen = 0
        while Date() < end, p.process.isRunning {
            if FileManager.default.fileExists(atPath: output.path), let probe = try? Probe(output) { seen = probe.frames }
            if seen >= frames { break }
            Thread.sleep(forTimeInterval: 0.2)
        }
        return (p, seen)
    }

    /// A recording killed with SIGKILL leaves an MP4 that ffprobe reads: every fragment written
    /// before the kill (fragments of 1 s, so at least the frames seen before it).
    @Test func aKilledRecordingLeavesAReadableMP4() throws {
        let folder = try TempFolder("kill")
        defer { folder.remove() }
        let url = folder.file("killed.mp4")
        let (p, seen) = try startRecording(["--device", "virtual", "--size", "320x240", "--seconds", "120", url.path], until: 60)
        #expect(seen >= 60, "the growing file showed \(seen) frames")
        p.signal(SIGKILL)
        #expect(p.exitStatus() == 128 + SIGKILL)
        let probe = try Probe(url)
        #expect(probe.codec == "h264" && probe.width == 320 && probe.height == 240, "\(probe)")
        #expect(probe.frames >= seen, "\(probe.frames) frames after the kill, \(seen) before")
        let rate = probe.frameRate.split(separator: "/").compactMap { Double($0) }
        let fps = try #require(rate.count == 2 && rate[1] > 0 ? rate[0] / rate[1] : nil, "frame rate \(probe.frameRate)")
        #expect(probe.duration >= Double(seen - 1) / fps - 0.001, "\(probe.duration) s for \(probe.frames) frames at \(fps) fps")
    }

    /// --pre-record: SIGUSR1 starts a recording that begins in the past, so 3 s of media end
    /// less than 3 s after it; SIGTERM before any SIGUSR1 ends with status 0 and no file.
    @Test func preRecordStartsOnSIGUSR1InThePast() throws {
        let folder = try TempFolder("tool-prerecord")
        defer { folder.remove() }
        let url = folder.file("motion.mp4")
        let p = try RunningProcess([
            "record", "--device", "virtual", "--size", "320x240", "--pre-record", "1.5", "--seconds", "3", "--json",
            url.path,
        ])
        // Ready (its handlers set, it says so), then 2 s for the 1.5 s it keeps to fill.
        #expect(waitUntil(timeout: 60) { p.stderr.contains("send SIGUSR1") }, "\(p.stderr)")
        Thread.sleep(forTimeInterval: 2)
        #expect(p.process.isRunning && !FileManager.default.fileExists(atPath: url.path), "no file before the trigger")
        let trigger = Date()
        p.signal(SIGUSR1)
        let status = p.exitStatus(timeout: 60)
        let elapsed = Date().timeIntervalSince(trigger)
        let data = p.output.stdout
        #expect(status == 0, "\(p.stderr)")
        let json = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any], "\(String(decoding: data, as: UTF8.self))")
        let duration = try #require(json["duration"] as? Double)
        #expect(abs(duration - 3) <= 1.0 / 30 + 0.001, "\(json)")
        #expect(elapsed < 3, "3 s of media took \(elapsed) s after the trigger: no past in it")
        let probe = try Probe(url)
        #expect(probe.frames == json["frames"] as? Int && abs(probe.duration - duration) < 0.002, "\(probe) \(json)")

        let quiet = folder.file("never.mp4")
        let q = try RunningProcess(["record", "--device", "virtual", "--size", "320x240", "--pre-record", "1", quiet.path])
        #expect(waitUntil(timeout: 60) { q.stderr.contains("send SIGUSR1") }, "\(q.stderr)")
        #expect(q.terminate(timeout: 60) == 0, "\(q.stderr)")
        #expect(!FileManager.default.fileExists(atPath: quiet.path))
    }

    /// SIGTERM finishes the file: status 0, the summary, and a file with every frame it counts.
    @Test func sigtermFinishesTheFile() throws {
        let folder = try TempFolder("term")
        defer { folder.remove() }
        let url = folder.file("stopped.mkv")
        let (p, seen) = try startRecording(
            ["--device", "virtual", "--size", "320x240", "--codec", "mjpeg", "--json", url.path],
            until: 15)
        #expect(seen >= 15)
        #expect(p.terminate(timeout: 60) == 0, "\(p.stderr)")
        let data = p.output.stdout
        let json = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any], "\(String(decoding: data, as: UTF8.self))")
        #expect(json["ended"] as? String == "stopped" && json["codec"] as? String == "mjpeg", "\(json)")
        let probe = try Probe(url)
        #expect(probe.codec == "mjpeg" && probe.frames == json["frames"] as? Int, "\(probe) \(json)")
        #expect(probe.frames >= seen)
    }

    /// --seconds stops on the capture clock: 2 s of 30 fps within one frame.
    @Test func secondsStopsOnTime() throws {
        let folder = try TempFolder("seconds")
        defer { folder.remove() }
        let url = folder.file("two.mp4")
        let r = try runProcess(
            try builtTool().path, ["record", "--device", "virtual", "--size", "640x480", "--seconds", "2", "--json", url.path])
        #expect(r.status == 0, "\(r.stderr)")
        let json = try #require(try JSONSerialization.jsonObject(with: r.stdout) as? [String: Any])
        #expect(json["ended"] as? String == "maximumDurationReached", "\(json)")
        let probe = try Probe(url)
        #expect(probe.codec == "h264" && probe.width == 640 && probe.height == 480 && probe.frames == json["frames"] as? Int, "\(probe)")
        let drops = (json["drops"] as? [String: Int])?.values.reduce(0, +) ?? -1
        #expect(probe.duration <= 2 + 1.0 / 60 + 0.001, "\(probe.duration)")
        if drops == 0 { #expect(probe.duration >= 2 - 1.0 / 30 - 0.001, "\(probe.duration)") }
    }

    /// Bad input: one line each, nothing recorded; status 2 for a mistake in the command line, 1
    /// for what only running finds (a missing folder, a server that is not there).
    @Test func badArgumentsAndPathsAreOneLineErrors() throws {
        let folder = try TempFolder("bad")
        defer { folder.remove() }
        let tool = try builtTool().path
        let cases: [([String], String, Int32)] = [
            (["record", "--device", "virtual", "--codec", "vp9", folder.file("a.mp4").path], "unknown codec 'vp9'", 2),
            (["record", "--device", "virtual", folder.file("a.avi").path], "name it .mp4 or .mkv", 2),
            (
                ["record", "--device", "virtual", "--seconds", "2", folder.url.appendingPathComponent("missing/a.mp4").path],
                "folder does not exist", 1
            ),
            (["record", "--device", "virtual"], "one OUTPUT file", 2),
            (["record", "--device", "virtual", "rtsp://127.0.0.1:1/live"], "cannot publish to rtsp://127.0.0.1:1/live", 1),
            (["record", "--device", "virtual", "--codec", "mjpeg", "rtsp://127.0.0.1:1/live"], "RTSP publishing carries H.264", 2),
            (["record", "--device", "virtual", "--audio-codec", "flac", folder.file("a.mkv").path], "unknown audio codec 'flac'", 2),
            (["record", "--device", "virtual", "--audio-codec", "opus", folder.file("a.mp4").path], "name the OUTPUT .mkv", 2),
            (["record", "--device", "virtual", "--pre-record", "0", folder.file("a.mp4").path], "--pre-record takes a number", 2),
            (["record", "--device", "virtual", "--pre-record", "2", "rtsp://127.0.0.1:1/live"], "--pre-record records into a file", 2),
            (["record", "--device", "virtual", "-x", folder.file("a.mp4").path], "unknown option -x", 2),
        ]
        for (args, expected, status) in cases {
            let r = try runProcess(tool, args)
            let lines = r.stderr.split(separator: "\n")
            #expect(r.status == status, "\(args): status \(r.status)")
            #expect(lines.count == 1 && r.stderr.contains(expected), "\(args): \(r.stderr)")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder.url.path).isEmpty)
    }

    /// RTSP carries H.264: asked for MJPEG, the tool says what to type (`--codec h264`), not the
    /// library's Swift name, before the camera opens.
    @Test func rtspWithMJPEGNamesTheOptionToType() throws {
        let r = try runProcess(try builtTool().path, ["record", "--device", "virtual", "--codec", "mjpeg", "rtsp://127.0.0.1:1/live"])
        #expect(r.status == 2, "status \(r.status)")
        #expect(r.stderr.split(separator: "\n").count == 1 && r.stderr.contains("use --codec h264"), "\(r.stderr)")
        #expect(!r.stderr.contains(".h264"), "\(r.stderr)")
    }
}
