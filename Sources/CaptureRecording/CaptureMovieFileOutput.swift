import Capture
import CaptureCodecs
import CaptureSystem
import Foundation

/// Records the session's camera to a movie file, as `AVCaptureMovieFileOutput`: H.264 (libx264)
/// or Motion JPEG, in fragmented MP4 (`.mp4`, `.m4v`, `.mov`) or Matroska (`.mkv`).
///
/// Add it to a session with `session.addOutput(_:)`, as any output (`canAddOutput` first): it is
/// listed in `session.outputs` and takes the camera's frames and the microphone's packets
/// through frame consumer ports of its own, beside the app's outputs; the session's
/// one-output-per-kind rule leaves it out (any number of movie outputs may record).
/// H.264 is encoded once per frame by the session's H.264 stage for every consumer with the same
/// settings (another movie output, an RTSP publish), on the stage's thread; the output writes
/// the encoded frames on its recording queue (MJPEG: the camera's bytes as they came). While the
/// encoder or the queue is busy, frames wait in order: at most one in the camera's buffer, the
/// rest copied (about a second of frames) so that the camera and the session's other outputs
/// lose nothing; beyond that storage the recording loses frames alone. The microphone's audio is
/// encoded once too, by the session's audio stage for every movie output with the same audio
/// settings, and written in its packets: the cuts at a pause and at the video's end fall on
/// packet edges (AAC's 21 ms at 48 kHz, Opus's 20 ms; PCM to the sample), and the audio stays
/// within one packet of the video (see the article on recording).
/// Every frame lost is counted once in `RecordingSummary.framesDropped` (the output's own losses
/// as `.frameWasLate`), never hidden.
///
/// MP4 is written fragmented: a process killed mid-recording leaves a playable file with every
/// fragment completed, at most `movieFragmentInterval` short. Timestamps are the capture
/// clock's, the first frame at 0: a lost frame leaves a gap in time, not a shift.
///
/// Thread-safe: every method and property may be used from any thread. Delegate calls come on
/// the output's recording queue, in order.
public final class CaptureMovieFileOutput: CaptureOutput, @unchecked Sendable {
    /// The output's port in the session's graph (a connection per camera): it takes the shared
    /// H.264 stage's units or JPEG frames, as the recording (or pre-record) asks, or nothing.
    let port: FrameConsumerPort
    /// What the port brought, waiting for the recording queue.
    let feed: RecordingFeed
    /// The output's port for the session's microphones: the packets of the session's shared
    /// audio stage for the recording's audio settings go to `feed` too.
    let audioPort: FrameConsumerPort
    /// Frames that may wait for (or be with) the recording queue in the buffers they came in:
    /// beyond this one, frames are copied on receipt and their buffers go back at once. (A camera
    /// streams with 4 buffers: one being filled, one the capture thread hands on, one with a quick
    /// app output; holding 2 cost an app output frames under load.)
    package static let heldFrameLimit = 1
    /// The most camera buffers this output (or, for H.264, its shared stage) ever held at once
    /// (at most `heldFrameLimit`). Any thread.
    package var cameraBuffersHeldPeak: Int { feed.buffersHeldPeak }
    /// Frames captured and waiting for the recording queue (the recorder's backlog). Any thread.
    package var framesWaiting: Int { feed.waiting }
    /// Serial: frames, drops, starts, stops and delegate calls, in order.
    let queue = DispatchQueue(label: "swift-capture.recording")
    private let lock = NSLock()
    private var shared = Shared()
    /// Touched only on `queue`.
    var active: Recording?
    /// The session event handler of `addOutput` (ends a recording when the session stops).
    var eventToken: UUID? {
        get { locked { $0.eventToken } }
        set { locked { $0.eventToken = newValue } }
    }

    struct Shared {
        var isRecording = false
        var url: URL?
        var duration: Duration = .zero
        var fileSize: Int64 = 0
        var framesWritten = 0
        var maxDuration: Duration?
        var maxFileSize: Int64?
        var minFreeDiskSpace: Int64?
        var fragmentInterval: Duration = .seconds(1)
        var preRecord: Duration = .zero
        var defaultSettings = MovieOutputSettings()
        var settings: [ObjectIdentifier: MovieOutputSettings] = [:]
        var last: RecordingSummary?
        var eventToken: UUID?
        /// When `stopRecording()` was called, until the recording queue has ended the recording.
        var stopAt: CaptureTime?
        /// The recording's file, for a stop to give up a write that waits on it.
        var destination: Destination?
        /// The output itself while it records: an owner that lets go does not lose the
        /// recording (its session's release then finishes it, as a stop would).
        var keepAlive: CaptureMovieFileOutput?
        /// Notices the release of the session the output is in.
        weak var sessionWatch: SessionWatch?
        /// The recording's pauses (see `pauseRecording()`).
        var pauses = PauseTimeline()
        /// Counts recordings, so that a pause's notice reaches the recording it was made in.
        var generation = 0
    }

    /// A stop's wait for a destination that does not take the bytes (a FIFO with no reader or
    /// a stalled one): after this the recording ends with `.cannotWriteFile`.
    static let stopGrace = 0.5
    /// A stop's wait for a camera (or microphone) that gives nothing more: with no frame waiting
    /// for the recorder this long after the stop, the stream counts as stalled and the recording
    /// ends with what it has (as the duration limit's half-second grace).
    static let stopStall = 0.5

    /// Touched only on `queue`.
    var standby: Standby?
    /// Pre-record's audio, as far back as its frames (touched only on `queue`).
    var audioRing = HeldAudio()

    public init() {
        // The feed keeps every frame (in order, none newest-wins) but holds at most
        // `heldFrameLimit` of the camera's buffers (so does the H.264 stage, for a port that
        // keeps every frame): a slow encoder costs the other outputs nothing, and what the
        // recorder cannot keep it loses alone, counted. Idle, the port takes nothing.
        let feed = RecordingFeed(heldLimit: Self.heldFrameLimit)
        let port = FrameConsumerPort(encodedFor: feed, keepsEveryFrame: true)
        let audioPort = FrameConsumerPort(audioEncodedFor: feed, keepsEveryFrame: true)
        self.feed = feed
        self.port = port
        self.audioPort = audioPort
        super.init(hosting: [port, audioPort])
        feed.port = port
        feed.setDrain(on: queue) { [weak self] in self?.drainFeed() }
        hosting = OutputHosting(
            joined: { [weak self] session in self?.joined(session) }, left: { [weak self] session in self?.left(session) })
    }

    deinit {
        sessionWatch?.disarm()
        if let token = eventToken { port.session?.removeEventHandler(token) }
        port.session?.removeFrameConsumer(port)
        audioPort.session?.removeFrameConsumer(audioPort)
    }

    func locked<T>(_ body: (inout Shared) -> T) -> T {
        lock.lock()
        defer { lock.unlock() }
        return body(&shared)
    }

    // MARK: Configuration

    // (`session`, `connections` (one per camera and one per microphone of its session) and
    // `connection(with:)` are CaptureOutput's, through its two ports.)

    /// How much of an MP4 recording is written at a time (one fragment): at most this much is
    /// lost when the process dies. One second by default; read at the start.
    public var movieFragmentInterval: Duration {
        get { locked { $0.fragmentInterval } }
        set {
            locked { $0.fragmentInterval = max(newValue, .milliseconds(100)) }
            queue.async { [self] in refreshStandby() }
        }
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
        queue.async { [self] in refreshStandby() }
    }

    /// Points the ports at what a recording (or pre-record) with `settings` takes: the shared
    /// H.264 stage's units for these settings, or JPEG at their quality, and the shared audio
    /// stage's packets for its audio codec; nothing for nil.
    func take(_ settings: MovieOutputSettings?, fragment: Duration) {
        guard let settings else {
            port.encodedProduct = nil
            audioPort.encodedProduct = nil
            return
        }
        audioPort.encodedProduct = settings.recordsAudio ? Self.audioStageSettings(settings).product : nil
        if settings.codec == .h264 {
            let interval = port.connection(with: .video)?.device?.activeVideoMinFrameDuration
            port.encodedProduct = Self.stageSettings(settings, fragment: fragment, interval: interval).product
        } else {
            port.jpegQuality = settings.jpegQuality
        }
    }

    /// The shared H.264 stage's settings for a recording: a key frame per fragment interval
    /// unless the settings give another interval (fragments are cut at key frames).
    static func stageSettings(_ settings: MovieOutputSettings, fragment: Duration, interval: FrameInterval?) -> H264Settings {
        let i = interval ?? FrameInterval(framesPerSecond: 30)
        let perFragment = Double(MovieWriter.microseconds(fragment)) / 1e6 * Double(i.denominator) / Double(max(1, i.numerator))
        return H264Settings(
            encoder: settings.h264Encoder.rawValue, preset: settings.preset,
            rateControl: {
                switch settings.rateControl {
                case .quality(let q): .quality(q)
                case .bitrate(let b): .bitrate(b)
                }
            }(), keyFrameInterval: settings.keyframeInterval ?? max(1, Int(perFragment)))
    }

    /// The shared audio stage's settings for a recording: its codec at 64 kb/s per channel (PCM
    /// as it is), at the microphone's rate and channels (Opus: at most two).
    static func audioStageSettings(_ settings: MovieOutputSettings) -> AudioEncoderSettings {
        AudioEncoderSettings(
            codec: {
                switch settings.audioCodec {
                case .aac: .aac
                case .opus: .opus
                case .pcm: .pcm
                }
            }())
    }

    // MARK: State

    /// Whether a recording is under way (from `startRecording` until its finish is reported).
    public var isRecording: Bool { locked { $0.isRecording } }
    /// Whether the recording is paused: from `pauseRecording()` until `resumeRecording()` or
    /// the recording's end. False when not recording.
    public var isRecordingPaused: Bool { locked { $0.isRecording && $0.pauses.isPaused } }
    /// The file being recorded, or nil.
    public var outputFileURL: URL? { locked { $0.url } }
    /// Media recorded so far: from the first frame to the end of the newest, pauses left out.
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
    /// The file is created at once (on a thread of its own: a FIFO's open waits for its reader
    /// without holding the output); the first frame the camera captures after this call is the
    /// recording's first, at time 0, and `didStartRecordingTo` follows it. Every failure, from a
    /// destination that cannot be created to a disk that fills up, reaches `didFinishRecordingTo`
    /// with its error; a destination that cannot be created, and a recording that wrote no frame
    /// (`.noDataCaptured`), leave no file (only a regular file the recording created is removed).
    /// While recording, the output keeps itself alive: when the app lets go of it and of its
    /// session, the recording is finished and reported as by `stopRecording()`.
    public func startRecording(to outputFileURL: URL, recordingDelegate delegate: any CaptureFileOutputRecordingDelegate) {
        let refused: RecordingError? = locked { s in
            if s.isRecording { return RecordingError(.invalidState, "already recording to \(s.url?.path ?? "a file"): stop it first") }
            s.isRecording = true
            s.keepAlive = self
            s.url = outputFileURL
            s.duration = .zero
            s.fileSize = 0
            s.framesWritten = 0
            s.pauses = PauseTimeline()
            s.generation += 1
            return nil
        }
        if let refused {
            queue.async { delegate.fileOutput(self, didFinishRecordingTo: outputFileURL, from: [], error: refused) }
            return
        }
        let requested = CaptureTime.now()
        let connection = port.connection(with: .video)
        let (settings, maxDuration, maxFileSize, fragment, minFree, generation) = locked { s in
            (
                (connection.flatMap { s.settings[ObjectIdentifier($0)] } ?? s.defaultSettings), s.maxDuration, s.maxFileSize,
                s.fragmentInterval, s.minFreeDiskSpace, s.generation
            )
        }
        queue.async { [self] in
            var fromStandby: Standby?
            let result = Result { () throws(RecordingError) -> MovieWriter in
                guard outputFileURL.isFileURL || outputFileURL.scheme?.lowercased() == "rtsp" else {
                    throw RecordingError(
                        .unsupportedContainer, "\(outputFileURL) is neither a file nor an rtsp:// URL: record to a .mp4 or .mkv file")
                }
                guard let container = MovieContainer(url: outputFileURL) else {
                    throw RecordingError(
                        .unsupportedContainer, "cannot tell the container of '\(outputFileURL.lastPathComponent)': name it .mp4 or .mkv")
                }
                if container == .rtsp, settings.codec != .h264 {
                    throw RecordingError(.unsupportedCodec, "RTSP publishing carries H.264: set MovieOutputSettings.codec to .h264")
                }
                if let problem = settings.problem { throw RecordingError(.unsupportedCodec, problem) }
                if settings.recordsAudio, settings.audioCodec != .aac, container != .matroska {
                    throw RecordingError(
                        .unsupportedCodec,
                        "\(container == .rtsp ? "RTSP publishing" : "MP4") carries AAC audio, not \(settings.audioCodec.rawValue): record .mkv, or choose AAC"
                    )
                }
                if session == nil {
                    throw RecordingError(.invalidState, "the movie output is in no session: add it with session.addOutput first")
                }
                // Pre-record: the kept past starts the file when it was kept with these settings.
                if let sb = standby {
                    standby = nil
                    if sb.isReady, sb.settings == settings, sb.fragment == fragment {
                        do throws(RecordingError) {
                            try sb.writer.open(url: outputFileURL, container: container, fragmentInterval: fragment)
                        } catch {
                            sb.writer.close()
                            throw error
                        }
                        fromStandby = sb
                        return sb.writer
                    }
                    sb.writer.close()
                    audioRing.removeAll()
                }
                return try MovieWriter(url: outputFileURL, container: container, fragmentInterval: fragment)
            }
            switch result {
            case .failure(let error):
                finishDelegate(delegate, url: outputFileURL, summary: nil, error: error)
            case .success(let writer):
                let rec = Recording(
                    url: outputFileURL, delegate: delegate, settings: settings, maxDuration: maxDuration,
                    maxFileSize: maxFileSize, writer: writer)
                rec.requested = requested
                rec.generation = generation
                rec.minFreeDiskSpace = outputFileURL.isFileURL ? minFree : nil
                rec.standby = fromStandby
                if fromStandby != nil {
                    rec.earlyAudio = audioRing
                    audioRing = HeldAudio()
                }
                active = rec
                locked { $0.destination = writer.destination }
                giveUpPastDurationLimit(rec, requested: requested)
                // A stop that came before this gives up a destination that does not take bytes.
                if locked({ $0.stopAt }) != nil { writer.destination?.giveUp(after: Self.stopGrace, grace: Self.stopGrace) }
                // From here on frames come in the recording's product: an H.264 recording takes
                // the units of the session's shared encoder for these settings.
                take(settings, fragment: fragment)
            }
        }
    }

    /// Ends the recording: the encoder's last frames and the final fragment are written and the
    /// file closed, then `didFinishRecordingTo` is called with no error. Every frame and audio
    /// buffer captured before this call is written first (by capture time: a recorder behind,
    /// such as a slow encoder, finishes the frames from before the stop that wait for it, and
    /// counts those it could not keep as dropped); nothing captured after it is. A camera or
    /// microphone that gives nothing more for half a second after the stop (stalled) ends the
    /// wait. A destination that takes no byte for half a second after the stop (a FIFO nobody
    /// reads, or a stalled reader) is given up: the recording ends with `.cannotWriteFile`. Does
    /// nothing when not recording.
    public func stopRecording() {
        // Decided by capture time, not by when the queue gets to a sample (the frames captured
        // before the stop may still wait in the consumer's backlog for a slow encoder): the
        // recording ends once the video and the audio have reached what was captured after the
        // stop, so a recorder that stays behind writes at most its backlog from before the stop.
        // A destination that does not take the bytes (a FIFO nobody reads) is given up a short
        // while after the stop, so that the queue is free for it.
        let now = CaptureTime.now()
        let destination = locked { s in
            s.stopAt = now
            return s.destination
        }
        destination?.giveUp(after: Self.stopGrace, grace: Self.stopGrace)
        queue.async { [self] in
            guard let rec = active else {
                locked { $0.stopAt = nil }
                return
            }
            watchStop(generation: rec.generation)
        }
    }

    /// On the queue, while a stop waits: ends the recording once both streams passed the stop,
    /// or once a stream has nothing waiting `stopStall` after it (a stalled camera or
    /// microphone, a session no longer running); checks again a little later otherwise.
    private func watchStop(generation: Int) {
        guard let rec = active, rec.generation == generation, let stopAt = locked({ $0.stopAt }) else { return }
        if endStopIfDone(rec, stopAt) { return }
        queue.asyncAfter(deadline: .now() + 0.05) { [self] in watchStop(generation: generation) }
    }

    /// On the queue, with a stop pending: finishes the recording when nothing captured before
    /// the stop is still to come. True when it did.
    @discardableResult
    func endStopIfDone(_ rec: Recording, _ stopAt: CaptureTime) -> Bool {
        let now = CaptureTime.now(), running = session?.isRunning == true
        let stalled = Double(now - stopAt) / 1e9 >= Self.stopStall || !running
        // (Frames waiting may be from before the stop: their drain gets to the first after it. A
        // camera is stalled when nothing waits and no frame came for `stopStall`, not merely
        // between two frames.)
        let videoStalled = stalled && framesWaiting == 0 && (!running || Double(now - rec.lastVideo) / 1e9 >= Self.stopStall)
        let videoDone = rec.videoPastStop || videoStalled
        // The microphone is stalled when its packets stopped coming, not when the stop is old: a
        // busy audio stage still bringing the packets from before the stop is waited for.
        let audioStalled = !running || (stalled && Double(now - rec.lastAudio) / 1e9 >= Self.stopStall)
        let audioDone = rec.audioPastStop || !rec.began || !rec.writer.hasAudio || audioStalled
        guard videoDone, audioDone else { return false }
        finish(error: nil)
        return true
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

    /// Ends the active recording (if any) with `error` (nil: stopped).
    func finish(error: RecordingError?) {
        locked { $0.stopAt = nil }
        guard let rec = active else { return }
        active = nil
        take(nil, fragment: .zero)
        feed.discard()
        // (Pre-record starts over with a new encoder.)
        refreshStandby()
        var error = error
        let hadAudio = rec.writer.hasAudio
        if !rec.began || rec.frames == 0 {
            // No frame was written: no empty file is left behind (only a regular file this
            // recording created is removed: never a FIFO, a device or someone else's file).
            let created = rec.writer.destination?.createdRegularFile ?? false
            rec.writer.close()
            if created { _ = Syscall.run("unlink", mock: nil, failure: -1, { unlink(rec.url.path) }) }
            let limit = rec.maxDuration.map { "its maximum duration of \($0) is shorter than one frame: allow a longer recording" }
            finishDelegate(
                rec.delegate, url: rec.url, summary: nil,
                error: error.flatMap { $0.recordingSuccessfullyFinished ? nil : $0 }
                    ?? RecordingError(
                        .noDataCaptured,
                        "no frame was recorded: "
                            + (error?.code == .maximumDurationReached
                                ? limit ?? "" : "none arrived before the recording stopped; is the session running with a camera?")))
            return
        }
        do {
            try rec.writer.finish(videoEnd: rec.began ? rec.lastNanoseconds + rec.frameNanoseconds : 0)
        } catch let failure {
            // A write failure outranks a limit reached (the file may be incomplete).
            if error == nil || error?.recordingSuccessfullyFinished == true { error = failure }
        }
        // (A pipe's size is what went through it.)
        let onDisk =
            rec.writer.destination?.isRegularFile == false
            ? rec.writer.destination?.bytesWritten
            : rec.url.isFileURL ? (try? FileManager.default.attributesOfItem(atPath: rec.url.path)[.size] as? Int64) : nil
        let size = onDisk ?? rec.writer.fileSize
        let summary = RecordingSummary(
            url: rec.url, framesWritten: rec.frames, framesDropped: rec.drops, duration: rec.duration,
            fileSize: size, encoder: rec.writer.encoderName,
            audioDuration: hadAudio ? .nanoseconds(rec.writer.audioSamplesNanoseconds) : nil,
            sequenceRuns: rec.sequenceRuns, error: error)
        finishDelegate(rec.delegate, url: rec.url, summary: summary, error: error, connections: rec.connections)
    }

    private func finishDelegate(
        _ delegate: any CaptureFileOutputRecordingDelegate, url: URL, summary: RecordingSummary?,
        error: RecordingError?, connections: [CaptureConnection] = []
    ) {
        let summary =
            summary
            ?? RecordingSummary(
                url: url, framesWritten: 0, framesDropped: [:], duration: .zero, fileSize: 0,
                encoder: "", error: error)
        let kept = locked { s in
            s.isRecording = false
            s.url = nil
            s.destination = nil
            s.pauses = PauseTimeline()
            s.last = summary
            s.duration = summary.duration
            s.fileSize = summary.fileSize
            s.framesWritten = summary.framesWritten
            defer { s.keepAlive = nil }
            return s.keepAlive
        }
        delegate.fileOutput(self, didFinishRecordingTo: url, from: connections, error: error)
        // (The output may go away here, after its last call.)
        withExtendedLifetime(kept) {}
    }
}

/// The delegate of `record(to:)`: resumes its caller once.
private final class ContinuationDelegate: CaptureFileOutputRecordingDelegate, @unchecked Sendable {
    // Set before the recording starts; resumed on the recording queue.
    var continuation: CheckedContinuation<Result<RecordingSummary, RecordingError>, Never>?
    func fileOutput(
        _ output: CaptureMovieFileOutput, didFinishRecordingTo outputFileURL: URL, from connections: [CaptureConnection],
        error: RecordingError?
    ) {
        let c = continuation
        continuation = nil
        if let error, !error.recordingSuccessfullyFinished {
            c?.resume(returning: .failure(error))
        } else {
            c?.resume(
                returning: .success(
                    output.lastRecording
                        ?? RecordingSummary(
                            url: outputFileURL, framesWritten: 0, framesDropped: [:], duration: .zero, fileSize: 0, encoder: "",
                            error: error)))
        }
    }
}
