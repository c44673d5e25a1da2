// `capture`: list cameras, take stills, measure a stream, through the Capture library.
import Capture
import CapturePreview
import CaptureRecording
import CaptureServer
import CaptureSystem
import Foundation

struct ToolError: Error { var message: String }

/// Minimal `--flag value` parser: flags given, positional words, and unknown-flag detection.
struct Arguments {
    var values: [String: String] = [:]
    var flags: Set<String> = []
    init(_ args: ArraySlice<String>, valued: Set<String>, boolean: Set<String>) throws {
        var it = args.makeIterator()
        while let a = it.next() {
            guard a.hasPrefix("--") else { throw ToolError(message: "unexpected argument '\(a)'") }
            let name = String(a.dropFirst(2))
            if boolean.contains(name) { flags.insert(name); continue }
            guard valued.contains(name) else { throw ToolError(message: "unknown option --\(name)") }
            guard let v = it.next() else { throw ToolError(message: "--\(name) needs a value") }
            values[name] = v
        }
    }
    func int(_ name: String, default d: Int, range: ClosedRange<Int>) throws -> Int {
        guard let s = values[name] else { return d }
        guard let v = Int(s), range.contains(v) else {
            throw ToolError(message: "--\(name) must be a whole number in \(range.lowerBound)...\(range.upperBound), not '\(s)'")
        }
        return v
    }
}

/// Each command's usage, in the order `capture help` lists them.
let commandUsages: KeyValuePairs<String, String> = [
    "devices": """
    usage: capture devices [--json] [--request-access]
           (cameras and microphones: path, media type, position, name, unique ID; then
           whether this user may use each: "video authorization: STATUS[: ADVICE]", "audio ...";
           --json: an array of devices, each with its media type's "authorization" and, unless
           authorized, "authorizationAdvice"; --request-access: first asks for access as an app
           does, which inside a sandbox asks the camera portal and may show the desktop's prompt)
    """,
    "snap": """
    usage: capture snap [--device PATH|ID|virtual] [--preset NAME | --size WxH] [--format FOURCC]
                        [--quality 1-100] [--count N] [--output FILE|DIR/]
           (without --output, photos go to the album, ~/Pictures or XDG_PICTURES_DIR; FILE's folder must exist;
           only a regular file at FILE is replaced, never a FIFO, device node or symbolic link)
    """,
    "stream": """
    usage: capture stream [--device PATH|ID|virtual] [--preset NAME | --size WxH] [--format FOURCC]
                          [--frames N] [--audio DEVICE] [--json]
    """,
    "record": """
    usage: capture record [--device PATH|ID|virtual] [--audio ID|ALSA-NAME|virtual] [--preset NAME | --size WxH]
                          [--format FOURCC] [--codec h264|mjpeg] [--quality Q | --bitrate B] [--keyframe-interval N]
                          [--encoder libx264|h264_v4l2m2m] [--audio-codec aac|opus|pcm] [--seconds S]
                          [--pre-record S] [--json]
                          OUTPUT.mp4|OUTPUT.mkv|rtsp://HOST:PORT/PATH
           (Ctrl-C or SIGTERM finishes the file; with --pre-record it keeps the last S seconds
           and records from S seconds back when it gets SIGUSR1)
    """,
    "audio": """
    usage: capture audio [--device ID|ALSA-NAME|virtual] [--seconds S] [--rate HZ] [--output FILE.wav] [--json]
           (records exactly S seconds of samples, default 2, at the device's rate nearest HZ, default 48000;
           Ctrl-C or SIGTERM ends it early with a complete file; pure digital silence is an error)
    """,
    "preview": """
    usage: capture preview [--device PATH|ID|virtual] [--preset NAME | --size WxH] [--format FOURCC]
                           [--window WxH] [--gravity resizeAspect|resizeAspectFill|resize] [--fullscreen] [--mirror]
           (keys: space takes a still into the album, t toggles cameras, i shows fps, drops and format,
           q or Esc quits)
    """,
    "serve": """
    usage: capture serve [--device PATH|ID|virtual] [--preset NAME | --size WxH] [--format FOURCC] [--fps N] [--quality 1-100]
                         [--host ADDR] [--port N] [--user U --password P] [--allow-origin ORIGIN] [--max-clients N]
                         [--allow-host NAME[,NAME...]]
           (MJPEG at /stream and /?action=stream, /snapshot, /state, the camera web app at /;
           an unplugged camera is served as offline and taken back when it returns;
           answers to localhost names, IP literals and this machine's name, --allow-host for others;
           Ctrl-C or SIGTERM stops it)
    """,
    "help": """
    usage: capture help [COMMAND]    (or: capture COMMAND --help, capture COMMAND -h)
    """,
]

/// Every command's usage, for `capture help` and a call without a command.
let usage = commandUsages.map(\.value).joined(separator: "\n")

/// One command's usage; nil for an unknown command.
func usage(of command: String) -> String? { commandUsages.first { $0.key == command }?.value }

/// Finds the camera to use; with no camera at all, says so and installs the virtual pair.
func chooseCamera(_ spec: String?) throws -> CaptureDevice {
    if spec == "virtual" || spec?.hasPrefix("virtual:") == true {
        if VirtualCamera.installed.isEmpty { _ = VirtualCamera.installDefaultPair() }
        let all = CaptureDevice.devices(for: .video).filter(\.isVirtual)
        if let spec, spec != "virtual" { if let d = all.first(where: { $0.path == spec || $0.uniqueID == spec }) { return d } }
        guard let d = all.first else { throw ToolError(message: "the virtual camera could not be installed") }
        return d
    }
    if let spec {
        if let d = CaptureDevice.device(withUniqueID: spec), d.mediaType == .video { return d }
        if !FileManager.default.fileExists(atPath: spec) {
            throw ToolError(message: "no camera at '\(spec)': run 'capture devices' to list them")
        }
        throw ToolError(message: "'\(spec)' is not a camera (no video capture): run 'capture devices' to list cameras")
    }
    if let d = CaptureDevice.default(for: .video) { return d }
    FileHandle.standardError.write(Data("capture: no camera on this machine; using the virtual camera\n".utf8))
    _ = VirtualCamera.installDefaultPair()
    guard let d = CaptureDevice.default(for: .video) else { throw ToolError(message: "the virtual camera could not be installed") }
    return d
}

/// Builds a running session for `device` with `outputs`, honouring --preset/--size/--format.
/// `beforeStart` gets the configured session before it starts: event handlers go there, since an
/// unplug right after the start must not be missed.
func makeSession(
    _ device: CaptureDevice, _ args: Arguments, outputs: [CaptureOutput],
    extraInputs: [CaptureDeviceInput] = [], beforeStart: (CaptureSession) -> Void = { _ in }
) throws -> CaptureSession {
    let session = CaptureSession()
    let input = try CaptureDeviceInput(device: device)
    session.beginConfiguration()
    // The inputs first, at no preset; the preset asked for is checked against them below.
    session.sessionPreset = .inputPriority
    for i in [input] + extraInputs {
        guard session.canAddInput(i) else { throw ToolError(message: "cannot add \(i.device.localizedName) to a session") }
        session.addInput(i)
    }
    for o in outputs where session.canAddOutput(o) { session.addOutput(o) }
    let format = try args.values["format"].map { s -> PixelFormat in
        guard let f = PixelFormat(fourCC: s.uppercased().padding(toLength: 4, withPad: " ", startingAt: 0)) else {
            throw ToolError(message: "--format takes a FourCC such as YUYV, NV12 or MJPG, not '\(s)'")
        }
        return f
    }
    if let sizeText = args.values["size"] {
        guard let size = VideoDimensions(sizeText) else { throw ToolError(message: "--size takes WxH, e.g. 1280x720, not '\(sizeText)'") }
        guard let chosen = device.bestFormat(for: size, pixelFormat: format) else {
            let sizes = Set(device.formats.filter { format == nil || $0.pixelFormat == format }.map(\.dimensions.description)).sorted()
            throw ToolError(
                message:
                    "\(device.localizedName) cannot capture \(format.map { "\($0) " } ?? "")\(size); it has \(sizes.joined(separator: ", "))"
            )
        }
        try device.lockForConfiguration()
        defer { device.unlockForConfiguration() }
        try device.setActiveFormat(chosen)
        session.sessionPreset = .inputPriority
    } else {
        let presetName = args.values["preset"] ?? "high"
        guard let preset = CaptureSession.Preset(rawValue: presetName) else {
            throw ToolError(
                message: "unknown preset '\(presetName)'; one of \(CaptureSession.Preset.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        if let format {
            // A format without a size: the preset's size in that format.
            if !device.formats.contains(where: { $0.pixelFormat == format }) {
                throw ToolError(
                    message:
                        "\(device.localizedName) has no \(format) format; it has \(Set(device.formats.map(\.pixelFormat.description)).sorted().joined(separator: ", "))"
                )
            }
            for case let o as CaptureVideoDataOutput in outputs { o.videoSettings = .init(pixelFormat: format) }
            if !outputs.contains(where: { $0 is CaptureVideoDataOutput }) {
                // A still-only session picks its format from a video data output's wish.
                let v = CaptureVideoDataOutput()
                v.videoSettings = .init(pixelFormat: format)
                if session.canAddOutput(v) { session.addOutput(v) }
            }
        }
        guard session.canSetSessionPreset(preset) else {
            throw ToolError(
                message:
                    "\(device.localizedName) cannot do preset \(preset.rawValue): try --size with one of \(Set(device.formats.map(\.dimensions.description)).sorted().joined(separator: ", "))"
            )
        }
        session.sessionPreset = preset
    }
    if case .rejected(let e) = session.commitConfiguration() { throw e }
    if let text = args.values["fps"] {
        guard let fps = Double(text), fps > 0, fps <= 1000 else {
            throw ToolError(message: "--fps takes frames per second, e.g. 30, not '\(text)'")
        }
        let format = device.activeFormat
        do throws(CaptureError) {
            try device.lockForConfiguration()
            defer { device.unlockForConfiguration() }
            try device.setActiveVideoMinFrameDuration(FrameInterval(framesPerSecond: fps))
        } catch {
            let rates = format?.videoSupportedFrameRateRanges.map(\.description).joined(separator: ", ") ?? "none"
            throw ToolError(
                message: "\(device.localizedName) cannot capture \(format.map { "\($0.dimensions) " } ?? "")at \(text) fps; it has \(rates)"
            )
        }
    }
    beforeStart(session)
    try session.start()
    return session
}

/// What ended a session under the tool: its first unplug or runtime error, in the words the tool
/// prints. Fed by a session's events (installed before the start); `onEnd` runs once, at the first.
final class SessionWatch: @unchecked Sendable {
    private let lock = NSLock()
    private var first: CaptureError?
    private let onEnd: @Sendable () -> Void
    init(onEnd: @escaping @Sendable () -> Void = {}) { self.onEnd = onEnd }

    /// The error that ended the session, if one did.
    var error: CaptureError? { lock.withLock { first } }

    func watch(_ session: CaptureSession) { session.addEventHandler { [self] event in handle(event) } }

    func handle(_ event: CaptureSession.Event) {
        let e: CaptureError
        switch event {
        case .deviceDisconnected(let d):
            e = CaptureError(.disconnected, "\(d.localizedName) (\(d.path)) was disconnected; plug it back in and run again")
        case .runtimeError(let error) where error.code != .disconnected:
            e = error
        default:
            return
        }
        let isFirst = lock.withLock {
            defer { if first == nil { first = e } }
            return first == nil
        }
        if isFirst { onEnd() }
    }
}

func jsonString(_ value: some Encodable) throws -> String {
    let enc = JSONEncoder()
    enc.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
    return String(decoding: try enc.encode(value), as: UTF8.self)
}

struct DeviceJSON: Encodable {
    var path: String, name: String, uniqueID: String, position: String, mediaType: String, driver: String, busInfo: String
    var formats: [String]
    /// The device's media type's authorization status, and what to do about it (absent when
    /// authorized): the text output's "video authorization: STATUS: ADVICE" lines. Flat
    /// strings in each entry, so the output stays an array that line-based readers (the shell
    /// completions) parse unchanged.
    var authorization: String, authorizationAdvice: String?
}

func devicesCommand(_ args: Arguments) throws {
    if args.flags.contains("request-access") {
        for type in MediaType.allCases {
            let done = DispatchSemaphore(value: 0)
            CaptureDevice.requestAccess(for: type) { _ in done.signal() }
            done.wait()
        }
    }
    var all = CaptureDevice.devices(for: .video) + CaptureDevice.devices(for: .audio)
    if all.filter({ $0.mediaType == .video }).isEmpty {
        // Cameras this user may not open are not listed: say so rather than "no camera".
        let why = CaptureDevice.authorizationAdvice(for: .video).map { " this user may open (\($0))" } ?? " on this machine"
        FileHandle.standardError.write(Data("capture: no camera\(why); listing the virtual camera\n".utf8))
        _ = VirtualCamera.installDefaultPair()
        all = CaptureDevice.devices(for: .video) + CaptureDevice.devices(for: .audio)
    }
    if args.flags.contains("json") {
        // Once per media type: each check looks at the device nodes and groups.
        let status = Dictionary(uniqueKeysWithValues: MediaType.allCases.map { ($0, CaptureDevice.authorizationStatus(for: $0)) })
        let advice = Dictionary(uniqueKeysWithValues: MediaType.allCases.map { ($0, CaptureDevice.authorizationAdvice(for: $0)) })
        print(
            try jsonString(
                all.map {
                    DeviceJSON(
                        path: $0.path, name: $0.localizedName, uniqueID: $0.uniqueID, position: $0.position.rawValue,
                        mediaType: $0.mediaType.rawValue, driver: $0.modelID, busInfo: $0.busInfo,
                        formats: $0.mediaType == .video ? $0.formats.map(\.description) : [],
                        authorization: (status[$0.mediaType] ?? .notDetermined).rawValue, authorizationAdvice: advice[$0.mediaType] ?? nil)
                }))
    } else {
        for d in all {
            print("\(d.path)\t\(d.mediaType.rawValue)\t\(d.position.rawValue)\t\(d.localizedName)\t\(d.uniqueID)")
        }
        for type in [MediaType.video, .audio] {
            let advice = CaptureDevice.authorizationAdvice(for: type).map { ": " + $0 } ?? ""
            print("\(type.rawValue) authorization: \(CaptureDevice.authorizationStatus(for: type).rawValue)\(advice)")
        }
    }
}

/// Where `capture snap` puts its photos.
enum SnapDestination {
    case album
    case file(String)
    case folder(String)

    /// `--output`: a path ending in / or naming a folder is a folder (created when missing),
    /// anything else a file whose folder must exist. Checked before the camera opens.
    init(_ output: String?) throws {
        guard let output else { self = .album; return }
        var isDir: ObjCBool = false
        if output.hasSuffix("/") || FileManager.default.fileExists(atPath: output, isDirectory: &isDir) && isDir.boolValue {
            try FileManager.default.createDirectory(atPath: output, withIntermediateDirectories: true)
            try Self.checkWritable(output, naming: output)
            self = .folder(output)
        } else {
            let folder = URL(fileURLWithPath: output).deletingLastPathComponent().path
            try Self.checkWritable(folder, naming: output)
            // A FIFO, a device node or a symbolic link is never replaced: refused before the camera opens.
            if case .success(let kind?) = FileSystem.kind(at: output), kind != .regular { throw PhotoLibrary.notAFile(output, kind) }
            self = .file(output)
        }
    }

    /// A missing, read-only or forbidden folder is found before a photo is taken.
    private static func checkWritable(_ folder: String, naming path: String) throws {
        if access(folder, W_OK) != 0 { throw CaptureError.file(errno: errno, path: path, operation: "access") }
    }

    /// Saves photo `index` of `count` and returns where it went.
    func save(_ jpeg: Data, metadata: PhotoMetadata, index: Int, count: Int) throws -> URL {
        switch self {
        case .album:
            let library = PhotoLibrary.shared
            return try library.saveSynchronously(jpeg: jpeg, metadata: metadata)
        case .file(let path):
            let url = URL(
                fileURLWithPath: count == 1
                    ? path
                    : path.replacingOccurrences(of: ".jpg", with: "") + String(format: "-%04d.jpg", index))
            try PhotoLibrary.write(jpeg: jpeg, metadata: metadata, to: url)
            return url
        case .folder(let path):
            let url = URL(fileURLWithPath: path).appendingPathComponent(String(format: "snap-%04d.jpg", index))
            try PhotoLibrary.write(jpeg: jpeg, metadata: metadata, to: url)
            return url
        }
    }
}

func snapCommand(_ args: Arguments) throws {
    let count = try args.int("count", default: 1, range: 1...100_000)
    let quality = try args.int("quality", default: 90, range: 1...100)
    let destination = try SnapDestination(args.values["output"])
    let device = try chooseCamera(args.values["device"])
    let still = CaptureStillImageOutput()
    still.outputSettings = .init(quality: quality)
    let session = try makeSession(device, args, outputs: [still])
    defer { session.stopRunning() }
    guard let connection = still.connection(with: .video) else { throw ToolError(message: "no video connection to the still output") }
    for i in 1...count {
        let sample = try runBlocking { () async throws(CaptureError) -> SampleBuffer in try await still.captureStillImage(from: connection)
        }
        guard let jpeg = CaptureStillImageOutput.jpegStillImageDataRepresentation(sample) else {
            throw ToolError(message: "the still has no JPEG data")
        }
        // The camera's maker and name as EXIF Make and Model (written where the still has no EXIF).
        let url = try destination.save(
            jpeg, metadata: PhotoMetadata(make: device.manufacturer, model: device.localizedName),
            index: i, count: count)
        let d = sample.dimensions.map(\.description) ?? "?"
        print("\(url.path)\t\(d)\t\(jpeg.count) bytes\tsequence \(sample.sequenceNumber)")
    }
}

/// Runs `action` once on the first of `signals` (taken from their default action, which would
/// end the process without finishing its file).
final class SignalStop: @unchecked Sendable {
    private let lock = NSLock()
    private var sources: [DispatchSourceSignal] = []
    private var didFire = false

    init(_ signals: [Int32], action: @escaping @Sendable () -> Void) {
        var set = sigset_t()
        sigemptyset(&set)
        for sig in signals { sigaddset(&set, sig) }
        pthread_sigmask(SIG_UNBLOCK, &set, nil)
        sources = signals.map { sig in
            signal(sig, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: sig, queue: .global())
            source.setEventHandler { [self] in
                let first = lock.withLock {
                    defer { didFire = true }
                    return !didFire
                }
                if first { action() }
            }
            source.resume()
            return source
        }
    }

    /// Whether a signal came.
    var fired: Bool { lock.withLock { didFire } }

    /// Stops listening (the signals stay ignored: the process is ending).
    func cancel() { for s in sources { s.cancel() } }
}

// The JSON keys `capture` prints are snake_case; the names are the keys.
// swift-format-ignore: AlwaysUseLowerCamelCase
struct StreamJSON: Encodable {
    var device: String, frames: Int, dropped: Int, drop_reasons: [String: Int]
    var first_sequence: UInt64?, last_sequence: UInt64?, fps: Double, width: Int, height: Int, format: String
    var seconds: Double
    /// Capture timestamp to delegate call, in milliseconds.
    var latency_ms: LatencyJSON
    var audio: AudioStreamJSON?
}
struct LatencyJSON: Encodable {
    var p50: Double, p99: Double, max: Double
    init(_ l: DeliveryLatency) {
        func ms(_ d: Duration) -> Double { (d.inMilliseconds * 1000).rounded() / 1000 }
        p50 = ms(l.p50)
        p99 = ms(l.p99)
        max = ms(l.maximum)
    }
}
// swift-format-ignore: AlwaysUseLowerCamelCase
struct AudioStreamJSON: Encodable { var device: String, sample_rate: Int, channels: Int, frames: Int, lost_frames: Int, peak_dbfs: Double }

final class StreamCounter: CaptureVideoDataOutputSampleBufferDelegate, @unchecked Sendable {
    let lock = NSLock()
    var frames = 0, first: UInt64?, last: UInt64?, firstTime: CaptureTime?, lastTime: CaptureTime?
    var dims: VideoDimensions?, format: PixelFormat?
    var drops: [String: Int] = [:]
    let target: Int
    let done = DispatchSemaphore(value: 0)
    init(target: Int) { self.target = target }
    func captureOutput(_ output: CaptureOutput, didOutput s: SampleBuffer, from connection: CaptureConnection) {
        lock.withLock {
            guard frames < target else { return }
            frames += 1
            if first == nil { first = s.sequenceNumber; firstTime = s.presentationTimeStamp }
            last = s.sequenceNumber
            lastTime = s.presentationTimeStamp
            dims = s.dimensions
            format = s.pixelFormat
            if frames == target { done.signal() }
        }
    }
    /// Counts the frames lost between the first and the last frame counted, so that
    /// last - first + 1 = frames + dropped: a loss before the first frame (a damaged first frame,
    /// a gap at start) is not part of the stream measured.
    func captureOutput(_ output: CaptureOutput, didDrop drop: DroppedFrames, from connection: CaptureConnection) {
        lock.withLock {
            guard frames < target, let first, let seq = drop.sequenceNumber, seq > first else { return }
            drops[drop.reason.rawValue, default: 0] += drop.count
        }
    }
}

func streamCommand(_ args: Arguments) throws {
    let device = try chooseCamera(args.values["device"])
    let frames = try args.int("frames", default: 120, range: 1...10_000_000)
    let output = CaptureVideoDataOutput()
    let counter = StreamCounter(target: frames)
    output.setSampleBufferDelegate(counter, queue: DispatchQueue(label: "capture.stream"))
    output.alwaysDiscardsLateVideoFrames = false
    var outputs: [CaptureOutput] = [output]
    let audio = AudioRecorder(path: nil)
    var audioInput: CaptureDeviceInput?
    if let spec = args.values["audio"] {
        audioInput = try CaptureDeviceInput(device: try chooseMicrophone(spec))
        let a = CaptureAudioDataOutput()
        a.setSampleBufferDelegate(audio, queue: DispatchQueue(label: "capture.stream.audio"))
        outputs.append(a)
    }
    let watch = SessionWatch { counter.done.signal() }
    let running = try makeSession(device, args, outputs: outputs, extraInputs: audioInput.map { [$0] } ?? [], beforeStart: watch.watch)
    let start = Date()
    counter.done.wait()
    running.stopRunning()
    if let e = watch.error { throw e }
    let elapsed = Date().timeIntervalSince(start)
    let (n, f, l, ft, lt, dims, fmt, drops) = counter.lock.withLock {
        (counter.frames, counter.first, counter.last, counter.firstTime, counter.lastTime, counter.dims, counter.format, counter.drops)
    }
    var fps = 0.0
    if let ft, let lt, n > 1 { fps = Double(n - 1) / (Double(lt - ft) / 1e9) }
    let report = StreamJSON(
        device: device.path, frames: n, dropped: drops.values.reduce(0, +), drop_reasons: drops,
        first_sequence: f, last_sequence: l, fps: (fps * 100).rounded() / 100,
        width: dims?.width ?? 0, height: dims?.height ?? 0, format: fmt?.description ?? "",
        seconds: (elapsed * 1000).rounded() / 1000,
        latency_ms: LatencyJSON(output.deliveryLatency()),
        audio: audioInput.map { i in
            audio.lock.withLock {
                AudioStreamJSON(
                    device: i.device.uniqueID, sample_rate: audio.format?.sampleRate ?? 0,
                    channels: audio.format?.channelCount ?? 0, frames: audio.frames,
                    lost_frames: audio.lostFrames, peak_dbfs: (Double(audio.peak) * 100).rounded() / 100)
            }
        })
    if args.flags.contains("json") {
        print(try jsonString(report))
    } else {
        let l = report.latency_ms
        print(
            "\(n) frames from \(device.localizedName), \(report.width)x\(report.height) \(report.format), \(String(format: "%.2f", fps)) fps, \(report.dropped) dropped \(drops), latency p50 \(l.p50) ms p99 \(l.p99) ms max \(l.max) ms"
        )
    }
}

/// Finds the microphone to use; with none at all, says so and installs the virtual microphone.
func chooseMicrophone(_ spec: String?) throws -> CaptureDevice {
    if spec == "virtual" || (spec == nil && CaptureDevice.devices(for: .audio).isEmpty) {
        if spec == nil {
            FileHandle.standardError.write(Data("capture: no audio capture device on this machine; using the virtual microphone\n".utf8))
        }
        if VirtualMicrophone.installed.isEmpty { VirtualMicrophone.install(VirtualMicrophone()) }
        guard let d = CaptureDevice.devices(for: .audio).first(where: { $0.virtualMicrophone != nil }) else {
            throw ToolError(message: "the virtual microphone could not be installed")
        }
        return d
    }
    if let spec { return try CaptureDevice.audioDevice(named: spec) }
    guard let d = CaptureDevice.default(for: .audio) else { throw ToolError(message: "no audio capture device") }
    return d
}

/// Writes audio buffers to a WAV file and keeps the counts and the peak level. With `seconds`,
/// it keeps exactly that many seconds of samples (rounded to a whole frame at the device's rate,
/// the last buffer cut), then signals `done`: a timer would lose the time the device takes to
/// deliver its first period and cut the file short.
final class AudioRecorder: CaptureAudioDataOutputSampleBufferDelegate, CaptureVideoDataOutputSampleBufferDelegate, @unchecked Sendable {
    let lock = NSLock()
    var writer: WAVFileWriter?
    let path: String?
    let seconds: Double?
    var frames = 0, buffers = 0, lostFrames = 0
    /// Frames to keep, once the first buffer has told the rate.
    var limit: Int?
    var peak: Float = AudioChannelLevel.silence
    var format: AudioFormat?
    var firstTime: CaptureTime?
    var error: CaptureError?
    let done = DispatchSemaphore(value: 0)
    init(path: String?, seconds: Double? = nil) {
        self.path = path
        self.seconds = seconds
    }
    func captureOutput(_ output: CaptureOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection) {
        guard let pcm = sampleBuffer.audioBuffer else { return }
        lock.withLock {
            if limit == nil, let seconds { limit = max(1, Int((seconds * Double(pcm.format.sampleRate)).rounded())) }
            let keep = limit.map { min(pcm.frameCount, $0 - frames) } ?? pcm.frameCount
            guard keep > 0, error == nil else { return }
            do throws(CaptureError) {
                if writer == nil, let path { writer = try WAVFileWriter(path: path, format: pcm.format) }
                if let writer {
                    if keep == pcm.frameCount {
                        try writer.write(pcm)
                    } else {
                        try writer.write(pcm.data.prefix(keep * pcm.format.bytesPerFrame))
                    }
                }
            } catch {
                self.error = error
                done.signal()
                return
            }
            if firstTime == nil { firstTime = sampleBuffer.presentationTimeStamp }
            format = pcm.format
            frames += keep
            buffers += 1
            for l in pcm.channelLevels { peak = max(peak, l.peakHoldLevel) }
            if frames == limit { done.signal() }
        }
    }
    func captureOutput(_ output: CaptureOutput, didDrop drop: DroppedFrames, from connection: CaptureConnection) {
        lock.withLock { if limit == nil || frames < limit! { lostFrames += drop.count } }
    }
}

// The JSON keys `capture` prints are snake_case; the names are the keys.
// swift-format-ignore: AlwaysUseLowerCamelCase
struct AudioJSON: Encodable {
    var device: String, sample_rate: Int, channels: Int, sample_format: String, frames: Int, buffers: Int
    var lost_frames: Int, peak_dbfs: Double, seconds: Double, output: String?
}

func audioCommand(_ args: Arguments) throws {
    guard let seconds = Double(args.values["seconds"] ?? "2"), seconds > 0, seconds <= 86_400 else {
        throw ToolError(message: "--seconds takes a number of seconds above 0 and at most 86400")
    }
    let path = args.values["output"]
    // A folder that is missing, read-only or forbidden is found before the microphone opens.
    if let path, access(URL(fileURLWithPath: path).deletingLastPathComponent().path, W_OK) != 0 {
        throw CaptureError.file(errno: errno, path: path, operation: "access")
    }
    // As for photos: a FIFO (whose open would block), a device node or a symbolic link is never
    // written over.
    if let path, case .success(let kind?) = FileSystem.kind(at: path), kind != .regular { throw PhotoLibrary.notAFile(path, kind) }
    let device = try chooseMicrophone(args.values["device"])
    let recorder = AudioRecorder(path: path, seconds: seconds)
    // Nothing half-written stays behind when the recording fails.
    var finished = false
    defer { if !finished, let path, recorder.lock.withLock({ recorder.writer != nil }) { unlink(path) } }
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

/// A window with the live picture: space takes a still into the album (printing its path), `t`
/// switches to the other camera inside begin/commitConfiguration, `i` shows or hides an overlay
/// with fps, drops, pixel format and size,
/// q/Esc (or the window's close button, Ctrl-C, SIGTERM) quits with status 0.
@MainActor
func previewCommand(_ args: Arguments) throws {
    let device = try chooseCamera(args.values["device"])
    let gravityName = args.values["gravity"] ?? "resizeAspect"
    guard let gravity = VideoGravity(rawValue: gravityName) else {
        throw ToolError(
            message: "--gravity takes one of \(VideoGravity.allCases.map(\.rawValue).joined(separator: ", ")), not '\(gravityName)'")
    }
    let windowText = args.values["window"] ?? "640x360"
    guard let windowSize = VideoDimensions(windowText), windowSize.width > 0, windowSize.height > 0 else {
        throw ToolError(message: "--window takes WxH, e.g. 640x360, not '\(windowText)'")
    }
    // SDL turns Ctrl-C and SIGTERM into a close request; a parent that spawned us from a thread
    // blocking them (as Dispatch's threads do) would otherwise leave them pending for ever.
    var closing = sigset_t()
    sigemptyset(&closing)
    sigaddset(&closing, SIGINT)
    sigaddset(&closing, SIGTERM)
    pthread_sigmask(SIG_UNBLOCK, &closing, nil)
    // The display first: without one there is nothing to start the camera for.
    try PreviewWindow.checkDisplay(ProcessInfo.processInfo.environment)
    let still = CaptureStillImageOutput()
    let watch = SessionWatch()
    let session = try makeSession(device, args, outputs: [still], beforeStart: watch.watch)
    defer { session.stopRunning() }
    let preview = CaptureVideoPreviewLayer(session: session)
    preview.videoGravity = gravity
    let mirror = args.flags.contains("mirror")
    preview.connection?.isVideoMirrored = mirror
    let window = try PreviewWindow(
        title: "capture preview: \(device.localizedName)", size: CGSize(width: windowSize.width, height: windowSize.height))
    preview.frame = window.rootLayer.bounds
    window.rootLayer.addSublayer(preview)
    let info = PreviewInfoOverlay(preview: preview)
    window.rootLayer.addSublayer(info.layer)
    var current = device

    func takeStill() {
        guard let connection = still.connection(with: .video) else { return }
        let metadata = PhotoMetadata(make: current.manufacturer, model: current.localizedName)
        Task.detached {
            do throws(CaptureError) {
                let sample = try await still.captureStillImage(from: connection)
                guard let jpeg = CaptureStillImageOutput.jpegStillImageDataRepresentation(sample) else { return }
                let url = try await PhotoLibrary.shared.save(jpeg: jpeg, metadata: metadata)
                say("\(url.path)\t\(sample.dimensions.map(\.description) ?? "?")\t\(jpeg.count) bytes")
            } catch {
                report(ToolError(message: "still failed: \(error.message)"))
            }
        }
    }

    func toggleCamera() {
        let cameras = CaptureDevice.devices(for: .video)
        let opposite: DevicePosition? = current.position == .front ? .back : current.position == .back ? .front : nil
        let other =
            cameras.first { $0.uniqueID != current.uniqueID && $0.position == opposite }
            ?? cameras.first { $0.uniqueID != current.uniqueID && $0.position != current.position }
            ?? cameras.first { $0.uniqueID != current.uniqueID }
        guard let other else {
            FileHandle.standardError.write(Data("capture: \(current.localizedName) is the only camera\n".utf8))
            return
        }
        do {
            try session.replaceInputs(with: try CaptureDeviceInput(device: other))
            current = other
            preview.connection?.isVideoMirrored = mirror
            say("camera: \(other.localizedName)")
        } catch {
            report(ToolError(message: "cannot switch to \(other.localizedName): \(errorText(error))"))
        }
    }

    window.eventHandler = { event in
        switch event {
        case .keyDown(.escape, _), .keyDown(Key("q"), _), .closeRequested:
            window.close()
        case .keyDown(.space, false):
            takeStill()
        case .keyDown(Key("t"), false):
            toggleCamera()
        case .keyDown(Key("i"), false):
            info.toggle(in: window.rootLayer)
        case .resized:
            preview.frame = window.rootLayer.bounds
            info.place(in: window.rootLayer)
        default:
            break
        }
    }
    if args.flags.contains("fullscreen") { window.isFullscreen = true }
    window.show()
    // The loop runs main-actor work between frames: this closes the window when the camera is
    // unplugged or fails (the session's events come on another queue).
    let ended = Task { @MainActor in
        while !window.isClosed {
            if watch.error != nil { window.close() }
            try? await Task.sleep(for: .milliseconds(50))
        }
    }
    defer { ended.cancel() }
    PreviewWindow.runEventLoop()
    if let e = watch.error { throw e }
}

/// Serves the camera over HTTP until SIGINT or SIGTERM; prints the URL, then a status line every
/// few seconds.
func serveCommand(_ args: Arguments) throws {
    let quality = try args.int("quality", default: 80, range: 1...100)
    let port = try args.int("port", default: 8080, range: 0...65_535)
    let maxClients = try args.int("max-clients", default: 20, range: 1...10_000)
    let user = args.values["user"], password = args.values["password"]
    guard (user == nil) == (password == nil) else { throw ToolError(message: "--user and --password go together") }
    var config = CaptureStreamServer.Configuration(
        host: args.values["host"] ?? "127.0.0.1", port: port, quality: quality,
        credentials: user.map { CaptureStreamServer.Credentials(user: $0, password: password ?? "") },
        allowedOrigin: args.values["allow-origin"], maxClients: maxClients)
    config.allowedHosts = (args.values["allow-host"] ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
    // Stop on SIGINT/SIGTERM through Dispatch (the default action would skip the clean stop).
    let stopRequested = DispatchSemaphore(value: 0)
    var sources: [DispatchSourceSignal] = []
    for sig in [SIGINT, SIGTERM] {
        signal(sig, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: sig, queue: .global())
        source.setEventHandler { stopRequested.signal() }
        source.resume()
        sources.append(source)
    }
    var unblock = sigset_t()
    sigemptyset(&unblock)
    sigaddset(&unblock, SIGINT)
    sigaddset(&unblock, SIGTERM)
    pthread_sigmask(SIG_UNBLOCK, &unblock, nil)
    let device = try chooseCamera(args.values["device"])
    let still = CaptureStillImageOutput()
    still.outputSettings = .init(quality: max(quality, 90))
    // The server keeps answering while the camera is gone and takes it back when it returns
    // (`reattachesCamera`); the tool says when. Watched from before the start: an unplug at any
    // time is reported.
    let gone = CameraGone()
    let session = try makeSession(device, args, outputs: [still]) { session in
        session.addEventHandler { [weak session] event in
            switch event {
            case .deviceDisconnected(let d):
                gone.set(true)
                say("offline: \(d.localizedName) (\(d.path)) went away; waiting for it to come back")
            case .didStartRunning:
                guard gone.set(false) else { return }
                let d = (session?.inputs.first as? CaptureDeviceInput)?.device
                say("online again: \(d?.localizedName ?? "the camera") (\(d?.path ?? "?")) is back")
            default:
                break
            }
        }
    }
    defer { session.stopRunning() }
    let server = try CaptureStreamServer(session: session, configuration: config)
    try server.start()
    defer { server.stop() }
    let url = server.url
    say("serving \(device.localizedName) at \(url)  (stream \(url)stream, snapshot \(url)snapshot, state \(url)state)")
    while stopRequested.wait(timeout: .now() + 5) == .timedOut {
        let s = server.statistics
        let size = s.dimensions.map(\.description) ?? "no frame yet"
        say(
            "\(s.isOnline ? "online" : "offline"), \(size), \(String(format: "%.1f", s.capturedFPS)) fps, \(s.framesReceived) frames, \(s.framesDropped.values.reduce(0, +)) dropped, \(s.clients.count) clients, \(s.clients.map(\.framesSkipped).reduce(0, +)) skipped by clients"
        )
    }
    say("stopping")
    _ = sources
}

/// Writes a line to standard output at once (print buffers when the output is a pipe).
func say(_ line: String) { FileHandle.standardOutput.write(Data((line + "\n").utf8)) }

/// Whether `capture serve`'s camera went away (set on the session's event queue).
final class CameraGone: @unchecked Sendable {
    private let lock = NSLock()
    private var gone = false
    /// Sets the flag; returns what it was.
    @discardableResult
    func set(_ value: Bool) -> Bool {
        lock.withLock {
            defer { gone = value }; return gone
        }
    }
}

/// Runs an async call to completion from synchronous code (the tool has no other work).
func runBlocking<T: Sendable>(_ body: @escaping @Sendable () async throws(CaptureError) -> T) throws(CaptureError) -> T {
    let box = ResultBox<T>()
    let sem = DispatchSemaphore(value: 0)
    Task {
        do throws(CaptureError) { box.result = .success(try await body()) } catch { box.result = .failure(error) }
        sem.signal()
    }
    sem.wait()
    return try box.result!.get()
}
final class ResultBox<T: Sendable>: @unchecked Sendable { var result: Result<T, CaptureError>? }

/// The one line the tool prints for any error: the library's words (`CaptureError` and the
/// products' errors), Foundation and POSIX file errors mapped to the same words, never a raw
/// `Error Domain=...` dump. Newlines are folded so it stays one line.
func errorText(_ error: any Error) -> String {
    let text: String
    switch error {
    case let e as ToolError: text = e.message
    case let e as CaptureError: text = e.message
    case let e as CaptureServerError: text = e.message
    case let e as PreviewError: text = e.message
    case let e as RecordingError: text = e.message
    default:
        if let e = CaptureError(foundation: error) {
            text = e.message
        } else {
            let ns = error as NSError
            text = ns.localizedFailureReason ?? ns.localizedDescription
        }
    }
    return text.split(whereSeparator: \.isNewline).joined(separator: "; ")
}

/// Prints `error` as one line on standard error.
func report(_ error: any Error) { FileHandle.standardError.write(Data(("capture: " + errorText(error) + "\n").utf8)) }

let argv = CommandLine.arguments
guard argv.count >= 2 else {
    FileHandle.standardError.write(Data((usage + "\n").utf8))
    exit(2)
}
let command = argv[1]
let rest = argv.dropFirst(2)
// `capture help [COMMAND]`, `capture --help`, and `capture COMMAND --help|-h`: usage, exit 0.
if ["help", "-h", "--help"].contains(command) {
    guard let topic = rest.first else {
        print(usage)
        exit(0)
    }
    guard let text = usage(of: topic) else {
        report(ToolError(message: "no command '\(topic)'; commands: \(commandUsages.map(\.key).joined(separator: ", "))"))
        exit(2)
    }
    print(text)
    exit(0)
}
if let text = usage(of: command), rest.contains(where: { $0 == "--help" || $0 == "-h" }) {
    print(text)
    exit(0)
}
do {
    switch command {
    case "devices":
        try devicesCommand(Arguments(rest, valued: [], boolean: ["json", "request-access"]))
    case "snap":
        try snapCommand(Arguments(rest, valued: ["device", "preset", "size", "format", "quality", "count", "output"], boolean: []))
    case "stream":
        try streamCommand(Arguments(rest, valued: ["device", "preset", "size", "format", "frames", "audio"], boolean: ["json"]))
    case "record":
        try recordCommand(rest)
    case "audio":
        try audioCommand(Arguments(rest, valued: ["device", "seconds", "rate", "output"], boolean: ["json"]))
    case "preview":
        try previewCommand(
            Arguments(rest, valued: ["device", "preset", "size", "format", "window", "gravity"], boolean: ["fullscreen", "mirror"]))
    case "serve":
        try serveCommand(
            Arguments(
                rest,
                valued: [
                    "device", "preset", "size", "format", "fps", "quality", "host", "port", "user",
                    "password", "allow-origin", "max-clients", "allow-host",
                ], boolean: []))
    default:
        throw ToolError(
            message: "unknown command '\(command)'; commands: \(commandUsages.map(\.key).joined(separator: ", ")) (capture help COMMAND)")
    }
} catch {
    report(error)
    exit(1)
}
