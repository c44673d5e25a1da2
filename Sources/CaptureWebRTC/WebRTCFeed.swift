import CCaptureWebRTCShim
import Capture
import CaptureCodecs
import Foundation

/// The shim's pipeline, freed when the last of its users (the feed, a viewer, an answer under
/// way) lets go of it. Thread-safe (the shim serialises its graph changes).
final class WebRTCGraph: @unchecked Sendable {
    let pointer: OpaquePointer
    init(_ pointer: OpaquePointer) { self.pointer = pointer }
    // (Its queued units are released here, their holds let go.)
    deinit { capture_webrtc_pipeline_free(pointer) }
}

/// The GStreamer graph (the shim's pipeline) and the session's side of it: the shared H.264
/// stage's units and the microphone's buffers go in here, on the stage's and the microphone's
/// threads; a viewer's key-frame request comes back out to the stage. Thread-safe: a lock keeps
/// pushes off a graph being freed.
final class WebRTCFeed: H264Consumer, @unchecked Sendable {
    private let lock = NSLock()
    // Guarded by `lock`.
    private var graph: WebRTCGraph?
    private var audioFormat: AudioFormat?
    private var scratch: [UInt8] = []
    private var failure: H264StageError?
    /// Set once, before the port is in a session.
    weak var port: FrameConsumerPort?
    /// Whether viewers watch: audio is encoded only then (video: the port subscribes only then).
    private var sending = false

    /// Makes the graph (video, and audio when `audio`). Throws when GStreamer lacks an element.
    init(audio: Bool, opusBitrate: Int) throws(WebRTCError) {
        if let missing = capture_webrtc_missing_element() {
            let name = String(cString: missing)
            throw WebRTCError(.missingElement, "GStreamer has no \(name): install Debian's \(Self.package(of: name))")
        }
        var error: UnsafeMutablePointer<CChar>?
        let ctx = Unmanaged.passUnretained(self).toOpaque()
        let made = capture_webrtc_pipeline_new(
            { ctx in Unmanaged<WebRTCFeed>.fromOpaque(ctx!).takeUnretainedValue().port?.requestKeyFrame() }, ctx,
            audio ? 1 : 0, Int32(clamping: opusBitrate), &error)
        guard let made else {
            let text = takeString(error) ?? "GStreamer could not build the WebRTC graph"
            throw WebRTCError(.missingElement, "\(text): check the GStreamer installation (gstreamer1.0-plugins-base, -good, -bad)")
        }
        graph = WebRTCGraph(made)
    }

    deinit { close() }

    /// The Debian package of a GStreamer element the graph uses.
    static func package(of element: String) -> String {
        switch element {
        case "webrtcbin", "dtlssrtpenc", "srtpenc": "gstreamer1.0-plugins-bad"
        case "nicesrc", "nicesink": "gstreamer1.0-nice"
        case "rtph264pay", "rtpopuspay", "rtpbin": "gstreamer1.0-plugins-good"
        case "tee", "queue", "gstreamer": "libgstreamer1.0-0"
        default: "gstreamer1.0-plugins-base"
        }
    }

    /// Lets go of the graph (freed once no viewer or answer holds it); pushes after this do
    /// nothing. Any thread.
    func close() {
        let g = lock.withLock {
            defer { graph = nil }
            return graph
        }
        _ = consume g
    }

    /// The graph, or nil once closed.
    var currentGraph: WebRTCGraph? { lock.withLock { graph } }

    func setSending(_ on: Bool) { lock.withLock { sending = on } }

    /// The stage's failure, if it could not encode.
    var stageFailure: H264StageError? { lock.withLock { failure } }

    // MARK: From the session

    /// A unit into the graph without a copy: held until GStreamer lets go of its buffer.
    func consume(_ unit: H264AccessUnit, from connection: CaptureConnection) {
        lock.withLock {
            guard let graph = graph?.pointer else { return }
            unit.hold()
            let ctx = Unmanaged.passRetained(unit).toOpaque()
            let release: @convention(c) (UnsafeMutableRawPointer?) -> Void = { ctx in
                let u = Unmanaged<H264AccessUnit>.fromOpaque(ctx!).takeRetainedValue()
                u.letGo()
            }
            unit.withUnsafeBytes { bytes in
                if unit.isKeyFrame {
                    // A late joiner (and a browser after a PLI) starts at a key frame with its SPS/PPS.
                    unit.parameterSets.withUnsafeBytes { ps in
                        _ = capture_webrtc_push_video(graph, bytes.baseAddress, bytes.count, ps.baseAddress, ps.count, release, ctx)
                    }
                } else {
                    _ = capture_webrtc_push_video(graph, bytes.baseAddress, bytes.count, nil, 0, release, ctx)
                }
            }
        }
    }

    func h264StageFailed(_ error: H264StageError, from connection: CaptureConnection) {
        lock.withLock { failure = error }
    }

    /// The stage's own drops need nothing here: what is sent stays decodable.
    func consumeDrop(_ drop: DroppedFrames, from connection: CaptureConnection) {}

    /// The microphone's buffer, copied into the graph while viewers watch (interleaved first
    /// when it comes in planes, into a buffer reused from one call to the next).
    func consumeAudio(_ sample: SampleBuffer, from connection: CaptureConnection) {
        guard let pcm = sample.audioBuffer, pcm.frameCount > 0 else { return }
        lock.withLock {
            guard sending, let graph = graph?.pointer else { return }
            let format = pcm.format
            if format != audioFormat {
                audioFormat = format
                capture_webrtc_set_audio_caps(graph, Self.caps(of: format))
            }
            pcm.withUnsafeBytes { bytes in
                if format.isInterleaved || format.channelCount == 1 {
                    _ = capture_webrtc_push_audio(graph, bytes.baseAddress, bytes.count)
                    return
                }
                let size = format.sampleFormat.bytesPerSample, channels = format.channelCount
                if scratch.count < bytes.count { scratch = [UInt8](repeating: 0, count: bytes.count) }
                scratch.withUnsafeMutableBytes { out in
                    for frame in 0..<pcm.frameCount {
                        for c in 0..<channels {
                            let from = (c * pcm.frameCount + frame) * size, to = (frame * channels + c) * size
                            out.baseAddress!.advanced(by: to).copyMemory(from: bytes.baseAddress!.advanced(by: from), byteCount: size)
                        }
                    }
                    _ = capture_webrtc_push_audio(graph, out.baseAddress, bytes.count)
                }
            }
        }
    }

    /// GStreamer's caps for a microphone's format (always interleaved: planes are interleaved here).
    static func caps(of format: AudioFormat) -> String {
        let name =
            switch format.sampleFormat {
            case .s16: "S16LE"
            case .s32: "S32LE"
            case .float32: "F32LE"
            }
        return "audio/x-raw,format=\(name),layout=interleaved,rate=\(format.sampleRate),channels=\(format.channelCount)"
    }
}

/// A C string the shim allocated, as a Swift string; the C string is freed.
func takeString(_ text: UnsafeMutablePointer<CChar>?) -> String? {
    guard let text else { return nil }
    defer { capture_webrtc_string_free(text) }
    return String(cString: text)
}
