import Capture
import CaptureCodecs
import CaptureSystem
import Foundation

// Pre-record: the video (the stage's units, or JPEG) and the audio kept while no recording is
// under way, and a recording that starts with them.
extension CaptureMovieFileOutput {
    /// Pre-record's writer (its ring) and what it was given, while no recording is under way.
    final class Standby {
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
        /// How much longer than `window` the writer keeps: a start waits for the microphone's
        /// format up to 1 s after it was asked (`startFromStandby`), and frames come meanwhile;
        /// kept for `window` alone, the frame of `window` before the start was gone by then (a
        /// second file began 1.9666 s in the past of 2 under load).
        static let startWait = Duration.seconds(1)

        init(window: Duration, settings: MovieOutputSettings, fragment: Duration) {
            self.window = window
            self.settings = settings
            self.fragment = fragment
            writer = MovieWriter(preRecord: window + Self.startWait, fragmentInterval: fragment)
            frames.reserveCapacity(1024)
        }
        var isReady: Bool { origin != nil && !failed && writer.keptRange != nil }
        /// The oldest capture time kept.
        var keptFrom: CaptureTime? {
            guard let origin, let r = writer.keptRange else { return nil }
            return CaptureTime(nanoseconds: origin.nanoseconds &+ UInt64(bitPattern: r.lowerBound))
        }
    }

    /// How much of the past a recording starts with (picamera2's `CircularOutput`, a motion
    /// trigger's "before"). While the output is not recording, the session's H.264 stage encodes
    /// the frames (or they are kept as JPEG for MJPEG) and the newest `preRecordDuration` is kept,
    /// from a keyframe on; `startRecording` then begins the file with the newest keyframe at or
    /// before `preRecordDuration` before the call (so up to one keyframe interval more), and
    /// the microphone's audio from the same time. Memory: the encoded video of this duration
    /// and one second more (a start may wait that long for the microphone) plus one keyframe
    /// interval, and its audio as captured. `.zero` (the default) keeps
    /// nothing, and the output takes frames only while recording. Takes effect at once; changing the
    /// settings or the fragment interval starts the kept past over.
    public var preRecordDuration: Duration {
        get { locked { $0.preRecord } }
        set {
            locked { $0.preRecord = max(newValue, .zero) }
            queue.async { [self] in refreshStandby() }
        }
    }

    /// On the queue: starts, restarts or ends pre-record's writer to match the settings, and
    /// asks the session for its frames (or for none) while no recording is under way.
    func refreshStandby() {
        let connection = port.connection(with: .video)
        let (window, settings, fragment) = locked { s in
            (s.preRecord, connection.flatMap { s.settings[ObjectIdentifier($0)] } ?? s.defaultSettings, s.fragmentInterval)
        }
        if let sb = standby, window == .zero || sb.settings != settings || sb.fragment != fragment || sb.window != window {
            sb.writer.close()
            standby = nil
            audioRing.removeAll()
        }
        guard active == nil else { return }
        if window > .zero, standby == nil, settings.problem == nil {
            standby = Standby(window: window, settings: settings, fragment: fragment)
        }
        // H.264 is kept as the session's shared stage makes it, MJPEG as the session hands it
        // out; idle without pre-record, no frames.
        take(standby?.settings, fragment: fragment)
    }

    /// Whether frames of `pixelFormat` are what a recording with `settings` writes: the shared
    /// stage's units for H.264, JPEG for MJPEG.
    static func wanted(_ pixelFormat: PixelFormat, _ settings: MovieOutputSettings) -> Bool {
        settings.codec == .h264 ? pixelFormat == RecordedFrame.h264 : pixelFormat == .jpeg
    }

    /// Pre-record: keeps a frame (a unit, a JPEG) in the standby writer's ring. False when the
    /// frame is not the product asked for, is of another size than those before, or failed.
    func feed(
        _ sb: Standby, _ frame: RecordedFrame, _ pixelFormat: PixelFormat, _ dims: VideoDimensions,
        connection: CaptureConnection
    ) -> Bool {
        guard !sb.failed, Self.wanted(pixelFormat, sb.settings) else { return false }
        if let f = sb.format, f.0 != pixelFormat || f.1 != dims { return false }
        if sb.origin == nil {
            // What is kept starts at a key frame.
            guard frame.isKeyFrame else { return false }
            let interval = connection.device?.activeVideoMinFrameDuration ?? FrameInterval(framesPerSecond: 30)
            sb.frameNanoseconds = Int64(interval.numerator) * 1_000_000_000 / Int64(max(1, interval.denominator))
            do {
                try sb.writer.begin(
                    standby: .init(width: dims.width, height: dims.height, pixelFormat: pixelFormat, frameInterval: interval),
                    settings: sb.settings, parameterSets: frame.parameterSets)
            } catch {
                // (A recording started now reports the same failure from a writer of its own.)
                sb.failed = true
                return false
            }
            sb.origin = frame.presentationTimeStamp
            sb.format = (pixelFormat, dims)
        }
        let at = frame.presentationTimeStamp - sb.origin!
        do {
            switch frame {
            case .sample(let sample): try sb.writer.write(sample, at: at)
            case .unit(let unit): try sb.writer.write(unit, at: at)
            }
        } catch {
            sb.failed = true
            return false
        }
        sb.frames.append((at, frame.sequenceNumber))
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
    func startFromStandby(
        _ rec: Recording, _ sb: Standby, _ frame: RecordedFrame, _ pixelFormat: PixelFormat,
        _ dims: VideoDimensions, connection: CaptureConnection
    ) {
        guard feed(sb, frame, pixelFormat, dims, connection: connection), let origin = sb.origin else {
            if sb.format != nil, Self.wanted(pixelFormat, sb.settings), sb.format?.0 != pixelFormat || sb.format?.1 != dims {
                finish(error: RecordingError(.formatChanged, "the camera's frames changed size before the recording began; start it again"))
            }
            return
        }
        let wantsAudio = rec.settings.recordsAudio && audioPort.connection(with: .audio) != nil
        let audio = rec.earlyAudio.first?.format
        if wantsAudio, audio == nil, frame.presentationTimeStamp - rec.requested < Standby.startWait.components.seconds * 1_000_000_000 {
            return
        }
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
        rec.pauseOrigin = frame.presentationTimeStamp
        rec.resumesPassed = locked { $0.pauses }.resumes(before: frame.presentationTimeStamp)
        // (The origin is on the encoder's 90 kHz clock: within a tick of the frame's time.)
        let written = sb.frames.filter { $0.at > attached.origin - sb.frameNanoseconds / 2 }
        rec.frames = attached.frames
        for f in written { rec.noteSequence(f.sequence) }
        rec.lastNanoseconds = (written.last?.at ?? attached.origin) - attached.origin
        for d in sb.drops where !(d.time < first) { rec.drops[d.reason, default: 0] += d.count }
        rec.connections = [connection] + (rec.writer.hasAudio ? audioPort.connections : [])
        let duration = rec.duration, size = rec.writer.fileSize, frames = rec.frames
        locked { s in
            s.duration = duration
            s.fileSize = size
            s.framesWritten = frames
        }
        _ = announceStart(rec)
    }
}
