import CCaptureRTSPShim
import Capture
import CaptureCodecs
import CaptureSystem
import Foundation

/// The session's side of the shim's server: the shared H.264 stage's units and the shared AAC
/// stage's packets go in here, on the stages' threads; the server's events (a media built or torn down, a client starting to play)
/// come back out on GStreamer's threads and subscribe the port or ask for a key frame.
/// Thread-safe: a lock keeps pushes off a server being freed.
final class RTSPFeed: H264Consumer, AudioPacketConsumer, @unchecked Sendable {
    private let lock = NSLock()
    /// Guarded by `lock`; nil once closed.
    private var server: OpaquePointer?
    /// Set once, before the port is in a session (the port holds the feed weakly, its owner both).
    weak var port: FrameConsumerPort?
    /// The microphone's port (AAC), when the session has one; set as `port` is.
    weak var audioPort: FrameConsumerPort?
    private let product: EncodedProduct
    private let audioProduct: EncodedProduct
    // Guarded by `lock`.
    private var pushed = 0
    private var failure: String?
    private var audioFormat: AudioStreamFormat?
    private var packetsPushed = 0

    /// The names a request's URL may give (the server's thread asks, for every request).
    let hostNames: HostNames

    init(product: EncodedProduct, audioProduct: EncodedProduct, hostNames: HostNames) {
        self.product = product
        self.audioProduct = audioProduct
        self.hostNames = hostNames
    }

    /// Takes the shim's server (once, right after it is made).
    func attach(_ server: OpaquePointer) { lock.withLock { self.server = server } }

    /// Frees the shim's server (clients closed, media torn down) and unsubscribes; pushes after
    /// this do nothing. Any thread but GStreamer's.
    func close() {
        let s = lock.withLock {
            defer { server = nil }
            return server
        }
        if let s { capture_rtsp_server_free(s) }
        port?.encodedProduct = nil
        audioPort?.encodedProduct = nil
    }

    /// Units the shared media took (each goes to every client).
    var unitsPushed: Int { lock.withLock { pushed } }
    /// AAC packets the shared media took.
    var audioPacketsPushed: Int { lock.withLock { packetsPushed } }

    /// A server event (`capture_rtsp_event`), on a GStreamer thread holding no lock of ours.
    func event(_ kind: Int32) {
        switch kind {
        case Int32(CAPTURE_RTSP_MEDIA_STARTED.rawValue):
            port?.encodedProduct = product
            audioPort?.encodedProduct = audioProduct
        case Int32(CAPTURE_RTSP_MEDIA_ENDED.rawValue):
            port?.encodedProduct = nil
            audioPort?.encodedProduct = nil
        default: port?.requestKeyFrame()
        }
    }

    // MARK: From the session (the stage's thread)

    /// A unit into the shared media without a copy: held until GStreamer lets go of its buffer.
    func consume(_ unit: H264AccessUnit, from connection: CaptureConnection) {
        lock.withLock {
            guard let server else { return }
            unit.hold()
            let ctx = Unmanaged.passRetained(unit).toOpaque()
            let release: @convention(c) (UnsafeMutableRawPointer?) -> Void = { ctx in
                Unmanaged<H264AccessUnit>.fromOpaque(ctx!).takeRetainedValue().letGo()
            }
            let status = unit.withUnsafeBytes { bytes in
                if unit.isKeyFrame {
                    // A client that joins starts at a key frame, with its SPS and PPS.
                    return unit.parameterSets.withUnsafeBytes { ps in
                        capture_rtsp_server_push_video(server, bytes.baseAddress, bytes.count, ps.baseAddress, ps.count, release, ctx)
                    }
                }
                return capture_rtsp_server_push_video(server, bytes.baseAddress, bytes.count, nil, 0, release, ctx)
            }
            if status == 0 { pushed += 1 }
        }
    }

    func h264StageFailed(_ error: H264StageError, from connection: CaptureConnection) {
        lock.withLock { failure = error.message }
    }

    /// The stage's failure, if it could not encode.
    var stageFailure: String? { lock.withLock { failure } }

    /// Raw frames never come: the ports take encoded products only.
    func consume(_ sample: SampleBuffer, from connection: CaptureConnection) {}

    /// The stage's own drops need nothing here: what is sent stays decodable.
    func consumeDrop(_ drop: DroppedFrames, from connection: CaptureConnection) {}

    /// An AAC packet into the shared media (copied); its stream's caps (with the
    /// AudioSpecificConfig) go first, and again when the format changes.
    func consumeAudioPacket(_ packet: AudioPacket, from connection: CaptureConnection) {
        lock.withLock {
            guard let server, let format = packet.format else { return }
            if audioFormat !== format {
                audioFormat = format
                capture_rtsp_server_set_audio_caps(server, Self.caps(of: format))
            }
            let status = packet.withUnsafeBytes { capture_rtsp_server_push_audio(server, $0.baseAddress, $0.count) }
            if status == 0 { packetsPushed += 1 }
        }
    }

    func audioStageFailed(_ error: AudioStageError, from connection: CaptureConnection) {
        lock.withLock { failure = error.message }
    }

    /// GStreamer's caps for the AAC stage's packets (raw AAC with its AudioSpecificConfig).
    static func caps(of format: AudioStreamFormat) -> String {
        let config = format.extradata.map { String(format: "%02x", $0) }.joined()
        return
            "audio/mpeg,mpegversion=4,stream-format=raw,rate=\(format.sampleRate),channels=\(format.channels),codec_data=(buffer)\(config)"
    }
}
