import Capture
import CaptureTestSupport
import CaptureWebRTC
import Foundation
import Testing

/// A virtual camera (and microphone) in a running session, for one test.
final class WebRTCRig {
    let camera: InstalledCamera
    let microphone: VirtualMicrophone?
    let session = CaptureSession()

    init(_ name: String, mode: VirtualCamera.Mode = InstalledCamera.smallMode, audio: Bool = true, tone: Double = 1000) throws {
        camera = try InstalledCamera("WebRTC \(name)", modes: [mode])
        session.addInput(try camera.input())
        if audio {
            let mic = try InstalledMicrophone("WebRTC mic", frequency: tone)
            microphone = mic.microphone
            session.addInput(try mic.input())
        } else {
            microphone = nil
        }
        session.startRunning()
    }

    func stop() {
        session.stopRunning()
        camera.uninstall()
        if let microphone { VirtualMicrophone.uninstall(microphone) }
    }
}

/// A browser driver of Tests/browser as a child process that reads one JSON object per line on
/// its stdin and writes one per line on its stdout. Thread-safe.
final class JSONLineProcess: @unchecked Sendable {
    static let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("browser")
    private let name: String
    private let process = Process()
    private let input = Pipe()
    private let output = Pipe()
    private let errors = Pipe()
    private let lock = NSLock()
    private var lines: [String] = []
    private var partial = Data()
    private var errorText = Data()

    /// Runs `python3 Tests/browser/SCRIPT ARGUMENTS...`.
    init(_ script: String, _ arguments: [String]) throws {
        name = script
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", Self.folder.appendingPathComponent(script).path] + arguments
        process.standardInput = input
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        output.fileHandleForReading.readabilityHandler = { [weak self] h in
            let d = h.availableData
            if d.isEmpty { h.readabilityHandler = nil } else { self?.take(d) }
        }
        errors.fileHandleForReading.readabilityHandler = { [weak self] h in
            let d = h.availableData
            if d.isEmpty { h.readabilityHandler = nil } else { self?.lock.withLock { self?.errorText.append(d) } }
        }
    }

    deinit {
        output.fileHandleForReading.readabilityHandler = nil
        errors.fileHandleForReading.readabilityHandler = nil
        // (SIGKILL: the test runner's threads block SIGTERM, and a child inherits that mask.)
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitForExit()
        }
    }

    private func take(_ d: Data) {
        lock.withLock {
            partial.append(d)
            while let nl = partial.firstIndex(of: UInt8(ascii: "\n")) {
                lines.append(String(decoding: partial[partial.startIndex..<nl], as: UTF8.self))
                partial = Data(partial[(nl + 1)...])
            }
        }
    }

    /// Kills the script and everything it started (Playwright's driver, the browser and its
    /// helpers) with SIGKILL, at once and without a word to anyone: a browser that crashes or is
    /// killed. Returns how many processes were killed.
    @discardableResult
    func killAll() -> Int {
        var tree: Set<Int32> = [process.processIdentifier]
        var grew = true
        while grew {
            grew = false
            for entry in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] {
                guard let pid = Int32(entry), !tree.contains(pid),
                    let stat = try? String(contentsOfFile: "/proc/\(entry)/stat", encoding: .utf8),
                    let close = stat.lastIndex(of: ")")
                else { continue }
                // pid (comm) state ppid ...
                let fields = stat[stat.index(after: close)...].split(separator: " ")
                if fields.count > 1, let parent = Int32(fields[1]), tree.contains(parent) {
                    tree.insert(pid)
                    grew = true
                }
            }
        }
        for pid in tree { kill(pid, SIGKILL) }
        process.waitForExit()
        return tree.count
    }

    var stderr: String { lock.withLock { String(decoding: errorText, as: UTF8.self) } }

    func send(_ object: [String: Any]) throws {
        let body = try JSONSerialization.data(withJSONObject: object)
        try input.fileHandleForWriting.write(contentsOf: body + Data("\n".utf8))
    }

    /// The next line with `key` (the unread lines before it are dropped), waiting at most
    /// `timeout` seconds.
    func next(with key: String, timeout: Double) async throws -> [String: Any] {
        let end = Date().addingTimeInterval(timeout)
        while Date() < end {
            let found: [String: Any]? = lock.withLock {
                while !lines.isEmpty {
                    let l = lines.removeFirst()
                    if let o = try? JSONSerialization.jsonObject(with: Data(l.utf8)) as? [String: Any], o[key] != nil { return o }
                }
                return nil
            }
            if let found { return found }
            if !process.isRunning, lock.withLock({ lines.isEmpty }) { break }
            try await Task.sleep(for: .milliseconds(5))
        }
        throw TestFailure("\(name) gave no \(key) line in \(timeout) s: \(stderr.suffix(2000))")
    }
}

/// Debian's chromium driven by Tests/browser/whep_peer.py: its offers come out on one JSON line,
/// the answers go in on one, and its report comes out last. Thread-safe.
final class BrowserPeer: Sendable {
    private let driver: JSONLineProcess

    init(viewers: Int = 1, window: Double = 3, audio: Bool = true) throws {
        driver = try JSONLineProcess(
            "whep_peer.py", ["--viewers", "\(viewers)", "--window", "\(window)"] + (audio ? [] : ["--no-audio"]))
    }

    func offers() async throws -> [String] {
        try #require(try await driver.next(with: "offers", timeout: 30)["offers"] as? [String])
    }

    /// Answers pages (nil leaves a page unanswered for now); `measure` starts the measurement.
    func send(answers: [String?] = [], measure: Bool = true) throws {
        try driver.send(["answers": answers.map { $0 ?? NSNull() as Any }, "measure": measure])
    }

    func report(timeout: Double = 30) async throws -> [[String: Any]] {
        try #require(try await driver.next(with: "viewers", timeout: timeout)["viewers"] as? [[String: Any]])
    }
}

/// One viewer in Debian's chromium that joins and leaves again and again, in one browser and one
/// page (Tests/browser/whep_cycles.py): a cycle costs a peer connection, not a browser. Thread-safe.
final class BrowserCycles: Sendable {
    private let driver: JSONLineProcess

    init(audio: Bool = true) throws {
        driver = try JSONLineProcess("whep_cycles.py", audio ? [] : ["--no-audio"])
    }

    /// A new peer connection's offer (the previous one closed), after its ICE gathering.
    func offer() async throws -> String {
        try driver.send(["offer": true])
        return try #require(try await driver.next(with: "offer", timeout: 30)["offer"] as? String)
    }

    /// Sets the answer and waits until the connection is up and a video frame was decoded (at
    /// most 5 s): the connection's state then ("connected", or what it was at the timeout) and
    /// the milliseconds to the first frame, if one came.
    func connect(answer: String) async throws -> (state: String, firstFrameMs: Double?) {
        try driver.send(["answer": answer])
        let r = try await driver.next(with: "state", timeout: 30)
        return (r["state"] as? String ?? "?", r["firstFrameMs"] as? Double)
    }

    /// Kills the browser (SIGKILL to it and every process of it): no DELETE, no DTLS close.
    @discardableResult
    func kill() -> Int { driver.killAll() }

    /// Closes the peer connection.
    func close() async throws {
        try driver.send(["close": true])
        _ = try await driver.next(with: "closed", timeout: 30)
    }
}

/// A compact offer as a browser makes it (recvonly H.264 and Opus, bundled, ICE and DTLS
/// attributes, an mDNS host candidate as Chromium's), for tests that need no browser on the other side.
func syntheticOffer(
    videoPayloadType: Int = 102, profile: String = "42e01f", packetizationMode: Int = 1, audio: Bool = true, video: Bool = true
) -> String {
    var lines = [
        "v=0", "o=- 4611731400430051336 2 IN IP4 127.0.0.1", "s=-", "t=0 0",
        "a=group:BUNDLE" + (video ? " 0" : "") + (audio ? " 1" : ""), "a=msid-semantic: WMS",
    ]
    let transport = [
        "c=IN IP4 0.0.0.0", "a=rtcp:9 IN IP4 0.0.0.0", "a=ice-ufrag:Ab12", "a=ice-pwd:abcdefghijklmnopqrstuvwx",
        "a=ice-options:trickle",
        "a=fingerprint:sha-256 EF:F5:F9:C3:E7:E5:4B:1E:F9:32:79:61:39:80:03:35:7B:9C:19:95:43:6F:9D:D6:E8:5A:72:39:68:80:26:26",
        "a=setup:actpass",
        "a=candidate:1 1 udp 2113937151 5c1f3e0a-8d4b-4e7f-9a62-0b7d1c2e3f40.local 50000 typ host generation 0 network-cost 999",
    ]
    if video {
        let pt = videoPayloadType
        lines +=
            ["m=video 9 UDP/TLS/RTP/SAVPF \(pt)"] + transport + [
                "a=mid:0", "a=recvonly", "a=rtcp-mux", "a=rtcp-rsize", "a=rtpmap:\(pt) H264/90000", "a=rtcp-fb:\(pt) ccm fir",
                "a=rtcp-fb:\(pt) nack", "a=rtcp-fb:\(pt) nack pli",
                "a=fmtp:\(pt) level-asymmetry-allowed=1;packetization-mode=\(packetizationMode);profile-level-id=\(profile)",
            ]
    }
    if audio {
        lines +=
            ["m=audio 9 UDP/TLS/RTP/SAVPF 111"] + transport + [
                "a=mid:1", "a=recvonly", "a=rtcp-mux", "a=rtpmap:111 opus/48000/2", "a=fmtp:111 minptime=10;useinbandfec=1",
            ]
    }
    return lines.joined(separator: "\r\n") + "\r\n"
}

/// Seconds of CPU this process used so far (user and system).
func processCPUSeconds() -> Double {
    var u = rusage()
    getrusage(RUSAGE_SELF.rawValue, &u)
    return Double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + Double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6
}

/// The median and the 95th percentile of `values` (nil when empty).
func percentiles(_ values: [Double]) -> (p50: Double, p95: Double)? {
    guard !values.isEmpty else { return nil }
    let s = values.sorted()
    return (s[s.count / 2], s[min(s.count - 1, s.count * 95 / 100)])
}

/// What viewers take in this process, counted so that other tests' files and threads do not
/// blur it: UDP sockets (only ICE opens them here) and GStreamer's threads (named
/// `element:pad`, or `webrtcbinN:pc`/`:ice`; the library's and Dispatch's names have no colon).
struct Resources: CustomStringConvertible {
    var udpSockets: Int
    var gstreamerThreads: Int
    var descriptors: Int
    /// Threads GLib's pool keeps unused (at most 2, for 15 s), still named after their last
    /// task: after the first viewers they are part of the baseline.
    static let idlePoolThreads = 2

    static var now: Resources {
        let fm = FileManager.default
        var udp = Set<String>()
        for table in ["/proc/self/net/udp", "/proc/self/net/udp6"] {
            let text = (try? String(contentsOfFile: table, encoding: .utf8)) ?? ""
            for line in text.split(separator: "\n").dropFirst() {
                let f = line.split(separator: " ", omittingEmptySubsequences: true)
                if f.count > 9 { udp.insert(String(f[9])) }
            }
        }
        let fds = (try? fm.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        let sockets = fds.compactMap { try? fm.destinationOfSymbolicLink(atPath: "/proc/self/fd/\($0)") }.filter {
            $0.hasPrefix("socket:[") && udp.contains(String($0.dropFirst(8).dropLast()))
        }
        let tasks = (try? fm.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
        let named = tasks.compactMap { try? String(contentsOfFile: "/proc/self/task/\($0)/comm", encoding: .utf8) }
        return Resources(udpSockets: sockets.count, gstreamerThreads: named.filter { $0.contains(":") }.count, descriptors: fds.count)
    }
    var description: String { "\(udpSockets) UDP sockets, \(gstreamerThreads) GStreamer threads (\(descriptors) descriptors in all)" }

    /// No more UDP sockets than `baseline`, and no more GStreamer threads than it and GLib's idle ones.
    func isBack(to baseline: Resources) -> Bool {
        udpSockets <= baseline.udpSockets && gstreamerThreads <= baseline.gstreamerThreads + Self.idlePoolThreads
    }

    /// The GStreamer threads' names now (for a failure's message).
    static var gstreamerThreadNames: [String] {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
        return tasks.compactMap { try? String(contentsOfFile: "/proc/self/task/\($0)/comm", encoding: .utf8) }
            .map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }.filter { $0.contains(":") }.sorted()
    }
}

/// The WebRTC suites, one at a time: they count the process's GStreamer threads and sockets.
@Suite(.serialized) enum WebRTCSuites {}

/// The virtual camera's bars (sRGB, 75 %), left to right.
let expectedBars: [(name: String, rgb: (Int, Int, Int))] = [
    ("white", (191, 191, 191)), ("yellow", (191, 191, 0)), ("cyan", (0, 191, 191)), ("green", (0, 191, 0)),
    ("magenta", (191, 0, 191)), ("red", (191, 0, 0)), ("blue", (0, 0, 191)), ("black", (0, 0, 0)),
]

/// The bars a report's picture does not show (more than 40 off in a channel), by name.
func wrongBars(_ viewer: [String: Any]) -> [String] {
    let bars = (viewer["bars"] as? [[Int]]) ?? []
    guard bars.count == 8 else { return ["no picture"] }
    return zip(expectedBars, bars).compactMap { e, px in
        let (r, g, b) = e.rgb
        return max(abs(px[0] - r), abs(px[1] - g), abs(px[2] - b)) > 40 ? "\(e.name) \(px)" : nil
    }
}

extension WebRTCPublisher.Configuration {
    /// The defaults with ICE on loopback only: the tests' media never leaves the machine's `lo`.
    static let loopback = Self(iceAddresses: ["127.0.0.1"])
}
