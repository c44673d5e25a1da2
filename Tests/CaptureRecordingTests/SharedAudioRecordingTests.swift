import Capture
@testable import CaptureRecording
import CaptureTestSupport
import Foundation
import Testing

/// Movie outputs with the same audio settings share the session's one encode of each
/// microphone buffer; each file's audio decodes and lasts as long as its video, within a packet.
@Suite struct SharedAudioRecordingTests {
    @Test func twoRecordingsWithTheSameAudioEncodeEachBufferOnce() throws {
        let rig = try RecordingRig("shared audio", .init(.nv12, width: 320, height: 240, frameRates: [30]))
        try rig.addMicrophone()
        defer { rig.stop() }
        let folder = try TempFolder("shared-audio")
        defer { folder.remove() }
        let movies = (0..<2).map { _ in CaptureMovieFileOutput() }
        for m in movies {
            rig.session.addOutput(m)
            m.maxRecordedDuration = .seconds(2)
        }
        try rig.session.start()
        let urls = [folder.file("a.mp4"), folder.file("b.mkv")]
        let events = movies.indices.map { _ in RecordingEvents() }
        let handedBefore = rig.session.audioBuffersHanded
        for (i, m) in movies.enumerated() { m.startRecording(to: urls[i], recordingDelegate: events[i]) }
        for e in events { #expect(e.waitForFinish(timeout: 60), "a recording never finished") }
        let encodes = rig.session.audioStageEncodes
        let handed = rig.session.audioBuffersHanded - handedBefore
        let summaries = try movies.map { try #require($0.lastRecording) }
        let packet = 1024.0 / 48_000
        for (s, url) in zip(summaries, urls) {
            #expect(s.error?.code == .maximumDurationReached, "\(s)")
            let audio = try #require(s.audioDuration, "no audio in \(url.lastPathComponent)").seconds
            #expect(abs(audio - s.duration.seconds) <= packet, "audio \(audio) s, video \(s.duration)")
            // Every packet decodes, and the stream lasts as long as the video (within a packet).
            let decode = try runProcess("/usr/bin/ffmpeg", ["-v", "error", "-i", url.path, "-map", "0:a", "-f", "null", "-"])
            #expect(decode.status == 0 && decode.stderr.isEmpty, "\(url.lastPathComponent): \(decode.stderr)")
            let a = try packetSpan(url, stream: "a:0"), v = try packetSpan(url, stream: "v:0")
            #expect(abs(a.end - v.end) <= packet + 0.002, "\(url.lastPathComponent): audio ends at \(a.end) s, video at \(v.end) s")
        }
        // One encode per microphone buffer while they recorded: an encoder per recording
        // would have made one per buffer for each.
        let recorded = summaries.compactMap { $0.audioDuration?.seconds }.max() ?? 0
        #expect(encodes <= handed, "\(encodes) encodes for \(handed) buffers handed on")
        #expect(Double(encodes) >= recorded * 48_000 / 1024 * 0.9, "\(encodes) encodes for \(recorded) s of audio")
    }
}
