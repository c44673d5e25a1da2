import CCaptureRTSPShim
import Capture
import CaptureCodecs
import CaptureSystem
import Foundation

/// Serves a session's camera over RTSP (gst-rtsp-server), for what reads `rtsp://host:8554/camera`:
/// NVRs (Frigate, Blue Iris, Shinobi), Home Assistant's generic camera, VLC, ffmpeg and GStreamer.
///
/// The video is the session's shared H.264 encode (one per frame for every consumer with the same
/// settings: WebRTC viewers at the WebRTC publisher's defaults, a `/stream.mp4` client, a
/// recording), never encoded again: every RTSP client reads one shared media, which only
/// packetizes it (RTP, payload type 96). The encoder runs only while a client reads; a client that
/// starts to play gets a key frame from the shared encoder. Clients choose TCP (interleaved on the
/// RTSP connection) or UDP. A TCP client that stops reading loses its own packets once its send
/// backlog (gst-rtsp-server's, bounded) is full and costs the other clients nothing; once its
/// connection has had no room for 3 s it is closed (`clientsDropped`). UDP is sent without waiting.
/// The microphone, when the session has one, is served as AAC (RTP payload type 97,
/// `mpeg4-generic`) from the session's shared AAC stage, the one `/stream.mp4` uses.
///
/// With `Configuration.credentials` every request needs them (HTTP Basic, as RTSP has it: 401
/// without them). The server listens on 127.0.0.1 unless told otherwise, and answers 403 to a
/// DESCRIBE, SETUP or PLAY whose URL names a host it does not answer to, as the HTTP server does
/// for its `Host` header: IP literals, localhost names, the address listened on, this machine's names and
/// `Configuration.allowedHosts` pass.
///
/// Thread-safe: every method and property may be used from any thread.
public final class RTSPServer: @unchecked Sendable {
    /// Where the server listens, what it serves and how it encodes.
    public struct Configuration: Sendable, Hashable {
        /// The address to listen on: 127.0.0.1 (the default) for this machine only, 0.0.0.0 for
        /// every interface.
        public var host: String
        /// The TCP port (8554, RTSP's usual alternative to 554); 0 for any free port (see `port`).
        public var port: Int
        /// The mount's path, `/camera` by default: `rtsp://host:port/camera`.
        public var path: String
        /// Basic credentials every request needs; nil serves everyone.
        public var credentials: Credentials?
        /// Host names a request's URL may name besides IP literals, localhost names, `host` and
        /// this machine's names (`"*"`: any), as `CaptureStreamServer.Configuration.allowedHosts`.
        public var allowedHosts: [String]
        /// The H.264 bitrate in bits per second (the camera's size and rate are the session's).
        public var bitrate: Int
        /// Frames from one key frame to the next; a client that starts to play gets one sooner.
        public var keyFrameInterval: Int
        /// x264's preset: `ultrafast` (the default) gives constrained baseline, which every
        /// client decodes, and shares the encode with the WebRTC publisher's defaults.
        public var preset: String
        /// Serve the microphone (AAC) when the session has an audio input at `init`.
        public var audio: Bool
        /// A UDP client that says nothing this long (no RTCP report, no request: a player sends
        /// one every few seconds) loses its session and is no longer sent to. A TCP client's
        /// session lasts as long as its connection (gst-rtsp-server's): one that stops reading
        /// loses its own packets, not the others', and is closed once its connection has had no
        /// room for 3 s. Whole seconds, at least 1; RTSP's usual 60 s by default.
        public var sessionTimeout: Duration

        /// A configuration; each default is the one its property names (127.0.0.1:8554/camera,
        /// no credentials, no other host names, 2 Mbit/s, a key frame every 60 frames,
        /// `ultrafast`, the microphone, 60 s).
        public init(
            host: String = "127.0.0.1", port: Int = 8554, path: String = "/camera", credentials: Credentials? = nil,
            allowedHosts: [String] = [], bitrate: Int = 2_000_000, keyFrameInterval: Int = 60, preset: String = "ultrafast",
            audio: Bool = true, sessionTimeout: Duration = .seconds(60)
        ) {
            self.allowedHosts = allowedHosts
            self.sessionTimeout = sessionTimeout
            self.audio = audio
            self.host = host
            self.port = port
            self.path = path
            self.credentials = credentials
            self.bitrate = bitrate
            self.keyFrameInterval = keyFrameInterval
            self.preset = preset
        }
    }

    /// A user name and password for RTSP's Basic authentication (the user name without a colon).
    public struct Credentials: Sendable, Hashable {
        /// The user name (not empty, no colon).
        public var user: String
        /// The password, compared as given.
        public var password: String
        /// Credentials for `user` with `password`.
        public init(user: String, password: String) {
            self.user = user
            self.password = password
        }
    }

    /// The configuration given (its `port` is the one asked for; see `port`).
    public let configuration: Configuration
    /// The port the server listens on (the one chosen when `configuration.port` was 0).
    public let port: Int
    /// The shared H.264 stage's settings the clients read.
    package let h264Settings: H264Settings
    /// Whether the microphone is served (AAC, the shared stage's at its default settings, as
    /// `/stream.mp4`'s: one encode for both).
    public let sendsAudio: Bool
    private let feed: RTSPFeed
    private let videoPort: FrameConsumerPort
    private let audioPort: FrameConsumerPort?
    private let pointer: OpaquePointer
    private weak var session: CaptureSession?
    private let lock = NSLock()
    private var stopped = false

    /// Starts serving `session`'s camera at `rtsp://host:port/path`; nothing is encoded until a
    /// client comes. Throws `.missingElement` (with the Debian package to install) when GStreamer
    /// lacks a part, `.cannotListen` when the port is taken, `.invalidConfiguration` for a value
    /// out of range.
    public init(session: CaptureSession, configuration: Configuration = .init()) throws(RTSPServerError) {
        guard (0...65535).contains(configuration.port) else {
            throw RTSPServerError(.invalidConfiguration, "port \(configuration.port) is out of range: give 0...65535 (0 for any)")
        }
        guard configuration.path.hasPrefix("/"), configuration.path.count > 1,
            !configuration.path.contains(where: { $0 == "?" || $0 == "#" || $0.isWhitespace })
        else {
            throw RTSPServerError(.invalidConfiguration, "path \"\(configuration.path)\" must start with / and name a mount, like /camera")
        }
        if let c = configuration.credentials, c.user.isEmpty || c.user.contains(":") {
            throw RTSPServerError(.invalidConfiguration, "the user name must be non-empty and without a colon")
        }
        guard configuration.bitrate > 0, configuration.keyFrameInterval > 0, configuration.sessionTimeout >= .seconds(1) else {
            throw RTSPServerError(.invalidConfiguration, "bitrate and keyFrameInterval must be positive, sessionTimeout 1 s or more")
        }
        if let missing = capture_rtsp_missing_element() {
            let name = String(cString: missing)
            let package =
                name.hasPrefix("rtp") ? "gstreamer1.0-plugins-good" : name == "appsrc" ? "gstreamer1.0-plugins-base" : "libgstreamer1.0-0"
            throw RTSPServerError(.missingElement, "GStreamer has no \(name): install Debian's \(package)")
        }
        self.configuration = configuration
        self.session = session
        h264Settings = H264Settings(
            encoder: "libx264", preset: configuration.preset, rateControl: .bitrate(configuration.bitrate),
            keyFrameInterval: configuration.keyFrameInterval)
        sendsAudio = configuration.audio && session.inputs.contains { $0.mediaTypes.contains(.audio) }
        feed = RTSPFeed(
            product: h264Settings.product, audioProduct: AudioEncoderSettings(codec: .aac).product,
            hostNames: HostNames(listenAddress: configuration.host, allowed: configuration.allowedHosts))
        videoPort = FrameConsumerPort(encodedFor: feed)
        audioPort = sendsAudio ? FrameConsumerPort(audioEncodedFor: feed) : nil
        feed.port = videoPort
        feed.audioPort = audioPort
        // The shim's handlers reach the feed through a retained reference it gives back.
        let ctx = Unmanaged.passRetained(feed).toOpaque()
        var error: UnsafeMutablePointer<CChar>?
        let made = capture_rtsp_server_new(
            configuration.host, Int32(configuration.port), configuration.path, configuration.credentials?.user,
            configuration.credentials?.password, sendsAudio ? 1 : 0,
            Int32(clamping: configuration.sessionTimeout.components.seconds),
            { ctx, kind in Unmanaged<RTSPFeed>.fromOpaque(ctx!).takeUnretainedValue().event(kind) },
            { ctx, host in
                let names = Unmanaged<RTSPFeed>.fromOpaque(ctx!).takeUnretainedValue().hostNames
                return names.allowsName(String(cString: host!)) ? 1 : 0
            },
            { ctx in Unmanaged<RTSPFeed>.fromOpaque(ctx!).release() }, ctx, &error)
        guard let made else {
            var text = "no reason given"
            if let error {
                text = String(cString: error)
                capture_rtsp_string_free(error)
            }
            throw RTSPServerError(.cannotListen, "the RTSP server cannot start: \(text): choose another port or address")
        }
        pointer = made
        port = Int(capture_rtsp_server_port(made))
        feed.attach(made)
        _ = session.addFrameConsumer(videoPort)
        if let audioPort { _ = session.addFrameConsumer(audioPort) }
    }

    deinit { stop() }

    /// `rtsp://host:port/path` (credentials not included).
    public var url: String {
        let host = configuration.host.contains(":") ? "[\(configuration.host)]" : configuration.host
        return "rtsp://\(host):\(port)\(configuration.path)"
    }

    /// RTSP connections open now (each client holds one, over TCP or UDP alike).
    public var clientCount: Int {
        lock.withLock { stopped ? 0 : Int(capture_rtsp_server_clients(pointer)) }
    }

    /// Clients closed so far because they stopped reading: over TCP, a connection that had no
    /// room to write for 3 s (its packets were being dropped meanwhile, not waited for).
    public var clientsDropped: Int {
        lock.withLock { stopped ? 0 : Int(capture_rtsp_server_clients_dropped(pointer)) }
    }

    /// H.264 access units the shared media has taken (each is sent to every client).
    public var unitsSent: Int { feed.unitsPushed }
    /// Whether the shared media exists (a client reads) and the encoder runs for it.
    package var isEncoding: Bool { videoPort.encodedProduct != nil }

    /// AAC packets the shared media has taken (0 without the microphone).
    public var audioPacketsSent: Int { feed.audioPacketsPushed }

    /// Closes every client and stops listening; the session's encoder stops once no one else
    /// reads it. Blocks until the server is down. Not from a GStreamer thread.
    public func stop() {
        let first = lock.withLock {
            defer { stopped = true }
            return !stopped
        }
        guard first else { return }
        feed.close()
        session?.removeFrameConsumer(videoPort)
        if let audioPort { session?.removeFrameConsumer(audioPort) }
    }
}
