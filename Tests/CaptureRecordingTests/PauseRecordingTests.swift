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

    /// Record a second, pause a second, resume until a 2.5 s limit ends the recording (a stop
    /// while paused is below): the file leaves the pause out (it is no longer
    /// than the time recorded around the pause), its video goes on right after the pause (one
    /// run of frames each side; every gap the camera's own, the seam's what the pause's cut
    /// left; an H.264 keyframe there), the audio is cut as the video is (in PCM the
    /// microphone's tone jumps in phase between the two frames of the seam), and the delegate
    /// hears start, pause, resume and finish in that order.
    @Test(arguments: [
        Case(file: "mp4", codec: .h264, camera: .nv12), Case(file: "mkv", codec: .h264, camera: .nv12, audio: .pcm),
        Case(file: "mkv", codec: .mjpeg, camera: .mjpeg),
    ])
    func thePauseIsLeftOutOfTheFile(_ c: Case) throws {
        try retrying { try pauseScenario(c) }
    }

    /// One run of `thePauseIsLeftOutOfTheFile`: nil when every check ran, else why they could not.
    private func pauseScenario(_ c: Case) throws -> String? {
        let setup = try Setup("pause \(c.codec) \(c.file)", c.camera, microphone: true)
        defer { setup.close() }
        let (rig, folder, movie) = (setup.rig, setup.folder, setup.movie)
        // The capture time of every frame, as an app output sees them.
        let captured = FrameTimes()
        let app = CaptureVideoDataOutput()
        app.alwaysDiscardsLateVideoFrames = false
        app.setSampleBufferDelegate(captured, queue: DispatchQueue(label: "test.pause-frame-times"))
        rig.session.addOutput(app)
        // H.264 with keyframes far apart: the one at the resume is the one forced there.
        movie.setOutputSettings(
            .init(codec: c.codec, keyframeInterval: c.codec == .h264 ? 1000 : nil, audioCodec: c.audio), for: nil)
        // Ended by the limit, whose end is written in order (a stop under load may cut a video
        // backlog short while the audio goes on).
        movie.maxRecordedDuration = .milliseconds(2500)
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
        // Less than the limit was recorded before the pause, so the limit is reached after the
        // resume (unless the test thread was held up that long: then it is tried again).
        guard Self.seconds(s0, p1) < 2.4 else {
            _ = events.waitForFinish()
            return "paused \(Self.seconds(s0, p1)) s after the start (2.4 s at most)"
        }
        #expect(movie.isRecordingPaused && movie.isRecording)
        // A second, and half a period of the tone: its phase jumps by half a turn at the seam.
        Self.wait(seconds: 1, since: p1, plusHalfAPeriodOf: rig.microphone!.frequency)
        let r0 = CaptureTime.now()
        movie.resumeRecording()
        let r1 = CaptureTime.now()
        #expect(!movie.isRecordingPaused)
        #expect(events.waitForFinish(), "the recording never finished")
        let e1 = CaptureTime.now()
        let error = try #require(events.finishError ?? nil)
        #expect(error.code == .maximumDurationReached, "\(error)")
        #expect(!movie.isRecordingPaused)
        #expect(events.events == [.started(url), .paused(url), .resumed(url), .finished(url, error)], "\(events.events)")

        let summary = try #require(movie.lastRecording)
        let frame = 1.0 / 30
        let video = try packetSpan(url, stream: "v:0"), audio = try packetSpan(url, stream: "a:0")
        // Recorded: at most from the start to the pause and from the resume to the end (plus
        // the seam's frame); the whole span would be longer by the pause, over a second.
        let around = Self.seconds(s0, p1) + Self.seconds(r0, e1)
        // (Matroska may start the video at AAC's priming delay rather than 0, and an MP4 without
        // an edit list stretch its first frame by that delay: 1024 samples, 21 ms at 48 kHz.)
        let priming = c.file == "mp4" && c.audio == .aac ? 0.025 : 0
        let length = video.end - video.first
        #expect(length <= around + 2 * frame + priming, "the file lasts \(length) s, recorded around the pause: \(around) s")
        #expect(abs(length - summary.duration.seconds) < 0.002 + priming, "file \(length) s, recorder \(summary.duration)")
        #expect(abs(movie.recordedDuration.seconds - summary.duration.seconds) < 0.000_001)
        // The audio starts and ends with the video (at the end within what a camera late under
        // load may leave between them; where the pause was cut out of it is checked below).
        #expect(abs(audio.first - video.first) <= frame, "start: audio \(audio.first) s, video \(video.first) s")
        #expect(abs(audio.end - video.end) < 0.5, "end: audio \(audio.end) s, video \(video.end) s")

        // One run of the camera's frames before the pause and one after (those captured while
        // paused are neither written nor dropped).
        #expect(summary.sequenceRuns.count == 2, "\(summary.sequenceRuns)")
        let times = try packetTimes(url), flags = try packetFlags(url)
        // (Non-decreasing: Matroska's times are whole ms, and a camera late under load may send
        // two frames less than 1 ms apart.)
        #expect(times.count == summary.framesWritten && zip(times, times.dropFirst()).allSatisfy { $0 <= $1 }, "\(times.count) packets")
        let dropped = summary.framesDropped.values.reduce(0, +)
        // The seam, gaps, key frame and tone need every frame: a run that lost one is tried again.
        guard dropped == 0 else { return "\(dropped) frames dropped: \(summary.framesDropped)" }
        guard summary.sequenceRuns.count == 2 else { return nil }  // (recorded above)
        // Frames written = the runs' frames, packet i being the i-th of them; the first
        // after the pause is the seam.
        let sequences = Array(summary.sequenceRuns[0]) + Array(summary.sequenceRuns[1])
        #expect(summary.framesWritten == sequences.count)
        let seam = summary.sequenceRuns[0].count
        try #require(seam > 0 && seam < times.count && times.count == sequences.count)
        // Each gap in the file is the camera's between the same two frames (the file's time
        // line is the capture clock) but at the seam, where it is what was left of the time
        // around the pause once the pause's span (between the calls' times) was cut out,
        // at least 1 ms. The first gap is left out (an MP4 stretches its first frame
        // by AAC's priming), as are frames the app output missed. MKV is timed in ms.
        var compared = 0
        for i in 2..<times.count {
            guard let a = captured.time(of: sequences[i - 1]), let b = captured.time(of: sequences[i]) else { continue }
            compared += 1
            let gap = times[i] - times[i - 1]
            if i != seam {
                #expect(abs(gap - Self.seconds(a, b)) < 0.0015, "packet \(i): \(gap) s in the file, \(Self.seconds(a, b)) s captured")
            } else {
                let least = max(0.001, Self.seconds(a, p0) + Self.seconds(r1, b))
                let most = max(0.001, Self.seconds(a, p1) + Self.seconds(r0, b))
                #expect(gap > least - 0.0015 && gap < most + 0.0015, "the seam: \(gap) s, expected \(least)...\(most) s")
            }
        }
        #expect(compared * 2 > times.count, "the app output saw \(compared) of \(times.count) frames' pairs")
        #expect(flags[seam].hasPrefix("K"), "the first frame after the pause is a keyframe: \(flags[seam])")
        // Lossless audio: the tone's phase jumps where the pause was cut out, between the
        // last frame before it and the first after (when the jump is big enough to see).
        if c.audio == .pcm {
            let tone = rig.microphone!.frequency
            let cuts = try toneBreaks(url, frequency: tone)
            let jump = (lo: 2 * Double.pi * tone * Self.seconds(p1, r0), hi: 2 * Double.pi * tone * Self.seconds(p0, r1))
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
        return nil
    }

    /// Sleeps until `seconds` after `since`, and on to half a period of `frequency` past a
    /// whole number of periods.
    private static func wait(seconds: Double, since: CaptureTime, plusHalfAPeriodOf frequency: Double) {
        Thread.sleep(forTimeInterval: max(0, seconds - 0.002))
        let period = 1e9 / frequency
        while true {
            let elapsed = Double(CaptureTime.now() - since)
            let phase = elapsed.truncatingRemainder(dividingBy: period) / period
            if elapsed >= seconds * 1e9, abs(phase - 0.5) < 0.05 { return }
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

    /// `maxRecordedDuration` counts recorded time only: a 1.5 s limit with a pause of 1.5 s
    /// after half a second ends after the resume (counted in wall time it would end in the
    /// pause), with frames from after the resume in the file and no more than the limit.
    @Test func theDurationLimitCountsRecordedTimeOnly() throws {
        try retrying { try durationLimitScenario() }
    }

    /// One run of `theDurationLimitCountsRecordedTimeOnly`: nil when every check ran.
    private func durationLimitScenario() throws -> String? {
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
        Thread.sleep(forTimeInterval: 1.5)
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
        #expect(video.end - video.first <= 1.5 + frame / 2 + 0.002, "\(video.end - video.first) s")
        guard pausedInTime else { return "paused \(Self.seconds(s0, p1)) s after the start (1.4 s at most)" }
        #expect(summary.sequenceRuns.count == 2, "\(summary.sequenceRuns)")
        return nil
    }

    /// Paused at once after the start: the file begins at the resume (audio too), and the
    /// delegate hears of the pause and the resume after the start all the same.
    @Test func aPauseBeforeTheFirstFrameIsToldAfterTheStart() throws {
        let setup = try Setup("pause first", microphone: true)
        defer { setup.close() }
        let (rig, folder, movie) = (setup.rig, setup.folder, setup.movie)
        let captured = FrameTimes()
        let app = CaptureVideoDataOutput()
        app.alwaysDiscardsLateVideoFrames = false
        app.setSampleBufferDelegate(captured, queue: DispatchQueue(label: "test.pause-first-frame-times"))
        rig.session.addOutput(app)
        movie.maxRecordedDuration = .milliseconds(700)
        try rig.session.start()
        // The camera and the microphone running first, so that frames come at once.
        Thread.sleep(forTimeInterval: 0.5)
        let url = folder.file("first.mkv")
        let events = RecordingEvents()
        movie.startRecording(to: url, recordingDelegate: events)
        movie.pauseRecording()
        let p1 = CaptureTime.now()
        Thread.sleep(forTimeInterval: 1)
        let r0 = CaptureTime.now()
        movie.resumeRecording()
        #expect(events.waitForFinish())
        let error = try #require(events.finishError ?? nil)
        #expect(events.events == [.started(url), .paused(url), .resumed(url), .finished(url, error)], "\(events.events)")
        #expect(error.code == .maximumDurationReached, "\(error)")
        // The file's first frame was captured after the resume (or, at most, in the instant
        // between the start and the pause), and the audio starts with it.
        let summary = try #require(movie.lastRecording)
        let first = try #require(summary.sequenceRuns.first?.lowerBound)
        if let at = captured.time(of: first) {
            #expect(!(p1 < at && at < r0), "the first frame was captured \(Self.seconds(p1, at)) s into the pause")
        }
        let frame = 1.0 / 30
        let video = try packetSpan(url, stream: "v:0"), audio = try packetSpan(url, stream: "a:0")
        #expect(abs(audio.first - video.first) <= frame, "audio \(audio), video \(video)")
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
