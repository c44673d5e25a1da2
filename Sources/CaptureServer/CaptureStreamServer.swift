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
                && a.allowedHosts == b.allowedHosts
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

    /// One stream client's figures.
    public struct ClientStatistics: Sendable, Hashable {
        /// The client's number, unique for the server's life.
        public var id: Int
        /// Parts sent (wholly or in part).
        public var framesSent: Int
        /// Frames the client skipped because it was still sending an older one.
        public var framesSkipped: Int
        /// Parts per second over the last second.
        public var fps: Double
    }

    /// The server's figures.
    public struct Statistics: Sendable, Hashable {
        /// Frames received from the session (each encoded once for every client).
        public var framesReceived: Int
        /// Frames the session lost before they reached the server, by reason.
        public var framesDropped: [DropReason: Int]
        /// Frames received per second over the last second.
        public var capturedFPS: Double
        /// The stream clients now.
        public var clients: [ClientStatistics]
        /// Stream clients refused for the client limit.
        public var clientsRefused: Int
        /// The newest frame's size.
        public var dimensions: VideoDimensions?
        /// Whether frames arrive (the camera is connected and running).
        public var isOnline: Bool
    }

    /// The configuration given (its `port` is the one asked for; see `port`).
    public let configuration: Configuration
    /// The session served.
    public let session: CaptureSession

    let lock = NSLock()
    private let consumer = CaptureVideoDataOutput(frameConsumer: ())
    private let sink: ServerFrameSink
    private let queue = DispatchQueue(label: "swift-capture.server")
    /// Where the web app's actions (still, toggle, control) run, one at a time.
    private let actions = DispatchQueue(label: "swift-capture.server.actions")
    // Everything below is guarded by `lock`.
    private var daemon: OpaquePointer?
    private var boundPort = 0
    private var retainedSelf: Unmanaged<CaptureStreamServer>?
    var pool: ServedFramePool
    var newest: ServedFrame?
    private var serial: UInt64 = 0
    private var received = 0
    private var receivedAtTick = 0
    private var capturedFPS = 0.0
    private var lastFrameTime: CaptureTime?
    private var lastTick = CaptureTime.now()
    private var dropped: [DropReason: Int] = [:]
    private var offline = false
    /// When the camera went (capture clock): a frame captured before it that arrives after the
    /// server went offline (from a JPEG encoder still at work) is not served and does not bring
    /// it back online; streams that ended stay ended.
    private var wentAt: CaptureTime?
    private var stopping = false
    var clients: [Int: StreamClient] = [:]
    private var nextClientID = 1
    private var refused = 0
    /// Snapshot requests waiting for a frame newer than when they came.
    private var waitingSnapshots: [(connection: HTTP.Connection, after: UInt64, deadline: CaptureTime)] = []
    /// Answers being made off the daemon's thread (still, toggle, control) for suspended connections.
    private let pendingWork = DispatchGroup()
    private var timer: DispatchSourceTimer?
    private var eventToken: UUID?
    /// The camera that went away and is looked for again (`reattachesCamera`), and the timer
    /// that looks on the action queue.
    private var missing: MissingCamera?
    private var reattachTimer: DispatchSourceTimer?
    /// Stills the web app took, by file name, for `/album/NAME` (the newest few).
    private var stills: [(name: String, jpeg: Data)] = []
    private let policy: RequestPolicy
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
        policy = RequestPolicy(configuration: configuration)
        let limits = Self.connectionLimits(configuration)
        connectionGuard = ConnectionGuard(headersDeadline: configuration.connectionTimeout, softLimit: limits.soft)
        self.session = session
        self.configuration = configuration
        pool = ServedFramePool(limit: configuration.maxClients + 4)
        sink = ServerFrameSink()
        sink.server = self
        consumer.videoSettings = .init(jpeg: .init(quality: configuration.quality))
        consumer.alwaysDiscardsLateVideoFrames = true
        consumer.setSampleBufferDelegate(sink, queue: queue)
    }

    deinit {
        timer?.cancel()
        consumer.setSampleBufferDelegate(nil, queue: nil)
    }

    /// The port listened on while running (the one chosen when the configuration asked for 0).
    public var port: Int { lock.withLock { boundPort } }

    /// The URL of the web app, e.g. `http://127.0.0.1:8080/`.
    public var url: URL {
        let h = configuration.host.contains(":") ? "[\(configuration.host)]" : configuration.host
        return URL(string: "http://\(h):\(port)/")!
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
        do {
            lock.lock()
            defer { lock.unlock() }
            guard daemon == nil else { throw CaptureServerError(.alreadyRunning, "the server runs already: stop() it first") }
            let socket = try ListeningSocket.bind(host: configuration.host, port: configuration.port)
            var flags = MHD_USE_AUTO_INTERNAL_THREAD.rawValue | MHD_ALLOW_SUSPEND_RESUME.rawValue
            if socket.isIPv6 { flags |= MHD_USE_IPv6.rawValue }
            let limits = Self.connectionLimits(configuration)
            let guardContext = Unmanaged.passUnretained(connectionGuard).toOpaque()
            var options: [MHD_OptionItem] = [
                MHD_OptionItem(option: MHD_OPTION.LISTEN_SOCKET, value: Int(socket.descriptor), ptr_value: nil),
                MHD_OptionItem(option: MHD_OPTION.CONNECTION_TIMEOUT, value: configuration.connectionTimeout, ptr_value: nil),
                MHD_OptionItem(option: MHD_OPTION.CONNECTION_LIMIT, value: limits.total, ptr_value: nil),
                MHD_OptionItem(option: MHD_OPTION.PER_IP_CONNECTION_LIMIT, value: limits.perAddress, ptr_value: nil),
                capture_server_notify_connection_option(guardNotifyConnection, guardContext),
                capture_server_notify_completed_option(guardRequestCompleted, guardContext),
                // Request line and headers must fit in the connection's 48 KiB (shared with the send
                // buffer); a bigger request is refused (431) and closed.
                MHD_OptionItem(option: MHD_OPTION.CONNECTION_MEMORY_LIMIT, value: 48 * 1024, ptr_value: nil),
                // Too many query arguments would exhaust that memory before an answer: counted first.
                capture_server_uri_log_option(serverURILogged, nil),
                MHD_OptionItem(option: MHD_OPTION.END, value: 0, ptr_value: nil),
            ]
            let d = options.withUnsafeMutableBufferPointer { o in
                capture_server_start_daemon(flags, 0, serverAccessHandler, Unmanaged.passUnretained(self).toOpaque(), o.baseAddress)
            }
            guard let d else {
                socket.close()
                throw CaptureServerError(
                    .startFailed,
                    "libmicrohttpd could not start on \(configuration.host):\(socket.port); check the system's thread and descriptor limits"
                )
            }
            daemon = d
            boundPort = socket.port
            stopping = false
            offline = false
            retainedSelf = Unmanaged.passRetained(self)
            lastTick = .now()
        }
        session.addFrameConsumer(consumer)
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
            reattachTimer?.cancel()
            defer { timer = nil; eventToken = nil; reattachTimer = nil; missing = nil }
            return (true, timer, eventToken)
        }
        guard running else { return }
        t?.cancel()
        session.removeFrameConsumer(consumer)
        if let token { session.removeEventHandler(token) }
        // Answers made off the daemon's thread are queued before the daemon goes.
        pendingWork.wait()
        let (d, me): (OpaquePointer?, Unmanaged<CaptureStreamServer>?) = lock.withLock {
            defer { daemon = nil; retainedSelf = nil; newest = nil }
            return (daemon, retainedSelf)
        }
        if let d { MHD_stop_daemon(d) }
        queue.sync {}
        me?.release()
    }

    /// The server's figures now.
    public var statistics: Statistics {
        lock.withLock {
            Statistics(
                framesReceived: received, framesDropped: dropped, capturedFPS: capturedFPS,
                clients: clients.values.sorted { $0.id < $1.id }.map {
                    ClientStatistics(id: $0.id, framesSent: $0.sent, framesSkipped: $0.skipped, fps: $0.fps)
                },
                clientsRefused: refused, dimensions: newest?.dimensions, isOnline: isOnlineLocked(now: .now()))
        }
    }

    // MARK: Frames (on the server's queue)

    func publish(_ sample: SampleBuffer) {
        guard sample.pixelFormat == .jpeg, let dims = sample.dimensions else { return }
        let seq = sample.sequenceNumber, time = sample.presentationTimeStamp
        sample.withUnsafeBytes { jpeg in
            lock.withLock {
                guard daemon != nil, !stopping else { return }
                if offline, let wentAt, time <= wentAt {
                    dropped[.frameWasLate, default: 0] += 1
                    return
                }
                serial += 1
                received += 1
                offline = false
                lastFrameTime = .now()
                newest = pool.take(jpeg: jpeg, serial: serial, sequence: seq, timestamp: time, dimensions: dims)
                resumeWaitingLocked(now: .now(), force: false)
            }
        }
    }

    func noteDrop(_ drop: DroppedFrames) {
        lock.withLock { dropped[drop.reason, default: 0] += drop.count }
    }

    private func sessionEvent(_ event: CaptureSession.Event) {
        switch event {
        case .deviceDisconnected(let device):
            // Its settings now: a camera plugged in again is a new object.
            let gone = MissingCamera(device: device, format: device.activeFormat, interval: device.activeVideoMinFrameDuration)
            let at = CaptureTime.now()
            // On the frame queue, after the frames the device gave before it went (a late one
            // must not bring the server back online).
            queue.async { [self] in
                lock.withLock {
                    offline = true
                    wentAt = at
                    // Streams end at their next part boundary.
                    resumeWaitingLocked(now: .now(), force: true)
                    if configuration.reattachesCamera, device.mediaType == .video, !stopping, daemon != nil {
                        watchForLocked(gone)
                    }
                }
            }
        default:
            break
        }
    }

    // MARK: Reattach (on the action queue)

    /// Starts looking for `gone` every half second. Under `lock`.
    private func watchForLocked(_ gone: MissingCamera) {
        missing = gone
        guard reattachTimer == nil else { return }
        let t = DispatchSource.makeTimerSource(queue: actions)
        t.schedule(deadline: .now() + 0.5, repeating: 0.5)
        t.setEventHandler { [weak self] in self?.tryReattach() }
        reattachTimer = t
        t.resume()
    }

    /// Puts the missing camera back in the session if it is there again; else tries again at
    /// the next tick. Gives up when the app replaced or removed its input meanwhile.
    private func tryReattach() {
        let gone: MissingCamera? = lock.withLock {
            guard let m = missing, !stopping else { return nil }
            pendingWork.enter()
            return m
        }
        guard let gone else { return }
        defer { pendingWork.leave() }
        // The input that went (or the one an attempt that failed to start put in its place).
        guard let old = session.inputs.lazy.compactMap({ $0 as? CaptureDeviceInput }).first(where: { gone.matches($0.device) }) else {
            // Somebody else changed the session's camera (the web app's toggle, the app).
            return finishReattach(gone)
        }
        let cameras = CaptureDevice.devices(for: .video).filter(\.isConnected)
        guard let device = cameras.first(where: { $0.uniqueID == gone.uniqueID }) ?? cameras.first(where: gone.matches) else { return }
        do throws(CaptureError) {
            try device.lockForConfiguration()
            defer { device.unlockForConfiguration() }
            // The format only when the session does not choose it by its preset.
            if session.sessionPreset == .inputPriority, let f = gone.format,
                let same = device.formats.first(where: { $0.pixelFormat == f.pixelFormat && $0.dimensions == f.dimensions })
            {
                try device.setActiveFormat(same)
            }
            if let i = gone.interval, device.activeFormat?.supports(i) ?? false {
                try device.setActiveVideoMinFrameDuration(i)
            }
            // A camera plugged in again starts at its defaults: the controls set on it before
            // (the web app's sliders, the app) are put back, in the order they were set. One the
            // camera refuses now (inactive under an automatic mode) is left as it is.
            for (id, value) in gone.controls { try? device.setValue(value, for: id) }
            let input = try CaptureDeviceInput(device: device)
            session.beginConfiguration()
            session.removeInput(old)
            session.addInput(input)
            if case .rejected(let e) = session.commitConfiguration() { throw e }
            if !session.isRunning { try session.start() }
        } catch {
            // Not ready yet (still enumerating, busy): the next tick tries again.
            return
        }
        finishReattach(gone)
    }

    /// Stops looking for `gone` (unless another camera went meanwhile).
    private func finishReattach(_ gone: MissingCamera) {
        lock.withLock {
            guard missing === gone else { return }
            missing = nil
            reattachTimer?.cancel()
            reattachTimer = nil
        }
    }

    private func tick() {
        connectionGuard.sweep(now: .now())
        lock.withLock {
            let now = CaptureTime.now()
            let seconds = max(Double(now - lastTick) / 1e9, 0.001)
            capturedFPS = (Double(received - receivedAtTick) / seconds * 10).rounded() / 10
            receivedAtTick = received
            for c in clients.values {
                c.fps = (Double(c.sent - c.sentAtTick) / seconds * 10).rounded() / 10
                c.sentAtTick = c.sent
            }
            lastTick = now
            resumeWaitingLocked(now: now, force: false)
        }
    }

    private func isOnlineLocked(now: CaptureTime) -> Bool {
        guard !offline, let t = lastFrameTime else { return false }
        return now - t < 2_000_000_000
    }

    /// Resumes suspended stream clients (they take the newest frame, or end when stopping or
    /// offline) and answers snapshot requests that have a new frame or ran out of time. Under `lock`.
    private func resumeWaitingLocked(now: CaptureTime, force: Bool) {
        for c in clients.values where c.isSuspended {
            c.isSuspended = false
            MHD_resume_connection(c.connection)
        }
        guard !waitingSnapshots.isEmpty else { return }
        var still: [(connection: HTTP.Connection, after: UInt64, deadline: CaptureTime)] = []
        for w in waitingSnapshots {
            if let f = newest, f.serial > w.after, !stopping {
                queueSnapshot(w.connection, f)
            } else if force || stopping || now > w.deadline {
                queueText(w.connection, 503, "no frame from the camera: check that it is connected and the session runs\n")
            } else {
                still.append(w)
                continue
            }
            MHD_resume_connection(w.connection)
        }
        waitingSnapshots = still
    }

    // MARK: Requests (on the daemon's thread)

    func handle(_ c: HTTP.Connection, url: String, method: String) -> MHD_Result {
        // No route reads a body: a big one is refused before anything else (libmicrohttpd drops it).
        // A chunked body's size is not known before the route would run, so it needs a length.
        if HTTP.value(c, MHD_ValueKind.HEADER_KIND, "Transfer-Encoding") != nil {
            return queueText(c, 411, "send a request body with a Content-Length (no route needs a body)\n")
        }
        if let length = HTTP.value(c, MHD_ValueKind.HEADER_KIND, "Content-Length").flatMap({ UInt64($0) }),
            length > UInt64(RequestLimits.bodyBytes)
        {
            return queueText(c, 413, "a request body may have \(RequestLimits.bodyBytes) bytes at most; no route needs one\n")
        }
        let host = HTTP.value(c, MHD_ValueKind.HEADER_KIND, "Host")
        guard policy.allowsHost(host) else {
            return queueText(
                c, 403, "this server does not answer to the name \(host ?? ""): use its address, or add the name to its allowed hosts\n")
        }
        // A preflight carries no credentials: the allowed origin's is answered before they are checked.
        let origin = HTTP.value(c, MHD_ValueKind.HEADER_KIND, "Origin")
        if method == "OPTIONS", HTTP.value(c, MHD_ValueKind.HEADER_KIND, "Access-Control-Request-Method") != nil,
            policy.answersPreflight(from: origin)
        {
            let r = HTTP.response("")
            addCommonHeaders(r, type: nil)
            HTTP.addHeader(r, "Access-Control-Allow-Methods", url.hasPrefix("/api/") ? "POST, GET, OPTIONS" : "GET, HEAD, OPTIONS")
            HTTP.addHeader(r, "Access-Control-Allow-Headers", "Authorization, X-Requested-With")
            HTTP.addHeader(r, "Access-Control-Max-Age", "600")
            return HTTP.queue(c, 204, r)
        }
        // Every route needs the credentials, when there are some.
        if !policy.authorizes(HTTP.value(c, MHD_ValueKind.HEADER_KIND, "Authorization")) {
            let r = HTTP.response("authentication required\n")
            addCommonHeaders(r, type: "text/plain; charset=utf-8")
            defer { MHD_destroy_response(r) }
            return MHD_queue_basic_auth_fail_response(c, "swift-capture", r)
        }
        let action = url == "/" ? HTTP.value(c, MHD_ValueKind.GET_ARGUMENT_KIND, "action") : nil
        let isGet = method == "GET" || method == "HEAD"
        let route: Route
        switch (url, action) {
        case ("/stream", _), ("/", "stream"): route = .stream
        case ("/snapshot", _), ("/", "snapshot"): route = .snapshot
        case ("/state", _): route = .state
        case ("/", nil): route = .page
        case ("/favicon.ico", _): route = .icon
        case ("/api/controls", _): route = .controls
        case ("/api/still", _): route = .still
        case ("/api/toggle", _): route = .toggle
        case ("/api/control", _): route = .control
        case (let u, _) where u.hasPrefix("/album/"): route = .album(String(u.dropFirst("/album/".count)))
        default:
            return queueText(c, 404, "not found: try /, /stream, /snapshot or /state\n")
        }
        if route.isAction ? method != "POST" : !isGet {
            let r = HTTP.response("method \(method) not allowed here\n")
            addCommonHeaders(r, type: "text/plain; charset=utf-8")
            HTTP.addHeader(r, "Allow", route.isAction ? "POST" : "GET, HEAD")
            return HTTP.queue(c, 405, r)
        }
        if route.isAction,
            let why = policy.refusesStateChange(
                host: host, origin: origin, referer: HTTP.value(c, MHD_ValueKind.HEADER_KIND, "Referer"),
                requestedWith: HTTP.value(c, MHD_ValueKind.HEADER_KIND, "X-Requested-With"))
        {
            return queueJSON(c, 403, Self.failure(why))
        }
        switch route {
        case .stream: return startStream(c, headOnly: method == "HEAD")
        case .snapshot: return snapshot(c)
        case .state: return queueJSON(c, 200, stateJSON())
        case .page:
            let r = HTTP.response(WebApp.page)
            addCommonHeaders(r, type: "text/html; charset=utf-8")
            return HTTP.queue(c, 200, r)
        case .icon:
            // Browsers ask for it whatever the page says; without it their console shows a 404.
            let r = HTTP.response(WebApp.icon)
            addCommonHeaders(r, type: "image/svg+xml")
            return HTTP.queue(c, 200, r)
        case .controls: return queueJSON(c, 200, controlsJSON())
        case .album(let name):
            guard let jpeg = lock.withLock({ stills.first { $0.name == name }?.jpeg }) else {
                return queueText(c, 404, "no such still\n")
            }
            let r = jpeg.withUnsafeBytes { HTTP.response($0) }
            addCommonHeaders(r, type: "image/jpeg")
            return HTTP.queue(c, 200, r)
        case .still: return answerLater(c) { $0.takeStill($1) }
        case .toggle:
            return answerLater(c) { server, answer in
                let (status, body) = server.toggleCamera(); answer(status, body)
            }
        case .control:
            let id = HTTP.value(c, MHD_ValueKind.GET_ARGUMENT_KIND, "id").flatMap {
                UInt32($0.hasPrefix("0x") ? String($0.dropFirst(2)) : $0, radix: $0.hasPrefix("0x") ? 16 : 10)
            }
            let value = HTTP.value(c, MHD_ValueKind.GET_ARGUMENT_KIND, "value").flatMap { Int64($0) }
            guard let id, let value else { return queueJSON(c, 400, Self.failure("id and value are needed, e.g. ?id=0x980900&value=10")) }
            return answerLater(c) { server, answer in
                let (status, body) = server.setControl(CaptureDevice.ControlID(rawValue: id), value)
                answer(status, body)
            }
        }
    }

    private enum Route {
        case stream, snapshot, state, page, icon, controls
        case album(String)
        case still, toggle, control
        var isAction: Bool {
            switch self {
            case .still, .toggle, .control: true
            default: false
            }
        }
    }

    func addCommonHeaders(_ r: OpaquePointer?, type: String?) {
        if let type { HTTP.addHeader(r, "Content-Type", type) }
        HTTP.addHeader(r, "Cache-Control", "no-store, no-cache, must-revalidate, max-age=0")
        if let origin = configuration.allowedOrigin {
            HTTP.addHeader(r, "Access-Control-Allow-Origin", origin)
            // A page of that origin may send the credentials (browsers refuse them with "*").
            if configuration.credentials != nil, origin != "*" { HTTP.addHeader(r, "Access-Control-Allow-Credentials", "true") }
        }
    }

    @discardableResult
    func queueText(_ c: HTTP.Connection, _ status: Int, _ text: String) -> MHD_Result {
        let r = HTTP.response(text)
        addCommonHeaders(r, type: "text/plain; charset=utf-8")
        return HTTP.queue(c, status, r)
    }

    @discardableResult
    func queueJSON(_ c: HTTP.Connection, _ status: Int, _ object: [String: Any]) -> MHD_Result {
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data("{\"ok\": false}".utf8)
        let r = data.withUnsafeBytes { HTTP.response($0) }
        addCommonHeaders(r, type: "application/json")
        return HTTP.queue(c, status, r)
    }

    static func failure(_ message: String) -> [String: Any] { ["ok": false, "error": message] }

    // MARK: Stream

    private func startStream(_ c: HTTP.Connection, headOnly: Bool) -> MHD_Result {
        let client: StreamClient? = lock.withLock {
            guard !stopping, !offline else { return nil }
            guard clients.count < configuration.maxClients else { refused += 1; return nil }
            let client = StreamClient(id: nextClientID, connection: c, server: self)
            nextClientID += 1
            // The first part is the newest frame there is.
            client.lastSerial = (newest?.serial ?? 1) - 1
            if !headOnly { clients[client.id] = client }
            return client
        }
        guard let client else {
            let (isOffline, full) = lock.withLock { (offline || stopping, clients.count >= configuration.maxClients) }
            if full && !isOffline {
                return queueText(c, 503, "too many clients (limit \(configuration.maxClients)): try again later\n")
            }
            return queueText(c, 503, "the camera is offline: check that it is connected\n")
        }
        let r: OpaquePointer?
        if headOnly {
            r = HTTP.response("")
        } else {
            r = MHD_create_response_from_callback(
                UInt64.max, 32 * 1024, serverStreamReader,
                Unmanaged.passRetained(client).toOpaque(), serverStreamFreed)
        }
        addCommonHeaders(r, type: MultipartStream.contentType)
        HTTP.addHeader(r, "Pragma", "no-cache")
        HTTP.addHeader(r, "Expires", "Mon, 3 Jan 2000 12:34:56 GMT")
        return HTTP.queue(c, 200, r)
    }

    /// The next bytes for `client` into `buffer`: the rest of its part, or the newest frame's part
    /// when it has sent one; suspends it when there is no newer frame. On the daemon's thread.
    func read(_ client: StreamClient, into buffer: UnsafeMutableRawBufferPointer) -> Int {
        lock.withLock {
            if client.frame == nil || client.offset >= client.frame!.count {
                client.frame = nil
                if stopping || offline { return closeStream(client, into: buffer) }
                guard let f = newest, f.serial > client.lastSerial else {
                    client.isSuspended = true
                    MHD_suspend_connection(client.connection)
                    return 0
                }
                if client.sent > 0 { client.skipped += Int(f.serial - client.lastSerial - 1) }
                client.frame = f
                client.offset = 0
                client.lastSerial = f.serial
                client.sent += 1
            }
            let f = client.frame!
            let n = min(buffer.count, f.count - client.offset)
            buffer.baseAddress!.copyMemory(from: f.base + client.offset, byteCount: n)
            client.offset += n
            return n
        }
    }

    /// Ends `client`'s stream after a whole part: the multipart close delimiter, then the end of
    /// the response (a final chunk, or the close for HTTP/1.0). Under `lock`.
    private func closeStream(_ client: StreamClient, into buffer: UnsafeMutableRawBufferPointer) -> Int {
        let rest = MultipartStream.closeDelimiter.count - client.closeOffset
        guard rest > 0 else { return -1 }  // MHD_CONTENT_READER_END_OF_STREAM
        let n = min(rest, buffer.count)
        MultipartStream.closeDelimiter.withUnsafeBytes {
            buffer.baseAddress!.copyMemory(from: $0.baseAddress! + client.closeOffset, byteCount: n)
        }
        client.closeOffset += n
        return n
    }

    func streamEnded(_ client: StreamClient) {
        lock.withLock {
            client.frame = nil
            clients[client.id] = nil
        }
    }

    // MARK: Snapshot

    private func snapshot(_ c: HTTP.Connection) -> MHD_Result {
        // Not the frame there is now (it may be old): the next one, so the picture is fresh.
        lock.lock()
        defer { lock.unlock() }
        guard !stopping, !offline else {
            return queueText(c, 503, "the camera is offline: check that it is connected\n")
        }
        let deadline = CaptureTime(nanoseconds: CaptureTime.now().nanoseconds + UInt64(configuration.snapshotTimeout * 1e9))
        waitingSnapshots.append((c, newest?.serial ?? 0, deadline))
        MHD_suspend_connection(c)
        return HTTP.yes
    }

    /// Queues `frame`'s JPEG for `c` without a copy: the response holds the frame. Under `lock`.
    private func queueSnapshot(_ c: HTTP.Connection, _ frame: ServedFrame) {
        let jpeg = frame.jpeg
        let held = Unmanaged.passRetained(SnapshotHold(server: self, frame: frame)).toOpaque()
        let r = MHD_create_response_from_buffer_with_free_callback_cls(
            jpeg.count, UnsafeMutableRawPointer(mutating: jpeg.baseAddress),
            serverFrameFreed, held)
        addCommonHeaders(r, type: "image/jpeg")
        HTTP.addHeader(r, "X-Timestamp", ServedFrame.seconds(frame.timestamp))
        HTTP.addHeader(r, "X-Sequence", String(frame.cameraSequence))
        HTTP.queue(c, 200, r)
    }

    // MARK: Actions (answered off the daemon's thread)

    typealias Answer = @Sendable (Int, [String: Any]) -> Void

    /// Suspends `c`, runs `work` on the action queue (Dispatch, not the cooperative pool, which a
    /// host program may keep busy) and queues the answer it gives for `c`.
    private func answerLater(_ c: HTTP.Connection, _ work: @escaping @Sendable (CaptureStreamServer, @escaping Answer) -> Void)
        -> MHD_Result
    {
        let accepted: Bool = lock.withLock {
            guard !stopping else { return false }
            MHD_suspend_connection(c)
            pendingWork.enter()
            return true
        }
        guard accepted else { return queueText(c, 503, "the server is stopping\n") }
        let connection = SendableConnection(c)
        actions.async { [self] in
            work(self) { status, body in
                self.lock.withLock {
                    self.queueJSON(connection.pointer, status, body)
                    MHD_resume_connection(connection.pointer)
                }
                self.pendingWork.leave()
            }
        }
        return HTTP.yes
    }

    private func takeStill(_ answer: @escaping Answer) {
        guard let still = session.outputs.lazy.compactMap({ $0 as? CaptureStillImageOutput }).first,
            let connection = still.connection(with: .video)
        else {
            return answer(503, Self.failure("the session has no still image output: add a CaptureStillImageOutput"))
        }
        let library = configuration.photoLibrary
        still.captureStillImageAsynchronously(from: connection) { [self] sample, error in
            guard let sample, let jpeg = CaptureStillImageOutput.jpegStillImageDataRepresentation(sample) else {
                return answer(500, Self.failure("the still failed: \(error?.message ?? "it has no JPEG data")"))
            }
            let d = sample.dimensions
            library.save(jpeg: jpeg, metadata: nil) { [self] result in
                switch result {
                case .failure(let e):
                    answer(500, Self.failure("the still could not be saved: \(e.message)"))
                case .success(let url):
                    // Its name only: where the album is on the server's disk is none of the client's business.
                    let name = url.lastPathComponent
                    // What the album holds (with the metadata it added), for `/album/NAME`.
                    let saved = (try? Data(contentsOf: url)) ?? jpeg
                    lock.withLock {
                        stills.append((name, saved))
                        if stills.count > 8 { stills.removeFirst() }
                    }
                    answer(
                        200,
                        [
                            "ok": true,
                            "result": [
                                "url": "/album/" + name, "name": name, "bytes": saved.count,
                                "width": d?.width ?? 0, "height": d?.height ?? 0,
                            ],
                        ])
                }
            }
        }
    }

    private func toggleCamera() -> (Int, [String: Any]) {
        guard let current = (session.inputs.first as? CaptureDeviceInput)?.device else {
            return (503, Self.failure("the session has no camera"))
        }
        // The other side's cameras first (front for back and back for front, as the seeds toggle),
        // then other positions, then the same; one that cannot be used (busy, gone) is skipped.
        let cameras = CaptureDevice.devices(for: .video).filter { $0.uniqueID != current.uniqueID }
        let opposite: DevicePosition? = current.position == .front ? .back : current.position == .back ? .front : nil
        let candidates =
            cameras.filter { $0.position == opposite }
            + cameras.filter { $0.position != opposite && $0.position != current.position }
            + cameras.filter { $0.position == current.position }
        guard !candidates.isEmpty else { return (409, Self.failure("\(current.localizedName) is the only camera")) }
        var problems: [String] = []
        for other in candidates {
            do throws(CaptureError) {
                try session.replaceInputs(with: try CaptureDeviceInput(device: other))
                return (
                    200,
                    ["ok": true, "result": ["camera": other.localizedName, "id": other.uniqueID, "position": other.position.rawValue]]
                )
            } catch {
                problems.append("\(other.localizedName): \(error.message)")
            }
        }
        return (409, Self.failure("cannot switch camera: " + problems.joined(separator: "; ")))
    }

    private func setControl(_ id: CaptureDevice.ControlID, _ value: Int64) -> (Int, [String: Any]) {
        guard let device = (session.inputs.first as? CaptureDeviceInput)?.device else {
            return (503, Self.failure("the session has no camera"))
        }
        do throws(CaptureError) {
            try device.lockForConfiguration()
            defer { device.unlockForConfiguration() }
            try device.setValue(value, for: id)
            return (200, ["ok": true, "result": ["id": Int(id.rawValue), "value": try device.value(of: id)]])
        } catch {
            return (400, Self.failure("cannot set control \(id): \(error.message)"))
        }
    }

    private func controlsJSON() -> [String: Any] {
        guard let device = (session.inputs.first as? CaptureDeviceInput)?.device else {
            return ["ok": true, "result": ["controls": [Any]()]]
        }
        let controls = (try? device.controls()) ?? []
        let list: [[String: Any]] = controls.filter { !$0.isReadOnly }.map { c in
            [
                "id": Int(c.id.rawValue), "name": c.name, "minimum": c.minimum, "maximum": c.maximum, "step": Int(c.step),
                "default": c.defaultValue, "value": (try? device.value(of: c.id)) ?? c.defaultValue,
            ]
        }
        return ["ok": true, "result": ["camera": device.localizedName, "controls": list]]
    }

    // MARK: State

    /// `/state` in uStreamer's shape, with this server's figures added.
    private func stateJSON() -> [String: Any] {
        let device = (session.inputs.first as? CaptureDeviceInput)?.device
        let desired = device?.activeVideoMinFrameDuration?.framesPerSecond ?? 0
        return lock.withLock {
            let now = CaptureTime.now()
            var stats: [String: Any] = [:]
            for c in clients.values {
                stats[String(c.id)] = [
                    "fps": c.fps, "frames": c.sent, "skipped": c.skipped, "extra_headers": false,
                    "advance_headers": false, "dual_final_frames": false, "zero_data": false, "key": "",
                ]
            }
            let d = newest?.dimensions ?? device?.activeFormat?.dimensions
            return [
                "ok": true,
                "result": [
                    "instance_id": "",
                    "encoder": ["type": "CPU", "quality": configuration.quality],
                    "source": [
                        "resolution": ["width": d?.width ?? 0, "height": d?.height ?? 0],
                        "online": isOnlineLocked(now: now), "desired_fps": (desired * 100).rounded() / 100,
                        "captured_fps": capturedFPS, "device": device?.localizedName ?? "",
                    ],
                    "stream": [
                        "queued_fps": capturedFPS, "clients": clients.count, "clients_stat": stats,
                        "clients_refused": refused,
                    ],
                    "frames": received,
                    "drops": dropped.values.reduce(0, +),
                    "drop_reasons": Dictionary(uniqueKeysWithValues: dropped.map { ($0.key.rawValue, $0.value) }),
                ] as [String: Any],
            ]
        }
    }
}

/// A camera that went away, what identifies it when it is back, and the settings it had.
final class MissingCamera: Sendable {
    let device: CaptureDevice
    let uniqueID: String
    let path: String
    let name: String
    let format: CaptureDevice.Format?
    let interval: FrameInterval?
    /// The control values set on it, to put back (see `CaptureDevice.controlValuesSet`).
    let controls: [(id: CaptureDevice.ControlID, value: Int64)]

    init(device: CaptureDevice, format: CaptureDevice.Format?, interval: FrameInterval?) {
        self.device = device
        controls = device.controlValuesSet
        uniqueID = device.uniqueID
        path = device.path
        name = device.localizedName
        self.format = format
        self.interval = interval
    }

    /// Whether `other` is this camera: the same object, the same `uniqueID`, or the same path and name.
    func matches(_ other: CaptureDevice) -> Bool {
        other === device || other.uniqueID == uniqueID || (other.path == path && other.localizedName == name)
    }
}

/// One stream client: the part it sends now and its counts. Guarded by the server's lock.
final class StreamClient: @unchecked Sendable {
    let id: Int
    let connection: HTTP.Connection
    let server: CaptureStreamServer
    var frame: ServedFrame?
    var offset = 0
    /// Bytes of the close delimiter sent (the stream is ending).
    var closeOffset = 0
    var lastSerial: UInt64 = 0
    var sent = 0
    var sentAtTick = 0
    var skipped = 0
    var fps = 0.0
    var isSuspended = false

    init(id: Int, connection: HTTP.Connection, server: CaptureStreamServer) {
        self.id = id
        self.connection = connection
        self.server = server
    }
}

/// The server's frame consumer delegate; calls come on the server's queue.
final class ServerFrameSink: CaptureVideoDataOutputSampleBufferDelegate, @unchecked Sendable {
    weak var server: CaptureStreamServer?
    func captureOutput(_ output: CaptureOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection) {
        server?.publish(sampleBuffer)
    }
    func captureOutput(_ output: CaptureOutput, didDrop drop: DroppedFrames, from connection: CaptureConnection) {
        server?.noteDrop(drop)
    }
}

/// A snapshot answer's hold on its frame (the answer is sent from the frame's bytes).
final class SnapshotHold: @unchecked Sendable {
    let server: CaptureStreamServer
    var frame: ServedFrame?
    init(server: CaptureStreamServer, frame: ServedFrame) {
        self.server = server
        self.frame = frame
    }
}

/// A connection pointer handed to the thread that answers it (used there only under the lock).
struct SendableConnection: @unchecked Sendable {
    let pointer: HTTP.Connection
    init(_ p: HTTP.Connection) { pointer = p }
}

// MARK: libmicrohttpd's callbacks

private func serverAccessHandler(
    _ cls: UnsafeMutableRawPointer?, _ connection: OpaquePointer?, _ url: UnsafePointer<CChar>?,
    _ method: UnsafePointer<CChar>?, _ version: UnsafePointer<CChar>?,
    _ uploadData: UnsafePointer<CChar>?, _ uploadSize: UnsafeMutablePointer<Int>?,
    _ state: UnsafeMutablePointer<UnsafeMutableRawPointer?>?
) -> MHD_Result {
    guard let cls, let connection, let url, let method else { return MHD_Result.NO }
    // Answered 414 already (`RequestLimits.refuseLongQuery`): close.
    if state?.pointee == RequestLimits.refused { return MHD_Result.NO }
    let server = Unmanaged<CaptureStreamServer>.fromOpaque(cls).takeUnretainedValue()
    server.connectionGuard.headersReceived(connection)
    // A body (uploads are not used here) is read and dropped.
    if let uploadSize, uploadSize.pointee != 0 {
        uploadSize.pointee = 0
        return MHD_Result.YES
    }
    return server.handle(connection, url: String(cString: url), method: String(cString: method))
}

private func serverStreamReader(
    _ cls: UnsafeMutableRawPointer?, _ position: UInt64, _ buffer: UnsafeMutablePointer<CChar>?,
    _ max: Int
) -> Int {
    guard let cls, let buffer else { return -2 }
    let client = Unmanaged<StreamClient>.fromOpaque(cls).takeUnretainedValue()
    return client.server.read(client, into: UnsafeMutableRawBufferPointer(start: buffer, count: max))
}

private func serverStreamFreed(_ cls: UnsafeMutableRawPointer?) {
    guard let cls else { return }
    let client = Unmanaged<StreamClient>.fromOpaque(cls).takeRetainedValue()
    client.server.streamEnded(client)
}

private func serverFrameFreed(_ cls: UnsafeMutableRawPointer?) {
    guard let cls else { return }
    let hold = Unmanaged<SnapshotHold>.fromOpaque(cls).takeRetainedValue()
    // Let go under the lock: the frame pool judges by reference counts under it.
    hold.server.lock.withLock { hold.frame = nil }
}
