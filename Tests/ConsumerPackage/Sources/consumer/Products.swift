// Every library product, imported as a package author would: each must resolve, build without a
// warning and link (the program's start loads every library they need).
import Capture
import CaptureCodecs
import CapturePreview
import CaptureRTSP
import CaptureRecording
import CaptureServer
import CaptureServerMP4
import CaptureVision
import CaptureVisionPreview
import CaptureVisionServer
import CaptureWebRTC

/// One public type of each product that has one (the bridging products add extensions only).
let linkedProducts: [Any.Type] = [
    CaptureSession.self, VirtualMoviePlayer.self, CaptureVideoPreviewLayer.self, CaptureMovieFileOutput.self,
    CaptureStreamServer.self, MetadataObject.self, MetadataOutlines.self, WebRTCPublisher.self,
    RTSPServer.self,
]

/// The products' outputs join a session as AVFoundation's do (`canAddOutput`, then
/// `addOutput`), are listed in its `outputs` beside the core's, and leave it with `removeOutput`.
func productOutputsAreOutputs(of session: CaptureSession) -> Bool {
    let movie = CaptureMovieFileOutput()
    let metadata = CaptureMetadataOutput()
    session.beginConfiguration()
    if session.canAddOutput(movie) { session.addOutput(movie) }
    if session.canAddOutput(metadata) { session.addOutput(metadata) }
    session.commitConfiguration()
    let listed = session.outputs.contains { $0 === movie } && session.outputs.contains { $0 === metadata }
    let connected = movie.connection(with: .video) != nil && metadata.connection(with: .video) != nil
    session.removeOutput(movie)
    session.removeOutput(metadata)
    return listed && connected && !session.outputs.contains { $0 === movie || $0 === metadata }
}
