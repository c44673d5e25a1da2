import Capture
import CaptureSystem
import Foundation

// One recording's state, on the recording queue from its start to its finish.
extension CaptureMovieFileOutput {
    final class Recording {
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
        /// audio stream; the packets from that frame's time on are written).
        var earlyAudio = HeldAudio()
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
        /// The video reached the duration limit: the recording ends once the audio does too
        /// (its stage lags the video by its encoder's delay, more on a loaded machine).
        var videoPastLimit = false
        /// When the last audio packet came (a stalled stage is not waited for).
        var lastAudio = CaptureTime.now()
        /// When the last video entry (a unit, a frame, a loss) came: a camera between two frames
        /// (slow on a loaded machine) is not a stalled one.
        var lastVideo = CaptureTime.now()
        /// A unit was lost (or a pause ended): the video goes on from the next key frame.
        var awaitingKey = false
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
}
