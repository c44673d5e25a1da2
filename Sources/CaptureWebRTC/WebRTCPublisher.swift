import CCaptureWebRTCShim
import Capture
import CaptureCodecs
import Foundation

/// Sends a session's camera (H.264) and microphone (Opus) to browsers over WebRTC: the engine of a
/// WHEP endpoint. Each viewer comes with a browser's SDP offer (`answer(offer:)`: offer text in,
/// answer text and the viewer's ID out) and ends with `end(id:)`, or by itself: when its
/// connection fails or its DTLS closes, when it has not connected `Configuration.connectTimeout`
/// after its answer, or when nothing has come from it for `Configuration.silenceTimeout` (a
/// browser sends RTCP every second or more often; a closed tab, a killed browser or a lost network
/// sends nothing). A viewer that goes without a DELETE never keeps its place.
///
/// The video is the session's shared H.264 encode (one per frame for every consumer with the same
/// settings: another viewer, a recording), never encoded again: GStreamer only packetizes it, once
/// per payload type, and a `webrtcbin` per viewer sends it. The microphone (the session's audio
/// input, when it has one at `init`) is encoded to Opus once for all viewers. Each viewer reads
/// through a bounded queue of its own: one that falls behind loses its oldest packets (counted in
/// `viewers`), and never slows capture or the other viewers. A browser's key-frame request
/// (PLI/FIR), and a viewer that just connected, get a key frame from the shared encoder.
/// The encoder runs only while someone watches.
///
/// ICE: host candidates on `Configuration.iceAddresses` (a server's `serveWebRTC` keeps them to
/// the addresses it listens on: loopback only for 127.0.0.1), plus a STUN server's when
/// configured; the answer carries all of them (no trickle).
///
/// Thread-safe: every method and property may be used from any thread. `answer(offer:)` waits
/// (off the caller's thread) for ICE gathering, at most `Configuration.gatheringTimeout`.
public final class WebRTCPublisher: @unchecked Sendable {
    /// How the publisher encodes and whom it takes.
    public struct Configuration: Sendable, Hashable {
        /// The H.264 bitrate in bits per second (the camera's size and rate are the session's).
        public var bitrate: Int
        /// Frames from one key frame to the next; viewers that join or ask get one sooner.
        public var keyFrameInterval: Int
        /// x264's preset: `ultrafast` (the default) gives constrained baseline, which every
        /// browser decodes; slower presets give High profile at a smaller size.
        public var preset: String
        /// Opus bitrate in bits per second.
        public var audioBitrate: Int
        /// A STUN server (`host:port`) for a server-reflexive candidate, or nil (host candidates only).
        public var stunServer: String?
        /// Viewers at most at once; `answer(offer:)` refuses more with `.tooManyViewers`.
        public var maxViewers: Int
        /// How long an answer waits for ICE gathering to complete.
        public var gatheringTimeout: Duration
        /// A viewer not connected (ICE and DTLS) this long after its answer ends.
        public var connectTimeout: Duration
        /// A connected viewer from which nothing (RTCP, DTLS) has come for this long ends.
        public var silenceTimeout: Duration
        /// The IP addresses ICE offers candidates on, e.g. `["127.0.0.1"]`; nil for every
        /// interface, unless the server the publisher is served on narrows it to its own address.
        public var iceAddresses: [String]?

        public init(
            bitrate: Int = 2_000_000, keyFrameInterval: Int = 60, preset: String = "ultrafast", audioBitrate: Int = 64000,
            stunServer: String? = nil, maxViewers: Int = 16, gatheringTimeout: Duration = .seconds(3),
            connectTimeout: Duration = .seconds(12), silenceTimeout: Duration = .seconds(5), iceAddresses: [String]? = nil
        ) {
            self.bitrate = bitrate
            self.keyFrameInterval = keyFrameInterval
            self.preset = preset
            self.audioBitrate = audioBitrate
            self.stunServer = stunServer
            self.maxViewers = maxViewers
            self.gatheringTimeout = gatheringTimeout
            self.connectTimeout = connectTimeout
            self.silenceTimeout = silenceTimeout
            self.iceAddresses = iceAddresses
        }
    }

    public let configuration: Configuration
    /// Whether the microphone is sent (the session had an audio input at `init`).
    public let sendsAudio: Bool
    let feed: WebRTCFeed
    private let videoPort: FrameConsumerPort
    private let audioPort: FrameConsumerPort?
    private let product: EncodedProduct
    /// The shared H.264 stage's settings the viewers take: another consumer with equal settings
    /// (the server's fragmented MP4, a recording) shares the encode.
    package let h264Settings: H264Settings
    private weak var session: CaptureSession?
    private let lock = NSLock()
    // Guarded by `lock`.
    private var viewersByID: [String: Viewer] = [:]
    /// Answers under way (they count against `maxViewers`).
    private var pending = 0
    private var stopped = false
    /// The addresses ICE gathers on (nil: every interface).
    private var candidateAddresses: [String]?
    /// Ends the viewers that never connected or went silent (see `watch()`).
    private let watchdog: DispatchSourceTimer
    /// When each connected viewer was last heard from, and its count then. Only on the watchdog's queue.
    private var heard: [String: (packets: UInt64, at: ContinuousClock.Instant)] = [:]
    /// Serialises freeing viewers with reading their counts (the shim's viewer is not shared-safe).
    private let viewerLock = NSLock()
    /// Packets a viewer's queue holds at most per medium (about half a second of 720p video).
    static let queuePackets: Int32 = 256

    /// A publisher of `session`'s camera (and microphone, when the session has an audio input).
    /// It joins the session as a frame consumer; nothing is encoded until a viewer comes.
    /// Throws `.missingElement` (with the Debian package to install) when GStreamer lacks a part.
    public init(session: CaptureSession, configuration: Configuration = .init()) throws(WebRTCError) {
        guard configuration.maxViewers > 0, configuration.bitrate > 0, configuration.connectTimeout > .zero,
            configuration.silenceTimeout > .zero
        else {
            throw WebRTCError(.negotiationFailed, "maxViewers, bitrate and the time-outs must be positive")
        }
        candidateAddresses = configuration.iceAddresses
        watchdog = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "swift-capture.webrtc.watchdog"))
        self.configuration = configuration
        self.session = session
        sendsAudio = session.inputs.contains { $0.mediaTypes.contains(.audio) }
        // The Opus branch even without a microphone (it then never sends): an offer's audio left
        // to webrtcbin gets a transceiver of webrtcbin's own, and the browser then takes none of
        // the video's packets (seen with Chromium and GStreamer 1.22).
        feed = try WebRTCFeed(audio: true, opusBitrate: configuration.audioBitrate)
        h264Settings = H264Settings(
            encoder: "libx264", preset: configuration.preset, rateControl: .bitrate(configuration.bitrate),
            keyFrameInterval: configuration.keyFrameInterval)
        product = h264Settings.product
        videoPort = FrameConsumerPort(encodedFor: feed)
        audioPort = sendsAudio ? FrameConsumerPort(audioFor: feed) : nil
        feed.port = videoPort
        _ = session.addFrameConsumer(videoPort)
        if let audioPort { _ = session.addFrameConsumer(audioPort) }
        watchdog.schedule(deadline: .now() + Self.watchInterval, repeating: Self.watchInterval, leeway: .milliseconds(100))
        watchdog.setEventHandler { [weak self] in self?.watch() }
        watchdog.resume()
    }

    deinit { stop() }

    /// How often the watchdog looks at the viewers.
    static let watchInterval = DispatchTimeInterval.milliseconds(500)

    /// Keeps ICE to the address a server listens on: loopback for 127.0.0.1 or localhost, that
    /// address for another literal address, every interface for 0.0.0.0, :: (or a host name).
    /// Leaves `Configuration.iceAddresses` when it was given. Viewers that come later use it.
    package func keepCandidates(toServerHost host: String) {
        guard configuration.iceAddresses == nil else { return }
        let addresses: [String]? =
            switch host.lowercased() {
            case "localhost": ["127.0.0.1"]
            case "0.0.0.0", "::", "", "*": nil
            default: Self.isAddress(host) ? [host] : nil
            }
        lock.withLock { candidateAddresses = addresses }
    }

    private static func isAddress(_ text: String) -> Bool {
        var bytes = in6_addr()
        return inet_pton(AF_INET, text, &bytes) == 1 || inet_pton(AF_INET6, text, &bytes) == 1
    }

    /// The addresses ICE gathers on now (nil: every interface).
    public var iceAddresses: [String]? { lock.withLock { candidateAddresses } }

    /// Ends each viewer not connected `connectTimeout` after its answer, and each connected one
    /// silent for `silenceTimeout`. On the watchdog's queue.
    private func watch() {
        let now = ContinuousClock.now
        let all = lock.withLock { viewersByID.map { ($0.key, $0.value) } }
        heard = heard.filter { id, _ in all.contains { $0.0 == id } }
        var ending: [String] = []
        for (id, v) in all {
            let received: UInt64? = viewerLock.withLock {
                guard lock.withLock({ viewersByID[id] != nil }) else { return nil }
                return capture_webrtc_viewer_stats(v.pointer).packets_received
            }
            guard let received else { continue }
            guard v.handle.connectedAfter != nil else {
                if now - v.handle.created > configuration.connectTimeout { ending.append(id) }
                continue
            }
            if let last = heard[id], last.packets == received {
                if now - last.at > configuration.silenceTimeout { ending.append(id) }
            } else {
                heard[id] = (received, now)
            }
        }
        for id in ending { end(id: id) }
    }

    /// Answers a browser's SDP offer (recvonly video, H.264 with packetization-mode=1; audio
    /// optional) with a new viewer: returns its ID (for `end(id:)` and a WHEP resource URL) and
    /// the SDP answer with every ICE candidate. Bad offers throw `.invalidOffer`, `.noVideo` or
    /// `.noH264` and change nothing; a full house throws `.tooManyViewers`.
    public func answer(offer sdp: String) async throws(WebRTCError) -> (id: String, answer: String) {
        let result: Result<(id: String, answer: String), WebRTCError> = await withCheckedContinuation { done in
            DispatchQueue.global(qos: .userInitiated).async { done.resume(returning: self.answerNow(offer: sdp)) }
        }
        return try result.get()
    }

    /// `answer(offer:)` for a caller on a thread that may wait (an HTTP handler's): blocks until
    /// ICE gathering is complete, at most `Configuration.gatheringTimeout`.
    public func answerBlocking(offer sdp: String) throws(WebRTCError) -> (id: String, answer: String) {
        try answerNow(offer: sdp).get()
    }

    private func answerNow(offer sdp: String) -> Result<(id: String, answer: String), WebRTCError> {
        let offer: WebRTCOffer
        do throws(WebRTCError) { offer = try WebRTCOffer(sdp) } catch { return .failure(error) }
        if let f = feed.stageFailure { return .failure(WebRTCError(.encoderFailed, "the H.264 encoder failed: \(f.message)")) }
        let refused: WebRTCError? = lock.withLock {
            if stopped { return WebRTCError(.stopped, "the WebRTC publisher was stopped") }
            guard viewersByID.count + pending < configuration.maxViewers else {
                return WebRTCError(
                    .tooManyViewers, "\(configuration.maxViewers) viewers watch already: end one, or raise maxViewers")
            }
            pending += 1
            return nil
        }
        if let refused { return .failure(refused) }
        let id = UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "")
        let handle = ViewerHandle(id: id, publisher: self)
        let made = makeViewer(offer: sdp, parsed: offer, handle: handle)
        let outcome: Result<(id: String, answer: String), WebRTCError> = lock.withLock {
            pending -= 1
            switch made {
            case .failure(let e): return .failure(e)
            case .success(let (viewer, answer)):
                if stopped { return .failure(WebRTCError(.stopped, "the WebRTC publisher was stopped")) }
                viewersByID[id] = viewer
                return .success((id, answer))
            }
        }
        if case .success(let (viewer, _)) = made, case .failure = outcome { release(viewer) }
        updateSubscription()
        return outcome
    }

    /// The shim's viewer for an offer, and its answer.
    private func makeViewer(
        offer sdp: String, parsed offer: WebRTCOffer, handle: ViewerHandle
    ) -> Result<(Viewer, String), WebRTCError> {
        guard let graph = feed.currentGraph else { return .failure(WebRTCError(.stopped, "the WebRTC publisher was stopped")) }
        let ctx = Unmanaged.passRetained(handle).toOpaque()
        let stun = configuration.stunServer.map { $0.hasPrefix("stun://") ? $0 : "stun://\($0)" }
        let timeout = Int32(
            clamping: configuration.gatheringTimeout.components.seconds * 1000
                + configuration.gatheringTimeout.components.attoseconds / 1_000_000_000_000_000)
        var answer: UnsafeMutablePointer<CChar>?
        var error: UnsafeMutablePointer<CChar>?
        let addresses = lock.withLock { candidateAddresses }?.joined(separator: ",")
        // (Payload types are within RTP's 0-127: `WebRTCOffer` refuses any other.)
        let pointer = capture_webrtc_viewer_new(
            graph.pointer, sdp, Int32(offer.videoPayloadType), Int32(offer.audioPayloadType ?? -1), stun, addresses,
            Self.queuePackets, timeout,
            { ctx, state in Unmanaged<ViewerHandle>.fromOpaque(ctx!).takeUnretainedValue().stateChanged(state) }, ctx,
            &answer, &error)
        guard let pointer else {
            Unmanaged<ViewerHandle>.fromOpaque(ctx).release()
            let text = takeString(error) ?? "no reason given"
            return .failure(WebRTCError(.negotiationFailed, "GStreamer could not answer the offer: \(text)"))
        }
        let viewer = Viewer(pointer: pointer, graph: graph, handle: handle, hasAudio: offer.audioPayloadType != nil && sendsAudio)
        let text = takeString(answer) ?? ""
        // webrtcbin rejects an m-line it cannot serve with port 0: an answer without video is none.
        let video = text.split(whereSeparator: \.isNewline).first { $0.hasPrefix("m=video") }
        guard let video, !video.hasPrefix("m=video 0 "), text.contains("H264/90000") else {
            release(viewer)
            return .failure(
                WebRTCError(
                    .negotiationFailed, "GStreamer could not agree on H.264 with the offer (payload type \(offer.videoPayloadType))"))
        }
        return .success((viewer, text))
    }

    /// Ends the viewer `id` (a WHEP DELETE): its connection closes and everything it used is
    /// freed before this returns. False when no viewer has this ID.
    @discardableResult
    public func end(id: String) -> Bool {
        guard let v = lock.withLock({ viewersByID.removeValue(forKey: id) }) else { return false }
        release(v)
        updateSubscription()
        return true
    }

    /// Ends every viewer and leaves the session; the publisher answers no more offers (`.stopped`).
    public func stop() {
        watchdog.cancel()
        let all: [Viewer] = lock.withLock {
            stopped = true
            defer { viewersByID = [:] }
            return Array(viewersByID.values)
        }
        for v in all { release(v) }
        session?.removeFrameConsumer(videoPort)
        if let audioPort { session?.removeFrameConsumer(audioPort) }
        feed.close()
    }

    /// Frees a viewer in the shim and lets go of its handle.
    private func release(_ viewer: Viewer) {
        viewerLock.withLock { capture_webrtc_viewer_free(viewer.graph.pointer, viewer.pointer) }
        Unmanaged.passUnretained(viewer.handle).release()
    }

    /// The encoder runs while someone watches (and audio is encoded then).
    private func updateSubscription() {
        let watching = lock.withLock { !viewersByID.isEmpty || pending > 0 }
        let wanted: EncodedProduct? = watching ? product : nil
        if videoPort.encodedProduct != wanted { videoPort.encodedProduct = wanted }
        feed.setSending(watching)
    }

    /// A viewer's connection failed or closed (the browser went without a DELETE): it ends.
    fileprivate func connectionEnded(_ id: String) {
        DispatchQueue.global().async { [weak self] in self?.end(id: id) }
    }

    /// Viewers now.
    public var viewerCount: Int { lock.withLock { viewersByID.count } }

    /// Each viewer's state and counts, in no particular order.
    public var viewers: [WebRTCViewerStatistics] {
        let all = lock.withLock { viewersByID.map { ($0.key, $0.value) } }
        return viewerLock.withLock {
            all.compactMap { id, v in
                // (Ended meanwhile: its pointer may be freed; skip it.)
                guard lock.withLock({ viewersByID[id] != nil }) else { return nil }
                let s = capture_webrtc_viewer_stats(v.pointer)
                return WebRTCViewerStatistics(
                    id: id, state: .init(rawValue: Int(s.connection_state)) ?? .new, framesSent: Int(s.video_frames_sent),
                    videoPacketsSent: Int(s.video_packets_sent), videoPacketsDropped: Int(s.video_packets_dropped),
                    audioPacketsSent: Int(s.audio_packets_sent), audioPacketsDropped: Int(s.audio_packets_dropped),
                    hasAudio: v.hasAudio, connectedAfter: v.handle.connectedAfter,
                    videoPacketsWithPlayoutDelay: Int(s.video_packets_with_playout_delay))
            }
        }
    }

    private struct Viewer {
        var pointer: OpaquePointer
        /// The graph it is in (kept until the viewer is freed).
        var graph: WebRTCGraph
        var handle: ViewerHandle
        var hasAudio: Bool
    }
}

/// What the shim's state callback reaches (on a GStreamer thread): the viewer's ID, when it
/// connected, and its publisher. Thread-safe.
final class ViewerHandle: @unchecked Sendable {
    let id: String
    private weak var publisher: WebRTCPublisher?
    let created = ContinuousClock.now
    private let lock = NSLock()
    private var connected: Duration?

    init(id: String, publisher: WebRTCPublisher) {
        self.id = id
        self.publisher = publisher
    }

    /// From the answer to the connection (ICE and DTLS done), or nil.
    var connectedAfter: Duration? { lock.withLock { connected } }

    func stateChanged(_ raw: Int32) {
        switch WebRTCViewerStatistics.ConnectionState(rawValue: Int(raw)) {
        case .connected: lock.withLock { if connected == nil { connected = ContinuousClock.now - created } }
        case .failed, .closed: publisher?.connectionEnded(id)
        default: break
        }
    }
}

/// One viewer's state and what it was sent. Plain value; any thread.
public struct WebRTCViewerStatistics: Sendable, Hashable {
    /// The peer connection's state (W3C's `RTCPeerConnectionState`).
    public enum ConnectionState: Int, Sendable, Hashable {
        case new, connecting, connected, disconnected, failed, closed
    }
    public var id: String
    public var state: ConnectionState
    /// Video frames sent (each frame's last packet left the viewer's queue).
    public var framesSent: Int
    public var videoPacketsSent: Int
    /// Video packets lost because the viewer fell behind (its queue dropped the oldest).
    public var videoPacketsDropped: Int
    public var audioPacketsSent: Int
    public var audioPacketsDropped: Int
    /// Whether the viewer gets the microphone.
    public var hasAudio: Bool
    /// From the answer to the connection, or nil while not yet connected.
    public var connectedAfter: Duration?
    /// Of the video packets sent, those with the playout-delay header extension (minimum 0, maximum 200 ms),
    /// sent when the viewer's offer had it: they ask the browser to show each frame as soon as it
    /// is complete.
    public var videoPacketsWithPlayoutDelay: Int
}
