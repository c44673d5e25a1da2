import Capture
import CaptureRecording
import CaptureTestSupport
import Foundation
import Testing

/// The first and end times of a stream's packets (the end: the last packet's time plus its
/// duration), in seconds, as ffprobe reads them.
func packetSpan(_ url: URL, stream: String) throws -> (first: Double, end: Double, count: Int) {
    let r = try runProcess(
        "/usr/bin/ffprobe",
        [
            "-v", "error", "-select_streams", stream, "-show_entries", "packet=pts_time,duration_time",
            "-of", "csv=p=0", url.path,
        ])
    guard r.status == 0 else { throw TestFailure("ffprobe cannot list the packets of \(url.path): \(r.stderr)") }
    let rows = r.text.split(separator: "\n").map { $0.split(separator: ",").compactMap { Double($0) } }
        .filter { $0.count == 2 }
    guard let first = rows.first, let last = rows.last else { throw TestFailure("no \(stream) packets in \(url.path)") }
    return (first[0], last[0] + last[1], rows.count)
}

/// Audio codecs in Matroska: AAC, Opus and PCM beside the video, starting and ending with it
/// (within one video frame); MP4 takes AAC only, and says so.
@Suite struct AudioCodecTests {
    @Test(arguments: [AudioCodec.aac, .opus, .pcm])
    func eachCodecInMatroska(_ codec: AudioCodec) throws {
        let rig = try RecordingRig("audio codec \(codec)", .init(.nv12, width: 320, height: 240, frameRates: [30]))
        try rig.addMicrophone()
        defer { rig.stop() }
        let folder = try TempFolder("audio-codec")
        defer { folder.remove() }
        let movie = CaptureMovieFileOutput()
        rig.session.addOutput(movie)
        movie.setOutputSettings(.init(audioCodec: codec), for: nil)
        movie.maxRecordedDuration = .seconds(2)
        try rig.session.start()
        let url = folder.file("av.mkv")
        let events = RecordingEvents()
        movie.startRecording(to: url, recordingDelegate: events)
        #expect(events.waitForFinish())
        #expect((events.finishError ?? nil)?.code == .maximumDurationReached, "\(String(describing: events.finishError))")
        let summary = try #require(movie.lastRecording)
        let streams = try streamTimes(url)
        let a = try #require(streams["audio"], "no audio stream: \(streams)")
        let names: [AudioCodec: String] = [.aac: "aac", .opus: "opus", .pcm: "pcm_s16le"]
        #expect(a.codec == names[codec] && streams["video"]?.codec == "h264", "\(streams)")
        let frame = 1.0 / 30
        let video = try packetSpan(url, stream: "v:0"), audio = try packetSpan(url, stream: "a:0")
        #expect(video.count == summary.framesWritten)
        #expect(abs(audio.first - video.first) <= frame, "start: audio \(audio.first) s, video \(video.first) s")
        #expect(abs(audio.end - video.end) <= frame, "end: audio \(audio.end) s, video \(video.end) s")
        let recorded = try #require(summary.audioDuration)
        #expect(abs(recorded.seconds - summary.duration.seconds) <= frame, "audio \(recorded), video \(summary.duration)")
    }

    /// `capture record --audio virtual --audio-codec opus|pcm` into MKV: the stream ffprobe finds.
    @Test(arguments: [("opus", "opus"), ("pcm", "pcm_s16le")])
    func theToolRecordsTheCodecAsked(_ c: (flag: String, name: String)) throws {
        let folder = try TempFolder("tool-audio-codec")
        defer { folder.remove() }
        let url = folder.file("av.mkv")
        let r = try runProcess(
            try builtTool().path,
            [
                "record", "--device", "virtual", "--audio", "virtual", "--size", "320x240",
                "--audio-codec", c.flag, "--seconds", "1", url.path,
            ])
        #expect(r.status == 0, "\(r.stderr)")
        let streams = try streamTimes(url)
        #expect(streams["audio"]?.codec == c.name && streams["video"]?.codec == "h264", "\(streams)")
    }

    /// Opus or PCM asked of an MP4 ends the recording at its start with `.unsupportedCodec`
    /// and no file; AAC records.
    @Test func mp4TakesAACOnly() throws {
        let rig = try RecordingRig("audio codec mp4", .init(.nv12, width: 320, height: 240, frameRates: [30]))
        try rig.addMicrophone()
        defer { rig.stop() }
        let folder = try TempFolder("audio-codec-mp4")
        defer { folder.remove() }
        let movie = CaptureMovieFileOutput()
        rig.session.addOutput(movie)
        try rig.session.start()
        for codec in [AudioCodec.opus, .pcm] {
            movie.setOutputSettings(.init(audioCodec: codec), for: nil)
            let url = folder.file("\(codec).mp4")
            let events = RecordingEvents()
            movie.startRecording(to: url, recordingDelegate: events)
            #expect(events.waitForFinish())
            let error = try #require(events.finishError ?? nil)
            #expect(error.code == .unsupportedCodec && error.message.contains("mkv"), "\(error)")
            #expect(!FileManager.default.fileExists(atPath: url.path))
        }
    }
}
