import Capture
import CaptureRecording
import CaptureTestSupport
import Foundation
import Testing

/// The recorder where it used to crash, hang or lose a recording: a camera switched mid-recording,
/// a FIFO nobody reads, an owner that lets go, a recording with no frame.
@Suite struct RecorderFaultTests {
    /// Waits (a deadline for hangs only) until `condition` holds.
    private func wait(_ seconds: Double = 60, _ condition: () -> Bool) -> Bool {
        let end = Date().addingTimeInterval(seconds)
        while !condition(), Date() < end { Thread.sleep(forTimeInterval: 0.01) }
        return condition()
    }

    /// A camera switch (begin, remove, add, commit) after the first camera ran a while: the new
    /// camera numbers its frames from 0 again. The recording goes on into one file, the summary
    /// has a run of sequence numbers per camera (and no single range), and its frame count is
    /// ffprobe's.
    @Test func aCameraSwitchAfterAWarmUpKeepsRecording() throws {
        let mode = VirtualCamera.Mode(.nv12, width: 320, height: 240, frameRates: [30])
        let rig = try RecordingRig("switch", mode)
        defer { rig.stop() }
        let other = VirtualCamera(name: "Recording switch B \(UUID().uuidString.prefix(8))", position: .front, formats: [mode])
        VirtualCamera.install(other)
        defer { VirtualCamera.uninstall(other) }
        let folder = try TempFolder("switch")
        defer { folder.remove() }
        let movie = CaptureMovieFileOutput()
        rig.session.addOutput(movie)
        try rig.session.start()
        // The warm-up: the first camera's numbers pass where the second's will start.
        Thread.sleep(forTimeInterval: 1)
        let url = folder.file("switch.mp4")
        let events = RecordingEvents()
        movie.startRecording(to: url, recordingDelegate: events)
        #expect(wait { movie.recordedFrameCount >= 15 }, "\(movie.recordedFrameCount) frames before the switch")
        let before = movie.recordedFrameCount
        let first = try #require(rig.session.inputs.first)
        rig.session.beginConfiguration()
        rig.session.removeInput(first)
        rig.session.addInput(try CaptureDeviceInput(device: try #require(CaptureDevice.device(withUniqueID: other.uniqueID))))
        _ = rig.session.commitConfiguration()
        #expect(wait { movie.recordedFrameCount >= before + 15 }, "\(movie.recordedFrameCount) frames after the switch")
        movie.stopRecording()
        #expect(events.waitForFinish(), "the recording never finished")
        #expect(events.finishError == .some(nil), "\(events.events)")
        let summary = try #require(movie.lastRecording)
        let runs = summary.sequenceRuns
        #expect(runs.count == 2 && summary.sequenceRange == nil, "\(runs)")
        if runs.count == 2 {
            #expect(runs[1].lowerBound < runs[0].upperBound, "the second camera's numbers did not start lower: \(runs)")
        }
        let inRuns = runs.reduce(0) { $0 + $1.count }
        let dropped = summary.framesDropped.values.reduce(0, +)
        #expect(summary.framesWritten <= inRuns && summary.framesWritten + dropped >= inRuns, "\(summary)")
        let probe = try Probe(url)
        #expect(probe.frames == summary.framesWritten, "ffprobe \(probe.frames), summary \(summary.framesWritten)")
    }

    /// A FIFO nobody opens for reading: the first write waits for a reader, yet a stop ends the
    /// recording within its grace (bound here for a loaded machine) with `.cannotWriteFile`, and
    /// the FIFO stays as it was.
    @Test func aFIFOWithNoReaderDoesNotHoldTheStop() throws {
        let rig = try RecordingRig("fifo", .init(.nv12, width: 320, height: 240, frameRates: [30]))
        defer { rig.stop() }
        let folder = try TempFolder("fifo")
        defer { folder.remove() }
        let fifo = folder.file("f.mp4")
        guard mkfifo(fifo.path, 0o600) == 0 else { throw TestFailure("mkfifo failed: \(errno)") }
        let movie = CaptureMovieFileOutput()
        rig.session.addOutput(movie)
        try rig.session.start()
        let events = RecordingEvents()
        movie.startRecording(to: fifo, recordingDelegate: events)
        Thread.sleep(forTimeInterval: 0.5)
        let stop = Date()
        movie.stopRecording()
        #expect(events.waitForFinish(timeout: 30), "the stop never finished the recording")
        let took = Date().timeIntervalSince(stop)
        #expect(took < 10, "the stop took \(took) s")
        let error = try #require(events.finishError ?? nil)
        #expect(error.code == .cannotWriteFile && error.message.contains("reader"), "\(error)")
        var st = stat()
        #expect(lstat(fifo.path, &st) == 0 && (st.st_mode & S_IFMT) == S_IFIFO, "the FIFO is gone or replaced")
        // The output records again at once, to a file.
        let url = folder.file("after.mkv")
        movie.maxRecordedDuration = .milliseconds(500)
        let again = RecordingEvents()
        movie.startRecording(to: url, recordingDelegate: again)
        #expect(again.waitForFinish())
        #expect((again.finishError ?? nil)?.code == .maximumDurationReached, "\(again.events)")
    }

    /// A FIFO whose reader opened it and stopped reading: once the pipe is full the recorder's
    /// writes wait, and a stop gives them up the same way, naming the stalled reader.
    @Test func aFIFOWhoseReaderStallsDoesNotHoldTheStop() throws {
        let rig = try RecordingRig("fifo stall", .init(.mjpeg, width: 320, height: 240, frameRates: [30]))
        defer { rig.stop() }
        let folder = try TempFolder("fifo-stall")
        defer { folder.remove() }
        let fifo = folder.file("f.mkv")
        guard mkfifo(fifo.path, 0o600) == 0 else { throw TestFailure("mkfifo failed: \(errno)") }
        // The reader: opens the pipe and never reads.
        let reader = open(fifo.path, O_RDONLY | O_NONBLOCK)
        guard reader >= 0 else { throw TestFailure("cannot open the FIFO for reading: \(errno)") }
        defer { close(reader) }
        let movie = CaptureMovieFileOutput()
        movie.setOutputSettings(.init(codec: .mjpeg), for: nil)
        rig.session.addOutput(movie)
        try rig.session.start()
        let events = RecordingEvents()
        movie.startRecording(to: fifo, recordingDelegate: events)
        // Until the pipe (64 kB) is full: the frames written stop growing.
        #expect(wait { movie.recordedFrameCount >= 5 })
        var last = -1
        #expect(
            wait {
                Thread.sleep(forTimeInterval: 0.3)
                defer { last = movie.recordedFrameCount }
                return movie.recordedFrameCount == last
            }, "the recorder never stalled")
        let stop = Date()
        movie.stopRecording()
        #expect(events.waitForFinish(timeout: 30), "the stop never finished the recording")
        let took = Date().timeIntervalSince(stop)
        #expect(took < 10, "the stop took \(took) s")
        let error = try #require(events.finishError ?? nil)
        #expect(error.code == .cannotWriteFile && error.message.contains("stopped reading"), "\(error)")
        // A pipe's size is the bytes that went through it (the pipe's buffer, at least a page).
        let size = movie.lastRecording?.fileSize ?? 0
        #expect(size >= 4096, "\(size) bytes")
    }

    /// `capture record` into a FIFO with no reader: SIGTERM and SIGINT each end it within
    /// seconds, with a non-zero status and one line naming the cause; the FIFO stays.
    @Test(arguments: [SIGTERM, SIGINT])
    func theToolIntoAFIFOWithNoReaderEndsOnASignal(_ sig: Int32) throws {
        let folder = try TempFolder("tool-fifo")
        defer { folder.remove() }
        let fifo = folder.file("f.mp4")
        guard mkfifo(fifo.path, 0o600) == 0 else { throw TestFailure("mkfifo failed: \(errno)") }
        let p = try RunningProcess(["record", "--device", "virtual", "--size", "320x240", "--seconds", "60", fifo.path])
        #expect(p.waitUntilHandles(sig), "the tool never took \(sig): \(p.stderr)")
        // (Its recording meanwhile waits for the FIFO's reader.)
        Thread.sleep(forTimeInterval: 1.5)
        #expect(p.process.isRunning, "\(p.stderr)")
        let sent = Date()
        p.signal(sig)
        let status = p.exitStatus(timeout: 20)
        let took = Date().timeIntervalSince(sent)
        #expect(status != nil && status != 0, "status \(String(describing: status)) after \(took) s: \(p.stderr)")
        #expect(took < 10, "the signal took \(took) s to end it")
        let lines = p.stderr.split(separator: "\n")
        #expect(lines.count == 1 && lines[0].contains("reader"), "\(p.stderr)")
        var st = stat()
        #expect(lstat(fifo.path, &st) == 0 && (st.st_mode & S_IFMT) == S_IFIFO)
    }

    /// The app lets go of the session and the movie output while recording: the recording is
    /// finished as a stop (no error) and reported, the file holds what was written, and the
    /// output goes away after its report.
    @Test func lettingGoWhileRecordingFinishesTheRecording() throws {
        let camera = VirtualCamera(
            name: "Recording let go \(UUID().uuidString.prefix(8))", position: .back,
            formats: [.init(.nv12, width: 320, height: 240, frameRates: [30])])
        VirtualCamera.install(camera)
        defer { VirtualCamera.uninstall(camera) }
        let folder = try TempFolder("let-go")
        defer { folder.remove() }
        let url = folder.file("let-go.mp4")
        let events = RecordingEvents()
        weak var released: CaptureMovieFileOutput?
        var written = 0
        do {
            let session = CaptureSession()
            session.addInput(try CaptureDeviceInput(device: try #require(CaptureDevice.device(withUniqueID: camera.uniqueID))))
            let movie = CaptureMovieFileOutput()
            session.addOutput(movie)
            try session.start()
            movie.startRecording(to: url, recordingDelegate: events)
            #expect(wait { movie.recordedFrameCount >= 9 })
            written = movie.recordedFrameCount
            released = movie
        }
        #expect(events.waitForFinish(timeout: 30), "no report after the owner let go: \(events.events)")
        #expect(events.finishError == .some(nil), "\(events.events)")
        let probe = try Probe(url)
        #expect(probe.codec == "h264" && probe.frames >= written, "\(probe), \(written) written before the release")
        #expect(wait(10) { released == nil }, "the output outlived its recording")
    }

    /// A duration limit shorter than a frame: no frame is recorded, and that is `.noDataCaptured`
    /// with no file left (the same as a stop before the first frame).
    @Test func aRecordingWithNoFrameIsAnError() throws {
        let rig = try RecordingRig("no frame", .init(.nv12, width: 320, height: 240, frameRates: [30]))
        defer { rig.stop() }
        let folder = try TempFolder("no-frame")
        defer { folder.remove() }
        let movie = CaptureMovieFileOutput()
        rig.session.addOutput(movie)
        try rig.session.start()
        movie.maxRecordedDuration = .nanoseconds(1)
        let url = folder.file("none.mp4")
        let events = RecordingEvents()
        movie.startRecording(to: url, recordingDelegate: events)
        #expect(events.waitForFinish())
        let error = try #require(events.finishError ?? nil)
        #expect(error.code == .noDataCaptured && !error.recordingSuccessfullyFinished, "\(error)")
        #expect(!FileManager.default.fileExists(atPath: url.path))

        // The tool: a one-line error and status 1.
        let tool = try RunningProcess(["record", "--device", "virtual", "--size", "320x240", "--seconds", "1e-9", url.path])
        #expect(tool.exitStatus(timeout: 60) == 1, "\(tool.stderr)")
        #expect(tool.stderr.contains("no frame"), "\(tool.stderr)")
        #expect(!FileManager.default.fileExists(atPath: url.path))
    }
}
