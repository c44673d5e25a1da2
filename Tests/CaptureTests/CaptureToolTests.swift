// `capture` as a new user meets it: --help for every command, one-line typed errors for bad
// destinations (a missing folder, a read-only file system, a full disk: real tmpfs mounts) with no
// file left behind, EXIF Make/Model in album photos (read back with exiftool), and audio of exactly
// the length asked for (the WAV's frame count).
import Capture
import CaptureTestSupport
import Foundation
import Testing

@Suite struct CaptureToolTests {
    struct Result {
        var status: Int32, stdout: String, stderr: String
        var errorLines: [Substring] { stderr.split(separator: "\n") }
    }

    static func tool() throws -> String { try builtTool().path }

    /// Runs `path args` with HOME in `home` (so album photos land there) and waits for it.
    static func run(_ path: String, _ args: [String], home: URL? = nil) throws -> Result {
        var env = ProcessInfo.processInfo.environment
        if let home {
            env["HOME"] = home.path
            env["XDG_CONFIG_HOME"] = home.appendingPathComponent(".config").path
            env.removeValue(forKey: "XDG_PICTURES_DIR")
        }
        let r = try runProcess(path, args, environment: env, timeout: 300)
        return Result(status: r.status, stdout: r.text, stderr: r.stderr)
    }

    static func capture(_ args: [String], home: URL? = nil) throws -> Result { try run(try tool(), args, home: home) }

    /// A fresh folder in the temporary directory (these tests run on the host only).
    static func folder() throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("capture-tool-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    /// A tmpfs of `kib` KiB mounted at a new folder (as root), with `options`; unmounted by `body`'s end.
    static func withTmpfs(kib: Int, options: String = "", _ body: (URL) throws -> Void) throws {
        let dir = try folder()
        defer { try? FileManager.default.removeItem(at: dir) }
        let mounted = try run(
            "/bin/mount", ["-t", "tmpfs", "-o", "size=\(kib)k" + (options.isEmpty ? "" : "," + options), "tmpfs", dir.path])
        guard mounted.status == 0 else {
            throw TestFailure("cannot mount a tmpfs (these tests need root): \(mounted.stderr)")
        }
        defer { _ = try? run("/bin/umount", [dir.path]) }
        try body(dir)
    }

    static let commands = ["devices", "snap", "stream", "record", "audio", "preview", "serve"]

    @Test(arguments: commands)
    func helpForEveryCommand(_ command: String) throws {
        for args in [[command, "--help"], [command, "-h"], ["help", command], [command, "--device", "x", "--help"]] {
            let r = try Self.capture(args)
            #expect(r.status == 0, "\(args): \(r.stderr)")
            #expect(r.stdout.hasPrefix("usage: capture \(command)"), "\(args): \(r.stdout)")
            #expect(r.stderr.isEmpty, "\(args): \(r.stderr)")
        }
    }

    @Test func helpListsEveryCommandAndUnknownOnesAreOneLineWithStatus2() throws {
        let all = try Self.capture(["help"])
        #expect(all.status == 0)
        for c in Self.commands { #expect(all.stdout.contains("usage: capture \(c)"), "\(c) missing from help") }
        for args in [["nonsense"], ["help", "nonsense"], ["snap", "--bogus"]] {
            let r = try Self.capture(args)
            #expect(r.status == 2, "\(args): \(r.status)")
            #expect(r.errorLines.count == 1, "\(args): \(r.stderr)")
        }
    }

    /// A one-line error in the library's words, a non-zero exit, and nothing at `path`.
    func expectRefused(_ r: Result, _ words: String, nothingAt path: String, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(r.status != 0, sourceLocation: sourceLocation)
        #expect(r.errorLines.count == 1, "\(r.stderr)", sourceLocation: sourceLocation)
        #expect(r.stderr.hasPrefix("capture: ") && r.stderr.contains(words), "\(r.stderr)", sourceLocation: sourceLocation)
        #expect(!r.stderr.contains("Error Domain") && !r.stderr.contains("UserInfo"), "\(r.stderr)", sourceLocation: sourceLocation)
        #expect(!FileManager.default.fileExists(atPath: path), "\(path) was left behind", sourceLocation: sourceLocation)
    }

    @Test func snapIntoAMissingFolderSaysSo() throws {
        let path = "/nonexistent-\(UUID().uuidString)/dir/x.jpg"
        expectRefused(try Self.capture(["snap", "--device", "virtual", "--output", path]), "no such folder", nothingAt: path)
        let wav = "/nonexistent-\(UUID().uuidString)/a.wav"
        expectRefused(
            try Self.capture(["audio", "--device", "virtual", "--seconds", "0.2", "--output", wav]), "no such folder", nothingAt: wav)
    }

    @Test func snapOntoAReadOnlyFileSystemSaysSo() throws {
        try Self.withTmpfs(kib: 256, options: "ro") { dir in
            let path = dir.appendingPathComponent("x.jpg").path
            expectRefused(try Self.capture(["snap", "--device", "virtual", "--output", path]), "read-only file system", nothingAt: path)
            let folderOutput = dir.appendingPathComponent("album").path + "/"
            expectRefused(
                try Self.capture(["snap", "--device", "virtual", "--output", folderOutput]), "read-only file system",
                nothingAt: folderOutput)
        }
    }

    @Test func snapOntoAFullDiskLeavesNoPartialFile() throws {
        try Self.withTmpfs(kib: 16) { dir in
            // 4 KiB free: less than any 640x480 JPEG of the colour bars.
            let filler = dir.appendingPathComponent("filler")
            try Data(count: 12 * 1024).write(to: filler)
            let path = dir.appendingPathComponent("x.jpg").path
            expectRefused(
                try Self.capture(["snap", "--device", "virtual", "--size", "640x480", "--output", path]), "is full", nothingAt: path)
            let left = try FileManager.default.contentsOfDirectory(atPath: dir.path)
            #expect(left == ["filler"], "left behind: \(left)")
            // The album the same way.
            let home = dir.appendingPathComponent("home")
            try FileManager.default.createDirectory(at: home, withIntermediateDirectories: true)
            let r = try Self.capture(["snap", "--device", "virtual", "--size", "640x480"], home: home)
            expectRefused(r, "is full", nothingAt: home.appendingPathComponent("Pictures/x.jpg").path)
            let pictures = (try? FileManager.default.contentsOfDirectory(atPath: home.appendingPathComponent("Pictures").path)) ?? []
            #expect(pictures.isEmpty, "left in the album: \(pictures)")
        }
    }

    /// `snap --time-code`: the photo carries the capture time of its frame (CLOCK_REALTIME ms
    /// mod 2^32), which lies between the launch of the tool and its return. (How far before the
    /// return is a measurement, not asserted: it grows with the machine's load.)
    @Test func snapTimeCodeRoundTrips() throws {
        let dir = try Self.folder()
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("t.jpg").path
        func now() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }
        let launched = now()
        let r = try Self.capture(["snap", "--device", "virtual", "--size", "640x480", "--time-code", "--output", path])
        let returned = now()
        #expect(r.status == 0, "\(r.stderr)")
        let code = try #require(
            VirtualCamera.timeCode(inJPEG: try Data(contentsOf: URL(fileURLWithPath: path))), "no time code in the photo")
        // Modulo 2^32 ms, as the code is: the frame was captured within this run.
        let sinceLaunch = Int64(UInt32(truncatingIfNeeded: Int64(code) - launched))
        let beforeReturn = Int64(UInt32(truncatingIfNeeded: returned - Int64(code)))
        #expect(
            sinceLaunch <= returned - launched && beforeReturn <= returned - launched,
            "code \(code), launched \(launched), returned \(returned)")
    }

    @Test func snapReplacesAFileAtomicallyAndCarriesMakeAndModel() throws {
        let dir = try Self.folder()
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("x.jpg").path
        try Data("old".utf8).write(to: URL(fileURLWithPath: path))
        let r = try Self.capture(["snap", "--device", "virtual", "--preset", "low", "--output", path])
        #expect(r.status == 0, "\(r.stderr)")
        let jpeg = try Data(contentsOf: URL(fileURLWithPath: path))
        #expect(jpeg.prefix(2) == Data([0xFF, 0xD8]))
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path) == ["x.jpg"], "a temporary file was left")
        // Into the album: EXIF Make and Model of the device, as exiftool reads them.
        let home = dir.appendingPathComponent("home")
        let album = try Self.capture(["snap", "--device", "virtual", "--preset", "low"], home: home)
        #expect(album.status == 0, "\(album.stderr)")
        let photos = try FileManager.default.contentsOfDirectory(atPath: home.appendingPathComponent("Pictures").path)
        #expect(photos.count == 1 && photos[0].hasPrefix("IMG_") && photos[0].hasSuffix(".jpg"), "\(photos)")
        let devices = try Self.capture(["devices", "--json"])
        let list = try #require(try JSONSerialization.jsonObject(with: Data(devices.stdout.utf8)) as? [[String: Any]])
        let name = try #require(list.first { ($0["path"] as? String)?.hasPrefix("virtual:") == true }?["name"] as? String)
        for photo in [home.appendingPathComponent("Pictures/" + photos[0]).path, path] {
            let exif = try Self.run("/usr/bin/exiftool", ["-s3", "-Make", "-Model", photo])
            #expect(exif.status == 0, "exiftool (apt-get install libimage-exiftool-perl): \(exif.stderr)")
            let lines = exif.stdout.split(separator: "\n").map(String.init)
            #expect(lines.count == 2 && !lines[0].isEmpty, "Make/Model of \(photo): \(exif.stdout)")
            #expect(lines.last == name, "Model of \(photo): \(exif.stdout), device \(name)")
            let valid = try Self.run("/usr/bin/exiftool", ["-validate", "-warning", "-a", "-s3", photo])
            #expect(valid.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "OK", "exiftool -validate \(photo): \(valid.stdout)")
        }
    }

    /// `devices --json` carries what the text output's "MEDIA authorization: STATUS[: ADVICE]"
    /// lines say, in every entry of that media type, and agrees with the library's own answer.
    /// (The VM's AuthorizationGroupDriverTests checks it for a denied user.)
    @Test func devicesJSONCarriesTheAuthorizationTheTextPrints() throws {
        let text = try Self.capture(["devices"])
        #expect(text.status == 0, "\(text.stderr)")
        let json = try Self.capture(["devices", "--json"])
        #expect(json.status == 0, "\(json.stderr)")
        let list = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [[String: Any]], "\(json.stdout)")
        for media in MediaType.allCases {
            let prefix = "\(media.rawValue) authorization: "
            let line = try #require(text.stdout.split(separator: "\n").first { $0.hasPrefix(prefix) }, "\(text.stdout)")
            let parts = line.dropFirst(prefix.count).split(separator: ":", maxSplits: 1)
            let status = String(parts[0]), advice = parts.count > 1 ? String(parts[1].dropFirst()) : nil
            #expect(status == CaptureDevice.authorizationStatus(for: media).rawValue)
            #expect(advice == CaptureDevice.authorizationAdvice(for: media))
            for d in list where d["media_type"] as? String == media.rawValue {
                #expect(d["authorization"] as? String == status, "\(d)")
                #expect(d["authorization_advice"] as? String == advice, "\(d)")
                // Absent, not null, when there is nothing to do.
                #expect((d["authorization_advice"] != nil) == (advice != nil), "\(d)")
            }
        }
        // The host lists at least the virtual camera, so the video check above ran.
        #expect(list.contains { $0["media_type"] as? String == "video" && $0["authorization"] is String }, "\(json.stdout)")
    }

    /// `capture audio --seconds S` writes exactly round(S * rate) frames, whatever S and the rate.
    @Test(arguments: [0.5, 1, 2.3], [44_100, 48_000])
    func audioRecordsExactlyTheSecondsAsked(_ seconds: Double, _ rate: Int) throws {
        let dir = try Self.folder()
        defer { try? FileManager.default.removeItem(at: dir) }
        let wav = dir.appendingPathComponent("a.wav").path
        let r = try Self.capture([
            "audio", "--device", "virtual", "--seconds", "\(seconds)", "--rate", "\(rate)", "--output", wav, "--json",
        ])
        #expect(r.status == 0, "\(r.stderr)")
        let data = try Data(contentsOf: URL(fileURLWithPath: wav))
        // The RIFF header: the rate at 24, block align at 32, the data chunk's size before its bytes.
        func u32(_ at: Int) -> Int { data[at..<at + 4].enumerated().reduce(0) { $0 | Int($1.element) << (8 * $1.offset) } }
        func u16(_ at: Int) -> Int { Int(data[at]) | Int(data[at + 1]) << 8 }
        #expect(u32(24) == rate, "rate \(u32(24))")
        let dataAt = try #require(data.range(of: Data("data".utf8))).lowerBound
        let frames = u32(dataAt + 4) / u16(32)
        #expect(frames == Int((seconds * Double(rate)).rounded()), "\(frames) frames for \(seconds) s at \(rate) Hz")
        #expect(data.count == dataAt + 8 + u32(dataAt + 4), "the header's size and the file's disagree")
    }
}

extension CaptureToolTests {
    /// `snap --output` (and `audio --output`) at a FIFO, a device node (made with mknod in a
    /// temporary folder, when this user may) and a symbolic link: refused in one line naming what
    /// is there, before the device opens (a FIFO would block the save), and each left as it was,
    /// the link's target too.
    @Test func snapNeverReplacesWhatIsNotARegularFile() throws {
        let dir = try Self.folder()
        defer { try? FileManager.default.removeItem(at: dir) }
        let fifo = dir.appendingPathComponent("fifo.jpg").path, node = dir.appendingPathComponent("full.jpg").path
        let link = dir.appendingPathComponent("link.jpg").path, target = dir.appendingPathComponent("target").path
        #expect(mkfifo(fifo, 0o644) == 0)
        // /dev/full's numbers: a write would fail, not reach anything.
        let madeNode = mknod(node, S_IFCHR | 0o644, dev_t(1 << 8 | 7)) == 0
        if !madeNode { print("CaptureToolTests: mknod not permitted here (errno \(errno)); the device node case is skipped") }
        try Data("target".utf8).write(to: URL(fileURLWithPath: target))
        #expect(symlink(target, link) == 0)
        var cases = [(fifo, "is a FIFO", S_IFIFO), (link, "is a symbolic link", S_IFLNK)]
        if madeNode { cases.append((node, "is a character device", S_IFCHR)) }
        for (path, words, type) in cases {
            let r = try Self.capture(["snap", "--device", "virtual", "--preset", "low", "--output", path])
            #expect(r.status == 1, "\(path): \(r.stderr)")
            #expect(r.errorLines.count == 1 && r.stderr.contains("\(path) \(words)"), "\(r.stderr)")
            var st = stat()
            #expect(lstat(path, &st) == 0 && st.st_mode & S_IFMT == type, "\(path) was changed")
        }
        // `capture audio --output` the same way.
        for (path, words, type) in cases {
            let r = try Self.capture(["audio", "--device", "virtual", "--seconds", "0.2", "--output", path])
            #expect(r.status == 1 && r.errorLines.count == 1 && r.stderr.contains("\(path) \(words)"), "\(path): \(r.stderr)")
            var st = stat()
            #expect(lstat(path, &st) == 0 && st.st_mode & S_IFMT == type, "\(path) was changed")
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: target)) == Data("target".utf8))
        let left = try FileManager.default.contentsOfDirectory(atPath: dir.path).sorted()
        #expect(left == (["fifo.jpg", "link.jpg", "target"] + (madeNode ? ["full.jpg"] : [])).sorted(), "\(left)")
        // A folder that takes no new files is named as such (root may write there by mode).
        if getuid() == 0 {
            let r = try Self.capture(["snap", "--device", "virtual", "--preset", "low", "--output", "/proc/x.jpg"])
            #expect(r.status == 1 && r.stderr.contains("/proc does not take new files"), "\(r.stderr)")
        }
    }

    /// Ctrl-C or SIGTERM during `capture audio`: exit 0, the summary, and a WAV whose header
    /// says exactly the samples the file holds, as many as the summary says.
    @Test(arguments: [SIGINT, SIGTERM])
    func audioEndsCleanlyOnASignal(_ sig: Int32) throws {
        let dir = try Self.folder()
        defer { try? FileManager.default.removeItem(at: dir) }
        let wav = dir.appendingPathComponent("a.wav").path
        let p = try RunningProcess(tool: "capture", ["audio", "--device", "virtual", "--seconds", "600", "--output", wav, "--json"])
        // Samples are on disk: the recording runs.
        let end = Date().addingTimeInterval(60)
        while Date() < end, ((try? FileManager.default.attributesOfItem(atPath: wav)[.size] as? Int) ?? 0) < 10_000 {
            usleep(50_000)
        }
        p.signal(sig)
        let status = p.exitStatus(timeout: 30)
        #expect(status == 0, "\(String(describing: status)): \(p.stderr)")
        let data = try Data(contentsOf: URL(fileURLWithPath: wav))
        func u32(_ at: Int) -> Int { data[at..<at + 4].enumerated().reduce(0) { $0 | Int($1.element) << (8 * $1.offset) } }
        func u16(_ at: Int) -> Int { Int(data[at]) | Int(data[at + 1]) << 8 }
        let dataAt = try #require(data.range(of: Data("data".utf8))).lowerBound
        #expect(u32(dataAt + 4) > 0 && data.count == dataAt + 8 + u32(dataAt + 4), "header says \(u32(dataAt + 4)), file \(data.count)")
        #expect(u32(4) == data.count - 8, "RIFF size \(u32(4)) for \(data.count) bytes")
        let json = try #require(try JSONSerialization.jsonObject(with: Data(p.stdout.utf8)) as? [String: Any], "\(p.stdout)")
        #expect(json["frames"] as? Int == u32(dataAt + 4) / u16(32), "\(json)")
    }
}

/// Foundation's file errors in the library's words: the mapping the tool's one error line uses.
@Suite struct FoundationErrorWordsTests {
    @Test func cocoaAndPOSIXFileErrorsBecomeCaptureErrors() throws {
        let path = "/data/photos/x.jpg"
        let cases: [(any Error, CaptureError.Code, String)] = [
            (CocoaError(.fileWriteOutOfSpace, userInfo: [NSFilePathErrorKey: path]), .diskFull, "is full"),
            (CocoaError(.fileWriteVolumeReadOnly, userInfo: [NSFilePathErrorKey: path]), .readOnlyFileSystem, "read-only file system"),
            (CocoaError(.fileWriteNoPermission, userInfo: [NSURLErrorKey: URL(fileURLWithPath: path)]), .permissionDenied, "no permission"),
            (CocoaError(.fileNoSuchFile, userInfo: [NSFilePathErrorKey: path]), .invalidArgument, "no such folder: /data/photos"),
            // The errno underneath wins over the Cocoa code.
            (
                NSError(
                    domain: NSCocoaErrorDomain, code: CocoaError.fileWriteUnknown.rawValue,
                    userInfo: [NSFilePathErrorKey: path, NSUnderlyingErrorKey: NSError(domain: NSPOSIXErrorDomain, code: Int(ENOSPC))]),
                .diskFull, "is full"
            ),
            (POSIXError(.EROFS), .readOnlyFileSystem, "read-only file system"),
        ]
        for (error, code, words) in cases {
            let e = try #require(CaptureError(foundation: error), "\(error)")
            #expect(e.code == code && e.message.contains(words), "\(error) became \(e)")
            #expect(!e.message.contains("Domain") && !e.message.contains("\n"), "\(e.message)")
        }
        #expect(CaptureError(foundation: CancellationError()) == nil)
    }
}

/// The command line as a user types it (issue 28): `--name=value`, refused combinations and
/// output names, `capture` alone, help about help, and the size snap reports.
extension CaptureToolTests {
    /// A JPEG's width and height, from its first SOF segment.
    static func jpegSize(_ d: Data) -> (Int, Int)? {
        let b = [UInt8](d)
        var i = 2
        while i + 8 < b.count, b[i] == 0xFF {
            let marker = b[i + 1], length = Int(b[i + 2]) << 8 | Int(b[i + 3])
            if [0xC0, 0xC1, 0xC2].contains(marker) { return (Int(b[i + 7]) << 8 | Int(b[i + 8]), Int(b[i + 5]) << 8 | Int(b[i + 6])) }
            i += 2 + length
        }
        return nil
    }

    /// Every command takes `--name=value` as `--name value`: a snap and a stream at the size so
    /// given, and for the others the option's own refusal, not "unknown option --name=value". A
    /// flag takes no value.
    @Test func everyOptionTakesTheEqualsForm() throws {
        let dir = try Self.folder()
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("x.jpg").path
        let snap = try Self.capture(["snap", "--device=virtual", "--size=640x480", "--quality=80", "--output=\(path)"])
        #expect(snap.status == 0, "\(snap.stderr)")
        let jpeg = try Data(contentsOf: URL(fileURLWithPath: path))
        #expect(Self.jpegSize(jpeg).map { [$0.0, $0.1] } == [640, 480])
        let stream = try Self.capture(["stream", "--device=virtual", "--size=320x240", "--frames=3", "--json"])
        #expect(stream.status == 0, "\(stream.stderr)")
        let json = try #require(try JSONSerialization.jsonObject(with: Data(stream.stdout.utf8)) as? [String: Any], "\(stream.stdout)")
        #expect(json["frames"] as? Int == 3 && json["width"] as? Int == 320 && json["height"] as? Int == 240, "\(json)")
        let wav = dir.appendingPathComponent("a.wav").path
        let audio = try Self.capture(["audio", "--device=virtual", "--seconds=0.2", "--rate=48000", "--output=\(wav)"])
        #expect(audio.status == 0, "\(audio.stderr)")
        #expect(FileManager.default.fileExists(atPath: wav))
        let refusals: [([String], String)] = [
            (["record", "--device=virtual", "--codec=vp9", dir.appendingPathComponent("a.mp4").path], "unknown codec 'vp9'"),
            (["preview", "--device=virtual", "--gravity=sideways"], "--gravity takes one of"),
            (["serve", "--device=virtual", "--port=99999"], "--port must be a whole number"),
            (["devices", "--json=yes"], "--json takes no value"),
            (["snap", "--bogus=1"], "unknown option --bogus"),
        ]
        // Usage errors, all of them: status 2.
        for (args, words) in refusals {
            let r = try Self.capture(args)
            #expect(r.status == 2 && r.errorLines.count == 1 && r.stderr.contains(words), "\(args): \(r.stderr)")
        }
    }

    /// `--preset` and `--size` both choose the size: given together, every camera command refuses
    /// in one line that says to give one, before the camera opens (nothing written).
    @Test func presetWithSizeIsRefused() throws {
        let dir = try Self.folder()
        defer { try? FileManager.default.removeItem(at: dir) }
        let both = ["--device", "virtual", "--preset", "low", "--size", "640x480"]
        let jpg = dir.appendingPathComponent("x.jpg").path, mp4 = dir.appendingPathComponent("x.mp4").path
        // (Each ends at once should the pair be taken: one frame, one second, a port that cannot be.)
        for args in [
            ["snap"] + both + ["--output", jpg], ["stream"] + both + ["--frames", "1"], ["record"] + both + ["--seconds", "1", mp4],
            ["preview"] + both, ["serve"] + both + ["--port", "99999"],
        ] {
            let r = try Self.capture(args)
            #expect(r.status == 2, "\(args): \(r.status) \(r.stdout)")
            #expect(r.errorLines.count == 1 && r.stderr.contains("give --preset or --size, not both"), "\(args): \(r.stderr)")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path).isEmpty)
    }

    /// An output name whose extension says another format than the one written is refused in
    /// one line naming the extensions the command writes, and nothing is written; the right
    /// extension, in any case, is taken.
    @Test func anOutputNameSaysWhatIsWritten() throws {
        let dir = try Self.folder()
        defer { try? FileManager.default.removeItem(at: dir) }
        let cases: [([String], String)] = [
            (["snap", "--device", "virtual", "--preset", "low", "--output", dir.appendingPathComponent("x.png").path], ".jpg or .jpeg"),
            (["audio", "--device", "virtual", "--seconds", "0.2", "--output", dir.appendingPathComponent("x.mp3").path], ".wav"),
            (["record", "--device", "virtual", "--seconds", "1", dir.appendingPathComponent("x.mov").path], ".mp4 or .mkv"),
        ]
        for (args, extensions) in cases {
            let r = try Self.capture(args)
            expectRefused(r, extensions, nothingAt: args.last!)
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path).isEmpty)
        let upper = dir.appendingPathComponent("x.JPEG").path
        let r = try Self.capture(["snap", "--device", "virtual", "--preset", "low", "--output", upper])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: upper)).prefix(2) == Data([0xFF, 0xD8]))
    }

    /// `capture` alone is a usage error (status 2) with a short summary on standard error: each
    /// command on one line, and how to get help; not every command's usage.
    @Test func captureAloneIsAShortSummary() throws {
        let r = try Self.capture([])
        #expect(r.status == 2)
        #expect(r.stdout.isEmpty, "\(r.stdout)")
        #expect(r.errorLines.count <= 12, "\(r.errorLines.count) lines: \(r.stderr)")
        for c in Self.commands {
            #expect(r.errorLines.filter { $0.hasPrefix("  \(c) ") }.count == 1, "\(c) in \(r.stderr)")
        }
        #expect(r.stderr.contains("capture help COMMAND"), "\(r.stderr)")
        #expect(!r.stderr.contains("--device"), "the options are help's: \(r.stderr)")
    }

    /// `capture help --help` (and `-h`, and `help help`): help's own usage, status 0.
    @Test func helpAboutHelp() throws {
        for args in [["help", "--help"], ["help", "-h"], ["help", "help"]] {
            let r = try Self.capture(args)
            #expect(r.status == 0, "\(args): \(r.stderr)")
            #expect(r.stdout.hasPrefix("usage: capture help"), "\(args): \(r.stdout)")
            #expect(r.stderr.isEmpty, "\(args): \(r.stderr)")
        }
    }

    /// `snap` prints the size of the file it wrote (EXIF included), into a file and the album.
    @Test func snapPrintsTheSizeOfTheFileWritten() throws {
        let dir = try Self.folder()
        defer { try? FileManager.default.removeItem(at: dir) }
        let home = dir.appendingPathComponent("home")
        for (args, home) in [
            (["snap", "--device", "virtual", "--preset", "low", "--output", dir.appendingPathComponent("x.jpg").path], nil),
            (["snap", "--device", "virtual", "--preset", "low"], home),
        ] {
            let r = try Self.capture(args, home: home)
            #expect(r.status == 0, "\(r.stderr)")
            // PATH<TAB>WxH<TAB>N bytes<TAB>sequence S
            let fields = r.stdout.split(separator: "\n").first?.split(separator: "\t") ?? []
            let path = try #require(fields.first.map(String.init), "\(r.stdout)")
            let size = try #require(try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int)
            #expect(fields.count == 4 && fields[2] == "\(size) bytes", "\(r.stdout) for a file of \(size) bytes")
        }
    }
}
