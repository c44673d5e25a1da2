// Recording vivid (and the loopback sound card) in the VM, read back with ffprobe: H.264 in MP4
// and MKV with AAC audio, MJPEG passed through from v4l2loopback, and a camera that goes away mid-recording. Runs in its own
// configuration ("recording": one vivid device, snd-aloop, v4l2loopback), since it unbinds vivid's device.
import Capture
import CaptureRecording
import Foundation
import Testing

/// What ffprobe says of a file: its streams (type to codec, width, height, start) and the
/// video packets' count, with the container's duration.
private struct FileProbe {
    var streams: [String: (codec: String, width: Int, height: Int, start: Double)] = [:]
    var videoPackets = 0
    var duration = -1.0

    init(_ url: URL) throws {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/ffprobe")
        p.arguments = ["-v", "error", "-count_packets", "-show_streams", "-show_format", "-of", "json", url.path]
        let out = Pipe()
        p.standardOutput = out
        p.standardError = FileHandle.nullDevice
        try p.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        guard p.terminationStatus == 0, let json = try JSONSerialization.jsonObject(with: data) as? [String: Any],
            let streams = json["streams"] as? [[String: Any]], let format = json["format"] as? [String: Any]
        else {
            throw RecordingDriverTests.Failure("ffprobe cannot read \(url.path) (status \(p.terminationStatus))")
        }
        for s in streams {
            guard let type = s["codec_type"] as? String else { continue }
            self.streams[type] = (
                s["codec_name"] as? String ?? "?", s["width"] as? Int ?? 0, s["height"] as? Int ?? 0,
                Double(s["start_time"] as? String ?? "") ?? .nan
            )
            if type == "video" { videoPackets = Int(s["nb_read_packets"] as? String ?? "") ?? -1 }
        }
        duration = Double(format["duration"] as? String ?? "") ?? -1
    }
}

/// Waits for a recording's end.
private final class Finish: CaptureFileOutputRecordingDelegate, @unchecked Sendable {
    private let lock = NSLock()
    private var error: RecordingError??
    func fileOutput(
        _ output: CaptureMovieFileOutput, didFinishRecordingTo outputFileURL: URL, from connections: [CaptureConnection],
        error: RecordingError?
    ) {
        lock.withLock { self.error = .some(error) }
    }
    func wait(_ seconds: Double = 120) -> RecordingError?? {
        let end = Date().addingTimeInterval(seconds)
        while Date() < end {
            if let e = lock.withLock({ error }) { return e }
            Thread.sleep(forTimeInterval: 0.05)
        }
        return nil
    }
}

@Suite(.serialized) struct RecordingDriverTests {
    struct Failure: Error, CustomStringConvertible {
        var description: String
        init(_ d: String) { description = d }
    }

    static let playback = "hw:Loopback,0,2"
    static let capture = "hw:Loopback,1,2"

    /// vivid at 320x180 in a session (NV12, else YUYV converted by the session).
    static func vivid() throws -> (CaptureDevice, CaptureSession) {
        let cam = try #require(try VM.vividCameras(count: 1).first)
        let format = try #require(
            cam.formats.first { $0.pixelFormat == .nv12 && $0.dimensions == VideoDimensions(width: 320, height: 180) }
                ?? cam.formats.first { $0.pixelFormat == .yuyv && $0.dimensions == VideoDimensions(width: 320, height: 180) },
            "vivid has no 320x180: \(cam.formats.map(\.description))")
        let session = CaptureSession()
        session.addInput(try CaptureDeviceInput(device: cam))
        try cam.lockForConfiguration()
        try cam.setActiveFormat(format)
        // 15 fps: what the VM (software emulation) keeps up with beside x264 and the audio.
        try cam.setActiveVideoMinFrameDuration(FrameInterval(framesPerSecond: 15))
        cam.unlockForConfiguration()
        return (cam, session)
    }

    /// 3 s of vivid with the loopback card's tone, to MP4 and to MKV: H.264 of the asked size,
    /// 3 s within a frame interval (unless frames were lost at the end), every frame of the
    /// camera's from the first to the last written or reported dropped, and AAC starting with
    /// the video.
    @Test(arguments: ["mp4", "mkv"])
    func vividWithLoopbackAudio(_ ext: String) throws {
        try VM.require()
        try #require(ProcessInfo.processInfo.environment["CAPTURE_VM_ALOOP"] != nil, "needs snd-aloop loaded (--aloop)")
        let player = try TonePlayer(device: Self.playback, frequency: 1000, decibels: -6)
        defer { player.stop() }
        let (cam, session) = try Self.vivid()
        session.addInput(try CaptureDeviceInput(device: try CaptureDevice.audioDevice(named: Self.capture)))
        let movie = CaptureMovieFileOutput()
        session.addOutput(movie)
        movie.setOutputSettings(.init(preset: "ultrafast"), for: nil)
        movie.maxRecordedDuration = .seconds(3)
        try session.start()
        defer { session.stopRunning() }
        let url = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("vivid-\(UUID().uuidString.prefix(8)).\(ext)")
        defer { try? FileManager.default.removeItem(at: url) }
        let finish = Finish()
        let probeOutput = CaptureAudioDataOutput()
        let stamps = Stamps()
        probeOutput.setSampleBufferDelegate(stamps, queue: DispatchQueue(label: "test.stamps"))
        session.addOutput(probeOutput)
        Thread.sleep(forTimeInterval: 1)
        let began = Date()
        movie.startRecording(to: url, recordingDelegate: finish)
        let ended = try #require(
            finish.wait(60), "the recording never finished: \(movie.recordedDuration), \(movie.recordedFrameCount) frames; \(stamps.text)")
        #expect(ended?.code == .maximumDurationReached, "\(String(describing: ended))")
        let summary = try #require(movie.lastRecording)
        let probe = try FileProbe(url)
        let video = try #require(probe.streams["video"]), audio = try #require(probe.streams["audio"], "no audio: \(probe.streams)")
        #expect(video.codec == "h264" && video.width == 320 && video.height == 180, "\(video)")
        #expect(audio.codec == "aac")
        let interval = (cam.activeVideoMinFrameDuration ?? FrameInterval(framesPerSecond: 30)).seconds
        #expect(abs(audio.start - video.start) <= interval, "audio starts at \(audio.start) s, video at \(video.start) s")
        #expect(probe.videoPackets == summary.framesWritten, "ffprobe \(probe.videoPackets) packets, recorder \(summary.framesWritten)")
        let range = try #require(summary.sequenceRange)
        let dropped = summary.framesDropped.values.reduce(0, +)
        #expect(
            summary.framesWritten <= range.count && summary.framesWritten + dropped >= range.count,
            "\(summary.framesWritten) written + \(dropped) dropped of the camera's \(range.count)")
        #expect(summary.duration.inSeconds <= 3 + interval / 2 + 0.001, "\(summary.duration)")
        let audioDuration = try #require(summary.audioDuration).inSeconds
        // The emulated machine may stall the camera for seconds (frames then reported dropped);
        // the limit holds on the capture clock for both streams all the same.
        #expect(audioDuration <= 3 + 0.1, "audio \(audioDuration) s")
        if dropped == 0 {
            #expect(summary.duration.inSeconds >= 3 - interval - 0.001, "\(summary.duration)")
            // The end's audio may still be on its way at the stop (up to 100 ms is padded).
            #expect(
                abs(audioDuration - summary.duration.inSeconds) <= 0.1 + interval, "audio \(audioDuration) s, video \(summary.duration)")
            #expect(abs(probe.duration - summary.duration.inSeconds) <= interval, "file \(probe.duration) s, recorder \(summary.duration)")
        }
        print(
            "recording: vivid 320x180 .\(ext): \(summary.framesWritten) frames, \(dropped) dropped, \(summary.duration), audio \(summary.audioDuration.map { "\($0)" } ?? "none"), took \(String(format: "%.2f", Date().timeIntervalSince(began))) s; \(summary)"
        )
    }

    /// An MJPEG camera (v4l2loopback fed one JPEG again and again) recorded with the `.mjpeg`
    /// codec into MKV: every packet in the file is the camera's JPEG byte for byte, and a JPEG
    /// without Huffman tables gets exactly the standard ones.
    @Test(arguments: [true, false])
    func mjpegIsPassedThrough(withTables: Bool) throws {
        try VM.require()
        let loop = try #require(
            CaptureDevice.devices(for: .video).first { $0.modelID.contains("loopback") },
            "no v4l2loopback camera: \(CaptureDevice.devices(for: .video).map(\.modelID))")
        let jpeg = try LoopbackFeeder.makeJPEG(width: 320, height: 240, huffmanTables: withTables)
        let feeder = try LoopbackFeeder(path: loop.path, width: 320, height: 240, frame: jpeg)
        defer { feeder.stop() }
        let session = CaptureSession()
        session.addInput(try CaptureDeviceInput(device: loop))
        let fmt = try #require(loop.formats.first { $0.pixelFormat == .mjpeg }, "loopback formats: \(loop.formats)")
        try loop.lockForConfiguration()
        try loop.setActiveFormat(fmt)
        loop.unlockForConfiguration()
        let movie = CaptureMovieFileOutput()
        session.addOutput(movie)
        movie.setOutputSettings(.init(codec: .mjpeg), for: nil)
        movie.maxRecordedDuration = .seconds(2)
        try session.start()
        defer { session.stopRunning() }
        let folder = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("mjpeg-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let url = folder.appendingPathComponent("loop.mkv")
        let finish = Finish()
        movie.startRecording(to: url, recordingDelegate: finish)
        let ended = try #require(finish.wait(60), "the recording never finished")
        #expect(ended?.code == .maximumDurationReached, "\(String(describing: ended))")
        let summary = try #require(movie.lastRecording)
        #expect(summary.encoder == "passthrough" && summary.framesWritten > 0)
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/ffmpeg")
        p.arguments = [
            "-v", "error", "-i", url.path, "-map", "0:v", "-c", "copy", "-f", "image2", folder.appendingPathComponent("%05d.jpg").path,
        ]
        try p.run()
        p.waitUntilExit()
        #expect(p.terminationStatus == 0)
        let packets = try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { $0.hasSuffix(".jpg") }
        #expect(packets.count == summary.framesWritten, "\(packets.count) packets, \(summary.framesWritten) written")
        let expectedSize = jpeg.count + (withTables ? 0 : MJPEG.standardHuffmanTableSegment.count)
        var identical = 0, sized = 0
        for name in packets {
            let data = try Data(contentsOf: folder.appendingPathComponent(name))
            if data == jpeg { identical += 1 }
            if data.count == expectedSize { sized += 1 }
        }
        if withTables {
            #expect(identical == packets.count, "\(identical) of \(packets.count) packets are the camera's JPEG")
        } else {
            #expect(sized == packets.count, "\(sized) of \(packets.count) packets are the JPEG with the standard tables")
        }
        print("recording: MJPEG passthrough (tables \(withTables)): \(packets.count) packets, \(identical) identical")
    }

    /// vivid's device unbound from its driver mid-recording (a camera unplugged): the recording
    /// ends with `.sessionStopped`, and the file, closed, is readable with what came before.
    @Test func aCameraThatGoesAwayEndsTheRecording() throws {
        let (_, session) = try Self.vivid()
        let movie = CaptureMovieFileOutput()
        session.addOutput(movie)
        movie.movieFragmentInterval = .milliseconds(500)
        try session.start()
        defer { session.stopRunning() }
        let url = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("unplug-\(UUID().uuidString.prefix(8)).mp4")
        defer { try? FileManager.default.removeItem(at: url) }
        let finish = Finish()
        movie.startRecording(to: url, recordingDelegate: finish)
        let deadline = Date().addingTimeInterval(60)
        while movie.recordedDuration < .seconds(2), Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }
        #expect(movie.recordedDuration >= .seconds(2), "vivid recorded \(movie.recordedDuration) in a minute")
        let device = "/sys/bus/platform/drivers/vivid"
        try "vivid.0".write(toFile: "\(device)/unbind", atomically: false, encoding: .utf8)
        defer { try? "vivid.0".write(toFile: "\(device)/bind", atomically: false, encoding: .utf8) }
        let ended = try #require(finish.wait(30), "the recording did not end after the camera went away")
        #expect(ended?.code == .sessionStopped && ended?.recordingSuccessfullyFinished == false, "\(String(describing: ended))")
        let summary = try #require(movie.lastRecording)
        let probe = try FileProbe(url)
        #expect(
            probe.streams["video"]?.codec == "h264" && probe.videoPackets == summary.framesWritten,
            "ffprobe \(probe.videoPackets) packets, recorder \(summary.framesWritten)")
        #expect(summary.framesWritten > 0 && abs(probe.duration - summary.duration.inSeconds) < 0.1, "\(probe.duration) s, \(summary)")
        print("recording: unplugged after \(summary.duration): \(summary.framesWritten) frames, \(String(describing: ended))")
    }
}

extension Duration {
    fileprivate var inSeconds: Double { let c = components; return Double(c.seconds) + Double(c.attoseconds) / 1e18 }
}

/// The first audio buffers' times against the clock, to tell a clock problem from a slow machine.
private final class Stamps: CaptureAudioDataOutputSampleBufferDelegate, @unchecked Sendable {
    private let lock = NSLock()
    private var lines: [String] = []
    func captureOutput(_ output: CaptureOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection) {
        let now = CaptureTime.now()
        lock.withLock {
            if lines.count < 5 {
                lines.append(
                    "audio at \(Double(now - sampleBuffer.presentationTimeStamp) / 1e9) s ago, \(sampleBuffer.audioBuffer?.frameCount ?? -1) frames"
                )
            }
        }
    }
    var text: String { lock.withLock { lines.joined(separator: "; ") } }
}
