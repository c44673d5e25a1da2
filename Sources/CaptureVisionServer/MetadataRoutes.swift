import Capture
import CaptureServer
import CaptureVision
import Foundation

/// `/metadata`: a metadata output's detections as server-sent events (`text/event-stream`), one
/// event per detection batch, written once for every client (`MetadataEvent`) and kept in a small
/// ring. A client sends the events in order; one more than `maxLag` events behind skips to the
/// newest (counted), so what a slow client holds is bounded and it never slows detection or the
/// other clients; one whose socket holds more than `unsentLimit` bytes it has not taken is
/// dropped (counted). A client with nothing to send gets a keep-alive comment every
/// `keepAliveInterval`.
///
/// Thread-safe: the observer runs on the output's detection thread, `respond` and the clients'
/// reads on the server's daemon thread, the keep-alive on a timer queue; what they share is
/// under `lock`.
final class MetadataRoutes: ServerRoutes, @unchecked Sendable {
    static let path = "/metadata"
    /// Events kept for clients.
    static let ringSize = 16
    /// Events a client may be behind before it skips to the newest.
    static let maxLag = 8
    /// Bytes a client's socket may hold that it has not taken before the client is dropped
    /// (about 250 events of a code: several seconds).
    static let unsentLimit = 64 * 1024

    let routes = [ServerRoute(path, methods: ["GET", "HEAD"])]
    let output: CaptureMetadataOutput
    let lock = NSLock()
    private let timerQueue = DispatchQueue(label: "swift-capture.server.metadata")
    // Guarded by `lock`.
    private var running = false
    private var observer: UUID?
    /// Whether the server put the output in its session (and takes it out on stop).
    private var addedOutput = false
    private var session: CaptureSession?
    private var ring = [(serial: UInt64, bytes: [UInt8])?](repeating: nil, count: ringSize)
    /// The newest event's serial (0: none yet).
    private(set) var newestSerial: UInt64 = 0
    private var clients: [Int: MetadataClient] = [:]
    private var nextClientID = 1
    private var maxClients = 20
    private var refused = 0
    /// Clients dropped for not reading.
    private var dropped = 0
    /// Seconds without a byte after which a waiting client gets a keep-alive comment.
    private(set) var keepAliveInterval = 15.0
    private var timer: DispatchSourceTimer?
    /// Clients waiting for an event (reused: waking allocates nothing).
    private var waiting: [RouteWaker] = []
    private var toWake: [RouteWaker] = []

    init(_ output: CaptureMetadataOutput) {
        self.output = output
        waiting.reserveCapacity(64)
        toWake.reserveCapacity(64)
    }

    // MARK: Server (start/stop thread)

    func serverWillStart(_ server: CaptureStreamServer) throws(CaptureServerError) {
        var added = false
        if output.session == nil {
            server.session.addOutput(output)
            added = true
        } else if output.session !== server.session {
            throw CaptureServerError(
                .invalidConfiguration, "the metadata output is in another session: serve it from the server's session (or from none)")
        }
        // Suspended connections do not time out in libmicrohttpd; the comments keep proxies
        // and the server's own time-out from cutting a quiet stream.
        let interval = min(15, max(0.5, Double(server.configuration.connectionTimeout) / 2))
        let t = DispatchSource.makeTimerSource(queue: timerQueue)
        t.schedule(deadline: .now() + interval, repeating: interval)
        t.setEventHandler { [weak self] in self?.wakeAll() }
        lock.withLock {
            running = true
            addedOutput = added
            session = server.session
            maxClients = server.configuration.maxClients
            keepAliveInterval = interval
            timer = t
            observer = output.addObserver { [weak self] batch in self?.publish(batch) }
        }
        t.resume()
    }

    func serverDidStop(_ server: CaptureStreamServer) {
        let (t, id, added): (DispatchSourceTimer?, UUID?, Bool) = lock.withLock {
            running = false
            defer {
                timer = nil
                observer = nil
                addedOutput = false
                session = nil
                for i in ring.indices { ring[i] = nil }
                waiting.removeAll(keepingCapacity: true)
            }
            return (timer, observer, addedOutput)
        }
        t?.cancel()
        if let id { output.removeObserver(id) }
        if added { server.session.removeOutput(output) }
    }

    func state() -> (name: String, value: [String: Any])? {
        let types = output.metadataObjectTypes.map(\.name)
        let s = output.statistics
        return lock.withLock {
            var stats: [String: Any] = [:]
            for c in clients.values { stats[String(c.id)] = ["events": c.sent, "skipped": c.skipped, "bytes": c.bytes] }
            return (
                "metadata",
                [
                    "path": Self.path, "types": types, "events": newestSerial, "clients": clients.count, "clients_stat": stats,
                    "clients_refused": refused, "clients_dropped": dropped, "frames_detected": s.framesDetected,
                    "frames_skipped": s.framesSkipped,
                ]
            )
        }
    }

    // MARK: Requests (daemon thread)

    func respond(to request: RouteRequest, with responder: RouteResponder) {
        let headers: [(name: String, value: String)] = [
            ("Content-Type", "text/event-stream"), ("X-Content-Type-Options", "nosniff"),
            // Proxies that buffer (nginx) pass events at once.
            ("X-Accel-Buffering", "no"),
        ]
        if request.method == "HEAD" { return responder.answer(RouteResponse(status: 200, headers: headers)) }
        let (client, limit): (MetadataClient?, Int) = lock.withLock {
            guard running, clients.count < maxClients else {
                refused += 1
                return (nil, maxClients)
            }
            let c = MetadataClient(id: nextClientID, routes: self, startAfter: newestSerial)
            nextClientID += 1
            clients[c.id] = c
            return (c, maxClients)
        }
        guard let client else {
            var r = RouteResponse.text(503, "too many clients (limit \(limit)): try again later\n")
            r.headers.append(("Retry-After", "5"))
            return responder.answer(r)
        }
        responder.answer(RouteResponse(status: 200, headers: headers, body: .stream(client)))
    }

    /// A client was dropped for not reading. Under `lock`.
    func droppedLocked() { dropped += 1 }

    func clientEnded(_ client: MetadataClient) {
        lock.withLock { clients[client.id] = nil }
    }

    // MARK: Detections (the output's detection thread: return quickly)

    func publish(_ batch: MetadataBatch) {
        // Nobody listens: nothing to write.
        guard lock.withLock({ running && !clients.isEmpty }) else { return }
        let serial = lock.withLock { newestSerial + 1 }
        // Written outside the lock: the daemon's thread goes on sending meanwhile. Only this
        // thread publishes, so the serial stays the next one.
        let bytes = MetadataEvent.bytes(batch, serial: serial)
        lock.withLock {
            guard running else { return }
            newestSerial = serial
            ring[Int(serial % UInt64(Self.ringSize))] = (serial, bytes)
            swap(&waiting, &toWake)
        }
        wakeWoken()
    }

    /// Wakes every waiting client (the keep-alive timer).
    private func wakeAll() {
        lock.withLock { swap(&waiting, &toWake) }
        wakeWoken()
    }

    private func wakeWoken() {
        for w in toWake { w.wake() }
        toWake.removeAll(keepingCapacity: true)
    }

    // MARK: Clients (daemon thread, under `lock`)

    /// What `client` sends next: the preamble, the next event (the newest when it fell behind),
    /// a keep-alive comment, nothing yet (after noting its waker), or the end.
    func nextLocked(for client: MetadataClient, waker: RouteWaker, now: Double) -> MetadataClient.Next {
        guard running else { return .end }
        if !client.greeted {
            client.greeted = true
            return .bytes(MetadataEvent.preamble)
        }
        if newestSerial >= client.next {
            if newestSerial - client.next >= UInt64(Self.maxLag) {
                client.skip(to: newestSerial)
            }
            if let e = ring[Int(client.next % UInt64(Self.ringSize))], e.serial == client.next {
                client.next += 1
                client.sent += 1
                return .bytes(e.bytes)
            }
            // Gone from the ring (the server restarted meanwhile): from the newest on.
            client.skip(to: newestSerial + 1)
        }
        if now - client.lastWrite >= keepAliveInterval * 0.9 { return .bytes(MetadataEvent.keepAlive) }
        waiting.append(waker)
        return .wait
    }
}
