import Capture
import CaptureRecording
import CaptureTestSupport
import Foundation
import Testing

/// `pauseRecording()` and `resumeRecording()` on the virtual camera and microphone, read back
/// with ffprobe. Times are taken on the capture clock right around each call (never across an
/// await), so a late test thread only widens the bounds.
@Suite struct PauseRecordingTests {
    struct Case: Sendable, CustomStringConvertible {
        var file: String
        var codec: VideoCodec
        var camera: PixelFormat
        var audio: AudioCodec = .aac
        var description: String { "\(codec) and \(audio) in \(file)" }
    }

    /// A session with a virtual camera (and microphone) and a movie output in it, and a folder.
    struct Setup {
        let rig: RecordingRig
        let folder: TempFolder
        let movie = CaptureMovieFileOutput()
        init(_ name: String, _ camera: PixelFormat = .nv12, microphone: Bool) throws {
            rig = try RecordingRig(name, .init(camera, width: 320, height: 240, frameRates: [30]))
            if microphone { try rig.addMicrophone() }
            folder = try TempFolder(name.replacingOccurrences(of: " ", with: "-"))
            rig.session.addOutput(movie)
        }
        func close() {
            rig.stop()
            folder.remove()
        }
    }

    /// Seconds between two capture times.
    private static func seconds(_ a: CaptureTime, _ b: CaptureTime) -> Double { Double(b - a) / 1e9 }

    /// Record, pause for a second, resume, stop: the file leaves the pause out (it is shorter
    /// than the time recorded around the pause by most of the pause), its video goes on right
    /// after the pause (one run of frames each side, the seam no wider than two frames, an
    /// H.264 keyframe there), the audio is cut as the video is (both streams start and end
    /// together; in PCM the microphone's tone jumps in phase between the two frames of the
    /// seam), and the delegate hears start, pause, resume and finish in that order.
    @Test(arguments: [
        Case(file: "mp4", codec: .h264, camera: .nv12), Case(file: "mkv", codec: .h264, camera: .nv12, audio: .pcm),
        Case(file: "mkv", codec: .mjpeg, camera: .mjpeg),
    ])
    func thePauseIsLeftOutOfTheFile(_ c: Case) throws {
        let setup = try Setup("pause \(c.codec) \(c.file)", c.camera, microphone: true)
        defer { setup.close() }
        let (rig, folder, movie) = (setup.rig, setup.folder, setup.movie)
        // H.264 with keyframes far apart: the one at the resume is the one forced there.
        movie.setOutputSettings(
            .init(codec: c.codec, keyframeInterval: c.codec == .h264 ? 1000 : nil, audioCodec: c.audio), for: nil)
        try rig.session.start()
        let url = folder.file("paused.\(c.file)")
        let events = RecordingEvents()
        let s0 = CaptureTime.now()
        movie.startRecording(to: url, recordingDelegate: events)
        #expect(events.waitForStart(), "the recording never started")
        #expect(!movie.isRecordingPaused)
        Thread.sleep(forTimeInterval: 1)
        let p0 = CaptureTime.now()
        movie.pauseRecording()
        let p1 = CaptureTime.now()
        #expect(movie.isRecordingPaused && movie.isRecording)
        Thread.sleep(forTimeInterval: 1)
        let r0 = CaptureTime.now()
        movie.resumeRecording()
        let r1 = CaptureTime.now()
        #expect(!movie.isRecordingPaused && movie.isRecording)
        Thread.sleep(forTimeInterval: 1)
        movie.stopRecording()
        let e1 = CaptureTime.now()
        #expect(events.waitForFinish(), "the recording never finished")
        #expect(events.events == [.started(url), .paused(url), .resumed(url), .finished(url, nil)], "\(events.events)")
        #expect(!movie.isRecordingPaused)

        let summary = try #require(movie.lastRecording)
        let frame = 1.0 / 30
        let video = try packetSpan(url, stream: "v:0"), audio = try packetSpan(url, stream: "a:0")
        // Recorded: at most from the start to the pause and from the resume to the stop (plus
        // the seam's frame); the whole span would be longer by the pause, over a second.
        let around = Self.seconds(s0, p1) + Self.seconds(r0, e1)
        // (Matroska may start the video at AAC's priming delay rather than 0, and MP4, lacking an
        // edit list, stretch its first frame by that delay: 1024 samples.)
        let priming = c.file == "mp4" && c.audio == .aac ? video.end - summary.duration.seconds : 0
        #expect(priming >= 0 && priming < 0.025, "\(priming) s")
        let length = video.end - video.first - priming
        #expect(length <= around + 2 * frame, "the file lasts \(length) s, recorded around the pause: \(around) s")
        #expect(abs(length - summary.duration.seconds) < 0.002, "file \(length) s, recorder \(summary.duration)")
        #expect(abs(movie.recordedDuration.seconds - summary.duration.seconds) < 0.000_001)
        // Audio cut as the video is: it starts and ends with it; uncut it would run a second on.
        #expect(abs(audio.first - video.first) <= frame, "start: audio \(audio.first) s, video \(video.first) s")
        #expect(abs(audio.end - video.end) <= frame, "end: audio \(audio.end) s, video \(video.end) s")

        // One run of the camera's frames before the pause and one after (those captured while
        // paused are neither written nor dropped).
        #expect(summary.sequenceRuns.count == 2, "\(summary.sequenceRuns)")
        let times = try packetTimes(url), flags = try packetFlags(url)
        #expect(times.count == summary.framesWritten && zip(times, times.dropFirst()).allSatisfy { $0 < $1 }, "\(times.count) packets")
        let gaps = zip(times, times.dropFirst()).map { $1 - $0 }
        #expect((gaps.max() ?? 0) < 0.5, "a gap of \(gaps.max() ?? 0) s: the pause is in the file")
        let dropped = summary.framesDropped.values.reduce(0, +)
        if dropped == 0, summary.sequenceRuns.count == 2 {
            // Frames written = the runs' frames; the first after the pause is the seam.
            #expect(summary.framesWritten == summary.sequenceRuns.reduce(0) { $0 + $1.count })
            let seam = summary.sequenceRuns[0].count
            try #require(seam > 0 && seam < times.count)
            let gap = times[seam] - times[seam - 1]
            #expect(gap >= frame / 2 - 0.001 && gap <= 2 * frame + 0.001, "the seam's gap is \(gap) s")
            #expect(gaps.allSatisfy { $0 <= 2 * frame + 0.002 }, "largest gap \(gaps.max() ?? 0) s")
            #expect(flags[seam].hasPrefix("K"), "the first frame after the pause is a keyframe: \(flags[seam])")
            // Lossless audio: the tone's phase jumps where the pause was cut out, between the
            // last frame before it and the first after (when the jump is big enough to see).
            if c.audio == .pcm {
                let cuts = try toneBreaks(url, frequency: rig.microphone!.frequency)
                let jump = (lo: 2 * Double.pi * 1000 * Self.seconds(p1, r0), hi: 2 * Double.pi * 1000 * Self.seconds(p0, r1))
                let turns = (jump.lo / (2 * .pi)).rounded(.down)
                let visible = jump.hi - jump.lo < 1 && jump.lo - turns * 2 * .pi > 0.2 && (turns + 1) * 2 * .pi - jump.hi > 0.2
                // (One break per audio buffer, a sample lost in each, would be dozens; a
                // microphone overrun under load adds two.)
                #expect(cuts.count < 10, "the tone breaks at \(cuts) s")
                if visible {
                    #expect(
                        cuts.contains { $0 >= times[seam - 1] - 0.001 && $0 <= times[seam] + 0.001 },
                        "tone breaks at \(cuts) s, the seam is \(times[seam - 1])...\(times[seam]) s")
                }
            }
        }
    }

    /// Where a file's audio, a pure tone of `frequency` Hz, breaks (seconds): the samples that
    /// do not follow the sine of the two before them (s[n+1] + s[n-1] = 2 cos(w) s[n]).
    /// The last 0.2 s (the silence a stop may end with) is left out.
    private func toneBreaks(_ url: URL, frequency: Double) throws -> [Double] {
        let info = try runProcess(
            "/usr/bin/ffprobe",
            ["-v", "error", "-select_streams", "a:0", "-show_entries", "stream=sample_rate", "-of", "csv=p=0", url.path])
        let rate = try #require(Double(info.text.trimmingCharacters(in: .whitespacesAndNewlines)), "\(info.text)")
        let raw = try runProcess("/usr/bin/ffmpeg", ["-v", "error", "-i", url.path, "-map", "0:a", "-ac", "1", "-f", "s16le", "-"])
        #expect(raw.status == 0, "\(raw.stderr)")
        let s: [Double] = raw.stdout.withUnsafeBytes { b in
            (0..<(b.count / 2)).map { Double(Int16(littleEndian: b.loadUnaligned(fromByteOffset: $0 * 2, as: Int16.self))) }
        }
        let c = 2 * cos(2 * Double.pi * frequency / rate)
        var breaks: [Double] = []
        for n in 1..<max(1, s.count - 1 - Int(rate / 5)) where abs(s[n + 1] + s[n - 1] - c * s[n]) > 50 {
            let t = Double(n) / rate
            if breaks.last.map({ t - $0 > 0.005 }) ?? true { breaks.append(t) }
        }
        return breaks
    }

    /// `maxRecordedDuration` counts recorded time only: a 1.5 s limit with a pause of a second
    /// after half a second ends after the resume, with 1.5 s in the file.
    @Test func theDurationLimitCountsRecordedTimeOnly() throws {
        let setup = try Setup("pause limit", microphone: false)
        defer { setup.close() }
        let (rig, folder, movie) = (setup.rig, setup.folder, setup.movie)
        movie.maxRecordedDuration = .milliseconds(1500)
        try rig.session.start()
        let url = folder.file("limited.mkv")
        let events = RecordingEvents()
        let s0 = CaptureTime.now()
        movie.startRecording(to: url, recordingDelegate: events)
        #expect(events.waitForStart())
        Thread.sleep(forTimeInterval: 0.5)
        movie.pauseRecording()
        let p1 = CaptureTime.now()
        Thread.sleep(forTimeInterval: 1)
        movie.resumeRecording()
        #expect(events.waitForFinish())
        let error = try #require(events.finishError ?? nil)
        #expect(error.code == .maximumDurationReached && error.recordingSuccessfullyFinished, "\(error)")
        // Less than the limit was recorded before the pause (unless the test thread was held up
        // that long): the limit is reached after the resume.
        let pausedInTime = Self.seconds(s0, p1) < 1.4
        if pausedInTime {
            #expect(
                events.events == [.started(url), .paused(url), .resumed(url), .finished(url, error)],
                "\(events.events)")
        }
        let summary = try #require(movie.lastRecording)
        let frame = 1.0 / 30
        let video = try packetSpan(url, stream: "v:0")
        #expect(video.end <= 1.5 + frame / 2 + 0.002, "\(video.end) s")
        if summary.framesDropped.isEmpty { #expect(video.end >= 1.5 - frame - 0.002, "\(video.end) s") }
        if pausedInTime { #expect(summary.sequenceRuns.count == 2, "\(summary.sequenceRuns)") }
    }

    /// Paused at once after the start: the file begins at the resume (audio too), and the
    /// delegate hears of the pause and the resume after the start all the same.
    @Test func aPauseBeforeTheFirstFrameIsToldAfterTheStart() throws {
        let setup = try Setup("pause first", microphone: true)
        defer { setup.close() }
        let (rig, folder, movie) = (setup.rig, setup.folder, setup.movie)
        try rig.session.start()
        // The camera and the microphone running first, so that frames come at once.
        Thread.sleep(forTimeInterval: 0.5)
        let url = folder.file("first.mkv")
        let events = RecordingEvents()
        movie.startRecording(to: url, recordingDelegate: events)
        movie.pauseRecording()
        Thread.sleep(forTimeInterval: 0.5)
        let r0 = CaptureTime.now()
        movie.resumeRecording()
        Thread.sleep(forTimeInterval: 0.7)
        movie.stopRecording()
        let e1 = CaptureTime.now()
        #expect(events.waitForFinish())
        #expect(events.events == [.started(url), .paused(url), .resumed(url), .finished(url, nil)], "\(events.events)")
        let frame = 1.0 / 30
        let video = try packetSpan(url, stream: "v:0"), audio = try packetSpan(url, stream: "a:0")
        // (At most one frame may have been captured between the start and the pause.)
        let after = Self.seconds(r0, e1)
        #expect(video.end - video.first <= after + 3 * frame, "the file lasts \(video.end - video.first) s, \(after) s after the resume")
        #expect(abs(audio.first - video.first) <= frame && abs(audio.end - video.end) <= frame, "audio \(audio), video \(video)")
    }

    /// As in AVFoundation, pausing when not recording or already paused, and resuming when not
    /// paused, do nothing (no delegate call); a stop while paused finishes the file as any stop.
    @Test func pauseAndResumeOutOfTurnDoNothing() throws {
        let setup = try Setup("pause no-op", microphone: false)
        defer { setup.close() }
        let (rig, folder, movie) = (setup.rig, setup.folder, setup.movie)
        try rig.session.start()
        movie.pauseRecording()
        #expect(!movie.isRecordingPaused, "not recording: nothing to pause")
        movie.resumeRecording()
        let url = folder.file("noop.mp4")
        let events = RecordingEvents()
        movie.startRecording(to: url, recordingDelegate: events)
        #expect(events.waitForStart())
        movie.resumeRecording()
        #expect(!movie.isRecordingPaused)
        Thread.sleep(forTimeInterval: 0.3)
        movie.pauseRecording()
        movie.pauseRecording()
        #expect(movie.isRecordingPaused)
        Thread.sleep(forTimeInterval: 0.3)
        movie.resumeRecording()
        movie.resumeRecording()
        #expect(!movie.isRecordingPaused)
        Thread.sleep(forTimeInterval: 0.3)
        movie.pauseRecording()
        Thread.sleep(forTimeInterval: 0.5)
        movie.stopRecording()
        #expect(events.waitForFinish())
        #expect(
            events.events == [.started(url), .paused(url), .resumed(url), .paused(url), .finished(url, nil)], "\(events.events)")
        #expect(!movie.isRecordingPaused && !movie.isRecording)
        movie.pauseRecording()
        #expect(!movie.isRecordingPaused, "after the stop: nothing to pause")
        // The file is whole, its end the last frame before the second pause.
        let summary = try #require(movie.lastRecording)
        let probe = try Probe(url)
        #expect(probe.frames == summary.framesWritten && summary.framesWritten > 0, "\(probe)")
        #expect(abs(probe.duration - summary.duration.seconds) < 0.002, "ffprobe \(probe.duration) s, recorder \(summary.duration)")
        // A new recording starts unpaused.
        let again = RecordingEvents()
        movie.startRecording(to: folder.file("again.mkv"), recordingDelegate: again)
        #expect(!movie.isRecordingPaused)
        #expect(again.waitForStart())
        movie.stopRecording()
        #expect(again.waitForFinish())
        #expect(again.events.count == 2, "\(again.events)")
    }
}
