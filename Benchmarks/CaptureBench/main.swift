// capture-bench: measures swift-capture's frame-to-JPEG paths on recorded frames, on the virtual
// camera and on live devices. Heap allocations are counted by CAllocCounter (it defines malloc
// for this process), never estimated.
//
//   capture-bench hotpath --input FILE --size WxH --format YUYV|UYVY|NV12|YU12 --quality Q
//                         [--subsampling 422|420] [--threads N] [--seconds S] [--range limited|full] [--json]
//   capture-bench passthrough --input FILE.mjpeg [--strip-dht] [--seconds S] [--json]
//   capture-bench session [--size WxH] [--format F] [--rate FPS] [--seconds S] [--quality Q] [--still-quality Q]
//                         [--jpeg-threads N] [--json]
//   capture-bench live --device PATH [--size WxH] [--format F] [--seconds S] [--threads N] [--quality Q] [--json]
//   capture-bench preview [--size WxH] [--rate FPS] [--mjpeg-size WxH | --input FILE.mjpeg] [--window WxH]
//                         [--seconds S] [--rounds N] [--json]   (needs a display: Xvfb; see Preview.swift)
//   capture-bench record --input FILE --size WxH [--format YUYV|NV12] [--mjpeg FILE.mjpeg] [--rounds N]
//                        [--short-frames N] [--long-frames N] [--preset P] [--crf Q] [--dir DIR] [--keep DIR]
//                        [--peer none] [--json]
//   capture-bench record --session [--size WxH] [--format F] [--seconds S] [--preset P] [--outputs N] [--app-output] [--audio] [--json]
//                        (needs ffmpeg; see Record.swift)
//   capture-bench cycles [--warmup N] [--cycles N] [--size WxH] [--json]   (what session cycles leave; Cycles.swift)
//   capture-bench latency [--size WxH] [--fps N] [--seconds S] [--rounds N] [--paths mjpeg,mp4,webrtc,webrtc-no-delay] [--viewers N] [--webapp-starts N]
//                         (Chromium through each serving path; JSON; see Latency.swift)
//   capture-bench metadata [--size WxH] [--types qr,face,...] [--input PICTURE.jpg] [--seconds S] [--rounds N] [--json]
//                          (the metadata output against zxing-cpp and OpenCV called directly; Metadata.swift)
//   capture-bench startup [--runs N]   (capture help, devices and snap started: time and peak memory; JSON; Startup.swift)
import CaptureVirtual
import CaptureImaging
import CaptureV4L2
import CaptureBackend
import CaptureBenchSupport
import CAllocCounter
import Capture
import Foundation

// MARK: - Command line

struct Arguments {
    var command = ""
    var values: [String: String] = [:]
    var flags: Set<String> = []

    init(_ argv: [String]) {
        var it = argv.dropFirst().makeIterator()
        command = it.next() ?? ""
        while let a = it.next() {
            guard a.hasPrefix("--") else { fail("unexpected argument \(a)") }
            let key = String(a.dropFirst(2))
            if ["json", "strip-dht", "session", "app-output", "audio"].contains(key) {
                flags.insert(key)
            } else if let v = it.next() {
                values[key] = v
            } else {
                fail("\(a) needs a value")
            }
        }
    }

    func string(_ k: String) -> String? { values[k] }
    func int(_ k: String, _ d: Int) -> Int {
        guard let s = values[k] else { return d }
        guard let v = Int(s) else { fail("--\(k) wants a number, not \(s)") }
        return v
    }
    func double(_ k: String, _ d: Double) -> Double {
        guard let s = values[k] else { return d }
        guard let v = Double(s) else { fail("--\(k) wants a number, not \(s)") }
        return v
    }
    func size(_ d: (Int, Int)? = nil) -> (Int, Int) {
        guard let s = values["size"] else {
            if let d { return d }
            fail("--size WxH is required")
        }
        let p = s.split(separator: "x").compactMap { Int($0) }
        guard p.count == 2, p[0] > 0, p[1] > 0 else { fail("--size wants WxH, not \(s)") }
        return (p[0], p[1])
    }
    func format(_ d: String? = nil) -> PixelFormat {
        guard let s = values["format"] ?? d else { fail("--format is required") }
        switch s.uppercased() {
        case "YUYV": return .yuyv
        case "UYVY": return .uyvy
        case "NV12": return .nv12
        case "YU12", "I420", "YUV420": return .yuv420
        case "MJPG", "MJPEG": return .mjpeg
        default: fail("unknown --format \(s) (YUYV, UYVY, NV12, YU12)")
        }
    }
    var json: Bool { flags.contains("json") }
}

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("capture-bench: \(message)\n".utf8))
    exit(2)
}

// MARK: - Clocks and counters

func wallNow() -> Double {
    var t = timespec()
    clock_gettime(CLOCK_MONOTONIC, &t)
    return Double(t.tv_sec) + Double(t.tv_nsec) * 1e-9
}

/// CPU time of the calling thread: a per-core cost that other processes on the box do not inflate.
func threadCPUNow() -> Double {
    var t = timespec()
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t)
    return Double(t.tv_sec) + Double(t.tv_nsec) * 1e-9
}

/// User + system CPU of the whole process (every thread).
func processCPUNow() -> Double {
    var u = rusage()
    getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &u)
    return Double(u.ru_utime.tv_sec) + Double(u.ru_utime.tv_usec) * 1e-6
        + Double(u.ru_stime.tv_sec) + Double(u.ru_stime.tv_usec) * 1e-6
}

func median(_ xs: [Double]) -> Double {
    guard !xs.isEmpty else { return .nan }
    let s = xs.sorted()
    return s[s.count / 2]
}

/// A flat JSON object, keys in insertion order.
struct Report {
    var fields: [(String, String)] = []
    mutating func add(_ k: String, _ v: String) { fields.append((k, "\"\(v)\"")) }
    mutating func add(_ k: String, _ v: Int) { fields.append((k, "\(v)")) }
    mutating func add(_ k: String, _ v: Double) {
        fields.append((k, v.isFinite ? String(format: "%.4f", v) : "null"))
    }
    mutating func add(_ k: String, _ v: Bool) { fields.append((k, v ? "true" : "false")) }

    func print(json: Bool) {
        if json {
            Swift.print("{" + fields.map { "\"\($0.0)\": \($0.1)" }.joined(separator: ", ") + "}")
        } else {
            for (k, v) in fields { Swift.print("\(k.padding(toLength: 34, withPad: " ", startingAt: 0)) \(v)") }
        }
    }
}

// MARK: - Frames in driver-like buffers

/// Page-aligned buffers, one frame each, padded to whole pages as a driver's mmap buffers are.
final class DriverLikeBuffers {
    let buffers: [UnsafeMutableRawBufferPointer]
    let frameBytes: [Int]

    init(frames: [Data]) {
        var bs: [UnsafeMutableRawBufferPointer] = []
        for f in frames {
            let length = (f.count + 4095) / 4096 * 4096
            var p: UnsafeMutableRawPointer?
            guard posix_memalign(&p, 4096, max(length, 4096)) == 0, let p else { fail("out of memory") }
            let b = UnsafeMutableRawBufferPointer(start: p, count: length)
            b.initializeMemory(as: UInt8.self, repeating: 0)
            f.withUnsafeBytes { b.copyMemory(from: $0) }
            bs.append(b)
        }
        buffers = bs
        frameBytes = frames.map(\.count)
    }

    deinit { for b in buffers { free(b.baseAddress) } }

    /// The bytes a driver would report as used (`bytesused`).
    var used: [UnsafeRawBufferPointer] {
        zip(buffers, frameBytes).map { UnsafeRawBufferPointer(start: $0.0.baseAddress, count: $0.1) }
    }
}

func readFile(_ path: String) -> Data {
    guard let d = FileManager.default.contents(atPath: path) else { fail("cannot read \(path)") }
    return d
}

func rawFrameBytes(_ format: PixelFormat, _ w: Int, _ h: Int) -> Int {
    switch format {
    case .yuyv, .uyvy: return (w + 1) / 2 * 4 * h
    case .nv12: return w * h + 2 * ((w + 1) / 2) * ((h + 1) / 2)
    case .yuv420: return w * h + 2 * ((w + 1) / 2) * ((h + 1) / 2)
    default: fail("hotpath reads YUYV, UYVY, NV12 or YU12 frames")
    }
}

// MARK: - hotpath

func hotpath(_ a: Arguments) {
    guard let path = a.string("input") else { fail("--input FILE is required") }
    let (w, h) = a.size()
    let format = a.format()
    let quality = a.int("quality", 85)
    let threads = max(1, a.int("threads", 1))
    let seconds = a.double("seconds", 3)
    let range: ColorRange = a.string("range") == "full" ? .full : .limited
    let subsampling: ChromaSubsampling? =
        switch a.string("subsampling") {
        case nil: nil
        case "422": .s422
        case "420": .s420
        case "444": .s444
        case let s?: fail("--subsampling wants 422 or 420, not \(s)")
        }

    let file = readFile(path)
    let frameBytes = rawFrameBytes(format, w, h)
    let count = min(64, file.count / frameBytes)
    guard count >= 1 else { fail("\(path) holds \(file.count) bytes, less than one \(w)x\(h) \(format) frame (\(frameBytes))") }
    let frames = (0..<count).map { file.subdata(in: ($0 * frameBytes)..<(($0 + 1) * frameBytes)) }
    let memory = DriverLikeBuffers(frames: frames)
    let replay = FrameReplay(pixelFormat: format, width: w, height: h, colorRange: range, buffers: memory.used)

    let encoder = JPEGEncoder(quality: quality, subsampling: subsampling)
    var sequence: UInt32 = 0
    var lastBytes = 0
    let samples = ReplaySamples()
    func encodeOne(_ i: Int) {
        // As the capture thread does: the dequeued buffer wrapped in its reused sample, then encoded in place.
        let sample = replay.sample(i, sequence: sequence, reusing: samples)
        sequence &+= 1
        do { lastBytes = try EncodePaths.encodeInPlace(sample, with: encoder).count } catch { fail("encode: \(error)") }
        samples.done(sample)
    }

    // Warm-up: sizes the encoder's buffers and arena.
    for i in 0..<count { encodeOne(i) }

    // Single thread, per core: thread CPU per pass; wall clock for reference.
    var cpuPerFrame: [Double] = [], wallPerFrame: [Double] = []
    // Reserved so that the timing itself allocates nothing while allocations are counted.
    cpuPerFrame.reserveCapacity(100_000)
    wallPerFrame.reserveCapacity(100_000)
    var totalBytes = 0, totalFrames = 0
    let allocBefore = calloc_counter_thread()
    let start = wallNow()
    while wallNow() - start < seconds || cpuPerFrame.count < 5 {
        let c0 = threadCPUNow(), w0 = wallNow()
        for i in 0..<count {
            encodeOne(i)
            totalBytes += lastBytes
            totalFrames += 1
        }
        cpuPerFrame.append((threadCPUNow() - c0) / Double(count))
        wallPerFrame.append((wallNow() - w0) / Double(count))
    }
    let allocsWrapAndEncode = Double(calloc_counter_thread() - allocBefore) / Double(totalFrames)

    // Break-down: encoding frames already wrapped, and wrapping alone.
    let prewrapped = (0..<count).map { replay.sample($0, sequence: UInt32($0)) }
    var a0 = calloc_counter_thread()
    for _ in 0..<4 { for s in prewrapped { _ = try? EncodePaths.encodeInPlace(s, with: encoder) } }
    let allocsEncodeOnly = Double(calloc_counter_thread() - a0) / Double(4 * count)
    a0 = calloc_counter_thread()
    for i in 0..<(4 * count) { samples.done(replay.sample(i % count, sequence: UInt32(i), reusing: samples)) }
    let allocsWrapOnly = Double(calloc_counter_thread() - a0) / Double(4 * count)
    // The still output's path: the JPEG copied into a reused Data.
    var stillEncoder: JPEGEncoder?, stillScratch: [UInt8] = []
    let stillSamples = StillSamples()
    for s in prewrapped {
        (try? EncodePaths.still(s, encoder: &stillEncoder, quality: quality, scratch: &stillScratch, into: stillSamples))?.release()
    }
    a0 = calloc_counter_thread()
    for _ in 0..<2 {
        for s in prewrapped {
            (try? EncodePaths.still(s, encoder: &stillEncoder, quality: quality, scratch: &stillScratch, into: stillSamples))?.release()
        }
    }
    let allocsStill = Double(calloc_counter_thread() - a0) / Double(2 * count)

    var r = Report()
    r.add("mode", "hotpath")
    r.add("format", format.description)
    r.add("width", w)
    r.add("height", h)
    r.add("quality", quality)
    r.add("subsampling", (subsampling ?? encoder.outputSubsampling(for: format))?.rawValue ?? "?")
    r.add("range", range == .full ? "full" : "limited")
    r.add("frames_in_file", count)
    r.add("frames_encoded", totalFrames)
    let cpuMedian = median(cpuPerFrame)
    r.add("fps", 1 / cpuMedian)
    r.add("ms_per_frame", cpuMedian * 1000)
    // The fastest pass: on a busy machine other load only ever adds time.
    r.add("best_fps", 1 / (cpuPerFrame.min() ?? .nan))
    r.add("wall_fps", 1 / median(wallPerFrame))
    r.add("wall_ms_per_frame", median(wallPerFrame) * 1000)
    r.add("bytes_per_frame", Double(totalBytes) / Double(totalFrames))
    r.add("allocations_per_frame", allocsWrapAndEncode)
    r.add("allocations_per_frame_encode", allocsEncodeOnly)
    r.add("allocations_per_frame_wrap", allocsWrapOnly)
    r.add("allocations_per_frame_still_path", allocsStill)
    r.add("allocation_counter_active", calloc_counter_is_active() != 0)

    // The encoder pool: wall-clock throughput with N workers and with 1, fed as fast as they take.
    if threads > 1 || a.string("threads") != nil {
        let one = runPool(replay: replay, workers: 1, quality: quality, subsampling: subsampling, seconds: seconds)
        let many =
            threads == 1
            ? one
            : runPool(
                replay: replay, workers: threads, quality: quality,
                subsampling: subsampling, seconds: seconds)
        r.add("threads", threads)
        // The same threads with no pool between them (each its own encoder and frames): what the
        // machine allows at that moment, to tell the pool's cost from other load.
        r.add(
            "independent_1_fps",
            independentThreads(
                replay: replay, threads: 1, quality: quality,
                subsampling: subsampling, seconds: seconds))
        r.add(
            "independent_fps",
            independentThreads(
                replay: replay, threads: threads, quality: quality,
                subsampling: subsampling, seconds: seconds))
        r.add("pool_1_fps", one.fps)
        r.add("pool_fps", many.fps)
        r.add("pool_scaling", many.fps / one.fps)
        r.add("pool_cpu_ms_per_frame", many.cpuPerFrame * 1000)
        r.add("pool_allocations_per_frame", many.allocationsPerFrame)
        r.add("pool_in_order", one.inOrder && many.inOrder)
        r.add("pool_dropped", many.dropped)
        r.add("pool_bytes_per_frame", many.bytesPerFrame)
    }
    r.print(json: a.json)
}

func independentThreads(
    replay: FrameReplay, threads: Int, quality: Int, subsampling: ChromaSubsampling?,
    seconds: Double
) -> Double {
    let counts = UnsafeMutablePointer<Int>.allocate(capacity: threads)
    counts.initialize(repeating: 0, count: threads)
    defer { counts.deallocate() }
    nonisolated(unsafe) let shared = counts
    let done = DispatchSemaphore(value: 0)
    let t0 = wallNow()
    for t in 0..<threads {
        Thread {
            let encoder = JPEGEncoder(quality: quality, subsampling: subsampling)
            var n = 0, seq = UInt32(t) << 24
            while wallNow() - t0 < seconds {
                _ = try? EncodePaths.encodeInPlace(replay.sample(n % replay.count, sequence: seq), with: encoder)
                n += 1
                seq &+= 1
            }
            shared[t] = n
            done.signal()
        }.start()
    }
    for _ in 0..<threads { done.wait() }
    let elapsed = wallNow() - t0
    return Double((0..<threads).reduce(0) { $0 + counts[$1] }) / elapsed
}

struct PoolRun {
    var fps: Double
    var cpuPerFrame: Double
    var allocationsPerFrame: Double
    var inOrder: Bool
    var dropped: Int
    var bytesPerFrame: Double
}

/// What the pool's delivery sees: counted under a lock, checked for order.
final class Tally: @unchecked Sendable {
    let lock = NSLock()
    var frames = 0, bytes = 0, dropped = 0, failed = 0
    var last: UInt32?
    var inOrder = true
    func take(_ o: JPEGEncoderPool.Output) {
        lock.lock()
        switch o {
        case .encoded(let sample, _):
            let seq = UInt32(truncatingIfNeeded: sample.sequenceNumber)
            if let l = last, seq != l &+ 1 { inOrder = false }
            last = seq
            frames += 1
            bytes += sample.withUnsafeBytes { $0.count }
        case .dropped(let d):
            dropped += d.count
            if let s = d.sequenceNumber { last = UInt32(truncatingIfNeeded: s) &+ UInt32(truncatingIfNeeded: d.count) &- 1 }
        case .failed:
            failed += 1
        }
        lock.unlock()
    }
}

func runPool(replay: FrameReplay, workers: Int, quality: Int, subsampling: ChromaSubsampling?, seconds: Double) -> PoolRun {
    let tally = Tally()
    let pool = JPEGEncoderPool(workers: workers, queueDepth: workers, quality: quality, subsampling: subsampling) {
        tally.take($0)
    }
    var seq: UInt32 = 0
    let samples = ReplaySamples()
    // As a driver: the next buffer that is not held (frames waiting in the pool hold theirs).
    var cursor = 0
    func nextSample() -> SampleBuffer {
        while true {
            for _ in 0..<replay.count {
                let i = cursor
                cursor = (cursor + 1) % replay.count
                if !samples.isHeld(i) { return replay.sample(i, sequence: seq, reusing: samples) }
            }
            usleep(100)
        }
    }
    // Warm-up: every worker sizes its encoder.
    // The pool takes a hold of its own; the driver-like caller gives its hold back after.
    func submitNext() {
        let s = nextSample()
        pool.submit(s, whenFull: .wait)
        samples.done(s)
    }
    for _ in 0..<(4 * workers) {
        submitNext()
        seq &+= 1
    }
    while tally.lock.withLock({ tally.frames }) < Int(seq) { usleep(1000) }
    let f0 = tally.lock.withLock { tally.frames }, b0 = tally.lock.withLock { tally.bytes }
    let a0 = calloc_counter_total(), c0 = processCPUNow(), t0 = wallNow()
    while wallNow() - t0 < seconds {
        for _ in 0..<replay.count {
            submitNext()
            seq &+= 1
        }
    }
    pool.shutdown()
    let t1 = wallNow(), c1 = processCPUNow(), a1 = calloc_counter_total()
    let frames = tally.lock.withLock { tally.frames } - f0
    let bytes = tally.lock.withLock { tally.bytes } - b0
    return PoolRun(
        fps: Double(frames) / (t1 - t0), cpuPerFrame: (c1 - c0) / Double(frames),
        allocationsPerFrame: Double(a1 - a0) / Double(frames), inOrder: tally.inOrder,
        dropped: tally.dropped, bytesPerFrame: Double(bytes) / Double(frames))
}

// MARK: - passthrough

/// Splits concatenated JPEGs (ffmpeg -f mjpeg) at each SOI: entropy-coded data stuffs every 0xFF
/// byte, so FF D8 FF only occurs where an image starts.
func splitMJPEG(_ d: Data) -> [Data] {
    let b = [UInt8](d)
    var starts: [Int] = []
    var i = 0
    while i + 2 < b.count {
        if b[i] == 0xFF, b[i + 1] == 0xD8, b[i + 2] == 0xFF { starts.append(i); i += 3 } else { i += 1 }
    }
    starts.append(b.count)
    return zip(starts, starts.dropFirst()).map { Data(b[$0.0..<$0.1]) }
}

/// Removes every DHT segment before the first scan, as UVC cameras send MJPEG.
func stripDHT(_ f: Data) -> Data {
    let b = [UInt8](f)
    var out: [UInt8] = [0xFF, 0xD8]
    var i = 2
    while i + 4 <= b.count, b[i] == 0xFF {
        let marker = b[i + 1]
        let len = Int(b[i + 2]) << 8 | Int(b[i + 3])
        if marker == 0xDA { break }
        if marker != 0xC4 { out += b[i..<(i + 2 + len)] }
        i += 2 + len
    }
    out += b[i...]
    return Data(out)
}

func passthrough(_ a: Arguments) {
    guard let path = a.string("input") else { fail("--input FILE.mjpeg is required") }
    let seconds = a.double("seconds", 2)
    var frames = splitMJPEG(readFile(path))
    guard !frames.isEmpty else { fail("\(path) holds no complete JPEG frame") }
    if frames.count > 64 { frames = Array(frames[0..<64]) }
    if a.flags.contains("strip-dht") { frames = frames.map(stripDHT) }
    let memory = DriverLikeBuffers(frames: frames)
    let used = memory.used
    let first = try? MJPEG.validateFrame(used[0])
    let w = first?.frame.width ?? 0, h = first?.frame.height ?? 0
    let replay = FrameReplay(pixelFormat: .mjpeg, width: w, height: h, colorRange: .full, buffers: used)

    var out: [UInt8] = []
    out.reserveCapacity(used.map(\.count).max()! + 1024)
    // Warm-up.
    for f in used { _ = try? MJPEG.insertStandardHuffmanTables(f, into: &out) }

    // The library's MJPEG hand-out: parse, DHT check, insertion when missing, into a reused buffer.
    let samples = ReplaySamples()
    var passCPU: [Double] = [], outBytes = 0, n = 0
    passCPU.reserveCapacity(100_000)
    var a0 = calloc_counter_thread()
    var start = wallNow()
    while wallNow() - start < seconds || passCPU.count < 5 {
        let c0 = threadCPUNow()
        for i in 0..<used.count {
            // The capture thread's wrap, as in hotpath.
            let sample = replay.sample(i, sequence: UInt32(truncatingIfNeeded: n), reusing: samples)
            sample.withUnsafeBytes { b in _ = try? MJPEG.insertStandardHuffmanTables(b, into: &out) }
            samples.done(sample)
            outBytes += out.count
            n += 1
        }
        passCPU.append((threadCPUNow() - c0) / Double(used.count))
    }
    let allocsPass = Double(calloc_counter_thread() - a0) / Double(n)
    let bytesPerFrame = Double(outBytes) / Double(n)

    // memcpy of the same bytes (the output size) into a preallocated buffer.
    let dst = UnsafeMutableRawPointer.allocate(byteCount: out.capacity + 4096, alignment: 4096)
    defer { dst.deallocate() }
    var copyCPU: [Double] = []
    start = wallNow()
    while wallNow() - start < seconds || copyCPU.count < 5 {
        let c0 = threadCPUNow()
        for _ in 0..<4 {
            for f in used { memcpy(dst, f.baseAddress!, f.count) }
        }
        copyCPU.append((threadCPUNow() - c0) / Double(4 * used.count))
    }
    let inBytes = Double(used.map(\.count).reduce(0, +)) / Double(used.count)

    // The still output's MJPEG path: rewritten into reused bytes, copied into a reused Data.
    var noEncoder: JPEGEncoder?, scratch: [UInt8] = []
    let stillSamples = StillSamples()
    for i in 0..<used.count {
        let sample = replay.sample(i, sequence: 0, reusing: samples)
        (try? EncodePaths.still(sample, encoder: &noEncoder, quality: 90, scratch: &scratch, into: stillSamples))?.release()
        samples.done(sample)
    }
    a0 = calloc_counter_thread()
    for i in 0..<used.count {
        let sample = replay.sample(i, sequence: 0, reusing: samples)
        (try? EncodePaths.still(sample, encoder: &noEncoder, quality: 90, scratch: &scratch, into: stillSamples))?.release()
        samples.done(sample)
    }
    let allocsStill = Double(calloc_counter_thread() - a0) / Double(used.count)

    let passMedian = median(passCPU), copyMedian = median(copyCPU)
    var r = Report()
    r.add("mode", "passthrough")
    r.add("width", w)
    r.add("height", h)
    r.add("frames_in_file", used.count)
    r.add("dht_inserted", !MJPEG.hasHuffmanTables(used[0]))
    r.add("in_bytes_per_frame", inBytes)
    r.add("bytes_per_frame", bytesPerFrame)
    r.add("fps", 1 / passMedian)
    r.add("ms_per_frame", passMedian * 1000)
    r.add("passthrough_mb_per_s", bytesPerFrame / passMedian / 1e6)
    r.add("memcpy_mb_per_s", inBytes / copyMedian / 1e6)
    r.add("ratio_to_memcpy", (bytesPerFrame / passMedian) / (inBytes / copyMedian))
    r.add("allocations_per_frame", allocsPass)
    r.add("allocations_per_frame_still_path", allocsStill)
    r.print(json: a.json)
}

// MARK: - session (virtual camera) and live (device)

/// A delegate that does nothing but count: what the library itself costs per frame.
final class CountingDelegate: CaptureVideoDataOutputSampleBufferDelegate, @unchecked Sendable {
    let lock = NSLock()
    var frames = 0
    var dropsByReason: [DropReason: Int] = [:]
    var pool: JPEGEncoderPool?
    func captureOutput(_ output: CaptureOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection) {
        lock.lock()
        frames += 1
        lock.unlock()
        pool?.submit(sampleBuffer)
    }
    func captureOutput(_ output: CaptureOutput, didDrop drop: DroppedFrames, from connection: CaptureConnection) {
        lock.lock()
        dropsByReason[drop.reason, default: 0] += drop.count
        lock.unlock()
    }
}

func openSession(
    device: CaptureDevice, size: (Int, Int), format: PixelFormat, rate: Double?,
    outputs: [CaptureOutput]
) -> CaptureSession {
    guard let f = device.bestFormat(for: VideoDimensions(width: size.0, height: size.1), pixelFormat: format) else {
        fail("\(device) offers no \(format) format near \(size.0)x\(size.1): \(device.formats)")
    }
    let session = CaptureSession()
    session.beginConfiguration()
    do {
        let input = try CaptureDeviceInput(device: device)
        guard session.canAddInput(input) else { fail("cannot add \(device)") }
        session.addInput(input)
    } catch { fail("cannot open \(device): \(error)") }
    for o in outputs {
        guard session.canAddOutput(o) else { fail("cannot add output \(o)") }
        session.addOutput(o)
    }
    _ = session.commitConfiguration()
    do {
        try device.lockForConfiguration()
        try device.setActiveFormat(f)
        if let rate { try device.setActiveVideoMinFrameDuration(FrameInterval(framesPerSecond: rate)) }
        device.unlockForConfiguration()
    } catch { fail("cannot set \(f): \(error)") }
    return session
}

func session(_ a: Arguments) {
    let (w, h) = a.size((640, 480))
    let format = a.format("YUYV")
    let rate = a.double("rate", 60)
    let seconds = a.double("seconds", 3)
    let quality = a.int("quality", 85)
    // --still-quality Q: stills at another quality than the JPEG stream (no shared encode).
    let stillQuality = a.int("still-quality", quality)
    let camera = VirtualCamera(
        name: "Bench Camera", position: .front,
        formats: [VirtualCamera.Mode(format, width: w, height: h, frameRates: [rate])])
    VirtualCamera.install(camera)
    defer { VirtualCamera.uninstall(camera) }
    guard let device = CaptureDevice.device(withUniqueID: camera.uniqueID) else { fail("virtual camera not listed") }

    let delegate = CountingDelegate()
    let video = CaptureVideoDataOutput()
    // --jpeg-threads N: the output delivers JPEG, encoded on N threads.
    let jpegThreads = a.int("jpeg-threads", 0)
    if jpegThreads > 0 { video.videoSettings = .init(jpeg: .init(quality: quality, threads: jpegThreads)) }
    video.setSampleBufferDelegate(delegate, queue: DispatchQueue(label: "bench.video"))
    let still = CaptureStillImageOutput()
    still.outputSettings = .init(quality: stillQuality)
    let s = openSession(device: device, size: (w, h), format: format, rate: rate, outputs: [video, still])
    do { try s.start() } catch { fail("cannot start: \(error)") }

    // Video data output: process-wide allocations per delivered frame after a warm-up second.
    Thread.sleep(forTimeInterval: 1)
    _ = video.deliveryLatency(resetting: true)
    let f0 = delegate.lock.withLock { delegate.frames }, a0 = calloc_counter_total(), c0 = processCPUNow()
    let produced0 = camera.statistics.framesProduced
    Thread.sleep(forTimeInterval: seconds)
    let f1 = delegate.lock.withLock { delegate.frames }, a1 = calloc_counter_total(), c1 = processCPUNow()
    let produced1 = camera.statistics.framesProduced
    let latency = video.deliveryLatency()
    let videoFrames = f1 - f0

    // The same without a delegate: what the camera, the capture thread and the output's
    // SampleBuffer cost, apart from the hand-off to the delegate's queue.
    video.setSampleBufferDelegate(nil, queue: nil)
    Thread.sleep(forTimeInterval: 0.3)
    let b0 = calloc_counter_total(), p0 = camera.statistics.framesProduced
    Thread.sleep(forTimeInterval: seconds / 2)
    let b1 = calloc_counter_total(), p1 = camera.statistics.framesProduced
    let baseFrames = Double(max(1, p1 - p0))
    let basePerFrame = Double(b1 - b0) / baseFrames

    // Still output: allocations per still, stills taken one after another.
    guard let connection = still.connection(with: .video) else { fail("the still output has no connection") }
    let stills = max(5, Int(seconds * 4))
    let done = DispatchSemaphore(value: 0)
    nonisolated(unsafe) var stillBytes = 0
    // One handler for every still, so the count is the library's, not the closure a caller makes.
    let handler: @Sendable (SampleBuffer?, CaptureError?) -> Void = { sample, error in
        if let error { fail("still: \(error)") }
        stillBytes = sample?.jpegData?.count ?? 0
        done.signal()
    }
    func takeOne() {
        still.captureStillImageAsynchronously(from: connection, completionHandler: handler)
        done.wait()
    }
    for _ in 0..<3 { takeOne() }
    let fs0 = camera.statistics.framesProduced, sa0 = calloc_counter_total()
    let e0 = s.stageJPEGEncodes + still.ownEncodes
    for _ in 0..<stills { takeOne() }
    let sa1 = calloc_counter_total(), fs1 = camera.statistics.framesProduced
    let e1 = s.stageJPEGEncodes + still.ownEncodes
    s.stopRunning()

    // Frames keep flowing while stills are taken: subtract their share.
    let videoPerFrame = Double(a1 - a0) / Double(max(1, videoFrames))
    let stillPerStill = (Double(sa1 - sa0) - basePerFrame * Double(fs1 - fs0)) / Double(stills)
    var r = Report()
    r.add("mode", "session")
    r.add("format", format.description)
    r.add("width", w)
    r.add("height", h)
    r.add("frames_produced", Int(produced1 - produced0))
    r.add("frames_delivered", videoFrames)
    r.add("jpeg_threads", jpegThreads)
    r.add("allocations_per_frame_video_data_output", videoPerFrame)
    r.add("allocations_per_frame_without_delegate", basePerFrame)
    r.add("cpu_ms_per_frame", (c1 - c0) / Double(max(1, videoFrames)) * 1000)
    // Capture timestamp to delegate call, over the measured window.
    r.add("latency_ms_p50", latency.p50.inMilliseconds)
    r.add("latency_ms_p99", latency.p99.inMilliseconds)
    r.add("latency_ms_max", latency.maximum.inMilliseconds)
    r.add("stills", stills)
    r.add("still_bytes", stillBytes)
    r.add("allocations_per_still", stillPerStill)
    // JPEG encodes (the input's stages' and the stills' own) per camera frame while stills are
    // taken back to back: 1 with a JPEG stream whose encode the stills share (same quality),
    // above 1 when they encode themselves beside it; without JPEG delivery, the stills' own
    // encodes alone.
    r.add("jpeg_encodes_per_frame_during_stills", Double(e1 - e0) / Double(max(1, fs1 - fs0)))
    r.add("still_own_encodes", still.ownEncodes)
    r.add("dropped", delegate.lock.withLock { delegate.dropsByReason.values.reduce(0, +) })
    r.print(json: a.json)
}

func live(_ a: Arguments) {
    guard let path = a.string("device") else { fail("--device PATH is required") }
    let (w, h) = a.size((320, 180))
    let format = a.format("YUYV")
    let seconds = a.double("seconds", 10)
    let quality = a.int("quality", 85)
    let threads = max(1, a.int("threads", 1))
    guard let device = CaptureDevice.devices(for: .video).first(where: { $0.path == path || $0.uniqueID == path }) else {
        fail("no camera at \(path); cameras: \(CaptureDevice.devices(for: .video).map(\.path))")
    }
    let tally = Tally()
    let pool = JPEGEncoderPool(workers: threads, quality: quality) { tally.take($0) }
    let delegate = CountingDelegate()
    delegate.pool = pool
    let video = CaptureVideoDataOutput()
    video.setSampleBufferDelegate(delegate, queue: DispatchQueue(label: "bench.live"))
    let s = openSession(
        device: device, size: (w, h), format: format, rate: a.string("rate").map { Double($0) ?? 30 },
        outputs: [video])
    do { try s.start() } catch { fail("cannot start: \(error)") }
    Thread.sleep(forTimeInterval: 1)
    let f0 = tally.lock.withLock { tally.frames }, c0 = processCPUNow(), t0 = wallNow()
    let d0 = delegate.lock.withLock { delegate.dropsByReason }
    Thread.sleep(forTimeInterval: seconds)
    let f1 = tally.lock.withLock { tally.frames }, c1 = processCPUNow(), t1 = wallNow()
    let d1 = delegate.lock.withLock { delegate.dropsByReason }
    s.stopRunning()
    pool.shutdown()
    let frames = f1 - f0
    func delta(_ r: DropReason) -> Int { (d1[r] ?? 0) - (d0[r] ?? 0) }
    var r = Report()
    r.add("mode", "live")
    r.add("device", path)
    r.add("format", (device.activeFormat?.pixelFormat ?? format).description)
    r.add("width", device.activeFormat?.dimensions.width ?? w)
    r.add("height", device.activeFormat?.dimensions.height ?? h)
    r.add("threads", threads)
    r.add("frames_encoded", frames)
    r.add("fps", Double(frames) / (t1 - t0))
    r.add("cpu_ms_per_frame", (c1 - c0) / Double(max(1, frames)) * 1000)
    r.add("bytes_per_frame", Double(tally.bytes) / Double(max(1, tally.frames)))
    // Drops the device caused (sequence gaps) versus drops on our side.
    r.add("drops_device", delta(.discontinuity) + delta(.corrupt))
    r.add("drops_ours", delta(.frameWasLate) + delta(.outOfBuffers) + tally.dropped)
    r.add("encode_failures", tally.failed)
    r.add("in_order", tally.inOrder)
    r.print(json: a.json)
}

// MARK: - main

let arguments = Arguments(CommandLine.arguments)
switch arguments.command {
case "hotpath": hotpath(arguments)
case "passthrough": passthrough(arguments)
case "session": session(arguments)
case "live": live(arguments)
case "preview": previewBench(arguments)
case "record": recordBench(arguments)
case "cycles": cyclesBench(arguments)
case "latency": latencyBench(arguments)
case "metadata": metadataBench(arguments)
case "startup": startupBench(arguments)
default:
    print(
        """
        usage: capture-bench hotpath --input FILE --size WxH --format YUYV|UYVY|NV12|YU12 --quality Q
                                     [--subsampling 422|420] [--threads N] [--seconds S] [--range limited|full] [--json]
               capture-bench passthrough --input FILE.mjpeg [--strip-dht] [--seconds S] [--json]
               capture-bench session [--size WxH] [--format F] [--rate FPS] [--seconds S] [--quality Q] [--still-quality Q] [--jpeg-threads N] [--json]
               capture-bench live --device PATH [--size WxH] [--format F] [--seconds S] [--threads N] [--json]
               capture-bench preview [--size WxH] [--rate FPS] [--mjpeg-size WxH | --input FILE.mjpeg] [--window WxH] [--seconds S] [--rounds N] [--json]
               capture-bench record --input FILE --size WxH [--format YUYV|NV12] [--mjpeg FILE.mjpeg] [--rounds N] [--short-frames N] [--long-frames N] [--preset P] [--crf Q] [--dir DIR] [--keep DIR] [--peer none] [--json]
               capture-bench metadata [--size WxH] [--types qr,face,...] [--input PICTURE.jpg] [--seconds S] [--rounds N] [--json]
               capture-bench record --session [--size WxH] [--format F] [--seconds S] [--preset P] [--outputs N] [--app-output] [--audio] [--json]
               capture-bench cycles [--warmup N] [--cycles N] [--size WxH] [--json]
               capture-bench latency [--size WxH] [--fps N] [--seconds S] [--rounds N] [--paths mjpeg,mp4,webrtc,webrtc-no-delay] [--viewers N] [--webapp-starts N]
               capture-bench startup [--runs N]
        """)
    exit(arguments.command.isEmpty ? 2 : (arguments.command == "help" ? 0 : 2))
}
