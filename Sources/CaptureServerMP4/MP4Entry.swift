import Capture
import CaptureCodecs

/// One place in `/stream.mp4`'s ring, in the order things arrived: a frame's fragment or a
/// microphone packet, held while in the ring and by each client that sends it. A value; its
/// holds are explicit (`hold`, `letGo`). Guarded by the routes' lock.
struct MP4Entry {
    /// The entries' own count (1, 2, ...; 0: an empty place).
    var serial: UInt64 = 0
    /// The init segment it belongs to (`FragmentedMP4Routes.generation`).
    var generation = 0
    /// Frames published up to it (for a client's lag, counted in frames as for video alone).
    var frames: UInt64 = 0
    var video: MP4Fragment?
    /// An AAC packet of the shared audio stage, sent as it is (no copy).
    var audio: AudioPacket?

    var isKey: Bool { video?.isKey ?? false }

    func hold() {
        video?.hold()
        audio?.hold()
    }

    func letGo() {
        video?.letGo()
        audio?.letGo()
    }
}

/// The microphone's side of `/stream.mp4`: a consumer of the session's shared audio stage (AAC,
/// the settings a recording uses, so both share one encode) that hands each packet to the
/// routes. Called on the stage's thread.
final class MP4AudioFeed: AudioPacketConsumer, @unchecked Sendable {
    weak var routes: FragmentedMP4Routes?

    func consumeAudioPacket(_ packet: AudioPacket, from connection: CaptureConnection) {
        routes?.consumeAudio(packet)
    }

    func audioStageFailed(_ error: AudioStageError, from connection: CaptureConnection) {
        routes?.audioStageFailed(error)
    }

    /// The stage's silence fills its own losses; a client's gaps are filled by the client.
    func consumeDrop(_ drop: DroppedFrames, from connection: CaptureConnection) {}
}
