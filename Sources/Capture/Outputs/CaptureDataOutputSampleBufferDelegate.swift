/// The methods shared by the video and audio data outputs' delegates. Declared once here so that
/// one class adopting both ``CaptureVideoDataOutputSampleBufferDelegate`` and
/// ``CaptureAudioDataOutputSampleBufferDelegate`` (as AVFoundation apps do) meets a single
/// requirement and a single default for each method, with or without its own `didDrop`.
public protocol CaptureDataOutputSampleBufferDelegate: AnyObject, Sendable {
    /// A new frame or block of audio from `output`. Holding `sampleBuffer` keeps its driver
    /// buffer; let go promptly.
    func captureOutput(_ output: CaptureOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection)
    /// Frames (video) or audio frames that were lost, and why. Does nothing unless implemented.
    func captureOutput(_ output: CaptureOutput, didDrop drop: DroppedFrames, from connection: CaptureConnection)
}

extension CaptureDataOutputSampleBufferDelegate {
    public func captureOutput(_ output: CaptureOutput, didDrop drop: DroppedFrames, from connection: CaptureConnection) {}
}
