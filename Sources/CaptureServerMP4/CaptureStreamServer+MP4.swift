import CaptureCodecs
import CaptureServer

extension CaptureStreamServer {
    /// Adds `/stream.mp4`: the camera as fragmented MP4 (H.264) and, when the session has a
    /// microphone, its sound (AAC-LC, `mp4a.40.2`, 64 kb/s per channel at the microphone's rate) in
    /// a second track, for `<video src>`, MSE, ffplay and VLC, from the session's shared encoders
    /// (H.264: x264 `veryfast`, constant quality 23, a key frame every 30 frames and whenever a
    /// client joins; AAC: the encode a movie output recording AAC shares). The encoders run only
    /// while a client watches. Call before `start()`; throws `.alreadyRunning` after it, and
    /// `.invalidConfiguration` when the path is added already. Any thread.
    public func addFragmentedMP4Stream() throws(CaptureServerError) {
        try addFragmentedMP4Stream(settings: H264Settings(), audio: true)
    }

    /// `addFragmentedMP4Stream()`, with the microphone's sound only when `audio` is true (and the
    /// session has a microphone when the first client comes); false serves the video alone.
    public func addFragmentedMP4Stream(audio: Bool) throws(CaptureServerError) {
        try addFragmentedMP4Stream(settings: H264Settings(), audio: audio)
    }

    /// `addFragmentedMP4Stream(audio:)` with the H.264 stage's settings (a recording with equal
    /// settings shares the encoder).
    package func addFragmentedMP4Stream(settings: H264Settings, audio: Bool = true) throws(CaptureServerError) {
        try add(FragmentedMP4Routes(settings: settings, audio: audio))
    }
}
