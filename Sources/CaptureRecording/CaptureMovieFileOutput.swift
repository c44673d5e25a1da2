import Capture
import CaptureSystem
import Foundation

/// Records the session's camera to a movie file, as `AVCaptureMovieFileOutput`: H.264 (libx264)
/// or Motion JPEG, in fragmented MP4 (`.mp4`, `.m4v`, `.mov`) or Matroska (`.mkv`).
///
/// Add it to a session with `session.addOutput(_:)` (this module's overload for movie outputs):
/// it joins the session as one of the package's frame consumers, beside the app's outputs, so it
/// is not listed in `session.outputs`, and the session's one-output-per-kind rule leaves it out.
/// Frames reach it in order on its recording queue, which encodes (H.264: one copy of each frame
/// into the encoder) or writes (MJPEG: the camera's bytes as they came) each one before it lets
/// go of it. While it is busy, frames wait in order: at most one in the camera's buffer, the
/// rest copied into the output's own storage (about a second of frames) so that the camera and
/// the session's other outputs lose nothing; beyond that storage the output loses frames alone.
/// Every frame lost is counted once in `RecordingSummary.framesDropped` (the output's own losses
/// as `.frameWasLate`), never hidden.
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
    /// Copies of the frames the recorder is behind on (see `init`).
    private let detached = DetachedFrames()
    /// Frames that may wait for (or be with) the recording queue in the buffers they came in:
    /// beyond this one, frames are copied on receipt and their buffers go back at once. (A camera
    /// streams with 4 buffers: one being filled, one the capture thread hands on, one with a quick
    /// app output; holding 2 cost an app output frames under load.)
    package static let heldFrameLimit = 1
    /// The most camera buffers this output ever held at once (at most `heldFrameLimit`). Any thread.
    package var cameraBuffersHeldPeak: Int { consumer.heldFramesPeak }
    /// Frames captured and waiting for the recording queue (the recorder's backlog). Any thread.
    package var framesWaiting: Int { consumer.framesWaiting }
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
        var lastSequence: UInt64?
        /// The sequence numbers written, a range per run (a camera switched to mid-recording
        /// numbers its frames from 0 again).
        var sequenceRuns: [ClosedRange<UInt64>] = []
        var format: (PixelFormat, VideoDimensions)?
        var minFreeDiskSpace: Int64?
        /// When free space was last checked (ns after the first frame).
        var lastSpaceCheck: Int64?
        /// Audio that came before the first video frame was written (its format opens the
        /// audio stream; the part after that frame's time is written).
        var earlyAudio: [SampleBuffer] = []
        /// When `startRecording` was called: frames captured before are not part of it (but
        /// for pre-record's).
        var requested = CaptureTime.now()
        /// Pre-record's encoder, until its kept frames start the file (at the next frame).
        var standby: Standby?
        /// The writer's time 0 (its first frame's capture time: a pre-record writer's began
        /// before the file's first frame).
        var writerOrigin: CaptureTime?
        /// The capture time of the frame that began the file: pauses after it shift what follows.
        var pauseOrigin: CaptureTime?
        /// The pauses the video has passed (a frame after a new one starts a run and a keyframe).
        var resumesPassed = 0
        /// `startRecording`'s count (see `Shared.generation`).
        var generation = 0
        /// Pause and resume notices that came before the first frame (true: a pause), sent
        /// after `didStartRecordingTo`.
        var heldNotices: [Bool] = []
        /// After a stop: the video (the audio) has reached what was captured after it, so all
        /// captured before it is in.
        var videoPastStop = false
        var audioPastStop = false
        init(
            url: URL, delegate: any CaptureFileOutputRecordingDelegate, settings: MovieOutputSettings, maxDuration: Duration?,
            maxFileSize: Int64?, writer: MovieWriter
        ) {
            self.url = url
            self.delegate = delegate
            self.settings = settings
            self.maxDuration = maxDuration
            self.maxFileSize = maxFileSize
            self.writer = writer
        }
        var duration: Duration { began ? .nanoseconds(lastNanoseconds + frameNanoseconds) : .zero }
        /// The camera of the newest frame written.
        var lastCamera: String?
        /// Notes a frame written: it extends the current run, or starts one when it comes from
        /// another camera or its number does not follow the last.
        func noteSequence(_ n: UInt64, camera: String? = nil, newRun: Bool = false) {
            let sameCamera = camera == nil || lastCamera == nil || camera == lastCamera
            if camera != nil { lastCamera = camera }
            if sameCamera, !newRun, let last = sequenceRuns.last, n > last.upperBound {
                sequenceRuns[sequenceRuns.count - 1] = last.lowerBound...n
            } else {
                sequenceRuns.append(n...n)
            }
            lastSequence = n
        }
    }

    /// Pre-record's encoder and what it was given, while no recording is under way.
    private final class Standby {
        let writer: MovieWriter
        let settings: MovieOutputSettings
        let fragment: Duration
        let window: Duration
        /// The first frame's capture time (the writer's time 0), once one came.
        var origin: CaptureTime?
        var format: (PixelFormat, VideoDimensions)?
        var frameNanoseconds: Int64 = 33_333_333
        /// The frames given (ns on the writer's timeline, sequence number), as far back as kept.
        var frames: [(at: Int64, sequence: UInt64)] = []
        /// Frames the camera lost meanwhile, as far back as kept.
        var drops: [DroppedFrames] = []
        var failed = false
        init(window: Duration, settings: MovieOutputSettings, fragment: Duration) {
            self.window = window
            self.settings = settings
            self.fragment = fragment
            writer = MovieWriter(preRecord: window, fragmentInterval: fragment)
            frames.reserveCapacity(1024)
        }
        var isReady: Bool { origin != nil && !failed && writer.keptRange != nil }
        /// The oldest capture time kept.
        var keptFrom: CaptureTime? {
            guard let origin, let r = writer.keptRange else { return nil }
            return CaptureTime(nanoseconds: origin.nanoseconds &+ UInt64(bitPattern: r.lowerBound))
        }
    }
    /// Touched only on `queue`.
    private var standby: Standby?
    /// Pre-record's audio, as far back as its frames (touched only on `queue`).
    private var audioRing: [SampleBuffer] = []

    public init() {
        consumer.alwaysDiscardsLateVideoFrames = false
        // The backlog keeps every frame (in order, none newest-wins) but holds at most
        // `heldFrameLimit` of the camera's buffers: a slow encoder costs the other outputs
        // nothing, and what the recorder cannot keep it loses alone, counted.
        let detached = detached
        consumer.frameDetacher = .init(heldLimit: Self.heldFrameLimit) { sample in detached.detach(sample) }
        // Audio shares the recording queue with a video encoder that may be seconds behind; it
        // is small (10 s of 48 kHz stereo is under 2 MB), so it waits rather than being lost.
        audioConsumer.maximumPendingDuration = .seconds(10)
        sink.owner = self
        consumer.setSampleBufferDelegate(sink, queue: queue)
        audioConsumer.setSampleBufferDelegate(sink, queue: queue)
    }

    deinit {
        sessionWatch?.disarm()
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
        set {
            locked { $0.fragmentInterval = max(newValue, .milliseconds(100)) }
            queue.async { [self] in refreshStandby() }
        }
    }

    /// How much of the past a recording starts with (picamera2's `CircularOutput`, a motion
    /// trigger's "before"). While the output is not recording, the session's frames are encoded
    /// (H.264) or kept as they came (MJPEG) and the newest `preRecordDuration` of them is kept,
    /// from a keyframe on; `startRecording` then begins the file with the newest keyframe at or
    /// before `preRecordDuration` before the call (so up to one keyframe interval more), and
    /// the microphone's audio from the same time. Memory: the encoded video of this duration
    /// plus one keyframe interval, and its audio as captured. `.zero` (the default) keeps
    /// nothing, and the encoder runs only while recording. Takes effect at once; changing the
    /// settings or the fragment interval starts the kept past over.
    public var preRecordDuration: Duration {
        get { locked { $0.preRecord } }
        set {
            locked { $0.preRecord = max(newValue, .zero) }
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

    /// The product the session delivers for `settings`: NV12 to encode, or JPEG.
    private static func product(_ settings: MovieOutputSettings) -> CaptureVideoDataOutput.VideoSettings {
        settings.codec == .h264 ? .init(pixelFormat: .nv12) : .init(jpeg: .init(quality: settings.jpegQuality))
    }

    /// On the queue: starts, restarts or ends pre-record's encoder to match the settings, and
    /// asks the session for its frames (or for none) while no recording is under way.
    private func refreshStandby() {
        let connection = consumer.connection(with: .video)
        let (window, settings, fragment) = locked { s in
            (s.preRecord, connection.flatMap { s.settings[ObjectIdentifier($0)] } ?? s.defaultSettings, s.fragmentInterval)
        }
        if let sb = standby, window == .zero || sb.settings != settings || sb.fragment != fragment || sb.window != window {
            sb.writer.close()
            standby = nil
            audioRing = []
        }
        guard active == nil else { return }
        if window > .zero, standby == nil, settings.problem == nil {
            standby = Standby(window: window, settings: settings, fragment: fragment)
            standby?.writer.detached = detached
        }
        consumer.videoSettings = standby.map { Self.product($0.settings) } ?? .init()
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
        let connection = consumer.connection(with: .video)
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
                    audioRing = []
                }
                let writer = try MovieWriter(url: outputFileURL, container: container, fragmentInterval: fragment)
                writer.detached = detached
                return writer
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
                    audioRing = []
                }
                active = rec
                locked { $0.destination = writer.destination }
                // With a duration limit, a destination still taking nothing past it is given up
                // as at a stop (the limit is checked on frames, which then wait for the write).
                if let max = maxDuration, rec.standby == nil {
                    let c = max.components
                    let end = Double(c.seconds) + Double(c.attoseconds) / 1e18 - Double(CaptureTime.now() - requested) / 1e9
                    writer.destination?.giveUp(after: Swift.max(0, end) + Self.stopGrace, grace: Self.stopGrace)
                }
                // A stop that came before this gives up a destination that does not take bytes.
                if locked({ $0.stopAt }) != nil { writer.destination?.giveUp(after: Self.stopGrace, grace: Self.stopGrace) }
                // From here on frames come in the recording's product.
                consumer.videoSettings = Self.product(settings)
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
    private func endStopIfDone(_ rec: Recording, _ stopAt: CaptureTime) -> Bool {
        let stalled = Double(CaptureTime.now() - stopAt) / 1e9 >= Self.stopStall || session?.isRunning != true
        // (Frames waiting may be from before the stop: their drain gets to the first after it.)
        let videoDone = rec.videoPastStop || (stalled && consumer.framesWaiting == 0)
        let audioDone = rec.audioPastStop || !rec.began || !rec.writer.hasAudio || stalled
        guard videoDone, audioDone else { return false }
        finish(error: nil)
        return true
    }

    /// Pauses the recording, as AVFoundation's `pauseRecording()`: frames and audio captured
    /// from this call until `resumeRecording()` are not written (nor counted as dropped: they
    /// are no loss), and the file's time line leaves the pause out, so that the video and the
    /// audio after the resume follow those before it at once, in sync. `recordedDuration` and
    /// `maxRecordedDuration` count recorded time only. Frames captured before the call and still
    /// waiting for the recorder are written. `didPauseRecordingTo` follows on the recording
    /// queue. Does nothing when not recording, when already paused, or after `stopRecording()`;
    /// a stop while paused finishes the file as any stop does.
    public func pauseRecording() { setPaused(true) }

    /// Resumes a paused recording, as AVFoundation's `resumeRecording()`: frames and audio
    /// captured from this call on are written again, the video from a keyframe (H.264), right
    /// after those before the pause in the file's time line. `didResumeRecordingTo` follows on
    /// the recording queue. Does nothing when the recording is not paused.
    public func resumeRecording() { setPaused(false) }

    private func setPaused(_ paused: Bool) {
        // (The time is taken under the lock, so no frame captured after it is judged by the
        // timeline before it.)
        let generation: Int? = locked { s in
            guard s.isRecording, s.stopAt == nil, paused ? s.pauses.pause(at: .now()) : s.pauses.resume(at: .now()) else {
                return nil
            }
            return s.generation
        }
        guard let generation else { return }
        queue.async { [self] in notify(paused: paused, generation: generation) }
    }

    /// On the queue: tells the recording's delegate of a pause or resume, after its start
    /// (held until then when no frame was written yet).
    private func notify(paused: Bool, generation: Int) {
        guard let rec = active, rec.generation == generation else { return }
        guard rec.began else {
            rec.heldNotices.append(paused)
            return
        }
        if paused {
            rec.delegate.fileOutput(self, didPauseRecordingTo: rec.url, from: rec.connections)
        } else {
            rec.delegate.fileOutput(self, didResumeRecordingTo: rec.url, from: rec.connections)
        }
    }

    /// On the queue, after `didStartRecordingTo`: the notices held until then.
    private func sendHeldNotices(_ rec: Recording) {
        let held = rec.heldNotices
        rec.heldNotices = []
        for paused in held { notify(paused: paused, generation: rec.generation) }
    }

    /// The session the output is in was released while recording: the recording ends as
    /// `stopRecording()` ends it.
    fileprivate func sessionReleased() {
        guard isRecording else { return }
        stopRecording()
    }

    /// Watches the session from inside its event handler: released with the session's
    /// handlers, so when the session is (and not when `removeOutput` disarmed it).
    var sessionWatch: SessionWatch? {
        get { locked { $0.sessionWatch } }
        set { locked { $0.sessionWatch = newValue } }
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
        guard let pixelFormat = sample.pixelFormat, let dims = sample.dimensions else { return }
        if let rec = active, let stopAt = locked({ $0.stopAt }), stopAt < sample.presentationTimeStamp {
            // Every frame captured before the stop is in: the recording ends once the audio is
            // too (this frame and those after it are not part of it).
            rec.videoPastStop = true
            if !endStopIfDone(rec, stopAt) { return }
        }
        guard let rec = active else {
            if let sb = standby, !feed(sb, sample, pixelFormat, dims, connection: connection), sb.format != nil,
                sb.format?.0 != pixelFormat || sb.format?.1 != dims, Self.wanted(pixelFormat, sb.settings)
            {
                // The camera's frames changed: the past kept is of another size; start over.
                sb.writer.close()
                standby = nil
                audioRing = []
                refreshStandby()
                if let fresh = standby { _ = feed(fresh, sample, pixelFormat, dims, connection: connection) }
            }
            return
        }
        if let sb = rec.standby {
            startFromStandby(rec, sb, sample, pixelFormat, dims, connection: connection)
            return
        }
        // Frames asked for before this recording (another product) are not part of it.
        let wanted: Bool = rec.settings.codec == .h264 ? (pixelFormat == .nv12 || pixelFormat == .yuv420) : pixelFormat == .jpeg
        guard wanted, !(sample.presentationTimeStamp < rec.requested) else { return }
        // Captured while paused: not part of the recording, and no loss.
        let pauses = locked { $0.pauses }
        if pauses.contains(sample.presentationTimeStamp) { return }
        if !rec.began {
            // With a microphone, the file opens once its format is known (its first buffer),
            // or without audio after a second of video and no audio.
            let wantsAudio = rec.settings.recordsAudio && audioConsumer.connection(with: .audio) != nil
            let audio = rec.earlyAudio.first?.audioBuffer?.format
            if wantsAudio, audio == nil, sample.presentationTimeStamp - rec.requested < 1_000_000_000 { return }
            let interval = connection.device?.activeVideoMinFrameDuration ?? FrameInterval(framesPerSecond: 30)
            rec.frameNanoseconds = Int64(interval.numerator) * 1_000_000_000 / Int64(max(1, interval.denominator))
            do {
                try rec.writer.begin(
                    .init(width: dims.width, height: dims.height, pixelFormat: pixelFormat, frameInterval: interval),
                    audio: wantsAudio ? audio : nil, settings: rec.settings)
            } catch {
                finish(error: error)
                return
            }
            rec.began = true
            rec.format = (pixelFormat, dims)
            rec.firstTime = sample.presentationTimeStamp
            rec.pauseOrigin = sample.presentationTimeStamp
            rec.resumesPassed = pauses.resumes(before: sample.presentationTimeStamp)
            rec.connections = [connection] + (rec.writer.hasAudio ? audioConsumer.connections : [])
            rec.delegate.fileOutput(self, didStartRecordingTo: rec.url, from: rec.connections)
            sendHeldNotices(rec)
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
            finish(
                error: RecordingError(
                    .formatChanged,
                    "the camera's frames changed from \(rec.format!.1) to \(dims) mid-recording; the file ends before the change"))
            return
        }
        let captured = sample.presentationTimeStamp
        var at = captured - rec.firstTime! - pauses.removed(before: captured, after: rec.pauseOrigin ?? rec.firstTime!)
        // The first frame after a pause starts a run of sequence numbers (those in the pause
        // were neither written nor lost) and a keyframe, and comes at least half a frame after
        // the last one (the pause's cut need not fall midway between two frames).
        let resumes = pauses.resumes(before: captured)
        let resumed = resumes > rec.resumesPassed
        if resumed { at = Swift.max(at, rec.lastNanoseconds + rec.frameNanoseconds / 2) }
        if let max = rec.maxDuration, Duration.nanoseconds(at + rec.frameNanoseconds / 2) > max {
            finish(
                error: RecordingError(
                    .maximumDurationReached, "the recording reached its maximum duration of \(max)",
                    recordingSuccessfullyFinished: true))
            return
        }
        if let max = rec.maxFileSize, rec.writer.fileSize >= max {
            finish(
                error: RecordingError(
                    .maximumFileSizeReached, "the recording reached its maximum file size of \(max) bytes",
                    recordingSuccessfullyFinished: true))
            return
        }
        if resumed {
            rec.resumesPassed = resumes
            rec.writer.nextFrameIsKey = true
        }
        do {
            try rec.writer.write(sample, at: at + (rec.firstTime! - (rec.writerOrigin ?? rec.firstTime!)))
        } catch {
            finish(error: error)
            return
        }
        rec.frames += 1
        rec.lastNanoseconds = at
        rec.noteSequence(sample.sequenceNumber, camera: connection.device?.uniqueID, newRun: resumed)
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
                finish(
                    error: RecordingError(
                        .diskFull, "less than \(min) bytes are free on the disk of \(rec.url.path) (minFreeDiskSpaceLimit)",
                        recordingSuccessfullyFinished: true))
            }
        }
    }

    private static func wanted(_ pixelFormat: PixelFormat, _ settings: MovieOutputSettings) -> Bool {
        settings.codec == .h264 ? (pixelFormat == .nv12 || pixelFormat == .yuv420) : pixelFormat == .jpeg
    }

    /// Pre-record: encodes (or keeps) a frame into the standby writer's ring. False when the
    /// frame is not the product asked for, is of another size than those before, or failed.
    private func feed(
        _ sb: Standby, _ sample: SampleBuffer, _ pixelFormat: PixelFormat, _ dims: VideoDimensions,
        connection: CaptureConnection
    ) -> Bool {
        guard !sb.failed, Self.wanted(pixelFormat, sb.settings) else { return false }
        if let f = sb.format, f.0 != pixelFormat || f.1 != dims { return false }
        if sb.origin == nil {
            let interval = connection.device?.activeVideoMinFrameDuration ?? FrameInterval(framesPerSecond: 30)
            sb.frameNanoseconds = Int64(interval.numerator) * 1_000_000_000 / Int64(max(1, interval.denominator))
            do {
                try sb.writer.begin(
                    standby: .init(width: dims.width, height: dims.height, pixelFormat: pixelFormat, frameInterval: interval),
                    settings: sb.settings)
            } catch {
                // (A recording started now reports the same failure from a writer of its own.)
                sb.failed = true
                return false
            }
            sb.origin = sample.presentationTimeStamp
            sb.format = (pixelFormat, dims)
        }
        let at = sample.presentationTimeStamp - sb.origin!
        do { try sb.writer.write(sample, at: at) } catch {
            sb.failed = true
            return false
        }
        sb.frames.append((at, sample.sequenceNumber))
        if let from = sb.writer.keptRange?.lowerBound, let i = sb.frames.firstIndex(where: { $0.at > from - sb.frameNanoseconds / 2 }),
            i > 0
        {
            sb.frames.removeFirst(i)
        }
        if let from = sb.keptFrom, let i = sb.drops.firstIndex(where: { !($0.time < from) }), i > 0 { sb.drops.removeFirst(i) }
        return true
    }

    /// A recording that starts with pre-record's frames: the frame goes into the ring, then
    /// (once the microphone's format is known, as for any recording) the file is begun with
    /// the kept frames from the keyframe the pre-record duration asks for.
    private func startFromStandby(
        _ rec: Recording, _ sb: Standby, _ sample: SampleBuffer, _ pixelFormat: PixelFormat,
        _ dims: VideoDimensions, connection: CaptureConnection
    ) {
        guard feed(sb, sample, pixelFormat, dims, connection: connection), let origin = sb.origin else {
            if sb.format != nil, Self.wanted(pixelFormat, sb.settings), sb.format?.0 != pixelFormat || sb.format?.1 != dims {
                finish(error: RecordingError(.formatChanged, "the camera's frames changed size before the recording began; start it again"))
            }
            return
        }
        let wantsAudio = rec.settings.recordsAudio && audioConsumer.connection(with: .audio) != nil
        let audio = rec.earlyAudio.first?.audioBuffer?.format
        if wantsAudio, audio == nil, sample.presentationTimeStamp - rec.requested < 1_000_000_000 { return }
        let window = sb.window.components
        let windowNanoseconds = window.seconds * 1_000_000_000 + window.attoseconds / 1_000_000_000
        let attached: (origin: Int64, frames: Int)
        do {
            attached = try rec.writer.attach(
                audio: wantsAudio ? audio : nil, settings: rec.settings,
                from: rec.requested - origin - windowNanoseconds)
        } catch {
            finish(error: error)
            return
        }
        let first = CaptureTime(nanoseconds: origin.nanoseconds &+ UInt64(bitPattern: attached.origin))
        rec.standby = nil
        rec.began = true
        rec.format = sb.format
        rec.frameNanoseconds = sb.frameNanoseconds
        rec.writerOrigin = origin
        rec.firstTime = first
        rec.pauseOrigin = sample.presentationTimeStamp
        rec.resumesPassed = locked { $0.pauses }.resumes(before: sample.presentationTimeStamp)
        // (The origin is on the encoder's 90 kHz clock: within a tick of the frame's time.)
        let written = sb.frames.filter { $0.at > attached.origin - sb.frameNanoseconds / 2 }
        rec.frames = attached.frames
        for f in written { rec.noteSequence(f.sequence) }
        rec.lastNanoseconds = (written.last?.at ?? attached.origin) - attached.origin
        for d in sb.drops where !(d.time < first) { rec.drops[d.reason, default: 0] += d.count }
        rec.connections = [connection] + (rec.writer.hasAudio ? audioConsumer.connections : [])
        let duration = rec.duration, size = rec.writer.fileSize, frames = rec.frames
        locked { s in
            s.duration = duration
            s.fileSize = size
            s.framesWritten = frames
        }
        rec.delegate.fileOutput(self, didStartRecordingTo: rec.url, from: rec.connections)
        sendHeldNotices(rec)
        let early = rec.earlyAudio
        rec.earlyAudio = []
        for a in early {
            guard let pcm = a.audioBuffer else { continue }
            do { try rec.writer.writeAudio(pcm, at: a.presentationTimeStamp - first) } catch {
                finish(error: error)
                return
            }
        }
    }

    /// Keeps `buffers` from the one playing at `from` on (the newest half second when nil).
    private static func trimAudio(_ buffers: inout [SampleBuffer], from: CaptureTime?) {
        if let from {
            var drop = 0
            while drop + 1 < buffers.count, !(from < buffers[drop + 1].presentationTimeStamp) { drop += 1 }
            if drop > 0 { buffers.removeFirst(drop) }
            return
        }
        guard let rate = buffers.first?.audioBuffer?.format.sampleRate else { return }
        while buffers.count > 1,
            Double(buffers.dropFirst().reduce(0) { $0 + ($1.audioBuffer?.frameCount ?? 0) }) / Double(max(1, rate)) > 0.5
        {
            buffers.removeFirst()
        }
    }

    /// Bytes free to an unprivileged writer on the file system of `url`'s folder.
    private static func freeSpace(at url: URL) -> Int64? {
        var st = statvfs()
        let folder = url.deletingLastPathComponent().path
        guard case .success = Syscall.run("statvfs", mock: nil, failure: -1, { statvfs(folder, &st) }) else { return nil }
        return Int64(st.f_bavail) * Int64(st.f_frsize)
    }

    fileprivate func handleAudio(_ sample: SampleBuffer) {
        guard let pcm = sample.audioBuffer else { return }
        guard let rec = active else {
            // Pre-record: as far back as the frames kept.
            if let sb = standby, sb.settings.recordsAudio {
                audioRing.append(sample)
                Self.trimAudio(&audioRing, from: sb.keptFrom)
            }
            return
        }
        guard rec.settings.recordsAudio else { return }
        guard rec.began else {
            // Before the first video frame: the newest half second waits for it (with
            // pre-record, all from the oldest frame kept).
            rec.earlyAudio.append(sample)
            Self.trimAudio(&rec.earlyAudio, from: rec.standby?.keptFrom)
            return
        }
        guard rec.writer.hasAudio else { return }
        // Audio captured after a stop is not part of the recording; the buffer the stop falls
        // in is the last (the recording ends once the video has reached the stop too).
        let (stopAt, pauses) = locked { ($0.stopAt, $0.pauses) }
        if let stopAt {
            let rate = Int64(Swift.max(1, pcm.format.sampleRate))
            let end = CaptureTime(
                nanoseconds: sample.presentationTimeStamp.nanoseconds &+ UInt64(Int64(pcm.frameCount) * 1_000_000_000 / rate))
            if stopAt < end { rec.audioPastStop = true }
            if stopAt < sample.presentationTimeStamp {
                endStopIfDone(rec, stopAt)
                return
            }
        }
        defer {
            if rec.audioPastStop, active === rec, let stopAt { endStopIfDone(rec, stopAt) }
        }
        guard !pauses.spans.isEmpty else {
            writeAudio(pcm, captured: sample.presentationTimeStamp, rec, removed: 0)
            return
        }
        // The parts outside the pauses, each moved earlier by the pauses before it.
        let start = sample.presentationTimeStamp
        let rate = Int64(Swift.max(1, pcm.format.sampleRate))
        let length = Int64(pcm.frameCount) * 1_000_000_000 / rate
        for part in pauses.kept(from: start, nanoseconds: length) {
            // (Rounded to the nearest sample; a part that runs to the end keeps the last one.)
            let from = Int((part.lowerBound * rate + 500_000_000) / 1_000_000_000)
            let to = part.upperBound == length ? pcm.frameCount : Int((part.upperBound * rate + 500_000_000) / 1_000_000_000)
            guard to > from else { continue }
            let piece = from == 0 && to >= pcm.frameCount ? pcm : pcm.frames(from..<to)
            let captured = CaptureTime(nanoseconds: start.nanoseconds &+ UInt64(part.lowerBound))
            writeAudio(piece, captured: captured, rec, removed: pauses.removed(before: captured, after: rec.pauseOrigin ?? rec.firstTime!))
            if active !== rec { return }
        }
    }

    /// On the queue: audio captured at `captured`, less the pauses' `removed` nanoseconds, into
    /// the recording's file.
    private func writeAudio(_ pcm: AudioPCMBuffer, captured: CaptureTime, _ rec: Recording, removed: Int64) {
        let at = captured - rec.firstTime! - removed
        // The limit is on the recorded time line (the capture clock less the pauses): audio past
        // it is left out, and a camera stalled half a second past it does not let the recording
        // run on (otherwise the video's next frame ends it, so that frames still on their way are
        // in). Frames captured and waiting for this recorder (a slow encoder) are not a stall:
        // they are written first.
        if let max = rec.maxDuration, Duration.nanoseconds(at) >= max {
            if Duration.nanoseconds(at) >= max + .milliseconds(500), consumer.framesWaiting == 0 {
                finish(
                    error: RecordingError(
                        .maximumDurationReached, "the recording reached its maximum duration of \(max)",
                        recordingSuccessfullyFinished: true))
            }
            return
        }
        do { try rec.writer.writeAudio(pcm, at: at) } catch { finish(error: error) }
    }

    fileprivate func handleDrop(_ drop: DroppedFrames) {
        if let sb = active?.standby ?? (active == nil ? standby : nil) {
            sb.drops.append(drop)
            return
        }
        guard let rec = active, rec.began, !rec.videoPastStop else { return }
        // A frame lost while paused would not have been written: no loss.
        let (pauses, stopAt) = locked { ($0.pauses, $0.stopAt) }
        if pauses.contains(drop.time) { return }
        var count = drop.count
        // A recorder behind learns of frames lost past the duration limit (or the stop) before
        // it reaches the frame that ends the recording: those are not part of it (counted up to
        // the last frame within, from the last frame written at the camera's frame interval).
        var end: Int64?
        if let max = rec.maxDuration {
            let (s, a) = max.components
            end = s * 1_000_000_000 + a / 1_000_000_000 - rec.frameNanoseconds / 2
        }
        if let stopAt, let first = rec.firstTime {
            let at = stopAt - first - pauses.removed(before: stopAt, after: rec.pauseOrigin ?? first)
            end = Swift.min(end ?? at, at)
        }
        if let end, let seq = drop.sequenceNumber, let last = rec.lastSequence, rec.frameNanoseconds > 0 {
            let lastWithin = Int64(last) + (end - rec.lastNanoseconds) / rec.frameNanoseconds
            count = Int(min(Int64(count), Swift.max(0, lastWithin - Int64(seq) + 1)))
        }
        if count > 0 { rec.drops[drop.reason, default: 0] += count }
    }

    /// Ends the active recording (if any) with `error` (nil: stopped).
    func finish(error: RecordingError?) {
        locked { $0.stopAt = nil }
        guard let rec = active else { return }
        active = nil
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

    /// The session stopped or lost its camera: a recording under way ends with what it has.
    func sessionEvent(_ event: CaptureSession.Event) {
        switch event {
        case .didStopRunning:
            queue.async { [self] in
                finish(error: RecordingError(.sessionStopped, "the session stopped; the file holds what was recorded until then"))
            }
        case .deviceDisconnected(let d):
            queue.async { [self] in
                finish(
                    error: RecordingError(
                        .sessionStopped, "\(d.localizedName) was disconnected; the file holds what was recorded until then"))
            }
        default:
            break
        }
    }
}

/// The consumer's delegate: hands frames and drops to the output, on its recording queue.
private final class RecordingSink: CaptureVideoDataOutputSampleBufferDelegate, CaptureAudioDataOutputSampleBufferDelegate,
    @unchecked Sendable
{
    // Set once, before the consumer delivers anything.
    weak var owner: CaptureMovieFileOutput?
    func captureOutput(_ output: CaptureOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection) {
        if sampleBuffer.mediaType == .audio {
            owner?.handleAudio(sampleBuffer)
        } else {
            owner?.handle(sampleBuffer, connection: connection)
        }
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
        let watch = SessionWatch(output)
        output.sessionWatch = watch
        output.eventToken = addEventHandler { [weak output] event in
            withExtendedLifetime(watch) { output?.sessionEvent(event) }
        }
    }

    /// Removes a movie file output; a recording under way ends as if the session stopped.
    public func removeOutput(_ output: CaptureMovieFileOutput) {
        guard output.consumer.session === self else { return }
        output.sessionWatch?.disarm()
        if let token = output.eventToken { removeEventHandler(token) }
        output.eventToken = nil
        removeFrameConsumer(output.consumer)
        removeOutput(output.audioConsumer)
        output.queue.async { output.finish(error: RecordingError(.sessionStopped, "the movie output was removed from its session")) }
    }
}

/// Held by the movie output's session event handler, so released with the session's handlers:
/// then, unless `removeOutput` disarmed it first, the session is gone and a recording under way
/// is finished as a stop.
final class SessionWatch: @unchecked Sendable {
    private let lock = NSLock()
    private weak var output: CaptureMovieFileOutput?
    private var armed = true
    init(_ output: CaptureMovieFileOutput) { self.output = output }
    func disarm() { lock.withLock { armed = false } }
    deinit {
        if armed { output?.sessionReleased() }
    }
}
