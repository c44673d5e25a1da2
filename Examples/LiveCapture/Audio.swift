import Capture
import Foundation

/// Adds the audio side of seed 004 when the library has audio capture (see issue 6).
enum LiveAudio {
    static func attach(to session: CaptureSession, device: String?, receiver: Receiver) {
        guard device != nil else { return }
        print("audio: not available in this build")
    }
}
