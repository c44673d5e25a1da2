// capture-bench record: the movie recorder's encode and write path (CaptureCodecs'
// H264FrameEncoder, what the session's H.264 stage runs on its thread, and CaptureRecording's
// MovieWriter, what CaptureMovieFileOutput runs on its recording queue) against its peers, side
// by side in one run, interleaved rounds, median of the per-round ratios.
//
//   (a) H.264: the same raw frames (YUYV or NV12, limited range, as a camera gives them) through
//       ours (the encoder's copy into its picture, NV12 as it is, YUYV through its
//       PixelFormatConverter to NV12; libx264; MovieWriter: fragmented MP4) and
//       through `ffmpeg -c:v libx264` with the recorder's default settings (preset, CRF, tune
//       zerolatency, no B-frames, a keyframe per second, NV12 into x264, x264's own choice of
//       threads on both sides, the same fragmented MP4; the bench checks that both files carry
//       the same x264 option string), both writing to files in --dir. Process CPU (user + system) per
//       frame, each side charged the difference between a long and a short recording, so that
//       neither start-up (ffmpeg's process, both encoders' set-up) nor the final flush counts.
//       Allocations per frame from the same difference: all, and those FFmpeg's and x264's own
//       code made (caller inside libavcodec, libavformat, libavutil, libswscale, libx264).
//   (b) MJPEG passthrough: JPEG frames (with Huffman tables, as the session hands them out)
//       written by MovieWriter into Matroska, process CPU per frame, against memcpy of the same
//       bytes into one buffer (thread CPU), and against write() of the same bytes to a file in
//       --dir, one call per frame (process CPU); writer set-up and trailer not timed.
//   --session: a CaptureMovieFileOutput recording the virtual camera in a running session
//       (default NV12 1280x720 at 30 fps): allocations per written frame, all and FFmpeg's.
import Capture
import CaptureVirtual
import CaptureBackend
import CaptureBenchSupport
import CaptureCodecs
import CaptureImaging
import CaptureRecording
import CAllocCounter
import Foundation

/// CPU (user + system) of the children this process has waited for.
func childrenCPUNow() -> Double {
    var u = rusage()
    getrusage(__rusage_who_t(RUSAGE_CHILDREN.rawValue), &u)
    return Double(u.ru_utime.tv_sec) + Double(u.ru_utime.tv_usec) * 1e-6
        + Double(u.ru_stime.tv_sec) + Double(u.ru_stime.tv_usec) * 1e-6
}

/// Threads of this process now.
func threadCount() -> Int {
    (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task").count) ?? 0
}

/// Runs `argv` to completion, its output discarded (stderr kept for a failure).
func runTool(_ argv: [String]) -> (status: Int32, stderr: String) {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    p.arguments = argv
    let err = Pipe()
    p.standardError = err
    p.standardOutput = FileHandle.nullDevice
    p.standardInput = FileHandle.nullDevice
    do { try p.run() } catch { fail("cannot run \(argv[0]): \(error)") }
    let text = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    p.waitUntilExit()
    return (p.terminationStatus, text)
}

func fileSize(_ path: String) -> Int {
    ((try? FileManager.default.attributesOfItem(atPath: path)[.size]) as? Int) ?? 0
}

/// What one recording cost.
struct RecordRun {
    var cpu: Double
    var allocations: Double
    var ffmpegAllocations: Double
    var bytes: Int
    var extraThreads: Int
}

func recordBench(_ a: Arguments) {
    if a.flags.contains("session") { return recordSession(a) }
    guard markFFmpegLibraries() > 0 else { fail("FFmpeg's libraries are not loaded: cannot tell their allocations") }
    let rounds = max(1, a.int("rounds", 5))
    let dir = a.string("dir") ?? (FileManager.default.fileExists(atPath: "/dev/shm") ? "/dev/shm" : NSTemporaryDirectory())
    guard let path = a.string("input") else {
        // --mjpeg alone: the passthrough half only.
        guard let mjpeg = a.string("mjpeg") else { fail("--input FILE (raw YUYV or NV12 frames) or --mjpeg FILE is required") }
        var r = Report()
        r.add("mode", "record")
        mjpegRecording(mjpeg, dir: dir, rounds: rounds, into: &r)
        r.print(json: a.json)
        return
    }
    let (w, h) = a.size()
    let format = a.format("YUYV")
    guard format == .yuyv || format == .nv12 else { fail("record reads YUYV or NV12 frames") }
    let short = max(2, a.int("short-frames", 30))
    let long = max(short + 1, a.int("long-frames", 150))
    let defaults = MovieOutputSettings()
    var settings = defaults
    if let p = a.string("preset") { settings.preset = p }
    if let q = a.string("crf") { settings.rateControl = .quality(Int(q) ?? 23) }
    guard case .quality(let crf) = settings.rateControl else { fail("the recorder's default is not a CRF") }
    let rate = 30
    // The recorder's default: a keyframe per movieFragmentInterval (1 s).
    let gop = settings.keyframeInterval ?? rate

    let file = readFile(path)
    let frameBytes = rawFrameBytes(format, w, h)
    let count = min(60, file.count / frameBytes)
    guard count >= 1 else { fail("\(path) holds less than one \(w)x\(h) \(format) frame") }
    let frames = (0..<count).map { file.subdata(in: ($0 * frameBytes)..<(($0 + 1) * frameBytes)) }
    // ffmpeg reads exactly the frames we use (the file may hold more).
    let input = "\(dir)/capture-bench-record-\(getpid()).raw"
    guard FileManager.default.createFile(atPath: input, contents: file.prefix(count * frameBytes)) else { fail("cannot write \(input)") }
    let ours = "\(dir)/capture-bench-record-\(getpid())-ours.mp4"
    let theirs = "\(dir)/capture-bench-record-\(getpid())-ffmpeg.mp4"
    // --keep DIR: the last recordings of both sides are moved there (to compare their streams).
    defer {
        if let keep = a.string("keep") {
            for (f, name) in [(ours, "ours.mp4"), (theirs, "ffmpeg.mp4")] {
                try? FileManager.default.removeItem(atPath: "\(keep)/\(name)")
                try? FileManager.default.moveItem(atPath: f, toPath: "\(keep)/\(name)")
            }
        }
        for f in [input, ours, theirs] { try? FileManager.default.removeItem(atPath: f) }
    }

    let memory = DriverLikeBuffers(frames: frames)
    let used = memory.used
    let replay = FrameReplay(
        pixelFormat: format, width: w, height: h, bytesPerLine: format == .yuyv ? w * 2 : w, buffers: used)
    let samples = ReplaySamples()
    let frameNanoseconds = Int64(1_000_000_000 / rate)
    let stage = H264Settings(
        encoder: settings.h264Encoder.rawValue, preset: settings.preset, rateControl: .quality(crf), keyFrameInterval: gop)

    func ourRecording(_ n: Int) -> RecordRun {
        try? FileManager.default.removeItem(atPath: ours)
        let t0 = threadCount()
        let c0 = processCPUNow(), a0 = calloc_counter_total(), f0 = calloc_counter_marked_total()
        var extra = 0
        do {
            guard let writer = try MovieWriter(url: URL(fileURLWithPath: ours), fragmentInterval: .seconds(1)) else {
                fail("no container for \(ours)")
            }
            let encoder = H264FrameEncoder(stage, interval: FrameInterval(framesPerSecond: Double(rate)))
            var failure: (any Error)?
            var begun = false
            for i in 0..<n {
                let sample = replay.sample(i % count, sequence: UInt32(i), reusing: samples)
                try encoder.load(sample)
                samples.done(sample)
                try encoder.encode(keyFrame: false) { unit in
                    do {
                        if !begun {
                            try writer.begin(
                                .init(
                                    width: w, height: h, pixelFormat: MovieWriter.VideoFormat.h264,
                                    frameInterval: FrameInterval(framesPerSecond: Double(rate))),
                                audio: nil, settings: settings, parameterSets: unit.parameterSets)
                            begun = true
                            extra = threadCount() - t0
                        }
                        try writer.write(unit, at: Int64(i) * frameNanoseconds)
                    } catch { failure = error }
                }
                if let failure { throw failure }
            }
            try writer.finish(videoEnd: Int64(n) * frameNanoseconds)
        } catch { fail("recording: \(error)") }
        return RecordRun(
            cpu: processCPUNow() - c0, allocations: Double(calloc_counter_total() - a0),
            ffmpegAllocations: Double(calloc_counter_marked_total() - f0), bytes: fileSize(ours), extraThreads: extra)
    }

    // --peer none: ours alone (for callgrind, which cannot follow the ffmpeg child).
    let withPeer = a.string("peer") != "none"
    func ffmpegRecording(_ n: Int) -> RecordRun {
        guard withPeer else { return RecordRun(cpu: .nan, allocations: 0, ffmpegAllocations: 0, bytes: 0, extraThreads: 0) }
        try? FileManager.default.removeItem(atPath: theirs)
        let c0 = childrenCPUNow()
        let r = runTool([
            "ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-y",
            "-f", "rawvideo", "-pix_fmt", format == .yuyv ? "yuyv422" : "nv12", "-s", "\(w)x\(h)",
            "-framerate", "\(rate)", "-stream_loop", "-1", "-i", input, "-frames:v", "\(n)",
            "-c:v", "libx264", "-preset", settings.preset, "-tune", "zerolatency", "-crf", "\(crf)",
            "-bf", "0", "-g", "\(gop)", "-pix_fmt", "nv12",
            "-movflags", "frag_keyframe+empty_moov+default_base_moof",
            "-min_frag_duration", "750000", "-frag_duration", "2000000", "-flush_packets", "1", theirs,
        ])
        guard r.status == 0 else { fail("ffmpeg failed (\(r.status)): \(r.stderr)") }
        return RecordRun(cpu: childrenCPUNow() - c0, allocations: 0, ffmpegAllocations: 0, bytes: fileSize(theirs), extraThreads: 0)
    }

    // Warm-up: page cache, libraries, the converter's tables.
    _ = ourRecording(short)
    _ = ffmpegRecording(short)

    var oursPerFrame: [Double] = [], theirsPerFrame: [Double] = [], ratios: [Double] = []
    var allocs: [Double] = [], ffmpegAllocs: [Double] = []
    var oursBytes = 0, theirsBytes = 0, extraThreads = 0, sameOptions = true, options = ""
    let span = Double(long - short)
    for round in 0..<rounds {
        // Alternate which side goes first, so a slow patch of the machine falls on both.
        var o: (RecordRun, RecordRun)!, f: (RecordRun, RecordRun)!
        if round % 2 == 0 {
            o = (ourRecording(short), ourRecording(long))
            f = (ffmpegRecording(short), ffmpegRecording(long))
        } else {
            f = (ffmpegRecording(short), ffmpegRecording(long))
            o = (ourRecording(short), ourRecording(long))
        }
        let oc = (o.1.cpu - o.0.cpu) / span, fc = (f.1.cpu - f.0.cpu) / span
        oursPerFrame.append(oc)
        theirsPerFrame.append(fc)
        ratios.append(fc / oc)
        allocs.append((o.1.allocations - o.0.allocations) / span)
        ffmpegAllocs.append((o.1.ffmpegAllocations - o.0.ffmpegAllocations) / span)
        oursBytes = o.1.bytes
        theirsBytes = f.1.bytes
        extraThreads = o.1.extraThreads
        // x264 writes its settings into the stream: the two sides must have encoded alike.
        guard withPeer else { continue }
        let (mine, peer) = (x264Options(ours), x264Options(theirs))
        sameOptions = sameOptions && mine != nil && mine == peer
        options = mine ?? "?"
        if mine != peer {
            FileHandle.standardError.write(Data("record: x264 options differ:\n ours:   \(mine ?? "-")\n ffmpeg: \(peer ?? "-")\n".utf8))
        }
    }

    var r = Report()
    r.add("mode", "record")
    r.add("format", format.description)
    r.add("width", w)
    r.add("height", h)
    r.add("frames_in_file", count)
    r.add("preset", settings.preset)
    r.add("crf", crf)
    r.add("default_settings", settings == defaults)
    r.add("keyframe_interval", gop)
    r.add("rounds", rounds)
    r.add("frames_short_long", "\(short)/\(long)")
    r.add("ours_cpu_ms_per_frame", median(oursPerFrame) * 1000)
    r.add("ffmpeg_cpu_ms_per_frame", median(theirsPerFrame) * 1000)
    // ffmpeg's CPU per frame over ours: 1 is the same cost, above 1 ours is cheaper.
    r.add("h264_ratio", median(ratios))
    r.add("h264_ratios", ratios.map { String(format: "%.3f", $0) }.joined(separator: " "))
    r.add("ours_file_bytes", oursBytes)
    r.add("ffmpeg_file_bytes", theirsBytes)
    r.add("encoder_threads_started", extraThreads)
    r.add("same_x264_options", sameOptions)
    r.add("x264_threads", options.split(separator: " ").first { $0.hasPrefix("threads=") }.map { String($0.dropFirst(8)) } ?? "?")
    r.add("allocations_per_frame", median(allocs))
    r.add("allocations_per_frame_ffmpeg", median(ffmpegAllocs))
    r.add("allocations_per_frame_ours", median(allocs) - median(ffmpegAllocs))
    r.add("allocation_counter_active", calloc_counter_is_active() != 0)

    if let mjpeg = a.string("mjpeg") { mjpegRecording(mjpeg, dir: dir, rounds: rounds, into: &r) }
    r.print(json: a.json)
}

/// (b): MJPEG passthrough into Matroska against memcpy of the same bytes, interleaved rounds.
func mjpegRecording(_ path: String, dir: String, rounds: Int, into r: inout Report) {
    var frames = splitMJPEG(readFile(path))
    guard !frames.isEmpty else { fail("\(path) holds no complete JPEG frame") }
    if frames.count > 64 { frames = Array(frames[0..<64]) }
    let memory = DriverLikeBuffers(frames: frames)
    let used = memory.used
    guard let first = try? MJPEG.validateFrame(used[0]) else { fail("\(path): not JPEG") }
    let w = first.frame.width, h = first.frame.height
    let replay = FrameReplay(pixelFormat: .mjpeg, width: w, height: h, colorRange: .full, buffers: used)
    let samples = ReplaySamples()
    let out = "\(dir)/capture-bench-record-\(getpid()).mkv"
    defer { try? FileManager.default.removeItem(atPath: out) }
    let perRound = max(used.count, 300 / used.count * used.count)
    let bytesPerPass = used.reduce(0) { $0 + $1.count }
    let dst = UnsafeMutableRawPointer.allocate(byteCount: used.map(\.count).max()! + 4096, alignment: 4096)
    defer { dst.deallocate() }

    var allocatedBytes = 0.0
    func record() -> (cpu: Double, allocations: Double, ffmpeg: Double, bytes: Int) {
        try? FileManager.default.removeItem(atPath: out)
        do {
            guard let writer = try MovieWriter(url: URL(fileURLWithPath: out), fragmentInterval: .seconds(1)) else { fail("no container") }
            try writer.begin(
                .init(width: w, height: h, pixelFormat: .jpeg, frameInterval: FrameInterval(framesPerSecond: 30)),
                audio: nil, settings: MovieOutputSettings(codec: .mjpeg))
            let c0 = processCPUNow(), a0 = calloc_counter_total(), f0 = calloc_counter_marked_total(), b0 = calloc_counter_total_bytes()
            for i in 0..<perRound {
                let sample = replay.sample(i % used.count, sequence: UInt32(i), reusing: samples)
                try writer.write(sample, at: Int64(i) * 33_333_333)
                samples.done(sample)
            }
            let c1 = processCPUNow(), a1 = calloc_counter_total(), f1 = calloc_counter_marked_total()
            allocatedBytes = Double(calloc_counter_total_bytes() - b0) / Double(perRound)
            try writer.finish(videoEnd: Int64(perRound) * 33_333_333)
            return (c1 - c0, Double(a1 - a0), Double(f1 - f0), fileSize(out))
        } catch { fail("MJPEG recording: \(error)") }
    }
    // The floor of any recorder: the same bytes written to a file in the same folder, one
    // write per frame (as the muxer's flush per packet), no container.
    let plain = "\(dir)/capture-bench-record-\(getpid()).bin"
    defer { try? FileManager.default.removeItem(atPath: plain) }
    func writeFile() -> Double {
        let fd = open(plain, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        guard fd >= 0 else { fail("cannot create \(plain)") }
        let c0 = processCPUNow()
        for i in 0..<perRound {
            let f = used[i % used.count]
            guard write(fd, f.baseAddress!, f.count) == f.count else { fail("write to \(plain) failed") }
        }
        let c1 = processCPUNow()
        close(fd)
        return c1 - c0
    }
    func copy() -> Double {
        let c0 = threadCPUNow()
        for i in 0..<perRound { let f = used[i % used.count]; memcpy(dst, f.baseAddress!, f.count) }
        return threadCPUNow() - c0
    }
    _ = record()
    _ = copy()
    _ = writeFile()
    var ratios: [Double] = [], recordCPU: [Double] = [], copyCPU: [Double] = [], allocs: [Double] = [], ffmpegAllocs: [Double] = []
    var writeRatios: [Double] = [], writeCPU: [Double] = []
    var fileBytes = 0
    for round in 0..<rounds {
        let (rec, cp): ((cpu: Double, allocations: Double, ffmpeg: Double, bytes: Int), Double)
        let wr: Double
        if round % 2 == 0 { rec = record(); cp = copy(); wr = writeFile() } else { wr = writeFile(); cp = copy(); rec = record() }
        writeRatios.append(wr / rec.cpu)
        writeCPU.append(wr / Double(perRound))
        ratios.append(cp / rec.cpu)
        recordCPU.append(rec.cpu / Double(perRound))
        copyCPU.append(cp / Double(perRound))
        allocs.append(rec.allocations / Double(perRound))
        ffmpegAllocs.append(rec.ffmpeg / Double(perRound))
        fileBytes = rec.bytes
    }
    let frameBytes = Double(bytesPerPass) / Double(used.count)
    r.add("mjpeg_width", w)
    r.add("mjpeg_height", h)
    r.add("mjpeg_bytes_per_frame", frameBytes)
    r.add("mjpeg_file_bytes", fileBytes)
    r.add("mjpeg_record_ms_per_frame", median(recordCPU) * 1000)
    r.add("mjpeg_record_mb_per_s", frameBytes / median(recordCPU) / 1e6)
    r.add("memcpy_mb_per_s", frameBytes / median(copyCPU) / 1e6)
    // Recording throughput over memcpy's, same bytes: the goal is at least 0.5.
    r.add("mjpeg_ratio_to_memcpy", median(ratios))
    r.add("mjpeg_ratios_to_write", writeRatios.map { String(format: "%.3f", $0) }.joined(separator: " "))
    r.add("write_mb_per_s", frameBytes / median(writeCPU) / 1e6)
    // Over plain write() of the same bytes to the same folder: what the container costs.
    r.add("mjpeg_ratio_to_write", median(writeRatios))
    r.add("mjpeg_allocations_per_frame", median(allocs))
    r.add("mjpeg_allocations_per_frame_ffmpeg", median(ffmpegAllocs))
    r.add("mjpeg_allocated_bytes_per_frame", allocatedBytes)
}

/// The option string x264 leaves in its SEI ("x264 - core ... - options: ..."), or nil.
func x264Options(_ path: String) -> String? {
    guard let d = FileManager.default.contents(atPath: path) else { return nil }
    let b = [UInt8](d.prefix(1 << 20))
    let key = Array("x264 - core".utf8)
    guard b.count > key.count, let at = (0..<(b.count - key.count)).first(where: { b[$0..<($0 + key.count)].elementsEqual(key) }) else {
        return nil
    }
    let end = b[at...].firstIndex(of: 0) ?? b.count
    return String(decoding: b[at..<end], as: UTF8.self)
}

/// Marks FFmpeg's and x264's code for the allocation counter (before anything is counted).
func markFFmpegLibraries() -> Int {
    let names = ["libavcodec", "libavformat", "libavutil", "libswscale", "libswresample", "libx264"]
    let list = UnsafeMutablePointer<UnsafePointer<CChar>?>.allocate(capacity: names.count + 1)
    for (i, n) in names.enumerated() { list[i] = UnsafePointer(strdup(n)) }
    list[names.count] = nil
    defer {
        for i in names.indices { free(UnsafeMutablePointer(mutating: list[i])) }
        list.deallocate()
    }
    return Int(calloc_counter_mark_libraries(list))
}

/// Records nothing but counts: the recording delegate of `recordSession`.
final class QuietRecordingDelegate: CaptureFileOutputRecordingDelegate, @unchecked Sendable {
    let finished = DispatchSemaphore(value: 0)
    func fileOutput(
        _ output: CaptureMovieFileOutput, didFinishRecordingTo outputFileURL: URL, from connections: [CaptureConnection],
        error: RecordingError?
    ) {
        if let error, !error.recordingSuccessfullyFinished { FileHandle.standardError.write(Data("record: \(error)\n".utf8)) }
        finished.signal()
    }
}

/// An app's video data output that takes every frame and does nothing with it (`--app-output`).
final class IdleFrameDelegate: CaptureVideoDataOutputSampleBufferDelegate, @unchecked Sendable {
    func captureOutput(_ output: CaptureOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection) {}
}

/// `record --session`: a CaptureMovieFileOutput in a running session on the virtual camera
/// (its frames in the camera's format, the recorder's own consumer and queue), allocations per
/// written frame over a window after a warm-up second: all, and FFmpeg's and x264's. With
/// `--app-output`, an app's video data output (every frame, no newest-wins) runs beside it and
/// its frames and losses are reported too (whether a slow recorder costs it anything).
func recordSession(_ a: Arguments) {
    guard markFFmpegLibraries() > 0 else { fail("FFmpeg's libraries are not loaded") }
    let (w, h) = a.size((1280, 720))
    let format = a.format("NV12")
    let seconds = a.double("seconds", 4)
    let dir = a.string("dir") ?? (FileManager.default.fileExists(atPath: "/dev/shm") ? "/dev/shm" : NSTemporaryDirectory())
    let camera = VirtualCamera(
        name: "Bench Camera", position: .front,
        formats: [VirtualCamera.Mode(format, width: w, height: h, frameRates: [30])])
    VirtualCamera.install(camera)
    defer { VirtualCamera.uninstall(camera) }
    guard let device = CaptureDevice.device(withUniqueID: camera.uniqueID) else { fail("virtual camera not listed") }
    // `--outputs N`: N movie outputs with the same settings recording at once (they share the
    // session's one H.264 encode: `h264_encodes_per_frame` stays 1).
    let movies = (0..<max(1, a.int("outputs", 1))).map { _ in CaptureMovieFileOutput() }
    let movie = movies[0]
    let app = CaptureVideoDataOutput()
    app.alwaysDiscardsLateVideoFrames = false
    let appDelegate = IdleFrameDelegate()
    app.setSampleBufferDelegate(appDelegate, queue: DispatchQueue(label: "capture-bench.app-output"))
    let withApp = a.flags.contains("app-output")
    let s = openSession(device: device, size: (w, h), format: format, rate: 30, outputs: withApp ? [app] : [])
    // `--audio`: a virtual microphone too; the outputs share its one AAC encode
    // (`audio_encodes_per_buffer` stays 1).
    let mic = VirtualMicrophone(name: "Bench Microphone \(getpid())")
    if a.flags.contains("audio") {
        VirtualMicrophone.install(mic)
        guard let d = CaptureDevice.device(withUniqueID: mic.uniqueID), let input = try? CaptureDeviceInput(device: d) else {
            fail("virtual microphone not listed")
        }
        s.addInput(input)
    }
    defer { if a.flags.contains("audio") { VirtualMicrophone.uninstall(mic) } }
    for m in movies { s.addOutput(m) }
    // `--preset P`: x264's preset (a slower one makes a recorder that falls behind).
    var settings = MovieOutputSettings()
    if let preset = a.string("preset") { settings.preset = preset }
    for m in movies { m.setOutputSettings(settings, for: nil) }
    do { try s.start() } catch { fail("cannot start: \(error)") }
    let urls = movies.indices.map { URL(fileURLWithPath: "\(dir)/capture-bench-record-\(getpid())-session-\($0).mp4") }
    defer { for url in urls { try? FileManager.default.removeItem(at: url) } }
    let delegates = movies.map { _ in QuietRecordingDelegate() }
    for (i, m) in movies.enumerated() { m.startRecording(to: urls[i], recordingDelegate: delegates[i]) }
    Thread.sleep(forTimeInterval: 1.5)
    let n0 = movie.recordedFrameCount, e0 = s.stageEncodes, ae0 = s.audioStageEncodes, ab0 = s.audioBuffersHanded
    let a0 = calloc_counter_total(), f0 = calloc_counter_marked_total(), c0 = processCPUNow()
    Thread.sleep(forTimeInterval: seconds)
    let n1 = movie.recordedFrameCount, e1 = s.stageEncodes, ae1 = s.audioStageEncodes, ab1 = s.audioBuffersHanded
    let a1 = calloc_counter_total(), f1 = calloc_counter_marked_total(), c1 = processCPUNow()
    for m in movies { m.stopRecording() }
    for d in delegates { _ = d.finished.wait(timeout: .now() + 10) }
    s.stopRunning()
    let frames = Double(max(1, n1 - n0))
    var r = Report()
    r.add("mode", "record-session")
    r.add("format", format.description)
    r.add("width", w)
    r.add("height", h)
    r.add("frames_written", n1 - n0)
    r.add("frames_dropped", movie.lastRecording?.framesDropped.values.reduce(0, +) ?? -1)
    r.add("drop_reasons", (movie.lastRecording?.framesDropped ?? [:]).map { "\($0.key)=\($0.value)" }.sorted().joined(separator: " "))
    r.add("preset", settings.preset)
    r.add("outputs", movies.count)
    r.add("h264_encodes_per_frame", Double(e1 - e0) / frames)
    r.add("frames_written_total", movie.lastRecording?.framesWritten ?? -1)
    if a.flags.contains("audio") {
        r.add("audio_encodes_per_buffer", Double(ae1 - ae0) / Double(max(1, ab1 - ab0)))
        let audio = movies.map { m in
            m.lastRecording?.audioDuration.map { d in
                String(format: "%.3f", Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18)
            }
        }
        r.add("audio_seconds", audio.map { $0 ?? "none" }.joined(separator: " "))
    }
    if withApp {
        let (delivered, dropped) = app.statistics
        r.add("app_frames_delivered", delivered)
        r.add("app_drop_reasons", dropped.map { "\($0.key)=\($0.value)" }.sorted().joined(separator: " "))
    }
    r.add("cpu_ms_per_frame", (c1 - c0) / frames * 1000)
    r.add("allocations_per_frame", Double(a1 - a0) / frames)
    r.add("allocations_per_frame_ffmpeg", Double(f1 - f0) / frames)
    r.add("allocations_per_frame_rest", Double((a1 - a0) - (f1 - f0)) / frames)
    r.print(json: a.json)
}
