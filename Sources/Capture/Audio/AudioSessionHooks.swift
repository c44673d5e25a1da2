// Where the session meets the audio layer. Created by the lead as stubs; the audio engineer
// owns this file and replaces the bodies.

extension CaptureSession {
    /// Makes the runner that reads an audio input while the session runs.
    func makeAudioRunner(for input: CaptureDeviceInput, connections: [CaptureConnection]) throws(CaptureError) -> any InputRunner {
        throw CaptureError(.unsupportedFormat, "audio capture is not available yet")
    }
}

extension CaptureDeviceInput {
    /// Checks that an audio device can be opened (throws .noSuchDevice, .deviceBusy, .permissionDenied).
    static func checkAudioDevice(_ device: CaptureDevice) throws(CaptureError) {
        throw CaptureError(.unsupportedFormat, "audio capture is not available yet")
    }
}
