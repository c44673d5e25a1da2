import Capture
import CaptureRecording
import CaptureTestSupport
import Foundation
import Testing

/// A fresh folder for one test's files, removed by `remove()`.
struct TempFolder {
    let url: URL
    init(_ name: String) throws {
        url = FileManager.default.temporaryDirectory.appendingPathComponent("rec-\(name)-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }
    func file(_ name: String) -> URL { url.appendingPathComponent(name) }
    func remove() { try? FileManager.default.removeItem(at: url) }
}

/// What ffprobe (a reader nobody here wrote) says of a movie file.
struct Probe {
    var codec: String
    var width: Int
    var height: Int
    /// Frames ffprobe decoded or read (`nb_read_frames`).
    var frames: Int
    /// Seconds, of the container.
    var duration: Double
    /// Of the video stream, in seconds (0 when ffprobe gives none).
    var startTime: Double
    var formatName: String
    var frameRate: String

    init(_ url: URL) throws {
        let r = try runProcess(
            "/usr/bin/ffprobe", ["-v", "error", "-count_frames", "-show_streams", "-show_format", "-of", "json", url.path])
        guard r.status == 0, let json = try JSONSerialization.jsonObject(with: r.stdout) as? [String: Any],
            let streams = json["streams"] as? [[String: Any]], let video = streams.first(where: { $0["codec_type"] as? String == "video" }),
            let format = json["format"] as? [String: Any]
        else {
            throw TestFailure("ffprobe cannot read \(url.path): status \(r.status): \(r.stderr)")
        }
        codec = video["codec_name"] as? String ?? "?"
        width = video["width"] as? Int ?? 0
        height = video["height"] as? Int ?? 0
        frames = Int(video["nb_read_frames"] as? String ?? "") ?? -1
        duration = Double(format["duration"] as? String ?? "") ?? -1
        startTime = Double(video["start_time"] as? String ?? "") ?? 0
        formatName = format["format_name"] as? String ?? "?"
        frameRate = video["r_frame_rate"] as? String ?? "?"
    }
}

/// ffprobe's `-show_streams` entries of a file, as JSON objects.
func probeStreams(_ url: URL) throws -> [[String: Any]] {
    let r = try runProcess("/usr/bin/ffprobe", ["-v", "error", "-show_streams", "-of", "json", url.path])
    guard r.status == 0, let json = try JSONSerialization.jsonObject(with: r.stdout) as? [String: Any],
        let streams = json["streams"] as? [[String: Any]]
    else { throw TestFailure("ffprobe cannot read \(url.path): \(r.stderr)") }
    return streams
}

/// What ffprobe says of each stream of a file: codec type to (codec, start time, duration).
func streamTimes(_ url: URL) throws -> [String: (codec: String, start: Double, duration: Double)] {
    var out: [String: (codec: String, start: Double, duration: Double)] = [:]
    for st in try probeStreams(url) {
        guard let type = st["codec_type"] as? String else { continue }
        out[type] = (
            st["codec_name"] as? String ?? "?", Double(st["start_time"] as? String ?? "") ?? .nan,
            Double(st["duration"] as? String ?? "") ?? .nan
        )
    }
    return out
}

/// The presentation times of a file's video packets, in seconds, in file order.
func packetTimes(_ url: URL) throws -> [Double] {
    let r = try runProcess(
        "/usr/bin/ffprobe", ["-v", "error", "-select_streams", "v:0", "-show_entries", "packet=pts_time", "-of", "csv=p=0", url.path])
    guard r.status == 0 else { throw TestFailure("ffprobe cannot list the packets of \(url.path): \(r.stderr)") }
    return r.text.split(separator: "\n").compactMap { Double($0.trimmingCharacters(in: .whitespaces)) }
}

/// The median of the gaps between successive times (nil for fewer than two).
func medianGap(_ times: [Double]) -> Double? {
    let gaps = zip(times, times.dropFirst()).map { $1 - $0 }.sorted()
    return gaps.isEmpty ? nil : gaps[gaps.count / 2]
}

/// A virtual camera with one mode, installed for one test, in a running session.
final class RecordingRig {
    let camera: VirtualCamera
    let session = CaptureSession()
    init(_ name: String, _ mode: VirtualCamera.Mode) throws {
        camera = VirtualCamera(name: "Recording \(name) \(UUID().uuidString.prefix(8))", position: .back, formats: [mode])
        VirtualCamera.install(camera)
        let device = try #require(CaptureDevice.device(withUniqueID: camera.uniqueID))
        session.addInput(try CaptureDeviceInput(device: device))
    }
    var microphone: VirtualMicrophone?
    /// Adds a virtual microphone to the session.
    func addMicrophone() throws {
        let mic = VirtualMicrophone(name: "Recording mic \(UUID().uuidString.prefix(8))")
        VirtualMicrophone.install(mic)
        microphone = mic
        let device = try #require(CaptureDevice.device(withUniqueID: mic.uniqueID))
        session.addInput(try CaptureDeviceInput(device: device))
    }
    func stop() {
        session.stopRunning()
        VirtualCamera.uninstall(camera)
        if let microphone { VirtualMicrophone.uninstall(microphone) }
    }
}

/// A recording delegate that keeps what it was told, in order.
final class RecordingEvents: CaptureFileOutputRecordingDelegate, @unchecked Sendable {
    enum Event: Equatable {
        case started(URL)
        case paused(URL)
        case resumed(URL)
        case finished(URL, RecordingError?)
    }
    private let lock = NSLock()
    private var _events: [Event] = []
    var events: [Event] { lock.withLock { _events } }
    func fileOutput(_ output: CaptureMovieFileOutput, didStartRecordingTo fileURL: URL, from connections: [CaptureConnection]) {
        lock.withLock { _events.append(.started(fileURL)) }
    }
    func fileOutput(_ output: CaptureMovieFileOutput, didPauseRecordingTo fileURL: URL, from connections: [CaptureConnection]) {
        lock.withLock { _events.append(.paused(fileURL)) }
    }
    func fileOutput(_ output: CaptureMovieFileOutput, didResumeRecordingTo fileURL: URL, from connections: [CaptureConnection]) {
        lock.withLock { _events.append(.resumed(fileURL)) }
    }
    func fileOutput(
        _ output: CaptureMovieFileOutput, didFinishRecordingTo outputFileURL: URL, from connections: [CaptureConnection],
        error: RecordingError?
    ) {
        lock.withLock { _events.append(.finished(outputFileURL, error)) }
    }
    var finishError: RecordingError?? {
        for case .finished(_, let e) in events { return .some(e) }
        return nil
    }
    /// Waits (a deadline for hangs only) until the start was reported.
    func waitForStart(timeout: Double = 90) -> Bool {
        waitUntil(timeout: timeout) { events.contains { if case .started = $0 { true } else { false } } }
    }
    /// Waits (a deadline for hangs only) until the finish was reported.
    func waitForFinish(timeout: Double = 90) -> Bool {
        waitUntil(timeout: timeout) { finishError != nil }
    }
}

/// The `capture` tool beside the test bundle.

extension Duration {
    var seconds: Double { let c = components; return Double(c.seconds) + Double(c.attoseconds) / 1e18 }
}
