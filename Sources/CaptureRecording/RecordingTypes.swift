import Capture
import Foundation

/// Why a recording failed or ended by itself, as the `error` of
/// `fileOutput(_:didFinishRecordingTo:from:error:)` (AVFoundation's `AVError` codes for file
/// outputs). Reaching a limit is reported this way too, with `recordingSuccessfullyFinished`
/// true: the file is complete and playable.
public struct RecordingError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The kinds of failure and of limits reached.
    public enum Code: String, Sendable, Hashable, CaseIterable {
        /// `maxRecordedDuration` was reached (AVFoundation's `maximumDurationReached`).
        case maximumDurationReached
        /// `maxRecordedFileSize` was reached (`maximumFileSizeReached`).
        case maximumFileSizeReached
        /// The destination cannot be created or written (missing folder, no permission), or took
        /// no byte for half a second after a stop (a FIFO with no reader, a stalled reader).
        case cannotWriteFile
        /// The RTSP server refused the stream, was not there, or went away.
        case publishingFailed
        /// The disk filled up while recording (`diskFull`).
        case diskFull
        /// The URL's extension names no container this output writes (`.mp4`, `.mkv`).
        case unsupportedContainer
        /// The codec cannot record this camera's frames (e.g. `.mjpeg` passthrough asked of a
        /// camera whose frames are not JPEG and JPEG encoding turned off).
        case unsupportedCodec
        /// The encoder or the muxer failed.
        case encoderFailed
        /// The output is already recording, or is not in a session with a camera.
        case invalidState
        /// The camera stopped or went away before or while recording (`sessionWasInterrupted`).
        case sessionStopped
        /// The recording ended before its first frame was written (AVFoundation's
        /// `noDataCaptured`), e.g. a duration limit shorter than a frame.
        case noDataCaptured
        /// The camera's frame size or pixel format changed mid-recording.
        case formatChanged
    }

    public var code: Code
    /// One line that says what happened and what to do.
    public var message: String
    /// True when the file is complete and playable although the recording ended by itself (a
    /// limit was reached): AVFoundation's `AVErrorRecordingSuccessfullyFinishedKey`.
    public var recordingSuccessfullyFinished: Bool

    public init(_ code: Code, _ message: String, recordingSuccessfullyFinished: Bool = false) {
        self.code = code
        self.message = message
        self.recordingSuccessfullyFinished = recordingSuccessfullyFinished
    }

    public var description: String { "\(code.rawValue): \(message)" }
}

/// The video codec of a recording.
public enum VideoCodec: String, Sendable, Hashable, CaseIterable {
    /// H.264 through FFmpeg's `libx264` encoder, once per frame for every consumer with the same
    /// settings (the camera's NV12 or I420 frames copied into the encoder, other formats
    /// converted, MJPEG decoded).
    case h264
    /// Motion JPEG: an MJPEG camera's frames are written as they came (Huffman tables inserted
    /// where the camera left them out); a raw camera's frames are encoded by the session's JPEG
    /// stage, once per frame for every consumer that wants the same quality.
    case mjpeg
}

/// The codec of a recording's audio (the session's microphone).
public enum AudioCodec: String, Sendable, Hashable, CaseIterable {
    /// AAC-LC, FFmpeg's native encoder: MP4, Matroska and RTSP.
    case aac
    /// Opus (FFmpeg's `libopus`, else its native encoder): Matroska only; the microphone must
    /// give 48, 24, 16, 12 or 8 kHz; more than two channels keep the first two.
    case opus
    /// Uncompressed 16-bit PCM (`pcm_s16le`): Matroska only.
    case pcm
}

/// The H.264 encoder a recording uses.
public enum H264Encoder: String, Sendable, Hashable, CaseIterable {
    /// x264 in software (any machine; presets and constant quality).
    case libx264
    /// A V4L2 memory-to-memory hardware encoder (e.g. a Raspberry Pi 4's), through FFmpeg's
    /// `h264_v4l2m2m`: bitrate only (a quality setting becomes about 0.1 bit per pixel); the
    /// recording ends with `.unsupportedCodec` on a machine without one.
    case v4l2m2m = "h264_v4l2m2m"
}

/// What a movie file output records from one connection (AVFoundation's output settings
/// dictionary, typed).
public struct MovieOutputSettings: Sendable, Hashable {
    /// How H.264 spends bits.
    public enum RateControl: Sendable, Hashable {
        /// Constant quality: x264's CRF, 0 (lossless) to 51 (worst); 23 is x264's default.
        case quality(Int)
        /// Average bitrate in bits per second.
        case bitrate(Int)
    }

    public var codec: VideoCodec
    /// H.264 only.
    public var rateControl: RateControl
    /// H.264 only: frames from one keyframe to the next; nil: one keyframe per
    /// `movieFragmentInterval`, so that every fragment starts with one.
    public var keyframeInterval: Int?
    /// H.264 only: the encoder (the summary's `encoder` says which ran).
    public var h264Encoder: H264Encoder
    /// H.264 only: the x264 preset (`ultrafast` ... `veryslow`).
    public var preset: String
    /// MJPEG from a raw camera only: the JPEG quality, 1 to 100.
    public var jpegQuality: Int
    /// Whether the session's microphone, when it has one, is recorded too (on the capture
    /// clock the video uses).
    public var recordsAudio: Bool
    /// The audio's codec: AAC (the default; the only one MP4 and RTSP take here), or Opus or
    /// PCM in Matroska. Another in MP4 ends the recording at its start with `.unsupportedCodec`.
    public var audioCodec: AudioCodec

    public init(
        codec: VideoCodec = .h264, rateControl: RateControl = .quality(23), keyframeInterval: Int? = nil,
        preset: String = "veryfast", jpegQuality: Int = 85, recordsAudio: Bool = true,
        h264Encoder: H264Encoder = .libx264, audioCodec: AudioCodec = .aac
    ) {
        self.audioCodec = audioCodec
        self.h264Encoder = h264Encoder
        self.recordsAudio = recordsAudio
        self.codec = codec
        self.rateControl = rateControl
        self.keyframeInterval = keyframeInterval
        self.preset = preset
        self.jpegQuality = jpegQuality
    }

    /// The problem with these settings, in one line, or nil.
    var problem: String? {
        if case .quality(let q) = rateControl, !(0...51).contains(q) { return "H.264 quality (CRF) must be 0...51, not \(q)" }
        if case .bitrate(let b) = rateControl, b < 1000 { return "H.264 bitrate must be at least 1000 bit/s, not \(b)" }
        if let k = keyframeInterval, k < 1 { return "the keyframe interval must be at least 1 frame, not \(k)" }
        guard
            ["ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow", "slower", "veryslow", "placebo"]
                .contains(preset)
        else { return "unknown x264 preset '\(preset)'" }
        guard (1...100).contains(jpegQuality) else { return "JPEG quality must be 1...100, not \(jpegQuality)" }
        return nil
    }
}

/// The container a URL's extension names.
enum MovieContainer: Sendable {
    case mp4, matroska
    /// Publishing to an RTSP server (ANNOUNCE/RECORD), not a file.
    case rtsp

    init?(url: URL) {
        if url.scheme?.lowercased() == "rtsp" {
            self = .rtsp
            return
        }
        guard url.isFileURL else { return nil }
        switch url.pathExtension.lowercased() {
        case "mp4", "m4v", "mov": self = .mp4
        case "mkv": self = .matroska
        default: return nil
        }
    }

    /// FFmpeg's muxer name.
    var muxer: String {
        switch self {
        case .mp4: "mp4"
        case .matroska: "matroska"
        case .rtsp: "rtsp"
        }
    }
}

/// Receives the start and the end of each recording, as `AVCaptureFileOutputRecordingDelegate`.
/// Called on the output's recording queue, one call at a time, in order; return quickly.
public protocol CaptureFileOutputRecordingDelegate: AnyObject, Sendable {
    /// The first frame was written: the file exists and grows from here.
    func fileOutput(_ output: CaptureMovieFileOutput, didStartRecordingTo fileURL: URL, from connections: [CaptureConnection])
    /// `pauseRecording()` took effect: what is captured from its call on is not written. After
    /// `didStartRecordingTo` (a pause made before the first frame is told once it is written).
    func fileOutput(_ output: CaptureMovieFileOutput, didPauseRecordingTo fileURL: URL, from connections: [CaptureConnection])
    /// `resumeRecording()` took effect: what is captured from its call on is written again,
    /// right after what came before the pause in the file's time line.
    func fileOutput(_ output: CaptureMovieFileOutput, didResumeRecordingTo fileURL: URL, from connections: [CaptureConnection])
    /// The recording ended and the file is closed. `error` is nil after `stopRecording()`; when a
    /// limit ended it, `error.recordingSuccessfullyFinished` is true and the file is complete;
    /// otherwise the file holds what was written up to the failure (nothing for a destination
    /// that could not be created).
    func fileOutput(
        _ output: CaptureMovieFileOutput, didFinishRecordingTo outputFileURL: URL, from connections: [CaptureConnection],
        error: RecordingError?)
}

extension CaptureFileOutputRecordingDelegate {
    public func fileOutput(_ output: CaptureMovieFileOutput, didStartRecordingTo fileURL: URL, from connections: [CaptureConnection]) {}
    public func fileOutput(_ output: CaptureMovieFileOutput, didPauseRecordingTo fileURL: URL, from connections: [CaptureConnection]) {}
    public func fileOutput(_ output: CaptureMovieFileOutput, didResumeRecordingTo fileURL: URL, from connections: [CaptureConnection]) {}
}

/// What one recording wrote.
public struct RecordingSummary: Sendable, Hashable {
    /// The file.
    public var url: URL
    /// Video frames written.
    public var framesWritten: Int
    /// Frames lost while recording, by reason (reported by the session: the recorder itself
    /// never discards a frame it was given).
    public var framesDropped: [DropReason: Int]
    /// Media duration: from the first frame to the end of the last one, pauses left out.
    public var duration: Duration
    /// Bytes in the file.
    public var fileSize: Int64
    /// The encoder that ran (`libx264`, `h264_v4l2m2m`), or `passthrough` for camera JPEG written as it came.
    public var encoder: String
    /// Audio written (silence for gaps included), or nil for a recording without audio.
    public var audioDuration: Duration?
    /// The camera's sequence numbers of the first and last frames written; nil when none was,
    /// or when the recording spans more than one run of them (see `sequenceRuns`).
    public var sequenceRange: ClosedRange<UInt64>? {
        get { sequenceRuns.count == 1 ? sequenceRuns[0] : nil }
        set { sequenceRuns = newValue.map { [$0] } ?? [] }
    }
    /// The camera's sequence numbers of the frames written, one range per run: a run ends where
    /// the numbers start over or go back (the session switched to another camera mid-recording,
    /// whose numbers begin at 0), and at each resume after a pause (the frames captured while
    /// paused are neither written nor dropped). Frames written = the ranges' counts less the frames dropped
    /// within them.
    public var sequenceRuns: [ClosedRange<UInt64>] = []
    /// nil when stopped by `stopRecording()`; the limit or the failure otherwise.
    public var error: RecordingError?
}
