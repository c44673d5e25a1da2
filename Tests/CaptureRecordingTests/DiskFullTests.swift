import Capture
import CaptureRecording
import CaptureTestSupport
import Foundation
import Testing

/// A recording onto a small tmpfs that fills up: the disk-full error reaches the delegate, and
/// the file, closed, is readable up to its last complete fragment.
@Suite struct DiskFullTests {
    /// A tmpfs of `bytes` mounted on a fresh folder (the tests run as root, as in CI); unmounted by `remove`.
    struct SmallDisk {
        let folder: TempFolder
        init(bytes: Int) throws {
            folder = try TempFolder("tmpfs")
            let r = try runProcess("/usr/bin/mount", ["-t", "tmpfs", "-o", "size=\(bytes)", "tmpfs", folder.url.path])
            guard r.status == 0 else {
                folder.remove()
                throw TestFailure("cannot mount a tmpfs (status \(r.status): \(r.stderr)): the recording tests need root, as CI runs them")
            }
        }
        func remove() {
            _ = try? runProcess("/usr/bin/umount", [folder.url.path])
            folder.remove()
        }
    }

    @Test(arguments: ["mp4", "mkv"])
    func aDiskThatFillsUpEndsWithDiskFullAndAReadableFile(_ ext: String) throws {
        let rig = try RecordingRig("tmpfs \(ext)", .init(.nv12, width: 320, height: 240, frameRates: [30]))
        defer { rig.stop() }
        let disk = try SmallDisk(bytes: 512 << 10)
        defer { disk.remove() }
        let movie = CaptureMovieFileOutput()
        rig.session.addOutput(movie)
        // JPEG at quality 100 (the session's encoder): half a megabyte in about a second.
        movie.setOutputSettings(.init(codec: .mjpeg, jpegQuality: 100), for: nil)
        movie.movieFragmentInterval = .milliseconds(200)
        movie.maxRecordedDuration = .seconds(60)
        try rig.session.start()
        let url = disk.folder.file("full.\(ext)")
        let events = RecordingEvents()
        movie.startRecording(to: url, recordingDelegate: events)
        #expect(events.waitForFinish())
        let error = try #require(events.finishError ?? nil, "the recording ended without an error")
        #expect(error.code == .diskFull && !error.recordingSuccessfullyFinished, "\(error)")
        #expect(!movie.isRecording)
        let summary = try #require(movie.lastRecording)
        #expect(summary.error?.code == .diskFull && summary.framesWritten > 0)
        // Closed (no descriptor of ours on it: it unmounts after the test) and readable up to
        // its last complete fragment: frames and a duration, fewer than were written.
        let probe = try Probe(url)
        #expect(probe.codec == "mjpeg" && probe.width == 320 && probe.height == 240, "\(probe)")
        let times = try packetTimes(url)
        #expect(
            probe.frames >= 3 && probe.frames <= summary.framesWritten, "ffprobe read \(probe.frames) of \(summary.framesWritten) written")
        #expect(times.count >= probe.frames && times.count <= summary.framesWritten, "\(times.count) packets")
        #expect(zip(times, times.dropFirst()).allSatisfy { $0 < $1 } && (times.last ?? 0) >= 0.1, "packets to \(times.last ?? -1) s")
        let open = try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").filter {
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\($0)")) == url.path
        }
        #expect(open.isEmpty, "the file is still open")
    }
}
