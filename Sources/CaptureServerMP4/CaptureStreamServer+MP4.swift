import CaptureCodecs
import CaptureServer

extension CaptureStreamServer {
    /// Adds `/stream.mp4`: the camera as fragmented MP4 (H.264), for `<video src>`, MSE, ffplay
    /// and VLC, from the session's shared H.264 encoder (x264 `veryfast`, constant quality 23, a
    /// key frame every 30 frames and whenever a client joins). The encoder runs only while a
    /// client watches. Call before `start()`; throws `.alreadyRunning` after it, and
    /// `.invalidConfiguration` when the path is added already. Any thread.
    public func addFragmentedMP4Stream() throws(CaptureServerError) {
        try addFragmentedMP4Stream(settings: H264Settings())
    }

    /// `addFragmentedMP4Stream()` with the H.264 stage's settings (a recording with equal settings
    /// shares the encoder).
    package func addFragmentedMP4Stream(settings: H264Settings) throws(CaptureServerError) {
        try add(FragmentedMP4Routes(settings: settings))
    }
}
