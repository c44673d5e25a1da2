import Capture
import CaptureRecording
import CaptureTestSupport
import Foundation
import Testing

/// Capture times of the camera's frames, by sequence number, as an app output saw them.
final class FrameTimes: CaptureVideoDataOutputSampleBufferDelegate, @unchecked Sendable {
    private let lock = NSLock()
    private var times: [UInt64: CaptureTime] = [:]
    private var first: CaptureTime?
    func captureOutput(_ output: CaptureOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection) {
        lock.withLock {
            times[sampleBuffer.sequenceNumber] = sampleBuffer.presentationTimeStamp
            if first == nil { first = sampleBuffer.presentationTimeStamp }
        }
    }
    func time(of sequence: UInt64) -> CaptureTime? { lock.withLock { times[sequence] } }
    var firstTime: CaptureTime? { lock.withLock { first } }
}

/// The flags of a file's video packets ("K" for a keyframe), in file order.
func packetFlags(_ url: URL) throws -> [String] {
    let r = try runProcess(
        "/usr/bin/ffprobe", ["-v", "error", "-select_streams", "v:0", "-show_entries", "packet=flags", "-of", "csv=p=0", url.path])
    guard r.status == 0 else { throw TestFailure("ffprobe cannot list the packets of \(url.path): \(r.stderr)") }
    return r.text.split(separator: "\n").map { String($0) }
}

/// Pre-record: a recording started at t = 5 s with 2 s of pre-record begins with the camera's
/// frame of t = 3 s (or the keyframe before it), and lasts from there to its stop.
@Suite struct PreRecordTests {
    struct Case: Sendable, CustomStringConvertible {
        var camera: PixelFormat
        var codec: VideoCodec
        var ext: String
        var microphone: Bool
        var description: String { "\(codec) .\(ext)\(microphone ? " with audio" : "")" }
    }

    /// The file at `url` begins `past` seconds before its start with a keyframe, the newest at
    /// or before 2 s before the start: 2 s or more before it (less a frame: the camera's clock
    /// and ours), and the file's next keyframe is less than 2 s before it. The start is the
    /// moment `startRecording` takes, somewhere in its call: `past` runs from the file's first
    /// frame to the call's beginning and to its return (under load, milliseconds apart), and each
    /// bound is judged at the end that could make it hold.
    func expectStartsAtTheRightKeyframe(_ url: URL, past: ClosedRange<Double>, label: String) throws {
        let flags = try packetFlags(url), times = try packetTimes(url)
        #expect(flags.first?.hasPrefix("K") == true, "\(label) begins with a keyframe")
        #expect(past.upperBound >= 2 - 1.0 / 30 && past.lowerBound < 4, "\(label) begins \(past) s before the start")
        if let next = zip(flags, times).dropFirst().first(where: { $0.0.hasPrefix("K") })?.1, let t0 = times.first {
            let nextPast = past.lowerBound - (next - t0)
            #expect(nextPast < 2, "\(label)'s second keyframe is \(nextPast) s before the start: it should have begun there")
        }
    }

    @Test(arguments: [
        Case(camera: .nv12, codec: .h264, ext: "mp4", microphone: false),
        Case(camera: .mjpeg, codec: .mjpeg, ext: "mkv", microphone: true),
    ])
    func aRecordingStartsInThePast(_ c: Case) throws {
        let rig = try RecordingRig("pre-record \(c)", .init(c.camera, width: 320, height: 240, frameRates: [30]))
        defer { rig.stop() }
        if c.microphone { try rig.addMicrophone() }
        let folder = try TempFolder("prerecord")
        defer { folder.remove() }
        let times = FrameTimes()
        let app = CaptureVideoDataOutput()
        app.alwaysDiscardsLateVideoFrames = false
        app.setSampleBufferDelegate(times, queue: DispatchQueue(label: "test.frame-times"))
        rig.session.addOutput(app)
        let movie = CaptureMovieFileOutput()
        rig.session.addOutput(movie)
        movie.setOutputSettings(.init(codec: c.codec, rateControl: .quality(28)), for: nil)
        movie.preRecordDuration = .seconds(2)
        #expect(movie.preRecordDuration == .seconds(2))
        try rig.session.start()
        // t = 5 s after the camera's first frame.
        let deadline = Date().addingTimeInterval(20)
        while times.firstTime == nil, Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
        let cameraStart = try #require(times.firstTime, "the camera sent no frame")
        while CaptureTime.now() - cameraStart < 5_000_000_000 { Thread.sleep(forTimeInterval: 0.005) }
        let url = folder.file("out.\(c.ext)")
        let events = RecordingEvents()
        let started = CaptureTime.now()
        movie.startRecording(to: url, recordingDelegate: events)
        let returned = CaptureTime.now()
        Thread.sleep(forTimeInterval: 1.5)
        movie.stopRecording()
        #expect(events.waitForFinish())
        #expect(events.finishError == .some(nil), "\(events.events)")
        let summary = try #require(movie.lastRecording)
        let frame = 1.0 / 30
        // The first frame written is the camera's of 2 s before the start, or of the keyframe
        // before that (H.264: one a second by default, as the fragments).
        let range = try #require(summary.sequenceRange)
        let firstTime = try #require(times.time(of: range.lowerBound))
        let past = Double(started - firstTime) / 1e9
        try expectStartsAtTheRightKeyframe(url, past: past...(Double(returned - firstTime) / 1e9), label: "the file")
        // From there to the stop: its duration is the frames' (first to the end of the last).
        let lastTime = try #require(times.time(of: range.upperBound))
        let span = Double(lastTime - firstTime) / 1e9 + frame
        #expect(abs(summary.duration.seconds - span) < 0.002, "recorder \(summary.duration), frames span \(span) s")
        #expect(summary.duration.seconds >= past + 1.5 - 3 * frame, "\(summary.duration) for \(past) s of past and 1.5 s after")
        let probe = try Probe(url)
        #expect(probe.codec == (c.codec == .h264 ? "h264" : "mjpeg") && probe.width == 320 && probe.height == 240, "\(probe)")
        #expect(probe.frames == summary.framesWritten, "ffprobe read \(probe.frames), the recorder wrote \(summary.framesWritten)")
        #expect(abs(probe.duration - summary.duration.seconds) <= frame, "file \(probe.duration) s, recorder \(summary.duration)")
        let packetTimes = try packetTimes(url)
        // (At 0; in Matroska with AAC, the muxer moves everything by the encoder's priming, 21 ms.)
        #expect(packetTimes.first.map { $0.magnitude < frame } == true, "the first frame is at 0: \(packetTimes.first ?? -1)")
        // Every frame from the first to the last written, or reported dropped.
        let dropped = summary.framesDropped.values.reduce(0, +)
        #expect(summary.framesWritten + dropped >= range.count, "\(summary.framesWritten) written + \(dropped) dropped of \(range.count)")
        if c.microphone {
            // The microphone's audio from the same past: starting and lasting with the video.
            let streams = try streamTimes(url)
            let audio = try #require(streams["audio"], "no audio stream: \(streams)")
            let video = try #require(streams["video"])
            #expect(abs(audio.start - video.start) <= frame, "audio starts at \(audio.start), video at \(video.start)")
            let audioDuration = try #require(summary.audioDuration)
            // The past's audio is all there; at the end, audio still on its way from a loaded
            // machine's microphone at the stop may be missing (the writer pads 100 ms), as in
            // any recording.
            #expect(
                audioDuration.seconds <= summary.duration.seconds + 0.001 && audioDuration.seconds >= summary.duration.seconds - 0.3,
                "audio \(audioDuration), video \(summary.duration); streams \(streams)")
        }
        // Pre-record goes on after a recording: a second one starts in the past too.
        let second = folder.file("second.\(c.ext)")
        let events2 = RecordingEvents()
        Thread.sleep(forTimeInterval: 2.5)
        let started2 = CaptureTime.now()
        movie.startRecording(to: second, recordingDelegate: events2)
        let returned2 = CaptureTime.now()
        Thread.sleep(forTimeInterval: 0.5)
        movie.stopRecording()
        #expect(events2.waitForFinish())
        let summary2 = try #require(movie.lastRecording)
        let first2 = try #require(summary2.sequenceRange.flatMap { times.time(of: $0.lowerBound) })
        let past2 = Double(started2 - first2) / 1e9
        try expectStartsAtTheRightKeyframe(second, past: past2...(Double(returned2 - first2) / 1e9), label: "the second file")
        #expect(try Probe(second).frames == summary2.framesWritten)
    }
}
