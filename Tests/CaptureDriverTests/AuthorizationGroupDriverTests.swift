// Authorization as Linux decides it, shown by `capture devices` run as root and, through setpriv,
// as nobody with and without the `video`/`audio` groups. Runs as root in the VM ("default"
// configuration), which has no udev: nodes are root:root 0600 until a test gives one a group.
import Capture
import Foundation
import Glibc
import Testing

@Suite(.serialized, .timeLimit(.minutes(3))) struct AuthorizationGroupDriverTests {
    /// What `capture devices` printed for one media type.
    struct Shown: CustomStringConvertible {
        var status: String, advice: String, stderr: String
        var description: String { "\(status): \(advice) [stderr: \(stderr)]" }
    }

    static func requireVM() throws {
        let env = ProcessInfo.processInfo.environment
        try #require(
            env["CAPTURE_VM"] == "1" && env["CAPTURE_VM_AS_USER"] != "1" && getuid() == 0
                && env["CAPTURE_VM_VIVID"] != nil && env["CAPTURE_VM_ALOOP"] != nil,
            "run through scripts/test (VM as root, with vivid and snd-aloop)")
    }

    /// The first node `authorizationStatus` looks at, as it sorts them.
    static func firstNode(_ media: MediaType) throws -> String {
        let (dir, prefix) = media == .video ? ("/dev", "video") : ("/dev/snd", "pcmC")
        let names = try FileManager.default.contentsOfDirectory(atPath: dir)
            .filter { $0.hasPrefix(prefix) && (media == .video || $0.hasSuffix("c")) }.sorted()
        return dir + "/" + (try #require(names.first, "no \(prefix) node in \(dir)"))
    }

    static func gid(_ name: String) throws -> gid_t { try #require(getgrnam(name), "no group \(name) in /etc/group").pointee.gr_gid }

    /// Gives `node` group `gid` and `mode` for `body`, then its owner and mode back.
    static func with(_ node: String, gid: gid_t, mode: mode_t, _ body: () throws -> Void) throws {
        var st = stat()
        try #require(stat(node, &st) == 0, "stat \(node): errno \(errno)")
        try #require(chown(node, st.st_uid, gid) == 0 && chmod(node, mode) == 0, "chgrp/chmod \(node): errno \(errno)")
        defer {
            _ = chown(node, st.st_uid, st.st_gid)
            _ = chmod(node, st.st_mode & 0o7777)
        }
        try body()
    }

    /// Runs `capture devices` as root (`groups` nil) or as uid/gid 65534 with exactly `groups`,
    /// and returns what it says of video and audio authorization.
    static func devices(as groups: [gid_t]?) throws -> (video: Shown, audio: Shown, stdout: String) {
        let (o, e) = try tool(["devices"], as: groups)
        func shown(_ media: String) throws -> Shown {
            let line = try #require(
                o.split(separator: "\n").first { $0.hasPrefix("\(media) authorization: ") }, "no \(media) line in: \(o)")
            let rest = line.dropFirst("\(media) authorization: ".count)
            let parts = rest.split(separator: ":", maxSplits: 1)
            return Shown(status: String(parts[0]), advice: parts.count > 1 ? String(parts[1].dropFirst()) : "", stderr: e)
        }
        return (try shown("video"), try shown("audio"), o)
    }

    /// Runs `capture ARGS` as `devices(as:)` does; returns its standard output and error.
    static func tool(_ args: [String], as groups: [gid_t]?) throws -> (stdout: String, stderr: String) {
        let dir = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        let tool = try #require(
            [dir.appendingPathComponent("capture"), dir.deletingLastPathComponent().appendingPathComponent("capture")]
                .first { FileManager.default.isExecutableFile(atPath: $0.path) },
            "no capture beside the test bundle: swift build --build-tests"
        ).path
        let p = Process()
        if let groups {
            p.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
            p.arguments =
                [
                    "--reuid=65534", "--regid=65534",
                    groups.isEmpty ? "--clear-groups" : "--groups=" + groups.map(String.init).joined(separator: ","),
                    "--", tool,
                ] + args
        } else {
            p.executableURL = URL(fileURLWithPath: tool)
            p.arguments = args
        }
        let out = Pipe(), err = Pipe()
        p.standardOutput = out
        p.standardError = err
        try p.run()
        let o = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        let e = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        try #require(
            p.terminationStatus == 0,
            "capture \(args.joined(separator: " ")) as \(groups.map { "nobody with groups \($0)" } ?? "root"): \(e)")
        return (o, e)
    }

    @Test func rootIsAuthorized() throws {
        try Self.requireVM()
        #expect(CaptureDevice.authorizationStatus(for: .video) == .authorized)
        #expect(CaptureDevice.authorizationAdvice(for: .audio) == nil)
        let shown = try Self.devices(as: nil)
        #expect(shown.video.status == "authorized" && shown.video.advice.isEmpty, "\(shown.video)")
        #expect(shown.audio.status == "authorized" && shown.audio.advice.isEmpty, "\(shown.audio)")
        let json = try Self.tool(["devices", "--json"], as: nil).stdout
        let list = try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [[String: Any]], "\(json)")
        #expect(Set(list.compactMap { $0["media_type"] as? String }) == ["video", "audio"], "\(json)")
        #expect(list.allSatisfy { $0["authorization"] as? String == "authorized" && $0["authorization_advice"] == nil }, "\(json)")
    }

    @Test func withoutTheGroupsDeniedWithAdvice() throws {
        try Self.requireVM()
        let video = try Self.firstNode(.video), audio = try Self.firstNode(.audio)
        // Give the nodes the devtmpfs default explicitly, whatever ran before.
        try Self.with(video, gid: 0, mode: 0o600) {
            try Self.with(audio, gid: 0, mode: 0o600) {
                let shown = try Self.devices(as: [])
                #expect(shown.video.status == "denied", "\(shown.video)")
                #expect(
                    shown.video.advice.contains("group 'video'") && shown.video.advice.contains("sudo usermod -aG video $USER")
                        && shown.video.advice.contains(video), "\(shown.video)")
                #expect(
                    shown.video.stderr.contains("no camera this user may open") && shown.video.stderr.contains("usermod -aG video"),
                    "\(shown.video.stderr)")
                #expect(!shown.stdout.contains(video + "\t"), "a node nobody may open is listed: \(shown.stdout)")
                #expect(shown.audio.status == "denied", "\(shown.audio)")
                #expect(
                    shown.audio.advice.contains("group 'audio'") && shown.audio.advice.contains("sudo usermod -aG audio $USER")
                        && shown.audio.advice.contains("/dev/snd/pcmC"), "\(shown.audio)")
                // `devices --json` gives each device its media type's status and advice, as the text does.
                let json = try Self.tool(["devices", "--json"], as: []).stdout
                let list = try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [[String: Any]], "\(json)")
                for media in ["video", "audio"] {
                    let text = media == "video" ? shown.video : shown.audio
                    let entries = list.filter { $0["media_type"] as? String == media }
                    #expect(!entries.isEmpty, "no \(media) device in: \(json)")
                    for d in entries {
                        #expect(d["authorization"] as? String == "denied", "\(d)")
                        #expect(d["authorization_advice"] as? String == text.advice, "\(d) against \(text)")
                    }
                }
            }
        }
    }

    @Test func withTheGroupAuthorized() throws {
        try Self.requireVM()
        let videoGID = try Self.gid("video"), audioGID = try Self.gid("audio")
        let video = try Self.firstNode(.video), audio = try Self.firstNode(.audio)
        try Self.with(video, gid: videoGID, mode: 0o660) {
            try Self.with(audio, gid: audioGID, mode: 0o660) {
                let inVideo = try Self.devices(as: [videoGID])
                #expect(inVideo.video.status == "authorized" && inVideo.video.advice.isEmpty, "\(inVideo.video)")
                #expect(inVideo.stdout.contains(video + "\t"), "the camera nobody may now open is listed: \(inVideo.stdout)")
                #expect(inVideo.audio.status == "denied" && inVideo.audio.advice.contains("group 'audio'"), "\(inVideo.audio)")

                let inAudio = try Self.devices(as: [audioGID])
                #expect(inAudio.audio.status == "authorized" && inAudio.audio.advice.isEmpty, "\(inAudio.audio)")
                #expect(inAudio.video.status == "denied" && inAudio.video.advice.contains("group 'video'"), "\(inAudio.video)")

                let inBoth = try Self.devices(as: [videoGID, audioGID])
                #expect(inBoth.video.status == "authorized" && inBoth.audio.status == "authorized", "\(inBoth.video) \(inBoth.audio)")
            }
        }
        // Modes restored: denied again.
        #expect(try Self.devices(as: [videoGID, audioGID]).video.status == "denied")
    }

    /// A udev rule may give the nodes another group (e.g. plugdev): the advice names that one.
    @Test func nodeOfAnotherGroupNamesThatGroup() throws {
        try Self.requireVM()
        let other = "plugdev", otherGID = try Self.gid("plugdev")
        let video = try Self.firstNode(.video)
        try Self.with(video, gid: otherGID, mode: 0o660) {
            let outside = try Self.devices(as: [try Self.gid("video")])
            #expect(outside.video.status == "denied", "\(outside.video)")
            #expect(
                outside.video.advice.contains("group '\(other)'") && outside.video.advice.contains("sudo usermod -aG \(other) $USER")
                    && outside.video.advice.contains(video), "\(outside.video)")
            #expect(try Self.devices(as: [otherGID]).video.status == "authorized")
        }
    }
}
