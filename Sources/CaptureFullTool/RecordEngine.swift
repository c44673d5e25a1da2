// `capture record`: the camera to an H.264 or MJPEG movie file (CaptureRecording).
import Capture
import CaptureRecording
import CaptureSystem
import CaptureToolCore
import Foundation

// The JSON keys `capture` prints are snake_case; the names are the keys.
// swift-format-ignore: AlwaysUseLowerCamelCase
struct RecordJSON: Encodable {
    var output: String, device: String, codec: String, encoder: String, width: Int?, height: Int?
    var frames: Int, drops: [String: Int], duration: Double, audio_duration: Double?, bytes: Int64, ended: String
}

/// Waits for the movie output's finish.
private final class RecordWaiter: CaptureFileOutputRecordingDelegate, @unchecked Sendable {
    let done = DispatchSemaphore(value: 0)
    private let lock = NSLock()
    private var _error: RecordingError?
    private var _dimensions: VideoDimensions?
    var error: RecordingError? { lock.withLock { _error } }
    var dimensions: VideoDimensions? { lock.withLock { _dimensions } }
    func fileOutput(_ output: CaptureMovieFileOutput, didStartRecordingTo fileURL: URL, from connections: [CaptureConnection]) {
        let d = connections.first?.device?.activeFormat?.dimensions
        lock.withLock { _dimensions = d }
    }
    func fileOutput(
        _ output: CaptureMovieFileOutput, didFinishRecordingTo outputFileURL: URL, from connections: [CaptureConnection],
        error: RecordingError?
    ) {
        lock.withLock { _error = error }
        done.signal()
    }
}

/// Records until --seconds pass (on the capture clock) or Ctrl-C/SIGTERM, which finish the file
/// and exit 0. OUTPUT is the one word that is not an option (or --output): a .mp4/.mkv file or an
/// rtsp:// URL to publish to.
func recordCommand(_ args: Arguments) throws {
    var args = args
    let words = args.words
    guard words.count + (args.values["output"] == nil ? 0 : 1) == 1, let path = words.first ?? args.values["output"] else {
        throw UsageError("record takes one OUTPUT file (.mp4 or .mkv) or rtsp:// URL: capture record [options] OUTPUT")
    }
    let codecName = args.values["codec"] ?? "h264"
    guard let codec = VideoCodec(rawValue: codecName) else {
        throw UsageError("unknown codec '\(codecName)': --codec takes \(VideoCodec.allCases.map(\.rawValue).joined(separator: " or "))")
    }
    var seconds: Double?
    if let s = args.values["seconds"] {
        guard let v = Double(s), v > 0, v <= 86_400 else {
            throw UsageError("--seconds takes a number of seconds above 0 and at most 86400, not '\(s)'")
        }
        seconds = v
    }
    let isRTSP = path.lowercased().hasPrefix("rtsp://")
    guard let destination = isRTSP ? URL(string: path) : URL(fileURLWithPath: path) else {
        throw UsageError("'\(path)' is not a URL: publish to rtsp://HOST:PORT/PATH")
    }
    // The extension names what is written: fragmented MP4 or Matroska (the library would write
    // MP4 into a .mov too, which is not a QuickTime movie).
    let ext = destination.pathExtension.lowercased()
    guard isRTSP || ["mp4", "m4v", "mkv"].contains(ext) else {
        if ext.isEmpty { throw UsageError("cannot tell the container of '\(path)': name it .mp4 or .mkv") }
        throw UsageError("record writes MP4 (.mp4, .m4v) or Matroska (.mkv), not .\(destination.pathExtension): name it .mp4 or .mkv")
    }
    guard !isRTSP || codec == .h264 else {
        throw UsageError("RTSP publishing carries H.264: use --codec h264 (the default), not --codec \(codecName)")
    }
    var settings = MovieOutputSettings(codec: codec)
    if codec == .h264 {
        if args.values["quality"] != nil { settings.rateControl = .quality(try args.int("quality", default: 23, range: 0...51)) }
        if args.values["bitrate"] != nil {
            settings.rateControl = .bitrate(try args.int("bitrate", default: 2_000_000, range: 1000...1_000_000_000))
        }
    } else {
        settings.jpegQuality = try args.int("quality", default: 85, range: 1...100)
    }
    if let e = args.values["encoder"] {
        guard let encoder = H264Encoder(rawValue: e) else {
            throw UsageError("unknown encoder '\(e)': --encoder takes \(H264Encoder.allCases.map(\.rawValue).joined(separator: " or "))")
        }
        settings.h264Encoder = encoder
    }
    if let a = args.values["audio-codec"] {
        guard let audioCodec = AudioCodec(rawValue: a) else {
            throw UsageError(
                "unknown audio codec '\(a)': --audio-codec takes \(AudioCodec.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        guard audioCodec == .aac || (!isRTSP && destination.pathExtension.lowercased() == "mkv") else {
            throw UsageError("--audio-codec \(a) records into Matroska: name the OUTPUT .mkv, or use aac")
        }
        settings.audioCodec = audioCodec
    }
    var preRecord: Double?
    if let s = args.values["pre-record"] {
        guard let v = Double(s), v > 0, v <= 600 else {
            throw UsageError("--pre-record takes a number of seconds above 0 and at most 600, not '\(s)'")
        }
        guard !isRTSP else { throw UsageError("--pre-record records into a file: give a .mp4 or .mkv OUTPUT") }
        preRecord = v
    }
    if args.values["keyframe-interval"] != nil {
        settings.keyframeInterval = try args.int("keyframe-interval", default: 30, range: 1...10_000)
    }

    let device = try chooseCamera(args.values["device"])
    // Without --format, the camera's own product where it has one: MJPEG passes through, NV12
    // needs no conversion.
    if args.values["format"] == nil {
        let wish: PixelFormat = codec == .mjpeg ? .mjpeg : .nv12
        if device.formats.contains(where: { $0.pixelFormat == wish }) { args.values["format"] = wish == .mjpeg ? "MJPG" : "NV12" }
    }
    let movie = CaptureMovieFileOutput()
    movie.setOutputSettings(settings, for: nil)
    movie.maxRecordedDuration = seconds.map { .nanoseconds(Int64($0 * 1e9)) }
    if let preRecord { movie.preRecordDuration = .nanoseconds(Int64(preRecord * 1e9)) }
    let microphones = try args.values["audio"].map { [try CaptureDeviceInput(device: try chooseMicrophone($0))] } ?? []
    let waiter = RecordWaiter()
    let trigger = DispatchSemaphore(value: 0)
    // An unplug or a failure ends the recording (the movie output finishes the file); the tool
    // then says why and exits non-zero. Before SIGUSR1, it ends the wait for it.
    let watch = SessionWatch { trigger.signal() }
    let session = try makeSession(device, args, outputs: [], extraInputs: microphones, beforeStart: watch.watch)
    defer { session.stopRunning() }
    session.addOutput(movie)

    // Ctrl-C and SIGTERM finish the file; with --pre-record, SIGUSR1 starts it (a motion
    // trigger), and Ctrl-C/SIGTERM before that end without one. (Unblocked: a parent that
    // spawned us from a thread blocking them, as Dispatch's threads do, would otherwise leave
    // them pending.)
    let triggered = LockedFlag(), quitBeforeTrigger = LockedFlag()
    // Held first: one already pending comes when they are unblocked.
    ProcessSignals.holdForDispatch([SIGINT, SIGTERM, SIGUSR1])
    ProcessSignals.unblock([SIGINT, SIGTERM, SIGUSR1])
    let signals = [SIGINT, SIGTERM, SIGUSR1].map { sig -> DispatchSourceSignal in
        let s = DispatchSource.makeSignalSource(signal: sig, queue: .global())
        s.setEventHandler {
            if sig == SIGUSR1 {
                if triggered.setOnce() { trigger.signal() }
            } else if preRecord != nil, triggered.setOnce() {
                quitBeforeTrigger.setOnce()
                trigger.signal()
            } else {
                movie.stopRecording()
            }
        }
        s.resume()
        return s
    }
    defer { for s in signals { s.cancel() } }
    // On a terminal, a progress line.
    var progress: DispatchSourceTimer?
    if isatty(STDERR_FILENO) != 0 {
        let t = DispatchSource.makeTimerSource(queue: .global())
        t.schedule(deadline: .now() + 1, repeating: 1)
        t.setEventHandler {
            let d = movie.recordedDuration.components
            let line = String(
                format: "\r%.1f s, %d frames, %lld bytes ", Double(d.seconds) + Double(d.attoseconds) / 1e18,
                movie.recordedFrameCount, movie.recordedFileSize)
            FileHandle.standardError.write(Data(line.utf8))
        }
        t.resume()
        progress = t
    }
    defer { progress?.cancel() }

    if let preRecord {
        // (On standard error: standard output is the summary's, JSON with --json.)
        FileHandle.standardError.write(
            Data(
                "keeping the last \(preRecord) s: send SIGUSR1 (kill -USR1 \(getpid())) to record \(path) from \(preRecord) s before it\n"
                    .utf8))
        trigger.wait()
        if let e = watch.error { throw e }
        if quitBeforeTrigger.isSet {
            FileHandle.standardError.write(Data("stopped before SIGUSR1: nothing recorded\n".utf8))
            return
        }
    }
    // Lost before the recording began: nothing to record.
    if let e = watch.error { throw e }
    movie.startRecording(to: destination, recordingDelegate: waiter)
    waiter.done.wait()
    progress?.cancel()
    if progress != nil { FileHandle.standardError.write(Data("\n".utf8)) }
    if let e = waiter.error, !e.recordingSuccessfullyFinished {
        // A failed session ends the recording with "the session stopped": say what stopped it
        // (its event comes on another queue, maybe just after).
        if e.code == .sessionStopped {
            let end = Date().addingTimeInterval(0.5)
            while watch.error == nil, Date() < end { usleep(10_000) }
            if let cause = watch.error, cause.code != .disconnected {
                let text = cause.message.hasSuffix(".") ? String(cause.message.dropLast()) : cause.message
                throw ToolError(message: "\(text); the file holds what was recorded until then")
            }
        }
        throw ToolError(message: e.message)
    }
    guard let summary = movie.lastRecording else { throw ToolError(message: "the recording ended without a summary") }
    let c = summary.duration.components
    let duration = Double(c.seconds) + Double(c.attoseconds) / 1e18
    let report = RecordJSON(
        output: path, device: device.uniqueID, codec: codec.rawValue, encoder: summary.encoder,
        width: waiter.dimensions?.width, height: waiter.dimensions?.height, frames: summary.framesWritten,
        drops: Dictionary(uniqueKeysWithValues: summary.framesDropped.map { ($0.key.rawValue, $0.value) }),
        duration: (duration * 1e6).rounded() / 1e6,
        audio_duration: summary.audioDuration.map { d in
            let c = d.components
            return ((Double(c.seconds) + Double(c.attoseconds) / 1e18) * 1e6).rounded() / 1e6
        }, bytes: summary.fileSize,
        ended: summary.error?.code.rawValue ?? "stopped")
    if args.flags.contains("json") {
        print(try jsonString(report))
    } else {
        let drops = summary.framesDropped.values.reduce(0, +)
        say(
            "wrote \(path): \(summary.framesWritten) frames, \(String(format: "%.3f", duration)) s, \(summary.fileSize) bytes, \(summary.encoder), \(drops) dropped"
        )
    }
    // The file holds what came before the failure (said above); the failure is the outcome.
    if let e = watch.error { throw e }
}

/// A flag set once, from any thread.
private final class LockedFlag: @unchecked Sendable {
    private let lock = NSLock()
    private var value = false
    /// Sets the flag; true when it was not set before.
    @discardableResult func setOnce() -> Bool {
        lock.withLock {
            defer { value = true }; return !value
        }
    }
    var isSet: Bool { lock.withLock { value } }
}
