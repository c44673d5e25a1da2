import Capture
import CaptureSystem
import Foundation

// The recording's limits: its duration, its file's size, the disk's free space.
extension CaptureMovieFileOutput {
    /// The longest recording; reaching it ends the recording with `.maximumDurationReached`
    /// (`recordingSuccessfullyFinished` true). nil (the default): no limit. Read at the start.
    public var maxRecordedDuration: Duration? {
        get { locked { $0.maxDuration } }
        set { locked { $0.maxDuration = newValue } }
    }

    /// The largest file in bytes; reaching it ends the recording with `.maximumFileSizeReached`.
    /// The size is checked as fragments reach the file, so a file can pass it by up to one
    /// fragment. nil (the default): no limit. Read at the start.
    public var maxRecordedFileSize: Int64? {
        get { locked { $0.maxFileSize } }
        set { locked { $0.maxFileSize = newValue } }
    }

    /// The free space to leave on the destination's file system: once less is free, the
    /// recording ends with `.diskFull` and `recordingSuccessfullyFinished` true (the file is
    /// complete), before the disk fills up. Checked about every 200 ms of media. nil (the
    /// default): no limit. Read at the start.
    public var minFreeDiskSpaceLimit: Int64? {
        get { locked { $0.minFreeDiskSpace } }
        set { locked { $0.minFreeDiskSpace = newValue } }
    }

    /// On the queue, at a recording's start: with a duration limit, a destination still taking
    /// nothing past it is given up as at a stop (the limit is checked on frames, which then
    /// wait for the write).
    func giveUpPastDurationLimit(_ rec: Recording, requested: CaptureTime) {
        guard let max = rec.maxDuration, rec.standby == nil else { return }
        let c = max.components
        let end = Double(c.seconds) + Double(c.attoseconds) / 1e18 - Double(CaptureTime.now() - requested) / 1e9
        rec.writer.destination?.giveUp(after: Swift.max(0, end) + Self.stopGrace, grace: Self.stopGrace)
    }

    /// On the queue, before a frame `at` ns on the recorded time line: finishes the recording
    /// when the frame would end past the duration limit. True when it did.
    /// With audio that has not reached the limit yet, the frame is left out and the recording
    /// ends once the audio reaches it, or stalls (no packet for half a second).
    func finishAtDurationLimit(_ rec: Recording, frameAt at: Int64) -> Bool {
        guard let max = rec.maxDuration, Duration.nanoseconds(at + rec.frameNanoseconds / 2) > max else { return false }
        if rec.videoPastLimit { return true }
        if rec.writer.hasAudio, Duration.nanoseconds(rec.writer.audioQueuedNanoseconds) < max {
            rec.videoPastLimit = true
            watchLimit(generation: rec.generation, max)
            return true
        }
        finish(error: Self.durationReached(max))
        return true
    }

    /// On the queue, while the video waits at the duration limit for the audio.
    private func watchLimit(generation: Int, _ max: Duration) {
        guard let rec = active, rec.generation == generation else { return }
        if Double(CaptureTime.now() - rec.lastAudio) / 1e9 >= Self.stopStall || session?.isRunning != true {
            finish(error: Self.durationReached(max))
            return
        }
        queue.asyncAfter(deadline: .now() + 0.05) { [self] in watchLimit(generation: generation, max) }
    }

    /// On the queue, before a frame: finishes the recording when its file reached the size
    /// limit. True when it did.
    func finishAtFileSizeLimit(_ rec: Recording) -> Bool {
        guard let max = rec.maxFileSize, rec.writer.fileSize >= max else { return false }
        finish(
            error: RecordingError(
                .maximumFileSizeReached, "the recording reached its maximum file size of \(max) bytes",
                recordingSuccessfullyFinished: true))
        return true
    }

    /// On the queue, for audio `at` ns on the recorded time line: true when it is past the
    /// duration limit (and left out). The limit is on the recorded time line (the capture clock
    /// less the pauses): audio past it is left out, and a camera stalled half a second past it
    /// does not let the recording run on (otherwise the video's next frame ends it, so that
    /// frames still on their way are in). Frames captured and waiting for this recorder (a slow
    /// encoder) are not a stall: they are written first.
    func audioPastDurationLimit(_ rec: Recording, at: Int64) -> Bool {
        guard let max = rec.maxDuration, Duration.nanoseconds(at) >= max else { return false }
        if rec.videoPastLimit {
            // Both streams reached it.
            finish(error: Self.durationReached(max))
            return true
        }
        // (A camera stalled: nothing waits for the recorder and no frame came for half a second.)
        if Duration.nanoseconds(at) >= max + .milliseconds(500), framesWaiting == 0,
            Double(CaptureTime.now() - rec.lastVideo) / 1e9 >= Self.stopStall
        {
            finish(error: Self.durationReached(max))
        }
        return true
    }

    /// The time of the last frame within the duration limit (ns on the recorded time line,
    /// half a frame before it), or nil without a limit.
    func lastFrameWithinDurationLimit(_ rec: Recording) -> Int64? {
        guard let max = rec.maxDuration else { return nil }
        let (s, a) = max.components
        return s * 1_000_000_000 + a / 1_000_000_000 - rec.frameNanoseconds / 2
    }

    /// On the queue, after a frame `at` ns on the recorded time line: about every 200 ms,
    /// finishes the recording when the disk has less free than the limit.
    func checkFreeSpace(_ rec: Recording, at: Int64) {
        guard let min = rec.minFreeDiskSpace, rec.lastSpaceCheck.map({ at - $0 >= 200_000_000 }) ?? true else { return }
        rec.lastSpaceCheck = at
        if let free = Self.freeSpace(at: rec.url), free < min {
            finish(
                error: RecordingError(
                    .diskFull, "less than \(min) bytes are free on the disk of \(rec.url.path) (minFreeDiskSpaceLimit)",
                    recordingSuccessfullyFinished: true))
        }
    }

    private static func durationReached(_ max: Duration) -> RecordingError {
        RecordingError(.maximumDurationReached, "the recording reached its maximum duration of \(max)", recordingSuccessfullyFinished: true)
    }

    /// Bytes free to an unprivileged writer on the file system of `url`'s folder.
    private static func freeSpace(at url: URL) -> Int64? {
        var st = statvfs()
        let folder = url.deletingLastPathComponent().path
        guard case .success = Syscall.run("statvfs", mock: nil, failure: -1, { statvfs(folder, &st) }) else { return nil }
        return Int64(st.f_bavail) * Int64(st.f_frsize)
    }
}
