import Capture
import CaptureRecording
import CaptureTestSupport
import Foundation
import Testing

/// A recorder that cannot keep up (x264's `placebo` preset, which no machine of this kind runs at
/// 30 fps) costs the session's other outputs nothing: it holds at most two of the camera's
/// buffers, copies the frames it is behind on, and loses what it cannot keep alone, counted.
@Suite(.serialized) struct SlowRecorderTests {
    /// Counts an app output's frames and notes their sequence numbers.
    final class Counter: CaptureVideoDataOutputSampleBufferDelegate, @unchecked Sendable {
        private let lock = NSLock()
        private var seqs: [UInt64] = []
        private var stamps: [UInt64: CaptureTime] = [:]
        func captureOutput(_ output: CaptureOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection) {
            let s = sampleBuffer.sequenceNumber, t = sampleBuffer.presentationTimeStamp
            lock.withLock {
                seqs.append(s)
                stamps[s] = t
            }
        }
        var sequences: [UInt64] { lock.withLock { seqs } }
        /// The capture time of each frame the app got, by sequence number.
        var captureTimes: [UInt64: CaptureTime] { lock.withLock { stamps } }
    }

    /// A movie output with x264's `placebo` preset (the slow encoder a user can pick) in `rig`'s session.
    static func placeboMovie(in rig: RecordingRig) -> CaptureMovieFileOutput {
        let movie = CaptureMovieFileOutput()
        rig.session.addOutput(movie)
        var settings = MovieOutputSettings(codec: .h264, rateControl: .quality(23))
        settings.preset = "placebo"
        movie.setOutputSettings(settings, for: nil)
        return movie
    }

    /// Checks that a recorder behind on its work cost `app` (an output keeping every frame)
    /// nothing, and returns the app's drops. Exact, whatever the load: the recorder never held more
    /// of the camera's buffers (or JPEG samples) than its limit, since it copied the frames it was
    /// behind on, and the app got each frame or was told it was lost, once. Not exact: how many the
    /// app lost, since an app queue a busy machine does not run for a few frame intervals holds
    /// the other buffers itself (1 to 11 of 60 on a loaded CI machine); a recorder holding the
    /// buffers while behind would leave the app about one frame per encode or write.
    static func expectOthersLostNothing(
        to movie: CaptureMovieFileOutput, app: CaptureVideoDataOutput, counter: Counter, atLeast minimum: Int
    ) -> [DropReason: Int] {
        #expect(
            movie.cameraBuffersHeldPeak <= CaptureMovieFileOutput.heldFrameLimit,
            "the recorder held \(movie.cameraBuffersHeldPeak) buffers at once")
        #expect(movie.cameraBuffersHeldPeak >= 1, "the recorder never got a frame in a camera buffer")
        let (delivered, appDrops) = app.statistics
        #expect(appDrops[.frameWasLate] == nil && appDrops[.corrupt] == nil, "the app output (keeping every frame) lost \(appDrops)")
        let seqs = counter.sequences
        #expect(
            delivered == seqs.count && zip(seqs, seqs.dropFirst()).allSatisfy { $0 < $1 }, "\(seqs.count) frames, \(delivered) delivered")
        guard let first = seqs.first, let last = seqs.last else {
            Issue.record("the app output got no frame")
            return appDrops
        }
        let made = Int(last - first) + 1
        let lost = (appDrops[.discontinuity] ?? 0) + (appDrops[.outOfBuffers] ?? 0)
        #expect(made <= seqs.count + lost, "the app's frames \(first)...\(last): \(seqs.count) delivered, \(lost) reported lost")
        #expect(seqs.count >= minimum && seqs.count * 3 >= made * 2, "the app got \(seqs.count) of frames \(first)...\(last): \(appDrops)")
        return appDrops
    }

    struct Case: Sendable, CustomStringConvertible {
        var format: PixelFormat
        var width: Int
        var height: Int
        var description: String { "\(format) \(width)x\(height)" }
    }

    /// (Sizes at which placebo runs at a few frames per second even on an idle machine of this
    /// kind, so that the recorder is behind by more than its storage within the 2 s; a YUYV
    /// frame is also converted on the recording queue.)
    @Test(arguments: [Case(format: .nv12, width: 1920, height: 1080), Case(format: .yuyv, width: 1280, height: 720)])
    func slowH264RecorderLosesFramesAloneWithGapsInTime(_ c: Case) throws {
        let format = c.format
        let rig = try RecordingRig("slow \(c)", .init(format, width: c.width, height: c.height, frameRates: [30]))
        defer { rig.stop() }
        let folder = try TempFolder("slow")
        defer { folder.remove() }
        // An app output that keeps every frame in order (no newest-wins) and is quick.
        let app = CaptureVideoDataOutput()
        app.alwaysDiscardsLateVideoFrames = false
        let counter = Counter()
        app.setSampleBufferDelegate(counter, queue: DispatchQueue(label: "test.slow-recorder.app"))
        rig.session.addOutput(app)
        let movie = Self.placeboMovie(in: rig)
        movie.maxRecordedDuration = .seconds(2)
        try rig.session.start()
        let url = folder.file("slow.mp4")
        let events = RecordingEvents()
        movie.startRecording(to: url, recordingDelegate: events)
        #expect(events.waitForFinish(), "the recording never finished")
        rig.session.stopRunning()
        let summary = try #require(movie.lastRecording)
        #expect(summary.error?.code == .maximumDurationReached, "\(String(describing: summary.error))")

        let appDrops = Self.expectOthersLostNothing(to: movie, app: app, counter: counter, atLeast: 30)

        // The recorder fell behind beyond its own storage and lost frames alone, as late.
        let late = summary.framesDropped[.frameWasLate] ?? 0
        #expect(late > 0, "x264 placebo kept up at \(c) (the recorder was never behind): \(summary)")
        // The camera's losses in the recording reach the recorder as they reach the app.
        #expect(
            summary.framesDropped[.outOfBuffers] ?? 0 <= appDrops[.outOfBuffers] ?? 0, "recorder \(summary.framesDropped), app \(appDrops)")
        // Each frame of the camera's sequence within the recording was written or counted lost once.
        let range = try #require(summary.sequenceRange)
        let dropped = summary.framesDropped.values.reduce(0, +)
        #expect(summary.framesWritten + dropped >= range.count, "\(summary.framesWritten) written + \(dropped) dropped of \(range.count)")
        // (Frames lost after the last one written, until the limit ended it, are counted too.)
        #expect(summary.framesWritten + dropped <= range.count + 30, "\(summary.framesWritten) + \(dropped) of \(range.count)")

        // The file: every frame written, at its capture time (lost frames leave gaps, not a shift).
        let probe = try Probe(url)
        #expect(probe.codec == "h264" && probe.width == c.width && probe.height == c.height, "\(probe)")
        #expect(probe.frames == summary.framesWritten, "ffprobe read \(probe.frames), the recorder wrote \(summary.framesWritten)")
        let times = try packetTimes(url)
        #expect(times.count == summary.framesWritten && zip(times, times.dropFirst()).allSatisfy { $0 < $1 })
        let longest = zip(times, times.dropFirst()).map { $1 - $0 }.max() ?? 0
        #expect(longest > 1.5 / 30, "no gap in time: the longest step is \(longest) s")
        // Spread over the capture time, not packed one frame interval apart: the file lasts from
        // its first frame's capture to its last one's, plus a frame (the camera's own times, as
        // the app got them: a loaded machine stretches the virtual camera's intervals).
        let interval = 1.0 / 30
        let captured = counter.captureTimes
        let first = try #require(captured[UInt64(range.lowerBound)], "the app did not get frame \(range.lowerBound)")
        let last = try #require(captured[UInt64(range.upperBound)], "the app did not get frame \(range.upperBound)")
        let span = Double(last - first) / 1e9 + interval
        #expect(
            abs(summary.duration.seconds - span) < 2 * interval,
            "duration \(summary.duration) for camera frames \(range) captured over \(span) s")
        #expect(abs(probe.duration - summary.duration.seconds) < 0.002, "ffprobe \(probe.duration) s, recorder \(summary.duration)")
    }

    /// MJPEG passed through into Matroska written to a pipe whose reader stops for 2 s (a slow
    /// destination: a network filesystem, a pipe into another program): the recorder's queue
    /// blocks in the write, yet an app output taking the same JPEGs gets every one; the recorder
    /// keeps about a second of frames in its own storage and loses the rest alone, as late.
    @Test func mjpegRecorderBlockedOnItsDestinationCostsOthersNothing() throws {
        let rig = try RecordingRig("slow mjpeg", .init(.mjpeg, width: 320, height: 240, frameRates: [30]))
        defer { rig.stop() }
        let folder = try TempFolder("slow-mjpeg")
        defer { folder.remove() }
        let app = CaptureVideoDataOutput()
        app.alwaysDiscardsLateVideoFrames = false
        app.videoSettings = .init(jpeg: .init(quality: 85))
        let counter = Counter()
        app.setSampleBufferDelegate(counter, queue: DispatchQueue(label: "test.slow-mjpeg.app"))
        rig.session.addOutput(app)
        let movie = CaptureMovieFileOutput()
        rig.session.addOutput(movie)
        movie.setOutputSettings(.init(codec: .mjpeg), for: nil)
        movie.maxRecordedDuration = .seconds(3)
        let pipe = folder.file("pipe.mkv")
        guard mkfifo(pipe.path, 0o600) == 0 else { throw TestFailure("mkfifo failed: \(errno)") }
        // The reader: opens the pipe, reads a little, stops for 2 s, then reads to the end.
        let copy = folder.file("copy.mkv")
        let reader = Thread {
            guard let input = FileHandle(forReadingAtPath: pipe.path) else { return }
            _ = FileManager.default.createFile(atPath: copy.path, contents: nil)
            guard let output = FileHandle(forWritingAtPath: copy.path) else { return }
            let start = Date()
            var paused = false
            while true {
                if !paused, Date().timeIntervalSince(start) > 0.3 {
                    paused = true
                    Thread.sleep(forTimeInterval: 2)
                }
                let chunk = input.readData(ofLength: 65536)
                if chunk.isEmpty { break }
                output.write(chunk)
            }
            try? output.close()
            try? input.close()
        }
        reader.start()
        try rig.session.start()
        let events = RecordingEvents()
        movie.startRecording(to: pipe, recordingDelegate: events)
        #expect(events.waitForFinish(), "the recording never finished")
        rig.session.stopRunning()
        let summary = try #require(movie.lastRecording)
        #expect(summary.error?.code == .maximumDurationReached, "\(String(describing: summary.error))")
        while reader.isExecuting || !reader.isFinished { Thread.sleep(forTimeInterval: 0.01) }

        let appDrops = Self.expectOthersLostNothing(to: movie, app: app, counter: counter, atLeast: 60)
        let late = summary.framesDropped[.frameWasLate] ?? 0
        #expect(late > 0, "the recorder was never behind by more than its storage: \(summary)")
        #expect(
            summary.framesDropped[.outOfBuffers] ?? 0 <= appDrops[.outOfBuffers] ?? 0, "recorder \(summary.framesDropped), app \(appDrops)")
        let range = try #require(summary.sequenceRange)
        let dropped = summary.framesDropped.values.reduce(0, +)
        #expect(summary.framesWritten + dropped >= range.count, "\(summary.framesWritten) written + \(dropped) dropped of \(range.count)")
        #expect(summary.framesWritten + dropped <= range.count + 30)

        let probe = try Probe(copy)
        #expect(probe.codec == "mjpeg" && probe.frames == summary.framesWritten, "\(probe), \(summary.framesWritten) written")
        let times = try packetTimes(copy)
        #expect(times.count == summary.framesWritten && zip(times, times.dropFirst()).allSatisfy { $0 < $1 })
        let longest = zip(times, times.dropFirst()).map { $1 - $0 }.max() ?? 0
        #expect(longest > 0.2, "no gap in time where the recorder lost frames: the longest step is \(longest) s")
    }

    /// The duration limit reached while the encoder is behind, with a microphone: the
    /// microphone's buffers past the limit do not end the recording while frames captured
    /// before it wait for the encoder, so the video reaches the limit too. (Before, the first
    /// audio buffer half a second past the limit ended the recording, and the file's video
    /// stopped where the encoder had got to.)
    @Test func aLimitReachedWhileBehindKeepsTheFramesCapturedBeforeIt() throws {
        // (At this size placebo takes longer per frame than the camera's interval, so the audio
        // passes the limit and its half-second grace long before the video gets there.)
        let rig = try RecordingRig("slow limit", .init(.nv12, width: 1920, height: 1080, frameRates: [30]))
        try rig.addMicrophone()
        defer { rig.stop() }
        let folder = try TempFolder("slow-limit")
        defer { folder.remove() }
        let movie = Self.placeboMovie(in: rig)
        movie.maxRecordedDuration = .milliseconds(600)
        try rig.session.start()
        let url = folder.file("limit.mp4")
        let events = RecordingEvents()
        let started = Date()
        movie.startRecording(to: url, recordingDelegate: events)
        #expect(events.waitForFinish(timeout: 60), "the recording never finished")
        let took = Date().timeIntervalSince(started)
        rig.session.stopRunning()
        let summary = try #require(movie.lastRecording)
        #expect(summary.error?.code == .maximumDurationReached, "\(String(describing: summary.error))")
        let interval = 1.0 / 30
        let audio = try #require(summary.audioDuration, "no audio: \(summary)").seconds
        // Frames lost (and counted) just before the limit shorten the video by their time: the
        // written and the lost together reach it.
        let lost = Double(summary.framesDropped.values.reduce(0, +)) * interval
        #expect(
            summary.duration.seconds + lost >= 0.6 - 2 * interval,
            "video \(summary.duration) and \(lost) s lost of a 0.6 s limit (\(took) s): \(summary)")
        #expect(summary.duration.seconds <= 0.6 + interval / 2, "\(summary.duration)")
        #expect(
            audio >= min(summary.duration.seconds, 0.6) - 2 * interval && audio <= 0.6 + 0.05,
            "audio \(audio) s, video \(summary.duration)")
        let probe = try Probe(url)
        #expect(probe.frames == summary.framesWritten, "ffprobe \(probe.frames), written \(summary.framesWritten)")
        print("slow limit: video \(summary.duration), audio \(audio) s, \(summary.framesWritten) frames, took \(took) s")
    }

    /// `stopRecording()` while the recorder is behind ends the recording at the stop: the frames
    /// captured before it that the recorder still holds are written, the ones after it are not
    /// waited for. (Before, the stop waited behind a backlog that a slow encoder never emptied:
    /// with the camera running it never finished.)
    @Test func aStopWhileBehindEndsTheRecordingAtTheStop() throws {
        let rig = try RecordingRig("slow stop", .init(.nv12, width: 1920, height: 1080, frameRates: [30]))
        defer { rig.stop() }
        let folder = try TempFolder("slow-stop")
        defer { folder.remove() }
        let movie = Self.placeboMovie(in: rig)
        try rig.session.start()
        let url = folder.file("stopped.mp4")
        let events = RecordingEvents()
        let asked = CaptureTime.now()
        movie.startRecording(to: url, recordingDelegate: events)
        Thread.sleep(forTimeInterval: 1.5)
        let stopped = CaptureTime.now()
        movie.stopRecording()
        // The camera keeps running meanwhile.
        #expect(events.waitForFinish(timeout: 60), "the recording did not finish while the camera ran")
        rig.session.stopRunning()
        let summary = try #require(movie.lastRecording)
        #expect(summary.error == nil, "\(String(describing: summary.error))")
        // Nothing captured after the stop is in it (the recording starts at or after `asked`).
        let span = Double(stopped - asked) / 1e9
        #expect(summary.duration <= .seconds(span + 1.0 / 30), "\(summary.duration) recorded for a stop \(span) s after the start")
        #expect(summary.framesWritten > 0)
        let probe = try Probe(url)
        #expect(probe.frames == summary.framesWritten, "ffprobe \(probe.frames), written \(summary.framesWritten)")
    }

    /// Notes each frame's sequence number and capture time.
    final class Stamps: CaptureVideoDataOutputSampleBufferDelegate, @unchecked Sendable {
        private let lock = NSLock()
        private var seen: [(seq: UInt64, at: CaptureTime)] = []
        func captureOutput(_ output: CaptureOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection) {
            let f = (sampleBuffer.sequenceNumber, sampleBuffer.presentationTimeStamp)
            lock.withLock { seen.append(f) }
        }
        var frames: [(seq: UInt64, at: CaptureTime)] { lock.withLock { seen } }
    }

    /// `stopRecording()` while frames wait for a slow encoder, with a microphone: every frame
    /// captured before the stop is written (or counted lost), none captured after it, and the
    /// video reaches the stop as the audio does. (Before, the stop finished the file from its own
    /// turn of the recording queue and cut off the frames still waiting: 0.41 s of video against
    /// 0.92 s of audio.)
    @Test func aStopWhileBehindWritesEveryFrameCapturedBeforeIt() throws {
        let rig = try RecordingRig("slow stop av", .init(.nv12, width: 1920, height: 1080, frameRates: [30]))
        try rig.addMicrophone()
        defer { rig.stop() }
        let folder = try TempFolder("slow-stop-av")
        defer { folder.remove() }
        // Which frames the camera captured when: an app output that gets every one it delivers.
        let app = CaptureVideoDataOutput()
        app.alwaysDiscardsLateVideoFrames = false
        let stamps = Stamps()
        app.setSampleBufferDelegate(stamps, queue: DispatchQueue(label: "test.slow-stop.app"))
        rig.session.addOutput(app)
        let movie = Self.placeboMovie(in: rig)
        try rig.session.start()
        let url = folder.file("stopped-av.mp4")
        let events = RecordingEvents()
        movie.startRecording(to: url, recordingDelegate: events)
        #expect(events.waitForStart(), "the recording never started")
        // Stop once frames wait for the encoder (a deadline for hangs only).
        let end = Date().addingTimeInterval(90)
        while movie.framesWaiting < 10, Date() < end { Thread.sleep(forTimeInterval: 0.005) }
        let backlog = movie.framesWaiting
        let before = CaptureTime.now()
        movie.stopRecording()
        let after = CaptureTime.now()
        #expect(backlog >= 10, "x264 placebo kept up at 1920x1080 (no backlog at the stop)")
        #expect(events.waitForFinish(timeout: 120), "the recording never finished")
        rig.session.stopRunning()
        let summary = try #require(movie.lastRecording)
        #expect(summary.error == nil, "\(String(describing: summary.error))")
        let range = try #require(summary.sequenceRange, "\(summary)")
        let seen = stamps.frames
        func at(_ seq: UInt64) -> CaptureTime? { seen.first { $0.seq == seq }?.at }
        let first = try #require(at(range.lowerBound), "the app did not get the recording's first frame")
        let lastWritten = try #require(at(range.upperBound), "the app did not get the recording's last frame")
        // The last frame captured before the stop, and the first after it.
        let a = try #require(seen.last { !(before < $0.at) }).seq
        let b = try #require(seen.first { after < $0.at }, "no frame came after the stop").seq
        let dropped = summary.framesDropped.values.reduce(0, +)
        // Every frame captured before the stop was written or counted lost, once; none after it.
        // (Frames the camera lost between a and b may be from either side of the stop.)
        let accounted = summary.framesWritten + dropped
        #expect(
            accounted >= Int(a - range.lowerBound) + 1 && accounted <= Int(b - range.lowerBound),
            "\(summary.framesWritten) written + \(dropped) dropped for frames \(range.lowerBound)...\(a) before the stop")
        #expect(!(after < lastWritten), "frame \(range.upperBound) was captured after the stop")
        #expect(range.upperBound == a || dropped > 0, "the file ends at frame \(range.upperBound), \(a) was the last before the stop")

        // The file: its video runs to the last frame before the stop, its audio to the stop.
        let interval = 1.0 / 30
        let times = try packetTimes(url)
        #expect(times.count == summary.framesWritten, "ffprobe listed \(times.count) packets, \(summary.framesWritten) written")
        let lastVideo = times.max() ?? 0
        #expect(abs(lastVideo - Double(lastWritten - first) / 1e9) < 0.002, "last packet at \(lastVideo) s")
        let stop = Double(before - first) / 1e9
        let audio = try #require(summary.audioDuration, "no audio: \(summary)").seconds
        // (Audio is written to the end of the buffer the stop falls in.)
        #expect(audio >= stop - 0.002 && audio <= Double(after - first) / 1e9 + 0.1, "audio \(audio) s for a stop at \(stop) s")
        // (The camera's own gap around the stop, when a loaded machine made one, is no loss.)
        let gap = Double((at(b) ?? after) - (at(a) ?? first)) / 1e9
        #expect(
            abs(audio - summary.duration.seconds) <= 2 * interval + Swift.max(0, gap - interval),
            "video \(summary.duration), audio \(audio) s, stop at \(stop) s")
        print(
            "slow stop: backlog \(backlog) at the stop (\(stop) s), video to \(lastVideo) s (\(summary.duration)), audio \(audio) s, "
                + "\(summary.framesWritten) written + \(dropped) dropped, frames \(range) of \(range.lowerBound)...\(a) before the stop")
    }

    /// A stop while behind whose camera then stalls (no frame comes after the stop): the frames
    /// captured before it are still written, and the recording ends (the stall is not waited
    /// out: nothing after the stop is needed once the backlog is written).
    @Test func aStopWhileBehindWithTheCameraStalledEnds() throws {
        let rig = try RecordingRig("slow stop stall", .init(.nv12, width: 1920, height: 1080, frameRates: [30]))
        try rig.addMicrophone()
        defer { rig.stop() }
        let folder = try TempFolder("slow-stop-stall")
        defer { folder.remove() }
        let app = CaptureVideoDataOutput()
        app.alwaysDiscardsLateVideoFrames = false
        let stamps = Stamps()
        app.setSampleBufferDelegate(stamps, queue: DispatchQueue(label: "test.slow-stop-stall.app"))
        rig.session.addOutput(app)
        let movie = Self.placeboMovie(in: rig)
        try rig.session.start()
        let url = folder.file("stalled.mp4")
        let events = RecordingEvents()
        movie.startRecording(to: url, recordingDelegate: events)
        #expect(events.waitForStart(), "the recording never started")
        let end = Date().addingTimeInterval(90)
        while movie.framesWaiting < 5, Date() < end { Thread.sleep(forTimeInterval: 0.005) }
        rig.camera.stall(for: nil)
        movie.stopRecording()
        #expect(events.waitForFinish(timeout: 120), "the recording never finished with the camera stalled")
        let summary = try #require(movie.lastRecording)
        #expect(summary.error == nil, "\(String(describing: summary.error))")
        rig.camera.resume()
        rig.session.stopRunning()
        // Every frame the camera made (all before the stop) was written or counted lost.
        let range = try #require(summary.sequenceRange, "\(summary)")
        let last = try #require(stamps.frames.last).seq
        let dropped = summary.framesDropped.values.reduce(0, +)
        #expect(
            summary.framesWritten + dropped == Int(last - range.lowerBound) + 1,
            "\(summary.framesWritten) written + \(dropped) dropped of frames \(range.lowerBound)...\(last)")
        print("slow stop, stalled: \(summary.framesWritten) written + \(dropped) dropped of \(range.lowerBound)...\(last)")
    }
}
