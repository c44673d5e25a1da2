import Capture
import Foundation

/// The audio consumer's delegate: hands the microphone's buffers to the output, on its
/// recording queue. (Audio losses are filled with silence in the file, not counted as frames.)
final class RecordingAudioSink: CaptureAudioDataOutputSampleBufferDelegate, @unchecked Sendable {
    // Set once, before the consumer delivers anything.
    weak var owner: CaptureMovieFileOutput?
    func captureOutput(_ output: CaptureOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection) {
        owner?.handleAudio(sampleBuffer)
    }
}
