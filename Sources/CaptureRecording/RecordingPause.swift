import Capture
import CaptureSystem
import Foundation

// Pause and resume: the recording's time line leaves the pauses out.
extension CaptureMovieFileOutput {
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
        // H.264 goes on from a key frame: asked for now, so that it is the first frame after.
        if !paused { port.requestKeyFrame() }
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
    func sendHeldNotices(_ rec: Recording) {
        let held = rec.heldNotices
        rec.heldNotices = []
        for paused in held { notify(paused: paused, generation: rec.generation) }
    }
}
