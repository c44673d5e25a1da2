// `capture audio`: a microphone's samples into a WAV file, exactly the seconds asked for.
import Capture
import Foundation

extension Command {
    package static let audio = Command(
        name: "audio", summary: "record a microphone into a WAV file",
        usage: """
            usage: capture audio [-d|--device ID|ALSA-NAME|virtual] [-t|--seconds S] [-r|--rate HZ] [-o|--output FILE.wav] [--json]
                   (records exactly S seconds of samples, default 2, at the device's rate nearest HZ, default 48000;
                   Ctrl-C or SIGTERM ends it early with a complete file; pure digital silence is an error)
            """,
        options: Options(valued: ["device", "seconds", "rate", "output"], boolean: ["json"]),
        run: audioCommand)
}

// The JSON keys `capture` prints are snake_case; the names are the keys.
// swift-format-ignore: AlwaysUseLowerCamelCase
struct AudioJSON: Encodable {
    var device: String, sample_rate: Int, channels: Int, sample_format: String, frames: Int, buffers: Int
    var lost_frames: Int, peak_dbfs: Double, seconds: Double, output: String?
}

func audioCommand(_ args: Arguments) throws {
    guard let seconds = Double(args.values["seconds"] ?? "2"), seconds > 0, seconds <= 86_400 else {
        throw UsageError("--seconds takes a number of seconds above 0 and at most 86400")
    }
    let path = args.values["output"]
    // Checked before the microphone opens: the folder takes new files, a FIFO, a device node or a
    // symbolic link is never written over, and the name says WAV.
    if let path {
        try OutputPath.checkWritable(URL(fileURLWithPath: path).deletingLastPathComponent().path, naming: path)
        try OutputPath.checkReplaceable(path)
        try OutputPath.checkExtension(path, command: "audio", writes: "WAV", as: ["wav"])
    }
    let device = try chooseMicrophone(args.values["device"])
    let recorder = AudioRecorder(path: path, seconds: seconds)
    // Nothing half-written stays behind when the recording fails.
    var finished = false
    defer { if !finished, let path, recorder.lock.withLock({ recorder.writer != nil }) { OutputPath.remove(path) } }
    let output = CaptureAudioDataOutput()
    if args.values["rate"] != nil { output.audioSettings.sampleRate = try args.int("rate", default: 48_000, range: 1000...768_000) }
    output.setSampleBufferDelegate(recorder, queue: DispatchQueue(label: "capture.audio"))
    let session = CaptureSession()
    let input = try CaptureDeviceInput(device: device)
    session.addInput(input)
    session.addOutput(output)
    let watch = SessionWatch { recorder.done.signal() }
    watch.watch(session)
    // Ctrl-C and SIGTERM end the recording early: the file is finished (its header says what it
    // holds) and the summary printed, as at the end of --seconds. (Unblocked: a parent that
    // spawned us from a thread blocking them would otherwise leave them pending.)
    let interrupted = SignalStop([SIGINT, SIGTERM]) { recorder.done.signal() }
    defer { interrupted.cancel() }
    try session.start()
    // The samples decide the length; the deadline only catches a device that stops delivering.
    let delivered = recorder.done.wait(timeout: .now() + seconds + 10) == .success
    session.stopRunning()
    if let e = watch.error { throw e }
    recorder.lock.lock()
    defer { recorder.lock.unlock() }
    if let e = recorder.error { throw e }
    try recorder.writer?.close()
    let r = recorder
    guard let fmt = r.format, r.frames > 0 else {
        if interrupted.fired { throw ToolError(message: "stopped before \(device.localizedName) delivered any audio: nothing recorded") }
        throw ToolError(message: "\(device.localizedName) delivered no audio in \(seconds + 10) s")
    }
    guard delivered else {
        throw ToolError(
            message: "\(device.localizedName) delivered \(r.frames) of \(r.limit ?? 0) frames and then stopped; check the device")
    }
    // Every sample exactly zero: no source reached the device (nothing plays into it, a loopback
    // whose player failed on a format the first opener fixed, a muted or wrong input), not a
    // quiet room, whose noise never gives pure zeros.
    guard r.peak > AudioChannelLevel.silence else {
        throw ToolError(
            message:
                "\(device.localizedName) delivered only digital silence (\(r.frames) frames, every sample 0): nothing reached it; check the device, its mixer and, for a loopback, that its player runs in \(fmt)"
        )
    }
    finished = true
    let report = AudioJSON(
        device: device.uniqueID, sample_rate: fmt.sampleRate, channels: fmt.channelCount,
        sample_format: fmt.sampleFormat.rawValue, frames: r.frames, buffers: r.buffers, lost_frames: r.lostFrames,
        peak_dbfs: (Double(r.peak) * 100).rounded() / 100, seconds: Double(r.frames) / Double(fmt.sampleRate),
        output: path)
    if args.flags.contains("json") {
        print(try jsonString(report))
    } else {
        print(
            "\(report.frames) frames from \(device.localizedName): \(fmt), peak \(String(format: "%.1f", report.peak_dbfs)) dBFS\(report.output.map { ", wrote \($0)" } ?? "")"
        )
    }
}
