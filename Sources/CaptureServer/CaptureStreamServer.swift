import CCaptureServerShim
import CMicroHTTPD
import Capture
import Foundation

/// Serves a session's camera over HTTP, as uStreamer and mjpg-streamer do: an MJPEG stream
/// (`/stream`, `/?action=stream`), the newest frame (`/snapshot`, `/?action=snapshot`), the state
/// in uStreamer's JSON shape (`/state`) and a camera web app (`/`: live picture, shutter, camera
/// toggle, control sliders).
///
/// The server is a frame consumer of the session: every frame is encoded to JPEG once (MJPEG
/// cameras pass through) for all clients, copied once into a part buffer of the server's and let
/// go at once, so no client holds a camera buffer. Each stream client sends one part at a time
/// and then skips to the newest frame; what it skipped is counted per client in `/state`. A client
/// that stops reading is timed out by libmicrohttpd and never slows capture or other clients.
///
/// libmicrohttpd runs one internal polling thread for every connection: a stream client that has
/// sent its part and has no newer frame is suspended, and resumed when the next frame arrives
/// (no thread per client, no busy loop).
///
/// Thread-safe: every method and property may be called from any thread. While running the server
/// keeps itself (and its session) alive; call `stop()` to end it.
public final class CaptureStreamServer: @unchecked Sendable {
    /// What the server serves and how.
    public struct Configuration: Sendable, Hashable {
        /// The address to listen on: 127.0.0.1 by default (this machine only); "0.0.0.0" or "::"
        /// for every interface.
        public var host: String
        /// The TCP port; 0 takes a free one (see `port` once started).
        public var port: Int
        /// JPEG quality from 1 to 100 for cameras that deliver raw frames.
        public var quality: Int
        /// HTTP Basic credentials required on every route; nil serves everyone.
        public var credentials: Credentials?
        /// The value of `Access-Control-Allow-Origin` on every answer (e.g. "*"); nil sends none.
        /// Pages of this origin may also change state (`/api/*`), and its preflights are answered
        /// before credentials are checked (browsers send none with a preflight).
        public var allowedOrigin: String?
        /// Stream clients at most at once; more are answered with 503.
        public var maxClients: Int
        /// Seconds a connection may be idle (nothing read or written) before it is closed, and
        /// seconds a request's headers may take in all (a client that trickles them is cut).
        public var connectionTimeout: Int
        /// Seconds a snapshot waits for a frame before it is answered with 503.
        public var snapshotTimeout: Double
        /// The album where the web app's shutter saves stills.
        public var photoLibrary: PhotoLibrary
        /// Whether the server takes the camera back when it returns after an unplug, as uStreamer
        /// does (true by default): while it is gone the server keeps answering (`/state` offline,
        /// `/snapshot` and `/stream` 503) and looks for it every half second (the same
        /// `uniqueID`, or the same path and name); once it is back, the server puts it in the
        /// session in place of the input that went, with the same format and frame rate and the
        /// control values set on it before (it comes back at its defaults), and starts the
        /// session if it stopped. False leaves the session to the app.
        public var reattachesCamera = true
        /// Host names the server answers to besides localhost names, IP literals, `host` and this
        /// machine's name (e.g. a name other machines reach it by); "*" answers any. A request
        /// for another name is refused (403): a web page whose DNS name was rebound to this
        /// machine cannot read the camera.
        public var allowedHosts: [String] = []
        /// The certificate and key to serve HTTPS with, on every route; nil serves plain HTTP.
        /// A client speaking plain HTTP to an HTTPS server gets no answer.
        public var tls: TLSIdentity?
        /// The access token of token links: a request with `?token=TOKEN` (any route, e.g. an
        /// `<img src>` or a player's URL) or `Authorization: Bearer TOKEN` is let in without the
        /// Basic credentials. With `credentials` either one suffices; without them the token is
        /// required. Compared over its full bytes; nil takes no token. Serve tokens over HTTPS
        /// (`tls`): a URL travels in clear text over HTTP.
        public var accessToken: String?

        public init(
            host: String = "127.0.0.1", port: Int = 8080, quality: Int = 80, credentials: Credentials? = nil,
            allowedOrigin: String? = nil, maxClients: Int = 20, connectionTimeout: Int = 10,
            snapshotTimeout: Double = 5, photoLibrary: PhotoLibrary = .shared
        ) {
            self.host = host
            self.port = port
            self.quality = quality
            self.credentials = credentials
            self.allowedOrigin = allowedOrigin
            self.maxClients = maxClients
            self.connectionTimeout = connectionTimeout
            self.snapshotTimeout = snapshotTimeout
            self.photoLibrary = photoLibrary
        }

        public static func == (a: Configuration, b: Configuration) -> Bool {
            a.host == b.host && a.port == b.port && a.quality == b.quality && a.credentials == b.credentials
                && a.allowedOrigin == b.allowedOrigin && a.maxClients == b.maxClients
                && a.connectionTimeout == b.connectionTimeout && a.snapshotTimeout == b.snapshotTimeout
                && a.photoLibrary === b.photoLibrary && a.reattachesCamera == b.reattachesCamera
                && a.allowedHosts == b.allowedHosts && a.tls == b.tls && a.accessToken == b.accessToken
        }

        public func hash(into h: inout Hasher) {
            h.combine(host)
            h.combine(port)
            h.combine(quality)
        }
    }

    /// A user name and password for HTTP Basic authentication.
    public struct Credentials: Sendable, Hashable {
        public var user: String
        public var password: String
        public init(user: String, password: String) {
            self.user = user
            self.password = password
        }
    }

    /// The configuration given (its `port` is the one asked for; see `port`).
    public let configuration: Configuration
    /// The session served.
    public let session: CaptureSession

    let lock = NSLock()
    /// Where the session hands the server its JPEGs (see `consume`); made once, at the end of `init`.
    private var framePort: FrameConsumerPort?
    let queue = DispatchQueue(label: "swift-capture.server")
    /// Where the web app's actions (still, toggle, control) run, one at a time.
    let actions = DispatchQueue(label: "swift-capture.server.actions")
    // Everything below is guarded by `lock`.
    var daemon: OpaquePointer?
    private var boundPort = 0
    private var retainedSelf: Unmanaged<CaptureStreamServer>?
    /// The certificate and key libmicrohttpd reads while it runs (`configuration.tls`).
    private var tlsStrings: TLSStrings?
    var pool: ServedFramePool
    /// The newest frame, held for the clients that want it next.
    var newest: ServedFrame? {
        didSet {
            oldValue?.letGo()
            newest?.hold()
        }
    }
    var serial: UInt64 = 0
    var received = 0
    var receivedAtTick = 0
    var capturedFPS = 0.0
    var lastFrameTime: CaptureTime?
    var lastTick = CaptureTime.now()
    var dropped: [DropReason: Int] = [:]
    var offline = false
    /// When the camera went (capture clock): a frame captured before it that arrives after the
    /// server went offline (from a JPEG encoder still at work) is not served and does not bring
    /// it back online; streams that ended stay ended.
    var wentAt: CaptureTime?
    var stopping = false
    var clients: [Int: StreamClient] = [:]
    var nextClientID = 1
    var refused = 0
    /// Snapshot requests waiting for a frame newer than when they came.
    var waitingSnapshots: [(connection: HTTP.Connection, after: UInt64, deadline: CaptureTime)] = []
    /// Answers being made off the daemon's thread (still, toggle, control) for suspended connections.
    let pendingWork = DispatchGroup()
    private var timer: DispatchSourceTimer?
    private var eventToken: UUID?
    /// The camera that went away and is looked for again (`reattachesCamera`), and the timer
    /// that looks on the action queue.
    var missing: MissingCamera?
    var reattachTimer: DispatchSourceTimer?
    /// Stills the web app took, by file name, for `/album/NAME` (the newest few).
    var stills: [(name: String, jpeg: Data)] = []
    /// Routes other products added (`add(_:)`), the requests waiting for their answers and their
    /// streams' connections.
    var addedRoutes: [any ServerRoutes] = []
    var pendingAnswers: [ObjectIdentifier: RouteResponder] = [:]
    var routeStreams: [ObjectIdentifier: RouteStreamConnection] = [:]
    let policy: RequestPolicy
    /// Cuts connections that hold the server waiting for their headers (slowloris).
    let connectionGuard: ConnectionGuard
    /// Held for the whole of `start()` and `stop()`: a `stop()` called while another runs returns
    /// only once the first has stopped the server.
    private let lifecycle = NSLock()

    /// A server for `session` (which may already run; frames are served once it runs). Throws
    /// for a configuration value out of range.
    public init(session: CaptureSession, configuration: Configuration = Configuration()) throws(CaptureServerError) {
        guard (1...100).contains(configuration.quality) else {
            throw CaptureServerError(.invalidConfiguration, "JPEG quality must be from 1 to 100, not \(configuration.quality)")
        }
        guard (1...10_000).contains(configuration.maxClients) else {
            throw CaptureServerError(.invalidConfiguration, "the client limit must be from 1 to 10000, not \(configuration.maxClients)")
        }
        guard (0...65_535).contains(configuration.port) else {
            throw CaptureServerError(.invalidConfiguration, "the port must be from 0 to 65535, not \(configuration.port)")
        }
        guard configuration.connectionTimeout >= 1, configuration.snapshotTimeout > 0 else {
            throw CaptureServerError(.invalidConfiguration, "timeouts must be at least 1 second")
        }
        if let c = configuration.credentials {
            guard !c.user.isEmpty, !c.user.contains(":") else {
                throw CaptureServerError(.invalidConfiguration, "the user name must be non-empty and without ':'")
            }
        }
        if let token = configuration.accessToken {
            guard !token.isEmpty, token.utf8.count <= 4096, !token.utf8.contains(0) else {
                throw CaptureServerError(.invalidConfiguration, "the access token must have 1 to 4096 bytes and no NUL")
            }
        }
        policy = RequestPolicy(configuration: configuration)
        let limits = Self.connectionLimits(configuration)
        connectionGuard = ConnectionGuard(headersDeadline: configuration.connectionTimeout, softLimit: limits.soft)
        self.session = session
        self.configuration = configuration
        pool = ServedFramePool(limit: configuration.maxClients + 4)
        framePort = FrameConsumerPort(self, jpegQuality: configuration.quality)
    }

    deinit { timer?.cancel() }

    /// The port listened on while running (the one chosen when the configuration asked for 0).
    public var port: Int { lock.withLock { boundPort } }

    /// The URL of the web app, e.g. `http://127.0.0.1:8080/` (`https` with `tls`).
    public var url: URL {
        let h = configuration.host.contains(":") ? "[\(configuration.host)]" : configuration.host
        return URL(string: "\(policy.scheme)://\(h):\(port)/")!
    }

    /// Whether the server runs.
    public var isRunning: Bool { lock.withLock { daemon != nil } }

    /// The connections libmicrohttpd holds open now (0 when stopped): each has a memory pool of
    /// its own, so none may linger past its time-out.
    package var openConnections: Int {
        lock.withLock { daemon.map { Int(capture_server_connection_count($0)) } ?? 0 }
    }

    /// Starts listening and takes frames from the session. Throws `.portInUse`, `.badAddress`,
    /// `.permissionDenied`, `.alreadyRunning` or `.startFailed`.
    public func start() throws(CaptureServerError) {
        lifecycle.lock()
        defer { lifecycle.unlock() }
        let routes = lock.withLock { daemon == nil ? addedRoutes : [] }
        var started: [any ServerRoutes] = []
        do {
            for r in routes {
                try r.serverWillStart(self)
                started.append(r)
            }
        } catch {
            for r in started { r.serverDidStop(self) }
            throw error
        }
        // A start that fails below lets the routes go again.
        var listening = false
        defer { if !listening { for r in started { r.serverDidStop(self) } } }
        do {
            lock.lock()
            defer { lock.unlock() }
            guard daemon == nil else { throw CaptureServerError(.alreadyRunning, "the server runs already: stop() it first") }
            let socket = try ListeningSocket.bind(host: configuration.host, port: configuration.port)
            // libmicrohttpd gets a copy: it closes that one when it stops, or when it fails to
            // start (a bad TLS key, for one), so ours is closed here either way.
            defer { socket.close() }
            let handed = try socket.duplicate()
            var flags = MHD_USE_AUTO_INTERNAL_THREAD.rawValue | MHD_ALLOW_SUSPEND_RESUME.rawValue
            if socket.isIPv6 { flags |= MHD_USE_IPv6.rawValue }
            let tls = configuration.tls.map(TLSStrings.init)
            if tls != nil { flags |= MHD_USE_TLS.rawValue }
            let limits = Self.connectionLimits(configuration)
            let guardContext = Unmanaged.passUnretained(connectionGuard).toOpaque()
            var options: [MHD_OptionItem] = [
                MHD_OptionItem(option: MHD_OPTION.LISTEN_SOCKET, value: Int(handed), ptr_value: nil),
                MHD_OptionItem(option: MHD_OPTION.CONNECTION_TIMEOUT, value: configuration.connectionTimeout, ptr_value: nil),
                MHD_OptionItem(option: MHD_OPTION.CONNECTION_LIMIT, value: limits.total, ptr_value: nil),
                MHD_OptionItem(option: MHD_OPTION.PER_IP_CONNECTION_LIMIT, value: limits.perAddress, ptr_value: nil),
                capture_server_notify_connection_option(guardNotifyConnection, guardContext),
                capture_server_notify_completed_option(guardRequestCompleted, guardContext),
                // Request line and headers must fit in the connection's 48 KiB (shared with the send
                // buffer); a bigger request is refused (431) and closed.
                MHD_OptionItem(option: MHD_OPTION.CONNECTION_MEMORY_LIMIT, value: 48 * 1024, ptr_value: nil),
                // Too many query arguments would exhaust that memory before an answer: counted first.
                capture_server_uri_log_option(serverURILogged, tls == nil ? nil : RequestLimits.overTLS),
            ]
            options += (tls?.options ?? []) + [MHD_OptionItem(option: MHD_OPTION.END, value: 0, ptr_value: nil)]
            let d = options.withUnsafeMutableBufferPointer { o in
                capture_server_start_daemon(flags, 0, serverAccessHandler, Unmanaged.passUnretained(self).toOpaque(), o.baseAddress)
            }
            guard let d else {
                if tls != nil {
                    throw CaptureServerError(
                        .badCertificate,
                        "libmicrohttpd could not start TLS with the certificate and key: give the key that belongs to the certificate, both PEM"
                    )
                }
                throw CaptureServerError(
                    .startFailed,
                    "libmicrohttpd could not start on \(configuration.host):\(socket.port); check the system's thread and descriptor limits"
                )
            }
            daemon = d
            tlsStrings = tls
            boundPort = socket.port
            stopping = false
            offline = false
            retainedSelf = Unmanaged.passRetained(self)
            lastTick = .now()
            listening = true
        }
        if let framePort { session.addFrameConsumer(framePort) }
        let token = session.addEventHandler { [weak self] event in self?.sessionEvent(event) }
        let t = DispatchSource.makeTimerSource(queue: queue)
        t.schedule(deadline: .now() + 1, repeating: 1)
        t.setEventHandler { [weak self] in self?.tick() }
        t.resume()
        lock.withLock {
            timer = t
            eventToken = token
        }
    }

    /// The connections libmicrohttpd holds at most: the stream clients and 128 more (snapshots, the
    /// page, state polls, idle sockets); from one address three quarters of them, so that one
    /// client cannot take them all; and the open connections above which those still waiting
    /// for their headers are cut (well below the per-address limit, so that a new request is
    /// taken: a cut connection counts for libmicrohttpd until its thread reaps it, and a burst
    /// of connections is accepted several at a time, so with 16 of room a burst of 300 slow
    /// connections sometimes left the next request refused at accept).
    static func connectionLimits(_ c: Configuration) -> (total: Int, perAddress: Int, soft: Int) {
        let total = c.maxClients + 128
        let perAddress = total * 3 / 4
        return (total, perAddress, perAddress - max(48, perAddress / 3))
    }

    /// Waits until every stream ended by `stop()` has sent its end (the multipart close
    /// delimiter, the last chunk) on the daemon's thread, for at most `limit` seconds: stopping
    /// the daemon before would cut the clients mid-chunk. A client that does not read is not
    /// waited for beyond the limit.
    private func drainStreams(limit: Double = 2) {
        let deadline = CaptureTime.now().seconds + limit
        while lock.withLock({ !clients.isEmpty || !routeStreams.isEmpty }), CaptureTime.now().seconds < deadline {
            Thread.sleep(forTimeInterval: 0.005)
        }
    }

    /// Stops serving: ends every stream at a part boundary, answers waiting requests, closes every
    /// connection and the socket, and stops taking frames. Returns once the daemon's thread is
    /// gone, from any number of threads at once. Does nothing when not running.
    public func stop() {
        lifecycle.lock()
        defer { lifecycle.unlock() }
        let (running, t, token): (Bool, DispatchSourceTimer?, UUID?) = lock.withLock {
            guard daemon != nil, !stopping else { return (false, nil, nil) }
            stopping = true
            resumeWaitingLocked(now: .now(), force: true)
            expirePendingAnswersLocked(now: CaptureTime.now().seconds, stopping: true)
            closeRouteStreamsLocked()
            reattachTimer?.cancel()
            defer { timer = nil; eventToken = nil; reattachTimer = nil; missing = nil }
            return (true, timer, eventToken)
        }
        guard running else { return }
        t?.cancel()
        if let framePort { session.removeFrameConsumer(framePort) }
        if let token { session.removeEventHandler(token) }
        // Answers made off the daemon's thread are queued before the daemon goes.
        pendingWork.wait()
        drainStreams()
        let (d, me): (OpaquePointer?, Unmanaged<CaptureStreamServer>?) = lock.withLock {
            defer { daemon = nil; retainedSelf = nil; newest = nil }
            return (daemon, retainedSelf)
        }
        if let d { MHD_stop_daemon(d) }
        lock.withLock { tlsStrings = nil }
        for r in lock.withLock({ addedRoutes }) { r.serverDidStop(self) }
        queue.sync {}
        me?.release()
    }
}
