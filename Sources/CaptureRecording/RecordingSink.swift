import Capture
import CaptureSystem
import Foundation

/// The consumer's delegate: hands frames and drops to the output, on its recording queue.
final class RecordingSink: CaptureVideoDataOutputSampleBufferDelegate, CaptureAudioDataOutputSampleBufferDelegate,
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
