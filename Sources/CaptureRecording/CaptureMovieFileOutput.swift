import Capture
import Foundation

/// Records the session's camera to a movie file, as `AVCaptureMovieFileOutput`: H.264 (libx264)
/// or Motion JPEG, in fragmented MP4 (`.mp4`, `.m4v`, `.mov`) or Matroska (`.mkv`).
///
/// Add it to a session with `session.addOutput(_:)` (this module's overload for movie outputs):
/// it joins the session as one of the package's frame consumers, beside the app's outputs, so it
/// is not listed in `session.outputs`, and the session's one-output-per-kind rule leaves it out.
/// Frames reach it in order on its recording queue, which encodes (H.264: one copy of each frame
/// into the encoder) or writes (MJPEG: the camera's bytes as they came) each one before it lets
/// go of it; while it is busy, frames wait holding their driver buffers, and frames the camera
/// loses meanwhile are counted in `RecordingSummary.framesDropped`, never hidden.
///
/// MP4 is written fragmented: a process killed mid-recording leaves a playable file with every
/// fragment completed, at most `movieFragmentInterval` short. Timestamps are the capture
/// clock's, the first frame at 0: a lost frame leaves a gap in time, not a shift.
///
/// Thread-safe: every method and property may be used from any thread. Delegate calls come on
/// the output's recording queue, in order.
public final class CaptureMovieFileOutput: @unchecked Sendable {
    /// The session-side consumer frames come through.
    let consumer = CaptureVideoDataOutput(frameConsumer: ())
    /// The session-side consumer of the microphone's audio.
    let audioConsumer = CaptureAudioDataOutput(frameConsumer: ())
    private let sink = RecordingSink()
    /// Serial: frames, drops, starts, stops and delegate calls, in order.
    let queue = DispatchQueue(label: "swift-capture.recording")
    private let lock = NSLock()
    private var shared = Shared()
    /// Touched only on `queue`.
    private var active: Recording?
    /// The session event handler of `addOutput` (ends a recording when the session stops).
    var eventToken: UUID? {
        get { locked { $0.eventToken } }
        set { locked { $0.eventToken = newValue } }
    }

    private struct Shared {
        var isRecording = false
        var url: URL?
        var duration: Duration = .zero
        var fileSize: Int64 = 0
        var framesWritten = 0
        var maxDuration: Duration?
        var maxFileSize: Int64?
        var minFreeDiskSpace: Int64?
        var fragmentInterval: Duration = .seconds(1)
        var defaultSettings = MovieOutputSettings()
        var settings: [ObjectIdentifier: MovieOutputSettings] = [:]
        var last: RecordingSummary?
        var eventToken: UUID?
    }

    private final class Recording {
        let url: URL
        let delegate: any CaptureFileOutputRecordingDelegate
        let settings: MovieOutputSettings
        let maxDuration: Duration?
        let maxFileSize: Int64?
        let writer: MovieWriter
        var connections: [CaptureConnection] = []
        var began = false
        var firstTime: CaptureTime?
        var frameNanoseconds: Int64 = 33_333_333
        var lastNanoseconds: Int64 = 0
        var frames = 0
        var drops: [DropReason: Int] = [:]
        var firstSequence: UInt64?
        var lastSequence: UInt64?
        var format: (PixelFormat, VideoDimensions)?
        var minFreeDiskSpace: Int64?
        /// When free space was last checked (ns after the first frame).
        var lastSpaceCheck: Int64?
        /// Audio that came before the first video frame was written (its format opens the
        /// audio stream; the part after that frame's time is written).
        var earlyAudio: [SampleBuffer] = []
        /// When `startRecording` was called: frames captured before are not part of it.
        var requested = CaptureTime.now()
        init(url: URL, delegate: any CaptureFileOutputRecordingDelegate, settings: MovieOutputSettings, maxDuration: Duration?,
             maxFileSize: Int64?, writer: MovieWriter) {
            self.url = url
            self.delegate = delegate
            self.settings = settings
            self.maxDuration = maxDuration
            self.maxFileSize = maxFileSize
            self.writer = writer
        }
        var duration: Duration { began ? .nanoseconds(lastNanoseconds + frameNanoseconds) : .zero }
    }

    public init() {
        consumer.alwaysDiscardsLateVideoFrames = false
        sink.owner = self
        consumer.setSampleBufferDelegate(sink, queue: queue)
        audioConsumer.setSampleBufferDelegate(sink, queue: queue)
    }

    deinit {
        consumer.setSampleBufferDelegate(nil, queue: nil)
        audioConsumer.setSampleBufferDelegate(nil, queue: nil)
        if let token = eventToken { consumer.session?.removeEventHandler(token) }
        consumer.session?.removeFrameConsumer(consumer)
        audioConsumer.session?.removeOutput(audioConsumer)
    }

    private func locked<T>(_ body: (inout Shared) -> T) -> T {
        lock.lock()
        defer { lock.unlock() }
        return body(&shared)
    }

    // MARK: Configuration

    /// The session the output is in.
    public var session: CaptureSession? { consumer.session }
    /// The output's connections: one per camera and one per microphone of its session.
    public var connections: [CaptureConnection] { consumer.connections + audioConsumer.connections }
    /// The connection carrying `mediaType` (`.video`, or `.audio` from a microphone), or nil.
    public func connection(with mediaType: MediaType) -> CaptureConnection? {
        mediaType == .audio ? audioConsumer.connection(with: .audio) : consumer.connection(with: mediaType)
    }

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

    /// How much of an MP4 recording is written at a time (one fragment): at most this much is
    /// lost when the process dies. One second by default; read at the start.
    public var movieFragmentInterval: Duration {
        get { locked { $0.fragmentInterval } }
        set { locked { $0.fragmentInterval = max(newValue, .milliseconds(100)) } }
    }

    /// The settings used for `connection` (those set for it, else the output's default).
    public func outputSettings(for connection: CaptureConnection?) -> MovieOutputSettings {
        locked { s in connection.flatMap { s.settings[ObjectIdentifier($0)] } ?? s.defaultSettings }
    }

    /// Sets what is recorded from `connection` (nil: the default for every connection without
    /// settings of its own). Takes effect at the next `startRecording`.
    public func setOutputSettings(_ settings: MovieOutputSettings, for connection: CaptureConnection?) {
        locked { s in
            if let connection { s.settings[ObjectIdentifier(connection)] = settings } else { s.defaultSettings = settings }
        }
    }

    // MARK: State

    /// Whether a recording is under way (from `startRecording` until its finish is reported).
    public var isRecording: Bool { locked { $0.isRecording } }
    /// The file being recorded, or nil.
    public var outputFileURL: URL? { locked { $0.url } }
    /// Media recorded so far: from the first frame to the end of the newest.
    public var recordedDuration: Duration { locked { $0.duration } }
    /// Bytes in the file so far.
    public var recordedFileSize: Int64 { locked { $0.fileSize } }
    /// Frames written so far in this recording.
    public var recordedFrameCount: Int { locked { $0.framesWritten } }
    /// What the last finished recording wrote, or nil.
    public var lastRecording: RecordingSummary? { locked { $0.last } }

    // MARK: Recording

    /// Starts recording to a file URL (its extension chooses the container; an existing file is
    /// replaced) or publishing H.264 to an `rtsp://` URL (RTP over the RTSP TCP connection; the
    /// server is contacted at the first frame, and a refusal is `.publishingFailed`).
    ///
    /// The file is created at once; the first frame the camera captures after this call is the
    /// recording's first, at time 0, and `didStartRecordingTo` follows it. Every failure, from a
    /// destination that cannot be created to a disk that fills up, reaches `didFinishRecordingTo`
    /// with its error; a destination that cannot be created, and a recording stopped before its
    /// first frame (`.noDataCaptured`), leave no file.
    public func startRecording(to outputFileURL: URL, recordingDelegate delegate: any CaptureFileOutputRecordingDelegate) {
        let refused: RecordingError? = locked { s in
            if s.isRecording { return RecordingError(.invalidState, "already recording to \(s.url?.path ?? "a file"): stop it first") }
            s.isRecording = true
            s.url = outputFileURL
            s.duration = .zero
            s.fileSize = 0
            s.framesWritten = 0
            return nil
        }
        if let refused {
            queue.async { delegate.fileOutput(self, didFinishRecordingTo: outputFileURL, from: [], error: refused) }
            return
        }
        let requested = CaptureTime.now()
        let connection = consumer.connection(with: .video)
        let (settings, maxDuration, maxFileSize, fragment, minFree) = locked { s in
            ((connection.flatMap { s.settings[ObjectIdentifier($0)] } ?? s.defaultSettings), s.maxDuration, s.maxFileSize,
             s.fragmentInterval, s.minFreeDiskSpace)
        }
        queue.async { [self] in
            let result = Result { () throws(RecordingError) -> MovieWriter in
                guard outputFileURL.isFileURL || outputFileURL.scheme?.lowercased() == "rtsp" else {
                    throw RecordingError(.unsupportedContainer, "\(outputFileURL) is neither a file nor an rtsp:// URL: record to a .mp4 or .mkv file")
                }
                guard let container = MovieContainer(url: outputFileURL) else {
                    throw RecordingError(.unsupportedContainer, "cannot tell the container of '\(outputFileURL.lastPathComponent)': name it .mp4 or .mkv")
                }
                if container == .rtsp, settings.codec != .h264 {
                    throw RecordingError(.unsupportedCodec, "RTSP publishing carries H.264: choose the .h264 codec")
                }
                if let problem = settings.problem { throw RecordingError(.unsupportedCodec, problem) }
                if session == nil { throw RecordingError(.invalidState, "the movie output is in no session: add it with session.addOutput first") }
                return try MovieWriter(url: outputFileURL, container: container, fragmentInterval: fragment)
            }
            switch result {
            case .failure(let error):
                finishDelegate(delegate, url: outputFileURL, summary: nil, error: error)
            case .success(let writer):
                let rec = Recording(url: outputFileURL, delegate: delegate, settings: settings, maxDuration: maxDuration,
                                    maxFileSize: maxFileSize, writer: writer)
                rec.requested = requested
                rec.minFreeDiskSpace = outputFileURL.isFileURL ? minFree : nil
                active = rec
                // From here on frames come in the recording's product.
                consumer.videoSettings = settings.codec == .h264
                    ? .init(pixelFormat: .nv12)
                    : .init(jpeg: .init(quality: settings.jpegQuality))
            }
        }
    }

    /// Ends the recording: the encoder's last frames and the final fragment are written and the
    /// file closed, then `didFinishRecordingTo` is called with no error. Frames captured before
    /// this call and still waiting for the recorder are written first. Does nothing when not
    /// recording.
    public func stopRecording() {
        queue.async { [self] in finish(error: nil) }
    }

    /// Records to `url` until `stopRecording()` is called, a limit is reached (the summary's
    /// `error` says which) or the task is cancelled (which stops it), and returns what was
    /// written; throws what ended it otherwise.
    public func record(to url: URL) async throws(RecordingError) -> RecordingSummary {
        let waiter = ContinuationDelegate()
        let result: Result<RecordingSummary, RecordingError> = await withTaskCancellationHandler {
            await withCheckedContinuation { (c: CheckedContinuation<Result<RecordingSummary, RecordingError>, Never>) in
                waiter.continuation = c
                startRecording(to: url, recordingDelegate: waiter)
            }
        } onCancel: {
            stopRecording()
        }
        return try result.get()
    }

    // MARK: On the recording queue

    fileprivate func handle(_ sample: SampleBuffer, connection: CaptureConnection) {
        guard let rec = active, let pixelFormat = sample.pixelFormat, let dims = sample.dimensions else { return }
        // Frames asked for before this recording (another product) are not part of it.
        let wanted: Bool = rec.settings.codec == .h264 ? (pixelFormat == .nv12 || pixelFormat == .yuv420) : pixelFormat == .jpeg
        guard wanted, !(sample.presentationTimeStamp < rec.requested) else { return }
        if !rec.began {
            // With a microphone, the file opens once its format is known (its first buffer),
            // or without audio after a second of video and no audio.
            let wantsAudio = rec.settings.recordsAudio && audioConsumer.connection(with: .audio) != nil
            let audio = rec.earlyAudio.first?.audioBuffer?.format
            if wantsAudio, audio == nil, sample.presentationTimeStamp - rec.requested < 1_000_000_000 { return }
            let interval = connection.device?.activeVideoMinFrameDuration ?? FrameInterval(framesPerSecond: 30)
            rec.frameNanoseconds = Int64(interval.numerator) * 1_000_000_000 / Int64(max(1, interval.denominator))
            do {
                try rec.writer.begin(.init(width: dims.width, height: dims.height, pixelFormat: pixelFormat, frameInterval: interval),
                                     audio: wantsAudio ? audio : nil, settings: rec.settings)
            } catch {
                finish(error: error)
                return
            }
            rec.began = true
            rec.format = (pixelFormat, dims)
            rec.firstTime = sample.presentationTimeStamp
            rec.connections = [connection] + (rec.writer.hasAudio ? audioConsumer.connections : [])
            rec.delegate.fileOutput(self, didStartRecordingTo: rec.url, from: rec.connections)
            let early = rec.earlyAudio
            rec.earlyAudio = []
            for a in early {
                guard let pcm = a.audioBuffer else { continue }
                do { try rec.writer.writeAudio(pcm, at: a.presentationTimeStamp - rec.firstTime!) } catch {
                    finish(error: error)
                    return
                }
            }
        } else if rec.format?.0 != pixelFormat || rec.format?.1 != dims {
            finish(error: RecordingError(.formatChanged, "the camera's frames changed from \(rec.format!.1) to \(dims) mid-recording; the file ends before the change"))
            return
        }
        let at = sample.presentationTimeStamp - rec.firstTime!
        if let max = rec.maxDuration, Duration.nanoseconds(at + rec.frameNanoseconds / 2) > max {
            finish(error: RecordingError(.maximumDurationReached, "the recording reached its maximum duration of \(max)",
                                         recordingSuccessfullyFinished: true))
            return
        }
        if let max = rec.maxFileSize, rec.writer.fileSize >= max {
            finish(error: RecordingError(.maximumFileSizeReached, "the recording reached its maximum file size of \(max) bytes",
                                         recordingSuccessfullyFinished: true))
            return
        }
        do {
            try rec.writer.write(sample, at: at)
        } catch {
            finish(error: error)
            return
        }
        rec.frames += 1
        rec.lastNanoseconds = at
        if rec.firstSequence == nil { rec.firstSequence = sample.sequenceNumber }
        rec.lastSequence = sample.sequenceNumber
        let duration = rec.duration, size = rec.writer.fileSize, frames = rec.frames
        locked { s in
            s.duration = duration
            s.fileSize = size
            s.framesWritten = frames
        }
        // After the frame, so that the file ends with it.
        if let min = rec.minFreeDiskSpace, rec.lastSpaceCheck.map({ at - $0 >= 200_000_000 }) ?? true {
            rec.lastSpaceCheck = at
            if let free = Self.freeSpace(at: rec.url), free < min {
                finish(error: RecordingError(.diskFull, "less than \(min) bytes are free on the disk of \(rec.url.path) (minFreeDiskSpaceLimit)",
                                             recordingSuccessfullyFinished: true))
            }
        }
    }

    /// Bytes free to an unprivileged writer on the file system of `url`'s folder.
    private static func freeSpace(at url: URL) -> Int64? {
        var st = statvfs()
        guard statvfs(url.deletingLastPathComponent().path, &st) == 0 else { return nil }
        return Int64(st.f_bavail) * Int64(st.f_frsize)
    }

    fileprivate func handleAudio(_ sample: SampleBuffer) {
        guard let rec = active, let pcm = sample.audioBuffer, rec.settings.recordsAudio else { return }
        guard rec.began else {
            // Before the first video frame: the newest half second waits for it.
            rec.earlyAudio.append(sample)
            let rate = Double(max(1, pcm.format.sampleRate))
            while rec.earlyAudio.count > 1, Double(rec.earlyAudio.dropFirst().reduce(0) { $0 + ($1.audioBuffer?.frameCount ?? 0) }) / rate > 0.5 {
                rec.earlyAudio.removeFirst()
            }
            return
        }
        guard rec.writer.hasAudio else { return }
        do { try rec.writer.writeAudio(pcm, at: sample.presentationTimeStamp - rec.firstTime!) } catch { finish(error: error) }
    }

    fileprivate func handleDrop(_ drop: DroppedFrames) {
        guard let rec = active, rec.began else { return }
        rec.drops[drop.reason, default: 0] += drop.count
    }

    /// Ends the active recording (if any) with `error` (nil: stopped).
    func finish(error: RecordingError?) {
        guard let rec = active else { return }
        active = nil
        consumer.videoSettings = .init()
        var error = error
        let hadAudio = rec.writer.hasAudio
        if !rec.began {
            // Nothing was written: no empty file is left behind.
            rec.writer.close()
            if rec.url.isFileURL { try? FileManager.default.removeItem(at: rec.url) }
            finishDelegate(rec.delegate, url: rec.url, summary: nil, error: error ?? RecordingError(
                .noDataCaptured, "no frame arrived before the recording stopped: is the session running with a camera?"))
            return
        }
        do {
            try rec.writer.finish(videoEnd: rec.began ? rec.lastNanoseconds + rec.frameNanoseconds : 0)
        } catch let failure {
            // A write failure outranks a limit reached (the file may be incomplete).
            if error == nil || error?.recordingSuccessfullyFinished == true { error = failure }
        }
        let onDisk = rec.url.isFileURL ? (try? FileManager.default.attributesOfItem(atPath: rec.url.path)[.size] as? Int64) : nil
        let size = onDisk ?? rec.writer.fileSize
        let summary = RecordingSummary(url: rec.url, framesWritten: rec.frames, framesDropped: rec.drops, duration: rec.duration,
                                       fileSize: size, encoder: rec.writer.encoderName,
                                       audioDuration: hadAudio ? .nanoseconds(rec.writer.audioSamplesNanoseconds) : nil,
                                       sequenceRange: rec.firstSequence.map { $0...(rec.lastSequence ?? $0) }, error: error)
        finishDelegate(rec.delegate, url: rec.url, summary: summary, error: error, connections: rec.connections)
    }

    private func finishDelegate(_ delegate: any CaptureFileOutputRecordingDelegate, url: URL, summary: RecordingSummary?,
                                error: RecordingError?, connections: [CaptureConnection] = []) {
        let summary = summary ?? RecordingSummary(url: url, framesWritten: 0, framesDropped: [:], duration: .zero, fileSize: 0,
                                                  encoder: "", sequenceRange: nil, error: error)
        locked { s in
            s.isRecording = false
            s.url = nil
            s.last = summary
            s.duration = summary.duration
            s.fileSize = summary.fileSize
            s.framesWritten = summary.framesWritten
        }
        delegate.fileOutput(self, didFinishRecordingTo: url, from: connections, error: error)
    }

    /// The session stopped or lost its camera: a recording under way ends with what it has.
    func sessionEvent(_ event: CaptureSession.Event) {
        switch event {
        case .didStopRunning:
            queue.async { [self] in finish(error: RecordingError(.sessionStopped, "the session stopped; the file holds what was recorded until then")) }
        case .deviceDisconnected(let d):
            queue.async { [self] in finish(error: RecordingError(.sessionStopped, "\(d.localizedName) was disconnected; the file holds what was recorded until then")) }
        default:
            break
        }
    }
}

/// The consumer's delegate: hands frames and drops to the output, on its recording queue.
private final class RecordingSink: CaptureVideoDataOutputSampleBufferDelegate, CaptureAudioDataOutputSampleBufferDelegate,
    @unchecked Sendable {
    // Set once, before the consumer delivers anything.
    weak var owner: CaptureMovieFileOutput?
    func captureOutput(_ output: CaptureOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection) {
        if sampleBuffer.mediaType == .audio { owner?.handleAudio(sampleBuffer) } else { owner?.handle(sampleBuffer, connection: connection) }
    }
    func captureOutput(_ output: CaptureOutput, didDrop drop: DroppedFrames, from connection: CaptureConnection) {
        // (Audio losses are filled with silence in the file; only video frames are counted.)
        if connection.mediaType == .video { owner?.handleDrop(drop) }
    }
}

/// The delegate of `record(to:)`: resumes its caller once.
private final class ContinuationDelegate: CaptureFileOutputRecordingDelegate, @unchecked Sendable {
    // Set before the recording starts; resumed on the recording queue.
    var continuation: CheckedContinuation<Result<RecordingSummary, RecordingError>, Never>?
    func fileOutput(_ output: CaptureMovieFileOutput, didFinishRecordingTo outputFileURL: URL, from connections: [CaptureConnection],
                    error: RecordingError?) {
        let c = continuation
        continuation = nil
        if let error, !error.recordingSuccessfullyFinished {
            c?.resume(returning: .failure(error))
        } else {
            c?.resume(returning: .success(output.lastRecording ?? RecordingSummary(
                url: outputFileURL, framesWritten: 0, framesDropped: [:], duration: .zero, fileSize: 0, encoder: "",
                sequenceRange: nil, error: error)))
        }
    }
}

extension CaptureSession {
    /// Whether `output` can be added: it is in no other session (movie outputs are frame
    /// consumers, so any number may be added beside the app's outputs).
    public func canAddOutput(_ output: CaptureMovieFileOutput) -> Bool {
        output.consumer.session == nil || output.consumer.session === self
    }

    /// Adds a movie file output, as `addOutput` does for AVFoundation's: it joins the session as
    /// a frame consumer (not listed in `outputs`), gets a connection to the camera, and ends a
    /// recording when the session stops or its camera goes away. Does nothing if
    /// `canAddOutput(output)` is false.
    public func addOutput(_ output: CaptureMovieFileOutput) {
        guard output.consumer.session == nil, addFrameConsumer(output.consumer) else { return }
        addAudioConsumer(output.audioConsumer)
        output.eventToken = addEventHandler { [weak output] event in output?.sessionEvent(event) }
    }

    /// Removes a movie file output; a recording under way ends as if the session stopped.
    public func removeOutput(_ output: CaptureMovieFileOutput) {
        guard output.consumer.session === self else { return }
        if let token = output.eventToken { removeEventHandler(token) }
        output.eventToken = nil
        removeFrameConsumer(output.consumer)
        removeOutput(output.audioConsumer)
        output.queue.async { output.finish(error: RecordingError(.sessionStopped, "the movie output was removed from its session")) }
    }
}
