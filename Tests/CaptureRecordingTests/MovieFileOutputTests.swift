import Capture
import CaptureRecording
import CaptureTestSupport
import Foundation
import Testing

/// `CaptureMovieFileOutput` on the virtual camera, in-process, read back with ffprobe.
@Suite struct MovieFileOutputTests {
    struct Case: Sendable, CustomStringConvertible {
        var format: PixelFormat
        var width: Int
        var height: Int
        var description: String { "\(format) \(width)x\(height)" }
    }

    /// H.264 in fragmented MP4 at two sizes, from NV12 as the camera gives it and from YUYV
    /// converted by the session: ffprobe finds the codec and size asked, every frame the
    /// recorder wrote, and the duration the limit set; the frames missing from the camera's
    /// sequence were all reported dropped.
    @Test(arguments: [Case(format: .nv12, width: 320, height: 240), Case(format: .yuyv, width: 640, height: 480)])
    func h264MP4HasTheSizeFramesAndDurationAsked(_ c: Case) throws {
        try retrying { try h264Scenario(c) }
    }

    /// One run of `h264MP4HasTheSizeFramesAndDurationAsked`: nil when every check ran (the
    /// interval and frame count need every frame: a run that lost one is tried again).
    private func h264Scenario(_ c: Case) throws -> String? {
        let rig = try RecordingRig("h264 \(c)", .init(c.format, width: c.width, height: c.height, frameRates: [30]))
        defer { rig.stop() }
        let folder = try TempFolder("h264")
        defer { folder.remove() }
        let movie = CaptureMovieFileOutput()
        #expect(rig.session.canAddOutput(movie))
        rig.session.addOutput(movie)
        #expect(rig.session.outputs.count == 1 && rig.session.outputs.first === movie, "a movie output is one of the session's outputs")
        #expect(movie.connection(with: .video) != nil)
        movie.maxRecordedDuration = .seconds(2)
        movie.setOutputSettings(.init(codec: .h264, rateControl: .quality(28)), for: movie.connection(with: .video))
        try rig.session.start()
        let url = folder.file("out.mp4")
        let events = RecordingEvents()
        #expect(!movie.isRecording)
        movie.startRecording(to: url, recordingDelegate: events)
        #expect(movie.isRecording)
        #expect(events.waitForFinish(), "the recording never finished")
        #expect(!movie.isRecording)
        // Started, then finished by the limit, with AVFoundation's "finished successfully".
        let error = try #require(events.finishError ?? nil)
        #expect(error.code == .maximumDurationReached && error.recordingSuccessfullyFinished, "\(error)")
        #expect(events.events.first == .started(url) && events.events.count == 2, "\(events.events)")
        let summary = try #require(movie.lastRecording)
        #expect(summary.encoder == "libx264")
        let probe = try Probe(url)
        #expect(probe.codec == "h264" && probe.width == c.width && probe.height == c.height, "\(probe)")
        // The packets carry the capture clock's times: increasing from 0, the last one frame
        // before the end; lost frames leave gaps (never less than one frame interval apart),
        // and without losses the frames are one interval apart.
        let times = try packetTimes(url)
        #expect(times.count == summary.framesWritten && zip(times, times.dropFirst()).allSatisfy { $0 < $1 }, "\(times.count) packets")
        #expect(abs((times.last ?? -1) + 1.0 / 30 - probe.duration) < 0.002, "last packet at \(times.last ?? -1) s of \(probe.duration) s")
        let gap = try #require(medianGap(times))
        #expect(gap > 1.0 / 30 - 0.005, "median gap \(gap) s")
        if summary.framesDropped.isEmpty { #expect(abs(gap - 1.0 / 30) < 0.002, "median gap \(gap) s") }  // (else tried again below)
        #expect(probe.frames == summary.framesWritten, "ffprobe read \(probe.frames), the recorder wrote \(summary.framesWritten)")
        #expect(probe.startTime.magnitude < 0.001, "the first frame is at 0: \(probe.startTime)")
        // The file's duration is the recorder's (first frame to the end of the last).
        #expect(abs(probe.duration - summary.duration.seconds) < 0.002, "ffprobe \(probe.duration) s, recorder \(summary.duration)")
        // Every frame of the camera's sequence from the first written to the last was written or
        // reported dropped.
        let range = try #require(summary.sequenceRange)
        let dropped = summary.framesDropped.values.reduce(0, +)
        #expect(summary.framesWritten + dropped >= range.count, "\(summary.framesWritten) written + \(dropped) dropped of \(range.count)")
        #expect(summary.framesWritten <= range.count)
        // The limit: 2 s within a frame, unless frames were lost at the end.
        let frame = 1.0 / 30
        #expect(summary.duration.seconds <= 2 + frame / 2 + 0.0001, "\(summary.duration)")
        #expect(summary.fileSize == (try FileManager.default.attributesOfItem(atPath: url.path)[.size] as? Int64))
        guard dropped == 0 else { return "\(dropped) frames dropped: \(summary.framesDropped)" }
        #expect(summary.duration.seconds >= 2 - frame - 0.0001, "\(summary.duration)")
        #expect(abs(summary.framesWritten - 60) <= 1, "\(summary.framesWritten) frames in 2 s at 30 fps")
        return nil
    }

    /// An MJPEG camera recorded as MJPEG into Matroska: each frame in the file is byte for byte
    /// the camera's frame (no re-encode), in the camera's order.
    @Test func mjpegIntoMKVIsPassedThrough() throws {
        let rig = try RecordingRig("mjpeg", .init(.mjpeg, width: 320, height: 240, frameRates: [30]))
        defer { rig.stop() }
        let folder = try TempFolder("mjpeg")
        defer { folder.remove() }
        // What the camera sent, from an app output that takes its frames as they are.
        let cameraFrames = LockedFrames()
        let app = CaptureVideoDataOutput()
        app.alwaysDiscardsLateVideoFrames = false
        let appDelegate = FrameSaver(cameraFrames)
        app.setSampleBufferDelegate(appDelegate, queue: DispatchQueue(label: "test.camera-frames"))
        rig.session.addOutput(app)
        let movie = CaptureMovieFileOutput()
        rig.session.addOutput(movie)
        movie.maxRecordedDuration = .milliseconds(1500)
        movie.setOutputSettings(.init(codec: .mjpeg), for: nil)
        try rig.session.start()
        let url = folder.file("out.mkv")
        let events = RecordingEvents()
        movie.startRecording(to: url, recordingDelegate: events)
        #expect(events.waitForFinish())
        let summary = try #require(movie.lastRecording)
        #expect(summary.error?.code == .maximumDurationReached)
        #expect(summary.encoder == "passthrough")
        rig.session.stopRunning()
        let probe = try Probe(url)
        #expect(probe.codec == "mjpeg" && probe.width == 320 && probe.height == 240 && probe.formatName.contains("matroska"), "\(probe)")
        #expect(probe.frames == summary.framesWritten)
        // The file's packets, one JPEG each.
        let packets = folder.url.appendingPathComponent("packets")
        try FileManager.default.createDirectory(at: packets, withIntermediateDirectories: true)
        let r = try runProcess(
            "/usr/bin/ffmpeg",
            [
                "-v", "error", "-i", url.path, "-map", "0:v", "-c", "copy", "-f", "image2",
                packets.appendingPathComponent("%05d.jpg").path,
            ])
        #expect(r.status == 0, "\(r.stderr)")
        let names = try FileManager.default.contentsOfDirectory(atPath: packets.path).sorted()
        #expect(names.count == summary.framesWritten && names.count >= 30, "\(names.count) packets, \(summary.framesWritten) written")
        let bySequence = cameraFrames.all
        var index: [Data: UInt64] = [:]
        for (seq, data) in bySequence { index[data] = seq }
        var sequences: [UInt64] = []
        for name in names {
            let data = try Data(contentsOf: packets.appendingPathComponent(name))
            guard let seq = index[data] else {
                Issue.record("packet \(name) (\(data.count) bytes) is none of the camera's \(bySequence.count) frames")
                return
            }
            sequences.append(seq)
        }
        #expect(zip(sequences, sequences.dropFirst()).allSatisfy { $0 < $1 }, "in the camera's order")
        #expect(sequences.first == summary.sequenceRange?.lowerBound && sequences.last == summary.sequenceRange?.upperBound)
    }

    /// The async form returns the summary when the limit ends the recording, and a bad
    /// destination throws a typed error and leaves nothing behind.
    @Test func asyncFormAndBadDestinations() async throws {
        let rig = try RecordingRig("async", .init(.nv12, width: 320, height: 240, frameRates: [30]))
        defer { rig.stop() }
        let folder = try TempFolder("async")
        defer { folder.remove() }
        let movie = CaptureMovieFileOutput()
        rig.session.addOutput(movie)
        try rig.session.start()

        // A folder that does not exist: typed error, no file, never started.
        let missing = folder.url.appendingPathComponent("no-such-folder/out.mp4")
        let events = RecordingEvents()
        movie.startRecording(to: missing, recordingDelegate: events)
        #expect(events.waitForFinish())
        let e1 = try #require(events.finishError ?? nil)
        #expect(e1.code == .cannotWriteFile && !e1.recordingSuccessfullyFinished, "\(e1)")
        #expect(e1.message.contains("does not exist"), "\(e1.message)")
        #expect(events.events.count == 1, "no didStart for a file never made: \(events.events)")
        #expect(!FileManager.default.fileExists(atPath: missing.path))
        #expect(!movie.isRecording)

        // A container the output does not write.
        do {
            _ = try await movie.record(to: folder.file("out.avi"))
            Issue.record("an .avi recording started")
        } catch {
            #expect(error.code == .unsupportedContainer, "\(error)")
        }
        #expect(!FileManager.default.fileExists(atPath: folder.file("out.avi").path))

        // A good one: the limit ends it, the summary comes back.
        movie.maxRecordedDuration = .seconds(1)
        let url = folder.file("async.mkv")
        let summary = try await movie.record(to: url)
        #expect(summary.error?.code == .maximumDurationReached)
        #expect(summary.framesWritten > 0 && summary.duration.seconds <= 1 + 1.0 / 60 + 0.0001, "\(summary)")
        let probe = try Probe(url)
        #expect(probe.codec == "h264" && probe.frames == summary.framesWritten && probe.formatName.contains("matroska"), "\(probe)")
        #expect(abs(probe.duration - summary.duration.seconds) < 0.002, "ffprobe \(probe.duration) s, recorder \(summary.duration)")
    }

    /// A second start while recording is refused with a typed error, and the first recording
    /// goes on; stopRecording finishes it with no error.
    @Test func aSecondStartIsRefusedAndStopFinishes() throws {
        let rig = try RecordingRig("twice", .init(.nv12, width: 320, height: 240, frameRates: [30]))
        defer { rig.stop() }
        let folder = try TempFolder("twice")
        defer { folder.remove() }
        let movie = CaptureMovieFileOutput()
        rig.session.addOutput(movie)
        try rig.session.start()
        let first = RecordingEvents(), second = RecordingEvents()
        movie.startRecording(to: folder.file("a.mp4"), recordingDelegate: first)
        movie.startRecording(to: folder.file("b.mp4"), recordingDelegate: second)
        #expect(second.waitForFinish())
        #expect((second.finishError ?? nil)?.code == .invalidState)
        // Wait for frames to be written, then stop.
        waitUntil(timeout: 60) { movie.recordedFrameCount >= 15 }
        #expect(movie.recordedFrameCount >= 15)
        movie.stopRecording()
        #expect(first.waitForFinish())
        #expect(first.finishError == .some(nil), "stopped: no error")
        let summary = try #require(movie.lastRecording)
        #expect(try Probe(folder.file("a.mp4")).frames == summary.framesWritten)
        #expect(!FileManager.default.fileExists(atPath: folder.file("b.mp4").path))
    }
}

extension MovieFileOutputTests {
    /// A disk that is full (a .mp4 name for /dev/full, whose every write fails with ENOSPC) ends
    /// the recording with the typed disk-full error, not a crash or a hang.
    @Test func aFullDiskIsATypedError() throws {
        let rig = try RecordingRig("full", .init(.nv12, width: 320, height: 240, frameRates: [30]))
        defer { rig.stop() }
        let folder = try TempFolder("full")
        defer { folder.remove() }
        let url = folder.file("full.mp4")
        try FileManager.default.createSymbolicLink(atPath: url.path, withDestinationPath: "/dev/full")
        let movie = CaptureMovieFileOutput()
        rig.session.addOutput(movie)
        movie.movieFragmentInterval = .milliseconds(200)
        try rig.session.start()
        let events = RecordingEvents()
        movie.startRecording(to: url, recordingDelegate: events)
        #expect(events.waitForFinish())
        let error = try #require(events.finishError ?? nil)
        #expect(error.code == .diskFull && !error.recordingSuccessfullyFinished, "\(error)")
        #expect(!movie.isRecording)
        // The output records again afterwards.
        movie.maxRecordedDuration = .milliseconds(500)
        let again = RecordingEvents()
        movie.startRecording(to: folder.file("again.mkv"), recordingDelegate: again)
        #expect(again.waitForFinish())
        #expect((again.finishError ?? nil)?.code == .maximumDurationReached)
        #expect(try Probe(folder.file("again.mkv")).frames == movie.lastRecording?.framesWritten)
    }

    /// minFreeDiskSpaceLimit: with more asked than any disk has, the recording ends at its first
    /// check with `.diskFull` and a complete file (success), before the disk is touched further.
    @Test func minFreeDiskSpaceEndsTheRecordingWithACompleteFile() throws {
        let rig = try RecordingRig("space", .init(.nv12, width: 320, height: 240, frameRates: [30]))
        defer { rig.stop() }
        let folder = try TempFolder("space")
        defer { folder.remove() }
        let movie = CaptureMovieFileOutput()
        rig.session.addOutput(movie)
        movie.minFreeDiskSpaceLimit = .max
        try rig.session.start()
        let url = folder.file("space.mp4")
        let events = RecordingEvents()
        movie.startRecording(to: url, recordingDelegate: events)
        #expect(events.waitForFinish())
        let e = try #require(events.finishError ?? nil)
        #expect(e.code == .diskFull && e.recordingSuccessfullyFinished, "\(e)")
        let summary = try #require(movie.lastRecording)
        #expect(summary.framesWritten == 1, "the check follows the first frame: \(summary)")
        #expect(try Probe(url).frames == summary.framesWritten)
    }

    /// A camera that goes quiet for half a second mid-recording leaves a gap in time in the
    /// file, not a shift: the frames after it keep their capture times, so the recording still
    /// ends at its limit with fewer frames.
    @Test func aStalledCameraLeavesAGapInTime() throws {
        let rig = try RecordingRig("stall", .init(.nv12, width: 320, height: 240, frameRates: [30]))
        defer { rig.stop() }
        let folder = try TempFolder("stall")
        defer { folder.remove() }
        let movie = CaptureMovieFileOutput()
        rig.session.addOutput(movie)
        movie.maxRecordedDuration = .seconds(3)
        try rig.session.start()
        let url = folder.file("stall.mkv")
        let events = RecordingEvents()
        movie.startRecording(to: url, recordingDelegate: events)
        waitUntil(timeout: 60) { movie.recordedFrameCount >= 20 }
        #expect(movie.recordedFrameCount >= 20)
        rig.camera.stall(for: .milliseconds(500))
        #expect(events.waitForFinish())
        #expect((events.finishError ?? nil)?.code == .maximumDurationReached)
        let summary = try #require(movie.lastRecording)
        let times = try packetTimes(url)
        #expect(times.count == summary.framesWritten)
        let widest = zip(times, times.dropFirst()).map { $1 - $0 }.max() ?? 0
        #expect(widest >= 0.45, "the stall's gap: \(widest) s")
        // The time the stall took holds no frames: at most 3 s of frames less the gap (and one).
        #expect(Double(summary.framesWritten) <= (3 - widest) * 30 + 2, "\(summary.framesWritten) frames")
        #expect(summary.duration.seconds <= 3 + 1.0 / 60 + 0.0001 && summary.duration.seconds > 3 - widest, "\(summary.duration)")
    }

    /// The V4L2 M2M hardware encoder where asked: on a machine with one the recording says it
    /// ran; without one (this host) the recording ends with a typed error and leaves no file.
    @Test func theHardwareEncoderRunsOrIsATypedError() throws {
        let rig = try RecordingRig("m2m", .init(.nv12, width: 320, height: 240, frameRates: [30]))
        defer { rig.stop() }
        let folder = try TempFolder("m2m")
        defer { folder.remove() }
        let movie = CaptureMovieFileOutput()
        rig.session.addOutput(movie)
        movie.setOutputSettings(.init(codec: .h264, h264Encoder: .v4l2m2m), for: nil)
        movie.maxRecordedDuration = .seconds(1)
        try rig.session.start()
        let url = folder.file("m2m.mp4")
        let events = RecordingEvents()
        movie.startRecording(to: url, recordingDelegate: events)
        #expect(events.waitForFinish())
        let e = try #require(events.finishError ?? nil)
        if e.code == .maximumDurationReached {
            #expect(movie.lastRecording?.encoder == "h264_v4l2m2m")
            #expect(try Probe(url).codec == "h264")
        } else {
            #expect(e.code == .unsupportedCodec && e.message.contains("libx264"), "\(e)")
            #expect(events.events.count == 1, "never started: \(events.events)")
        }
    }

    /// A recording stopped before its first frame (the session not running) ends with
    /// `.noDataCaptured` and leaves no file.
    @Test func stoppedBeforeAnyFrameLeavesNoFile() throws {
        let rig = try RecordingRig("nodata", .init(.nv12, width: 320, height: 240, frameRates: [30]))
        defer { rig.stop() }
        let folder = try TempFolder("nodata")
        defer { folder.remove() }
        let movie = CaptureMovieFileOutput()
        rig.session.addOutput(movie)
        let url = folder.file("empty.mp4")
        let events = RecordingEvents()
        movie.startRecording(to: url, recordingDelegate: events)
        movie.stopRecording()
        #expect(events.waitForFinish())
        #expect((events.finishError ?? nil)?.code == .noDataCaptured, "\(events.events)")
        #expect(events.events.count == 1 && !FileManager.default.fileExists(atPath: url.path))
    }

    /// maxRecordedFileSize ends the recording once the file reaches it (checked as fragments
    /// land, so it may pass it by at most about a fragment), with a complete file.
    @Test func maxRecordedFileSizeEndsTheRecording() throws {
        let rig = try RecordingRig("size", .init(.mjpeg, width: 640, height: 480, frameRates: [30]))
        defer { rig.stop() }
        let folder = try TempFolder("size")
        defer { folder.remove() }
        let movie = CaptureMovieFileOutput()
        rig.session.addOutput(movie)
        movie.setOutputSettings(.init(codec: .mjpeg), for: nil)
        movie.movieFragmentInterval = .milliseconds(200)
        let limit: Int64 = 200_000
        movie.maxRecordedFileSize = limit
        try rig.session.start()
        let url = folder.file("size.mp4")
        let events = RecordingEvents()
        movie.startRecording(to: url, recordingDelegate: events)
        #expect(events.waitForFinish())
        let error = try #require(events.finishError ?? nil)
        #expect(error.code == .maximumFileSizeReached && error.recordingSuccessfullyFinished, "\(error)")
        let summary = try #require(movie.lastRecording)
        // At least the limit; over it by no more than what one fragment holds (about 200 ms).
        let perFrame = Double(summary.fileSize) / Double(max(1, summary.framesWritten))
        #expect(
            summary.fileSize >= limit && Double(summary.fileSize) <= Double(limit) + perFrame * 12,
            "\(summary.fileSize) bytes, \(summary.framesWritten) frames")
        let probe = try Probe(url)
        #expect(probe.codec == "mjpeg" && probe.frames == summary.framesWritten, "\(probe)")
    }
}

/// Video with the session's microphone: AAC beside the video, both starting together and
/// lasting as long (within one video frame), in MP4 and in MKV.
@Suite struct AudioRecordingTests {
    @Test(arguments: ["mp4", "mkv"])
    func audioAndVideoStartAndEndTogether(_ ext: String) throws {
        let rig = try RecordingRig("audio \(ext)", .init(.nv12, width: 320, height: 240, frameRates: [30]))
        try rig.addMicrophone()
        defer { rig.stop() }
        let folder = try TempFolder("audio")
        defer { folder.remove() }
        let movie = CaptureMovieFileOutput()
        rig.session.addOutput(movie)
        movie.maxRecordedDuration = .seconds(2)
        try rig.session.start()
        let url = folder.file("av.\(ext)")
        let events = RecordingEvents()
        movie.startRecording(to: url, recordingDelegate: events)
        #expect(events.waitForFinish())
        #expect((events.finishError ?? nil)?.code == .maximumDurationReached, "\(String(describing: events.finishError))")
        let summary = try #require(movie.lastRecording)
        let audio = try #require(summary.audioDuration, "no audio recorded")
        let frame = 1.0 / 30
        #expect(abs(audio.seconds - summary.duration.seconds) <= frame, "audio \(audio), video \(summary.duration)")
        let streams = try streamTimes(url)
        let v = try #require(streams["video"]), a = try #require(streams["audio"], "no audio stream: \(streams)")
        #expect(v.codec == "h264" && a.codec == "aac")
        #expect(abs(a.start - v.start) <= frame, "start: audio \(a.start) s, video \(v.start) s")
        // MKV gives no per-stream duration: the file's (the longer stream's) is checked there.
        let probe = try Probe(url)
        #expect(probe.frames == summary.framesWritten)
        if ext == "mp4" {
            #expect(abs(a.duration - v.duration) <= frame, "duration: audio \(a.duration) s, video \(v.duration) s")
        }
        #expect(abs(probe.duration - summary.duration.seconds) <= frame, "file \(probe.duration) s, video \(summary.duration)")
    }
}

/// Camera frames by sequence number.
final class LockedFrames: @unchecked Sendable {
    private let lock = NSLock()
    private var frames: [UInt64: Data] = [:]
    func add(_ seq: UInt64, _ data: Data) { lock.withLock { frames[seq] = data } }
    var all: [UInt64: Data] { lock.withLock { frames } }
}

final class FrameSaver: CaptureVideoDataOutputSampleBufferDelegate, @unchecked Sendable {
    let frames: LockedFrames
    init(_ frames: LockedFrames) { self.frames = frames }
    func captureOutput(_ output: CaptureOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection) {
        frames.add(sampleBuffer.sequenceNumber, sampleBuffer.data())
    }
}

/// Publishing over RTSP into a real server peer: `ffmpeg -rtsp_flags listen`, which writes what
/// it receives to a file that ffprobe then reads.
@Suite struct RTSPPublishingTests {
    /// A TCP port nobody listens on now (bound to port 0, read, closed).
    static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw TestFailure("socket failed") }
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = 0
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { p -> Bool in
                bind(fd, p, len) == 0 && getsockname(fd, p, &len) == 0
            }
        }
        guard bound else { throw TestFailure("bind failed") }
        return Int(UInt16(bigEndian: addr.sin_port))
    }

    @Test func h264IsPublishedToAListeningServer() throws {
        let rig = try RecordingRig("rtsp", .init(.nv12, width: 320, height: 240, frameRates: [30]))
        defer { rig.stop() }
        let folder = try TempFolder("rtsp")
        defer { folder.remove() }
        let port = try Self.freePort()
        let received = folder.file("received.mkv")
        let server = Process()
        server.executableURL = URL(fileURLWithPath: "/usr/bin/ffmpeg")
        server.arguments = [
            "-v", "error", "-rtsp_flags", "listen", "-i", "rtsp://127.0.0.1:\(port)/live", "-c", "copy", "-y", received.path,
        ]
        server.standardInput = FileHandle.nullDevice
        server.standardOutput = FileHandle.nullDevice
        server.standardError = FileHandle.nullDevice
        try server.run()
        defer { if server.isRunning { kill(server.processIdentifier, SIGKILL) } }
        let movie = CaptureMovieFileOutput()
        rig.session.addOutput(movie)
        movie.maxRecordedDuration = .seconds(2)
        try rig.session.start()
        let url = try #require(URL(string: "rtsp://127.0.0.1:\(port)/live"))
        // The server may not listen yet: a refused connection is a typed error; try again.
        var summary: RecordingSummary?
        let end = Date().addingTimeInterval(60)
        while summary == nil, Date() < end {
            let events = RecordingEvents()
            movie.startRecording(to: url, recordingDelegate: events)
            #expect(events.waitForFinish())
            let e = events.finishError ?? nil
            if e?.code == .publishingFailed, server.isRunning {
                Thread.sleep(forTimeInterval: 0.1)
                continue
            }
            #expect(e?.code == .maximumDurationReached, "\(String(describing: e))")
            summary = movie.lastRecording
        }
        let s = try #require(summary)
        #expect(s.framesWritten > 0 && s.encoder == "libx264" && s.fileSize > 0, "\(s)")
        // The publisher's TEARDOWN ends the server's input: it finishes its file and exits.
        let deadline = Date().addingTimeInterval(60)
        while server.isRunning, Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }
        #expect(!server.isRunning && server.terminationStatus == 0)
        let probe = try Probe(received)
        #expect(probe.codec == "h264" && probe.width == 320 && probe.height == 240, "\(probe)")
        // Over TCP nothing is lost: every frame sent arrived.
        #expect(probe.frames == s.framesWritten, "\(probe.frames) received, \(s.framesWritten) sent")
    }

    @Test func aServerThatIsNotThereIsATypedError() throws {
        let rig = try RecordingRig("rtsp-none", .init(.nv12, width: 320, height: 240, frameRates: [30]))
        defer { rig.stop() }
        let movie = CaptureMovieFileOutput()
        rig.session.addOutput(movie)
        try rig.session.start()
        let events = RecordingEvents()
        movie.startRecording(to: try #require(URL(string: "rtsp://127.0.0.1:\(try Self.freePort())/live")), recordingDelegate: events)
        #expect(events.waitForFinish(timeout: 60))
        let e = try #require(events.finishError ?? nil)
        #expect(e.code == .publishingFailed && e.message.contains("rtsp://127.0.0.1"), "\(e)")
        #expect(events.events.count == 1, "never started: \(events.events)")
        // MJPEG is not published.
        movie.setOutputSettings(.init(codec: .mjpeg), for: nil)
        let mjpeg = RecordingEvents()
        movie.startRecording(to: try #require(URL(string: "rtsp://127.0.0.1:1/live")), recordingDelegate: mjpeg)
        #expect(mjpeg.waitForFinish())
        #expect((mjpeg.finishError ?? nil)?.code == .unsupportedCodec)
    }
}
