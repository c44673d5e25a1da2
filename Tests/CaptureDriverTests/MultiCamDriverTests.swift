// CaptureMultiCamSession against two vivid instances (n_devs=2) in the VM, at a small size:
// frames from both, each only on its own output, paired by timestamp within one frame interval.
import CaptureBackend
import Capture
import CaptureTestSupport
import Foundation
import Testing

@Suite(.serialized, .timeLimit(.minutes(3))) struct MultiCamDriverTests {
    @Test func twoVividCamerasGivePairedFrames() throws {
        let cams = try VM.vividCameras()
        try MultiCamFlows.pairedFrames(cams[0], cams[1], preset: .low, frames: 20, timeout: 60)
    }
}
