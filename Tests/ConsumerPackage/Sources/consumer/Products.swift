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
