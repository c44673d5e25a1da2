// `capture stream`: frames from the camera, counted and timed (fps, drops, latency), and a
// microphone's samples beside them with --audio.
import Capture
import Foundation

extension Command {
    package static let stream = Command(
        name: "stream", summary: "measure the camera's stream: frames, drops, fps and latency",
        usage: """
            usage: capture stream [-d|--device PATH|ID|virtual|file:MEDIA] [--preset NAME | -s|--size WxH] [-f|--format FOURCC]
                                  [-n|--frames N] [-a|--audio DEVICE] [--json]
            """,
        options: Options(valued: ["device", "preset", "size", "format", "frames", "audio"], boolean: ["json"], exclusive: [presetOrSize]),
        run: streamCommand)
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
    let frames = try args.int("frames", default: 120, range: 1...10_000_000)
    let device = try chooseCamera(args.values["device"])
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
