// capture-bench cycles: what session cycles leave behind, in a process of its own (in the test
// bundle other suites' memory comes and goes beside it). Each cycle makes a session with a
// virtual camera, a video data output and a still output, starts it, waits for a frame, stops it
// and lets everything go. Memory is read three times: after the warm-up, after a fifth of the
// cycles and at the end; a leak shows as growth in the last four fifths that keeps pace with the
// cycles, while caches that fill once do not.
//
//   capture-bench cycles [--warmup N] [--cycles N] [--size WxH] [--json]
import CAllocCounter
import Capture
import CaptureBackend
import CaptureVirtual
import Foundation

private final class FirstFrame: CaptureVideoDataOutputSampleBufferDelegate, @unchecked Sendable {
    let arrived = DispatchSemaphore(value: 0)
    private let lock = NSLock()
    private var signalled = false
    func captureOutput(_ output: CaptureOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection) {
        lock.lock()
        defer { lock.unlock() }
        if !signalled {
            signalled = true
            arrived.signal()
        }
    }
}

private final class Weak<T: AnyObject>: @unchecked Sendable {
    weak var object: T?
}

/// Memory figures of this process now; nil where this build cannot read them.
private struct MemoryReading {
    var liveBlocks: Int?, liveBytes: Int?, sanitizerBytes: Int?, residentBytes: Int, descriptors: Int

    static func now() -> MemoryReading {
        typealias Counter = @convention(c) () -> Int
        typealias Trim = @convention(c) (Int) -> Int32
        let active = calloc_counter_is_active() != 0
        var sanitizer: Int?
        if let f = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "__sanitizer_get_current_allocated_bytes") {
            sanitizer = unsafeBitCast(f, to: Counter.self)()
        }
        // Resident memory after malloc_trim(0), so freed blocks malloc kept do not count.
        if let trim = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "malloc_trim") { _ = unsafeBitCast(trim, to: Trim.self)(0) }
        let statm = (try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8)) ?? ""
        let pages = statm.split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? 0
        return MemoryReading(
            liveBlocks: active ? Int(calloc_counter_live_blocks()) : nil,
            liveBytes: active ? Int(calloc_counter_live_bytes()) : nil,
            sanitizerBytes: sanitizer,
            residentBytes: pages * Int(sysconf(Int32(_SC_PAGESIZE))),
            descriptors: (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? -1)
    }
}

func cyclesBench(_ a: Arguments) {
    let warmup = a.int("warmup", 10), cycles = a.int("cycles", 150)
    guard warmup >= 0, cycles >= 5 else { fail("--cycles wants 5 or more, --warmup 0 or more") }
    let (w, h) = a.size((320, 240))
    let camera = VirtualCamera(
        name: "Cycles Camera", position: .back, formats: [VirtualCamera.Mode(.yuyv, width: w, height: h, frameRates: [30])])
    VirtualCamera.install(camera)
    defer { VirtualCamera.uninstall(camera) }
    guard let device = CaptureDevice.device(withUniqueID: camera.uniqueID) else { fail("virtual camera not listed") }
    let queue = DispatchQueue(label: "bench.cycles")
    var alive = 0, noFrame = 0

    func cycle() {
        let session = Weak<CaptureSession>(), output = Weak<CaptureOutput>()
        do {
            let s = CaptureSession()
            do { s.addInput(try CaptureDeviceInput(device: device)) } catch { fail("cannot open \(device): \(error)") }
            let video = CaptureVideoDataOutput()
            let delegate = FirstFrame()
            video.setSampleBufferDelegate(delegate, queue: queue)
            s.addOutput(video)
            s.addOutput(CaptureStillImageOutput())
            session.object = s
            output.object = video
            do { try s.start() } catch { fail("cannot start: \(error)") }
            if delegate.arrived.wait(timeout: .now() + 10) == .timedOut { noFrame += 1 }
            s.stopRunning()
        }
        // A drain on the delegate's queue may hold the output a moment longer.
        let by = wallNow() + 5
        while session.object != nil || output.object != nil, wallNow() < by { usleep(2_000) }
        if session.object != nil || output.object != nil { alive += 1 }
    }

    let started = wallNow()
    for _ in 0..<warmup { cycle() }
    let m0 = MemoryReading.now()
    let first = cycles / 5
    for _ in 0..<first { cycle() }
    let m1 = MemoryReading.now()
    for _ in first..<cycles { cycle() }
    queue.sync {}
    let m2 = MemoryReading.now()

    var r = Report()
    r.add("cycles", cycles)
    r.add("warmup", warmup)
    r.add("cycles_left_alive", alive)
    r.add("cycles_without_frame", noFrame)
    r.add("camera_streaming_after", camera.isStreaming)
    r.add("seconds", wallNow() - started)
    // Per figure: the three readings, after the warm-up, after a fifth and at the end.
    func add(_ name: String, _ f: (MemoryReading) -> Int?) {
        guard let v0 = f(m0), let v1 = f(m1), let v2 = f(m2) else { return }
        r.add("\(name)_0", v0)
        r.add("\(name)_1", v1)
        r.add("\(name)_2", v2)
    }
    add("live_blocks") { $0.liveBlocks }
    add("live_bytes") { $0.liveBytes }
    add("sanitizer_bytes") { $0.sanitizerBytes }
    add("resident_bytes") { $0.residentBytes }
    add("descriptors") { $0.descriptors }
    r.print(json: a.json)
}
