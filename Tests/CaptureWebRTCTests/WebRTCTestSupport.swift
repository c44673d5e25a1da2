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
            let mic = VirtualMicrophone(name: "WebRTC mic \(UUID().uuidString.prefix(8))", frequency: tone)
            VirtualMicrophone.install(mic)
            microphone = mic
            let device = try #require(CaptureDevice.device(withUniqueID: mic.uniqueID))
            session.addInput(try CaptureDeviceInput(device: device))
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

/// Debian's chromium driven by Tests/browser/whep_peer.py: its offers come out on one JSON line,
/// the answers go in on one, and its report comes out last. Thread-safe.
final class BrowserPeer: @unchecked Sendable {
    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("browser/whep_peer.py")
    private let process = Process()
    private let input = Pipe()
    private let output = Pipe()
    private let errors = Pipe()
    private let lock = NSLock()
    private var lines: [String] = []
    private var partial = Data()
    private var errorText = Data()

    init(viewers: Int = 1, window: Double = 3, audio: Bool = true) throws {
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments =
            ["python3", Self.script.path, "--viewers", "\(viewers)", "--window", "\(window)"] + (audio ? [] : ["--no-audio"])
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
            process.waitUntilExit()
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

    var stderr: String { lock.withLock { String(decoding: errorText, as: UTF8.self) } }

    /// The next JSON line with `key`, waiting at most `timeout` seconds.
    func line(with key: String, timeout: Double) async throws -> [String: Any] {
        let end = Date().addingTimeInterval(timeout)
        while Date() < end {
            let found: [String: Any]? = lock.withLock {
                for l in lines {
                    if let o = try? JSONSerialization.jsonObject(with: Data(l.utf8)) as? [String: Any], o[key] != nil { return o }
                }
                return nil
            }
            if let found { return found }
            if !process.isRunning, lock.withLock({ lines.isEmpty }) { break }
            try await Task.sleep(for: .milliseconds(20))
        }
        throw TestFailure("whep_peer.py gave no \(key) line in \(timeout) s: \(stderr.suffix(2000))")
    }

    func offers() async throws -> [String] {
        try #require(try await line(with: "offers", timeout: 30)["offers"] as? [String])
    }

    func send(answers: [String?]) throws {
        let body = try JSONSerialization.data(withJSONObject: ["answers": answers.map { $0 ?? NSNull() as Any }])
        try input.fileHandleForWriting.write(contentsOf: body + Data("\n".utf8))
    }

    func report(timeout: Double = 30) async throws -> [[String: Any]] {
        try #require(try await line(with: "viewers", timeout: timeout)["viewers"] as? [[String: Any]])
    }
}

/// Open descriptors and threads of this process.
struct Resources: CustomStringConvertible {
    var descriptors: Int
    var threads: Int
    static var now: Resources {
        Resources(
            descriptors: ProcessResources.openDescriptors,
            threads: (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task").count) ?? -1)
    }
    var description: String { "\(descriptors) descriptors, \(threads) threads" }
}

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
