// What `capture audio` and `capture stream --audio` do with a microphone's buffers: count them,
// keep the peak level and, for audio, write them to a WAV file.
import Capture
import Foundation

/// Writes audio buffers to a WAV file and keeps the counts and the peak level. With `seconds`,
/// it keeps exactly that many seconds of samples (rounded to a whole frame at the device's rate,
/// the last buffer cut), then signals `done`: a timer would lose the time the device takes to
/// deliver its first period and cut the file short.
final class AudioRecorder: CaptureAudioDataOutputSampleBufferDelegate, CaptureVideoDataOutputSampleBufferDelegate, @unchecked Sendable {
    let lock = NSLock()
    var writer: WAVFileWriter?
    let path: String?
    let seconds: Double?
    var frames = 0, buffers = 0, lostFrames = 0
    /// Frames to keep, once the first buffer has told the rate.
    var limit: Int?
    var peak: Float = AudioChannelLevel.silence
    var format: AudioFormat?
    var firstTime: CaptureTime?
    var error: CaptureError?
    let done = DispatchSemaphore(value: 0)
    init(path: String?, seconds: Double? = nil) {
        self.path = path
        self.seconds = seconds
    }
    func captureOutput(_ output: CaptureOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection) {
        guard let pcm = sampleBuffer.audioBuffer else { return }
        lock.withLock {
            if limit == nil, let seconds { limit = max(1, Int((seconds * Double(pcm.format.sampleRate)).rounded())) }
            let keep = limit.map { min(pcm.frameCount, $0 - frames) } ?? pcm.frameCount
            guard keep > 0, error == nil else { return }
            do throws(CaptureError) {
                if writer == nil, let path { writer = try WAVFileWriter(path: path, format: pcm.format) }
                if let writer {
                    if keep == pcm.frameCount {
                        try writer.write(pcm)
                    } else {
                        try writer.write(pcm.data.prefix(keep * pcm.format.bytesPerFrame))
                    }
                }
            } catch {
                self.error = error
                done.signal()
                return
            }
            if firstTime == nil { firstTime = sampleBuffer.presentationTimeStamp }
            format = pcm.format
            frames += keep
            buffers += 1
            for l in pcm.channelLevels { peak = max(peak, l.peakHoldLevel) }
            if frames == limit { done.signal() }
        }
    }
    func captureOutput(_ output: CaptureOutput, didDrop drop: DroppedFrames, from connection: CaptureConnection) {
        lock.withLock { if limit == nil || frames < limit! { lostFrames += drop.count } }
    }
}
