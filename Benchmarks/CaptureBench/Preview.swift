// capture-bench preview: the preview window against the direct C routes, side by side in one
// run, interleaved rounds, median of the per-round ratios.
//
//   (a) YUYV frames from the virtual camera through CaptureVideoPreviewLayer + PreviewWindow
//       (its event loop, as `capture preview` runs it): process CPU per drawn frame, against
//       SDL_UpdateTexture of copies of the same camera's frames into a YUY2 texture + render +
//       present at the same rate, in a plain SDL window (same renderer choice). The preview's
//       figure includes the virtual camera (it redraws its band and counter per frame) and the
//       session's delivery; the upload route has neither.
//   (b) MJPEG frames decoded for a small window: ScaledJPEGDecoder (what the window uses) against
//       tjDecompress2 at the same TurboJPEG scaling factor, called directly; thread CPU per frame.
import Capture
import CaptureVirtual
import CapturePreview
internal import CSDL2
internal import CTurboJPEG
import Foundation

/// Copies of the first frames a camera delivers (their bytes and the row pitch).
final class FrameCollector: CaptureVideoDataOutputSampleBufferDelegate, @unchecked Sendable {
    private let lock = NSLock()
    private var collected: [[UInt8]] = []
    private var pitch = 0
    private let wanted: Int
    let done = DispatchSemaphore(value: 0)

    init(count: Int) { wanted = count }

    func captureOutput(_ output: CaptureOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection) {
        let bytes = sampleBuffer.withUnsafeBytes { [UInt8]($0) }
        let rowBytes = sampleBuffer.bytesPerRow()
        lock.withLock {
            guard collected.count < wanted else { return }
            collected.append(bytes)
            pitch = rowBytes
            if collected.count == wanted { done.signal() }
        }
    }

    var frames: (frames: [[UInt8]], pitch: Int) { lock.withLock { (collected, pitch) } }
}

/// `count` frames of `device` in its active format.
func collectFrames(_ device: CaptureDevice, size: (Int, Int), format: PixelFormat, count: Int) -> (frames: [[UInt8]], pitch: Int) {
    let collector = FrameCollector(count: count)
    let video = CaptureVideoDataOutput()
    video.setSampleBufferDelegate(collector, queue: DispatchQueue(label: "bench.collect"))
    let s = openSession(device: device, size: size, format: format, rate: nil, outputs: [video])
    do { try s.start() } catch { fail("cannot start: \(error)") }
    guard collector.done.wait(timeout: .now() + 30) == .success else { fail("the camera delivered no \(count) frames in 30 s") }
    s.stopRunning()
    video.setSampleBufferDelegate(nil, queue: nil)
    return collector.frames
}

/// Runs the preview windows' event loop (as `capture preview` does) for `seconds`.
func runPreviewLoop(seconds: Double) {
    DispatchQueue.main.asyncAfter(deadline: .now() + seconds) { PreviewWindow.stopEventLoop() }
    PreviewWindow.runEventLoop()
}

struct RouteRun {
    var cpuPerFrame: Double
    var frames: Int
    var replaced = 0
    var dropped = 0
}

/// (a), the library's route: the session's frames in a preview layer filling a window.
func previewRoute(_ device: CaptureDevice, size: (Int, Int), seconds: Double) -> RouteRun {
    let s = openSession(device: device, size: size, format: .yuyv, rate: nil, outputs: [])
    let window: PreviewWindow
    do {
        window = try PreviewWindow(title: "capture-bench preview", size: CGSize(width: size.0, height: size.1))
    } catch { fail("\(error.message)") }
    let layer = CaptureVideoPreviewLayer(session: s)
    layer.frame = window.rootLayer.bounds
    window.rootLayer.addSublayer(layer)
    do { try s.start() } catch { fail("cannot start: \(error)") }
    window.show()
    runPreviewLoop(seconds: 0.5)
    let before = layer.statistics, c0 = processCPUNow()
    runPreviewLoop(seconds: seconds)
    let after = layer.statistics, c1 = processCPUNow()
    s.stopRunning()
    layer.session = nil
    window.close()
    let frames = after.framesDrawn - before.framesDrawn
    return RouteRun(
        cpuPerFrame: (c1 - c0) / Double(max(1, frames)), frames: frames,
        replaced: after.framesReplaced - before.framesReplaced, dropped: after.framesDropped - before.framesDropped)
}

/// (a), the direct C route: the same frames uploaded to a YUY2 streaming texture and drawn at
/// `rate`, in a window of SDL's own. Returns the renderer's name too.
func uploadRoute(frames: [[UInt8]], pitch: Int, size: (Int, Int), rate: Double, seconds: Double) -> (RouteRun, String) {
    let env = ProcessInfo.processInfo.environment
    if (env["SDL_VIDEODRIVER"] ?? "").isEmpty { SDL_SetHint("SDL_VIDEODRIVER", "x11") }
    // Right after the preview route closed its display connection, opening one can fail for a
    // moment ("x11 not available", seen once under load): a few tries.
    var tries = 0
    while SDL_InitSubSystem(UInt32(SDL_INIT_VIDEO)) != 0 {
        tries += 1
        guard tries < 20 else { fail("SDL: \(String(cString: SDL_GetError()))") }
        usleep(100_000)
    }
    defer {
        SDL_QuitSubSystem(UInt32(SDL_INIT_VIDEO))
        SDL_Quit()
    }
    let undefined: Int32 = 0x1FFF_0000
    guard
        let win = SDL_CreateWindow(
            "capture-bench upload", undefined, undefined, Int32(size.0), Int32(size.1),
            SDL_WINDOW_SHOWN.rawValue | SDL_WINDOW_RESIZABLE.rawValue),
        let ren = SDL_CreateRenderer(win, -1, 0),
        let tex = SDL_CreateTexture(
            ren, SDL_PIXELFORMAT_YUY2.rawValue, Int32(SDL_TEXTUREACCESS_STREAMING.rawValue),
            Int32(size.0), Int32(size.1))
    else {
        fail("SDL: \(String(cString: SDL_GetError()))")
    }
    defer {
        SDL_DestroyTexture(tex)
        SDL_DestroyRenderer(ren)
        SDL_DestroyWindow(win)
    }
    var info = SDL_RendererInfo()
    SDL_GetRendererInfo(ren, &info)
    let name = info.name.map { String(cString: $0) } ?? "?"
    SDL_SetYUVConversionMode(SDL_YUV_CONVERSION_BT601)
    var n = 0
    func step() {
        var e = SDL_Event()
        while SDL_PollEvent(&e) != 0 {}
        frames[n % frames.count].withUnsafeBytes { _ = SDL_UpdateTexture(tex, nil, $0.baseAddress, Int32(pitch)) }
        SDL_SetRenderDrawColor(ren, 0, 0, 0, 255)
        SDL_RenderClear(ren)
        SDL_RenderCopy(ren, tex, nil, nil)
        SDL_RenderPresent(ren)
        n += 1
    }
    func run(_ seconds: Double) -> Int {
        let start = wallNow(), first = n
        var next = start
        while wallNow() - start < seconds {
            step()
            next += 1 / rate
            let wait = next - wallNow()
            if wait > 0 { usleep(UInt32(wait * 1e6)) } else { next = wallNow() }
        }
        return n - first
    }
    _ = run(0.5)
    let c0 = processCPUNow()
    let count = run(seconds)
    let c1 = processCPUNow()
    return (RouteRun(cpuPerFrame: (c1 - c0) / Double(max(1, count)), frames: count), name)
}

/// (b), TurboJPEG called directly: tjDecompress2 at a fixed scaled size into one buffer.
final class DirectScaledDecode {
    let handle: tjhandle
    var out: [UInt8]
    let width: Int, height: Int

    init(width: Int, height: Int) {
        guard let h = tjInitDecompress() else { fail("tjInitDecompress failed") }
        handle = h
        self.width = width
        self.height = height
        out = [UInt8](repeating: 0, count: width * height * 4)
    }
    deinit { tjDestroy(handle) }

    func decode(_ jpeg: UnsafeRawBufferPointer) -> Bool {
        out.withUnsafeMutableBufferPointer { o in
            tjDecompress2(
                handle, jpeg.baseAddress!.assumingMemoryBound(to: UInt8.self), UInt(jpeg.count), o.baseAddress,
                Int32(width), Int32(width * 4), Int32(height), Int32(TJPF_BGRA.rawValue), 0) == 0
        }
    }
}

/// The smallest TurboJPEG scaling factor (at most 1) whose picture still covers `target`,
/// chosen here independently of ScaledJPEGDecoder.
func directScaledSize(width: Int, height: Int, target: (Int, Int)) -> (width: Int, height: Int, factor: String) {
    var n: Int32 = 0
    guard let list = tjGetScalingFactors(&n) else { fail("tjGetScalingFactors failed") }
    var best = (width, height, "1/1"), bestValue = 1.0
    for i in 0..<Int(n) {
        let f = list[i]
        let value = Double(f.num) / Double(f.denom)
        guard value <= 1 else { continue }
        let w = (width * Int(f.num) + Int(f.denom) - 1) / Int(f.denom), h = (height * Int(f.num) + Int(f.denom) - 1) / Int(f.denom)
        if w >= target.0, h >= target.1, value < bestValue { best = (w, h, "\(f.num)/\(f.denom)"); bestValue = value }
    }
    return best
}

func previewBench(_ a: Arguments) {
    let (w, h) = a.size((1280, 720))
    let rate = a.double("rate", 30)
    let seconds = a.double("seconds", 2)
    let rounds = max(1, a.int("rounds", 5))
    let jpegSize: (Int, Int) = {
        guard let s = a.string("mjpeg-size") else { return (1920, 1080) }
        let p = s.split(separator: "x").compactMap { Int($0) }
        guard p.count == 2, p[0] > 0, p[1] > 0 else { fail("--mjpeg-size wants WxH, not \(s)") }
        return (p[0], p[1])
    }()
    let windowSize: (Int, Int) = {
        guard let s = a.string("window") else { return (640, 360) }
        let p = s.split(separator: "x").compactMap { Int($0) }
        guard p.count == 2, p[0] > 0, p[1] > 0 else { fail("--window wants WxH, not \(s)") }
        return (p[0], p[1])
    }()
    do { try PreviewWindow.checkDisplay(ProcessInfo.processInfo.environment) } catch {
        fail("\(error.message) (the benchmark draws real windows: start Xvfb and set DISPLAY)")
    }

    let camera = VirtualCamera(
        name: "Bench Preview Camera", position: .front,
        formats: [
            VirtualCamera.Mode(.yuyv, width: w, height: h, frameRates: [rate]),
            VirtualCamera.Mode(.mjpeg, width: jpegSize.0, height: jpegSize.1, frameRates: [30]),
        ])
    VirtualCamera.install(camera)
    defer { VirtualCamera.uninstall(camera) }
    guard let device = CaptureDevice.device(withUniqueID: camera.uniqueID) else { fail("virtual camera not listed") }

    // The upload route's frames: copies of what this camera delivers.
    let yuyv = collectFrames(device, size: (w, h), format: .yuyv, count: 16)
    // MJPEG frames: a file (--input, as passthrough reads) or the virtual camera's.
    var jpegs: [[UInt8]]
    if let path = a.string("input") {
        jpegs = splitMJPEG(readFile(path)).prefix(32).map { [UInt8]($0) }
        guard !jpegs.isEmpty else { fail("\(path) holds no complete JPEG frame") }
    } else {
        jpegs = collectFrames(device, size: jpegSize, format: .mjpeg, count: 16).frames
    }
    let jpegMemory = DriverLikeBuffers(frames: jpegs.map { Data($0) })
    let jpegFrames = jpegMemory.used
    var header = (w: Int32(0), h: Int32(0), sub: Int32(0), cs: Int32(0))
    do {
        guard let probe = tjInitDecompress() else { fail("tjInitDecompress failed") }
        defer { tjDestroy(probe) }
        let f = jpegFrames[0]
        guard
            tjDecompressHeader3(
                probe, f.baseAddress!.assumingMemoryBound(to: UInt8.self), UInt(f.count),
                &header.w, &header.h, &header.sub, &header.cs) == 0
        else { fail("the MJPEG frames are not readable JPEG") }
    }
    let direct = directScaledSize(width: Int(header.w), height: Int(header.h), target: windowSize)
    let ours = ScaledJPEGDecoder()
    let theirs = DirectScaledDecode(width: direct.width, height: direct.height)
    // Warm-up, and the same picture size on both routes.
    for f in jpegFrames {
        guard let s = ours.decode(f, target: windowSize) else { fail("ScaledJPEGDecoder could not decode a frame") }
        guard s == (direct.width, direct.height) else {
            fail("ScaledJPEGDecoder chose \(s), TurboJPEG's factor \(direct.factor) gives \(direct.width)x\(direct.height)")
        }
        guard theirs.decode(f) else { fail("tjDecompress2: \(String(cString: tjGetErrorStr2(theirs.handle)))") }
    }
    func decodeCPU(_ body: (UnsafeRawBufferPointer) -> Void) -> Double {
        let start = wallNow()
        var passes = 0
        let c0 = threadCPUNow()
        while wallNow() - start < seconds / 4 || passes < 2 {
            for f in jpegFrames { body(f) }
            passes += 1
        }
        return (threadCPUNow() - c0) / Double(passes * jpegFrames.count)
    }

    var previewCPU: [Double] = [], uploadCPU: [Double] = [], yuyvRatios: [Double] = []
    var oursCPU: [Double] = [], tjCPU: [Double] = [], mjpegRatios: [Double] = []
    var drawn = 0, uploaded = 0, replaced = 0, dropped = 0
    var renderer = "?"
    for round in 0..<rounds {
        // Alternating order: drift on the machine during a round favours neither route.
        var p = RouteRun(cpuPerFrame: .nan, frames: 0), u = RouteRun(cpuPerFrame: .nan, frames: 0)
        var o = Double.nan, t = Double.nan
        if round % 2 == 0 {
            p = previewRoute(device, size: (w, h), seconds: seconds)
            (u, renderer) = uploadRoute(frames: yuyv.frames, pitch: yuyv.pitch, size: (w, h), rate: rate, seconds: seconds)
            o = decodeCPU { _ = ours.decode($0, target: windowSize) }
            t = decodeCPU { _ = theirs.decode($0) }
        } else {
            (u, renderer) = uploadRoute(frames: yuyv.frames, pitch: yuyv.pitch, size: (w, h), rate: rate, seconds: seconds)
            p = previewRoute(device, size: (w, h), seconds: seconds)
            t = decodeCPU { _ = theirs.decode($0) }
            o = decodeCPU { _ = ours.decode($0, target: windowSize) }
        }
        previewCPU.append(p.cpuPerFrame)
        uploadCPU.append(u.cpuPerFrame)
        yuyvRatios.append(p.cpuPerFrame / u.cpuPerFrame)
        oursCPU.append(o)
        tjCPU.append(t)
        // Speed relative to TurboJPEG: its time over ours (above 1: faster than it).
        mjpegRatios.append(t / o)
        drawn += p.frames
        uploaded += u.frames
        replaced += p.replaced
        dropped += p.dropped
    }
    func list(_ xs: [Double]) -> String { xs.map { String(format: "%.3f", $0) }.joined(separator: " ") }

    var r = Report()
    r.add("mode", "preview")
    r.add("rounds", rounds)
    r.add("seconds_per_route", seconds)
    r.add("renderer", renderer)
    r.add("yuyv_width", w)
    r.add("yuyv_height", h)
    r.add("yuyv_rate", rate)
    r.add("yuyv_frames_drawn_preview", drawn)
    r.add("yuyv_frames_drawn_upload", uploaded)
    r.add("yuyv_frames_replaced_preview", replaced)
    r.add("yuyv_frames_dropped_preview", dropped)
    r.add("yuyv_cpu_ms_per_frame_preview", median(previewCPU) * 1000)
    r.add("yuyv_cpu_ms_per_frame_upload", median(uploadCPU) * 1000)
    // Goal: at most 1.2.
    r.add("yuyv_cpu_ratio", median(yuyvRatios))
    r.add("yuyv_cpu_ratio_min", yuyvRatios.min() ?? .nan)
    r.add("yuyv_cpu_ratio_max", yuyvRatios.max() ?? .nan)
    r.add("yuyv_cpu_ratios", list(yuyvRatios))
    r.add("mjpeg_width", Int(header.w))
    r.add("mjpeg_height", Int(header.h))
    r.add("mjpeg_frames", jpegFrames.count)
    r.add("mjpeg_bytes_per_frame", Double(jpegFrames.map(\.count).reduce(0, +)) / Double(jpegFrames.count))
    r.add("mjpeg_window", "\(windowSize.0)x\(windowSize.1)")
    r.add("mjpeg_scale", direct.factor)
    r.add("mjpeg_decoded_size", "\(direct.width)x\(direct.height)")
    r.add("mjpeg_ms_per_frame_scaled_decoder", median(oursCPU) * 1000)
    r.add("mjpeg_ms_per_frame_tjdecompress2", median(tjCPU) * 1000)
    // Goal: at least 0.95.
    r.add("mjpeg_speed_ratio", median(mjpegRatios))
    r.add("mjpeg_speed_ratio_min", mjpegRatios.min() ?? .nan)
    r.add("mjpeg_speed_ratio_max", mjpegRatios.max() ?? .nan)
    r.add("mjpeg_speed_ratios", list(mjpegRatios))
    r.print(json: a.json)
}
