// `capture serve` on vivid in the VM: a real device served to real clients (curl, ffprobe), and a
// device removed under a stream and plugged in again. The removal is the kernel's own unbind of
// vivid's platform device: its nodes leave /dev and every open descriptor gets ENODEV, as with a
// USB camera pulled out; the bind brings the nodes back, as plugging it in again. The server keeps
// running offline, lets go of the removed device (no descriptor left on it), and takes the camera
// back when it returns.
import Capture
import CaptureTestSupport
import Foundation
import Testing

@Suite(.serialized, .timeLimit(.minutes(4))) struct ServeDriverTests {
    /// `capture serve --port 0 ARGS` with a fresh HOME (its album).
    static func serve(_ args: [String]) throws -> RunningProcess {
        try RunningProcess(["serve", "--port", "0"] + args, freshHome: true)
    }

    struct Response {
        var status: Int
        var body: Data
        var headers: String
        var curlStatus: Int32
    }

    /// `curl` to the end of the answer (or `maxTime`).
    static func get(_ url: String, maxTime: Int = 30) throws -> Response {
        let head = FileManager.default.temporaryDirectory.appendingPathComponent("head-\(UUID().uuidString)")
        let body = FileManager.default.temporaryDirectory.appendingPathComponent("body-\(UUID().uuidString)")
        defer {
            try? FileManager.default.removeItem(at: head)
            try? FileManager.default.removeItem(at: body)
        }
        let status = try shell("curl -s -S --max-time \(maxTime) -D \(head.path) -o \(body.path) '\(url)'").status
        let headers = (try? String(contentsOf: head, encoding: .utf8)) ?? ""
        let line = headers.split(separator: "\r\n").last { $0.hasPrefix("HTTP/") } ?? ""
        return Response(
            status: line.split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? -1,
            body: (try? Data(contentsOf: body)) ?? Data(), headers: headers, curlStatus: status)
    }

    /// Runs `command` with /bin/sh; its status and output (stdout and stderr together).
    @discardableResult
    static func shell(_ command: String) throws -> (status: Int32, output: String) {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/bin/sh")
        p.arguments = ["-c", command + " 2>&1"]
        let pipe = Pipe()
        p.standardOutput = pipe
        try p.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        p.waitForExit()
        return (p.terminationStatus, String(decoding: data, as: UTF8.self))
    }

    static func source(_ state: Data) -> [String: Any]? {
        ((try? JSONSerialization.jsonObject(with: state) as? [String: Any])?["result"] as? [String: Any])?["source"] as? [String: Any]
    }

    static func camera() throws -> CaptureDevice {
        try #require(try VM.vividCameras(count: 1).first)
    }

    @Test func servesVividToCurlAndFFprobe() throws {
        let cam = try Self.camera()
        let serving = try Self.serve(["--device", cam.path, "--size", "640x360", "--format", "YUYV", "--quality", "80"])
        let base = try #require(serving.servedURL().map { String($0.dropLast()) }, "no URL: \(serving.stderr)")

        for path in ["/snapshot", "/?action=snapshot"] {
            let r = try Self.get(base + path)
            #expect(r.status == 200 && r.headers.lowercased().contains("content-type: image/jpeg"), "\(path): \(r.status) \(r.headers)")
            let image = try #require(TestJPEG.decode(r.body), "\(path) is not a JPEG (\(r.body.count) bytes)")
            #expect(image.width == 640 && image.height == 360, "\(path): \(image.width)x\(image.height)")
            // vivid's colour bars are clean in the lower part of the picture.
            let wrong = ColorBars.mismatches(image, row: image.height * 3 / 4)
            #expect(wrong.isEmpty, "\(path): not vivid's bars: \(wrong)")
        }

        let state = try Self.get(base + "/state")
        #expect(state.status == 200)
        let stateText = String(decoding: state.body, as: UTF8.self)
        let source = try #require(Self.source(state.body), "\(stateText)")
        #expect(source["online"] as? Bool == true, "\(source)")
        let resolution = source["resolution"] as? [String: Any]
        let width = resolution?["width"] as? Int, height = resolution?["height"] as? Int
        #expect(width == 640 && height == 360, "\(source)")
        #expect((source["captured_fps"] as? Double ?? 0) > 0, "\(source)")

        for path in ["/stream", "/?action=stream"] {
            let probe = try Self.shell("ffprobe -v error -analyzeduration 1000000 -show_streams -of json '\(base)\(path)'")
            #expect(probe.status == 0, "ffprobe \(path): \(probe.output)")
            let json = try JSONSerialization.jsonObject(with: Data(probe.output.utf8)) as? [String: Any]
            let stream = try #require((json?["streams"] as? [[String: Any]])?.first, "\(probe.output)")
            #expect(stream["codec_name"] as? String == "mjpeg", "\(stream)")
            let width = stream["width"] as? Int, height = stream["height"] as? Int
            #expect(width == 640 && height == 360, "\(stream)")
        }
        #expect(serving.terminate() == 0, "capture serve did not stop cleanly: \(serving.stderr)")
    }

    @Test func aDeviceRemovedMidStreamEndsTheStreamCleanlyAndIsTakenBackWhenPluggedInAgain() throws {
        let cam = try Self.camera()
        let modprobe = try #require(ProcessInfo.processInfo.environment["CAPTURE_VM_MODPROBE"], "needs the VM harness")
        let params = try #require(ProcessInfo.processInfo.environment["CAPTURE_VM_VIVID"], "needs vivid loaded")
        // The platform device behind the node (vivid.0, vivid.1, ...).
        let node = URL(fileURLWithPath: cam.path).lastPathComponent
        let platform = URL(fileURLWithPath: "/sys/class/video4linux/\(node)/device").resolvingSymlinksInPath().lastPathComponent
        try #require(platform.hasPrefix("vivid."), "\(cam.path) is not on a vivid platform device (\(platform))")

        let serving = try Self.serve(["--device", cam.path, "--size", "320x180", "--format", "YUYV", "--quality", "70"])
        let base = try #require(serving.servedURL().map { String($0.dropLast()) }, "no URL: \(serving.stderr)")
        var removed = false
        defer {
            // vivid back as it was, for whatever runs next in this VM.
            _ = serving.terminate()
            if removed {
                _ = try? Self.shell("\(modprobe) -r vivid; \(modprobe) vivid \(params == "1" ? "" : params)")
            }
        }

        // Two readers: curl over HTTP/1.1 (the end is the final chunk, and curl exits 0 only when
        // the response really ended) and over HTTP/1.0 (the end is the close).
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("serve-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let readers = try ["1.1", "1.0"].map { version -> (Process, URL, Pipe) in
            let file = dir.appendingPathComponent("stream-\(version)")
            let p = Process()
            p.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
            p.arguments = ["-s", "-S", "-N", "--http\(version)", "--max-time", "90", "-o", file.path, base + "/stream"]
            let errors = Pipe()
            p.standardError = errors
            try p.run()
            return (p, file, errors)
        }
        func partsSaved(_ file: URL) -> Int {
            (try? MultipartBody.parse(Array((try? Data(contentsOf: file)) ?? Data())).parts.count) ?? 0
        }
        var deadline = Date(timeIntervalSinceNow: 30)
        while Date() < deadline, readers.contains(where: { partsSaved($0.1) < 3 }) { usleep(100_000) }
        try #require(!readers.contains { partsSaved($0.1) < 3 }, "the readers got too few parts: \(serving.stderr)")

        let (status, output) = try Self.shell("echo \(platform) > /sys/bus/platform/drivers/vivid/unbind")
        try #require(status == 0, "unbind \(platform): \(output)")
        removed = true
        let pulled = Date()
        #expect(!FileManager.default.fileExists(atPath: cam.path), "\(cam.path) is still there after the unbind")

        // Each stream ends: the response ends, after whole parts and the close delimiter.
        for (p, file, errors) in readers {
            deadline = Date(timeIntervalSinceNow: 15)
            while p.isRunning, Date() < deadline { usleep(50_000) }
            let name = p.arguments!.first { $0.hasPrefix("--http") }!
            if p.isRunning {
                Issue.record("curl \(name): the stream did not end within 15 s of the removal")
                p.terminate()
            }
            p.waitForExit()
            let message = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            #expect(p.terminationStatus == 0, "curl \(name) exited \(p.terminationStatus): \(message)")
            let body = try MultipartBody.parse(Array(try Data(contentsOf: file)))
            #expect(body.parts.count >= 3, "\(name): \(body.parts.count) parts")
            #expect(body.parts.allSatisfy { $0.isCompleteJPEG }, "\(name): a part is not a whole JPEG")
            let closed = body.isClosed
            #expect(closed, "\(name): no close delimiter after the last part (\(body.trailing) bytes after it)")
            if let last = body.parts.last {
                let image = TestJPEG.decode(Data(last.jpeg))
                #expect(image?.width == 320 && image?.height == 180, "\(name): the last part does not decode at 320x180")
            }
        }
        print("serve: streams ended \(String(format: "%.2f", Date().timeIntervalSince(pulled))) s after the removal")

        // The server keeps answering: /state says offline; a snapshot or a new stream is refused.
        var source: [String: Any]?
        deadline = Date(timeIntervalSinceNow: 10)
        repeat {
            source = Self.source(try Self.get(base + "/state").body)
            if source?["online"] as? Bool == false { break }
            usleep(200_000)
        } while Date() < deadline
        #expect(source?["online"] as? Bool == false, "/state after the removal: \(String(describing: source))")
        let snapshot = try Self.get(base + "/snapshot", maxTime: 10)
        #expect(snapshot.status == 503, "/snapshot after the removal: \(snapshot.status)")
        let stream = try Self.get(base + "/stream", maxTime: 10)
        #expect(stream.status == 503, "/stream after the removal: \(stream.status)")
        #expect(try Self.get(base + "/").status == 200)
        #expect(serving.process.isRunning, "capture serve exited: \(serving.stderr)")

        // Every descriptor on the removed device is closed (a held one reads "/dev/videoN (deleted)").
        let fds = "/proc/\(serving.process.processIdentifier)/fd"
        func heldRemoved() -> [String] {
            ((try? FileManager.default.contentsOfDirectory(atPath: fds)) ?? []).compactMap {
                try? FileManager.default.destinationOfSymbolicLink(atPath: "\(fds)/\($0)")
            }.filter { $0.hasPrefix("/dev/") && $0.hasSuffix("(deleted)") }
        }
        deadline = Date(timeIntervalSinceNow: 10)
        while Date() < deadline, !heldRemoved().isEmpty { usleep(200_000) }
        #expect(heldRemoved().isEmpty, "the server still holds the removed device: \(heldRemoved())")
        // The status line says so too.
        deadline = Date(timeIntervalSinceNow: 12)
        while Date() < deadline, !serving.stdout.contains("offline") { usleep(200_000) }
        #expect(serving.stdout.contains("offline"), "no offline status line: \(serving.stdout)")
        #expect(serving.process.isRunning, "capture serve exited while the camera was gone: \(serving.stderr)")

        // Plugged in again: the server takes it back by itself.
        let bound = try Self.shell("echo \(platform) > /sys/bus/platform/drivers/vivid/bind")
        try #require(bound.status == 0, "bind \(platform): \(bound.output)")
        removed = false
        let plugged = Date()
        deadline = Date(timeIntervalSinceNow: 20)
        repeat {
            source = Self.source(try Self.get(base + "/state", maxTime: 5).body)
            if source?["online"] as? Bool == true { break }
            usleep(200_000)
        } while Date() < deadline
        #expect(source?["online"] as? Bool == true, "/state after the bind: \(String(describing: source))")
        if source?["online"] as? Bool == true {
            print("serve: online \(String(format: "%.2f", Date().timeIntervalSince(plugged))) s after the bind")
        }
        #expect(serving.waitFor(timeout: 5) { $0.contains("online again") }, "no status line for the return: \(serving.stdout)")
        let back = try Self.get(base + "/snapshot", maxTime: 20)
        #expect(back.status == 200, "/snapshot after the bind: \(back.status) \(String(decoding: back.body.prefix(200), as: UTF8.self))")
        let image = TestJPEG.decode(back.body)
        #expect(image?.width == 320 && image?.height == 180, "/snapshot after the bind is not a 320x180 JPEG (\(back.body.count) bytes)")
        let probe = try Self.shell("ffprobe -v error -analyzeduration 1000000 -show_streams -of json '\(base)/stream'")
        #expect(probe.status == 0, "ffprobe /stream after the bind: \(probe.output)")
        let json = try? JSONSerialization.jsonObject(with: Data(probe.output.utf8)) as? [String: Any]
        let probed = (json?["streams"] as? [[String: Any]])?.first
        let codec = probed?["codec_name"] as? String, width = probed?["width"] as? Int, height = probed?["height"] as? Int
        #expect(codec == "mjpeg" && width == 320 && height == 180, "/stream after the bind: \(probe.output)")

        // Gone again: SIGTERM stops it with status 0 while it waits for the camera.
        let unboundAgain = try Self.shell("echo \(platform) > /sys/bus/platform/drivers/vivid/unbind")
        try #require(unboundAgain.status == 0, "unbind \(platform) again: \(unboundAgain.output)")
        removed = true
        deadline = Date(timeIntervalSinceNow: 10)
        repeat {
            source = Self.source(try Self.get(base + "/state", maxTime: 5).body)
            if source?["online"] as? Bool == false { break }
            usleep(200_000)
        } while Date() < deadline
        #expect(source?["online"] as? Bool == false, "/state after the second unbind: \(String(describing: source))")
        #expect(serving.terminate() == 0, "capture serve did not stop cleanly while the camera was gone: \(serving.stderr)")
        if try Self.shell("echo \(platform) > /sys/bus/platform/drivers/vivid/bind").status == 0 { removed = false }
    }
}
