import Capture
import CaptureRecording
import CaptureTestSupport
import Foundation
import Testing

/// A cleanly stopped MP4 read by readers that do not walk every fragment: GStreamer and
/// AtomicParsley (Chromium: Tests/browser/movie_check.py) see its whole duration.
@Suite struct MP4ReaderTests {
    /// gst-discoverer-1.0's "Duration: H:MM:SS.fraction", in seconds.
    private func gstreamerDuration(_ url: URL) throws -> Double {
        let r = try runProcess("/usr/bin/gst-discoverer-1.0", [url.path])
        guard r.status == 0, let line = r.text.split(separator: "\n").first(where: { $0.contains("Duration:") }) else {
            throw TestFailure("gst-discoverer-1.0 cannot read \(url.path): \(r.status) \(r.text) \(r.stderr)")
        }
        let parts = line.split(separator: " ").last.map { $0.split(separator: ":").compactMap { Double($0) } } ?? []
        guard parts.count == 3 else { throw TestFailure("no duration in '\(line)'") }
        return parts[0] * 3600 + parts[1] * 60 + parts[2]
    }

    /// With and without a microphone: GStreamer's duration is within 0.1 s of ffprobe's (it was
    /// the last keyframe's before), and AtomicParsley takes the file (it refused `iso5`).
    @Test(arguments: [false, true])
    func readersSeeTheWholeDuration(withAudio: Bool) throws {
        let rig = try RecordingRig("readers", .init(.nv12, width: 320, height: 240, frameRates: [30]))
        defer { rig.stop() }
        if withAudio { try rig.addMicrophone() }
        let folder = try TempFolder("readers")
        defer { folder.remove() }
        let movie = CaptureMovieFileOutput()
        rig.session.addOutput(movie)
        try rig.session.start()
        movie.maxRecordedDuration = .milliseconds(2500)
        let url = folder.file("whole.mp4")
        let events = RecordingEvents()
        movie.startRecording(to: url, recordingDelegate: events)
        #expect(events.waitForFinish())
        #expect((events.finishError ?? nil)?.code == .maximumDurationReached, "\(events.events)")
        let probe = try Probe(url)
        #expect(probe.duration > 2.3, "\(probe)")
        let gst = try gstreamerDuration(url)
        #expect(abs(gst - probe.duration) < 0.1, "GStreamer \(gst) s, ffprobe \(probe.duration) s")
        let ap = try runProcess("/usr/bin/AtomicParsley", [url.path, "-T", "1"])
        #expect(ap.status == 0 && ap.text.contains("moov") && !(ap.text + ap.stderr).contains("unsupported"), "\(ap.text) \(ap.stderr)")
    }
}
