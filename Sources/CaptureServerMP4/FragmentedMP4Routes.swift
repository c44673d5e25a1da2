import Capture
import CaptureCodecs
import CaptureServer
import Foundation

/// `/stream.mp4`: the session's H.264 (the one shared stage: a recording at the same settings
/// shares its encoder) as fragmented MP4 over HTTP, playable by `<video src>`, MSE, ffplay and
/// VLC. Each frame becomes one mdat for every client; each client gets the init segment, then
/// from a key frame (asked of the stage when it joins) one moof + mdat per frame, with its own
/// decode times from 0. A client that falls behind skips to the next key frame (counted); it
/// never slows capture or the other clients, and what it holds is bounded by the shared ring.
/// The encoder runs only while someone watches (it stops a few seconds after the last leaves).
///
/// Thread-safe: `consume` runs on the stage's encoder thread, `respond` and the clients' reads on
/// the server's daemon thread, the rest on any thread; everything shared is under `lock`.
final class FragmentedMP4Routes: ServerRoutes, H264Consumer, @unchecked Sendable {
    static let path = "/stream.mp4"
    let routes = [ServerRoute(path, methods: ["GET", "HEAD"])]
    let settings: H264Settings
    /// Fragments kept for clients: about two seconds at 30 fps.
    static let ringSize = 64
    /// Frames a client may be behind before it skips to a key frame.
    static let maxLag = 30

    let lock = NSLock()
    private var port: FrameConsumerPort?
    private let control = DispatchQueue(label: "swift-capture.server.mp4")
    // Guarded by `lock`.
    private var session: CaptureSession?
    private var maxClients = 20
    private var ring = [MP4Fragment?](repeating: nil, count: ringSize)
    private var pool = MP4FragmentPool(limit: ringSize + 32)
    /// The newest fragment's serial (0: none yet).
    private(set) var newestSerial: UInt64 = 0
    /// The init segment of the encoder now, and what it was made of.
    private(set) var initSegment: [UInt8]?
    private(set) var generation = 0
    private var parameterSets = Data()
    private var dimensions = VideoDimensions(width: 0, height: 0)
    private(set) var codec = ""
    private var failure: H264StageError?
    private var clients: [Int: MP4Client] = [:]
    private var nextClientID = 1
    private var refused = 0
    /// Clients waiting for a fragment, woken by the next (reused: waking allocates nothing).
    private var waiting: [RouteWaker] = []
    private var toWake: [RouteWaker] = []
    private var idleCheck = 0

    init(settings: H264Settings) {
        self.settings = settings
        waiting.reserveCapacity(64)
        toWake.reserveCapacity(64)
        port = FrameConsumerPort(encodedFor: self, keepsEveryFrame: false)
    }

    // MARK: Server (start/stop thread)

    func serverWillStart(_ server: CaptureStreamServer) throws(CaptureServerError) {
        guard let port else { return }
        guard server.session.addFrameConsumer(port) else {
            throw CaptureServerError(.startFailed, "the session takes no more outputs: /stream.mp4 cannot be served")
        }
        lock.withLock {
            session = server.session
            maxClients = server.configuration.maxClients
            failure = nil
        }
    }

    func serverDidStop(_ server: CaptureStreamServer) {
        guard let port else { return }
        port.encodedProduct = nil
        server.session.removeFrameConsumer(port)
        lock.withLock {
            for i in ring.indices {
                ring[i]?.letGo()
                ring[i] = nil
            }
            waiting.removeAll(keepingCapacity: true)
            session = nil
            initSegment = nil
            parameterSets = Data()
        }
    }

    func state() -> (name: String, value: [String: Any])? {
        lock.withLock {
            var stats: [String: Any] = [:]
            for c in clients.values {
                stats[String(c.id)] = ["fragments": c.sent, "skipped": c.skipped, "bytes": c.bytes]
            }
            return (
                "mp4",
                [
                    "path": Self.path, "codec": codec, "encoding": port?.encodedProduct != nil, "clients": clients.count,
                    "clients_stat": stats, "clients_refused": refused, "fragments": newestSerial,
                    "error": failure?.message ?? NSNull(),
                ]
            )
        }
    }

    // MARK: Requests (daemon thread)

    func respond(to request: RouteRequest, with responder: RouteResponder) {
        let headers: [(name: String, value: String)] = [
            ("Content-Type", "video/mp4"), ("X-Content-Type-Options", "nosniff"),
        ]
        let client: MP4Client? = lock.withLock {
            if failure != nil { return nil }
            guard request.method == "GET" else { return nil }
            guard clients.count < maxClients else {
                refused += 1
                return nil
            }
            let c = MP4Client(id: nextClientID, routes: self, startAfter: newestSerial)
            nextClientID += 1
            clients[c.id] = c
            // An idle check pending from before is void.
            idleCheck += 1
            return c
        }
        guard let client else {
            let (failure, limit) = lock.withLock { (self.failure, maxClients) }
            if let failure { return responder.answer(.text(503, "H.264 is not available: \(failure.message)\n")) }
            if request.method == "HEAD" { return responder.answer(RouteResponse(status: 200, headers: headers)) }
            return responder.answer(.text(503, "too many clients (limit \(limit)): try again later\n"))
        }
        // The stream starts at a key frame: ask for one now rather than waiting for the next.
        port?.requestKeyFrame()
        watch()
        responder.answer(RouteResponse(status: 200, headers: headers, body: .stream(client)))
    }

    /// Turns the encoder on for the clients (off the daemon's thread: it changes the session's routes).
    private func watch() {
        control.async { [self] in
            guard let port, port.encodedProduct == nil else { return }
            port.encodedProduct = settings.product
            port.requestKeyFrame()
        }
    }

    /// A client left: the encoder stops when nobody has watched for a few seconds.
    func clientEnded(_ client: MP4Client) {
        let check: Int? = lock.withLock {
            clients[client.id] = nil
            guard clients.isEmpty else { return nil }
            idleCheck += 1
            return idleCheck
        }
        guard let check else { return }
        control.asyncAfter(deadline: .now() + 3) { [self] in
            let idle = lock.withLock { clients.isEmpty && idleCheck == check }
            if idle { port?.encodedProduct = nil }
        }
    }

    // MARK: Units (the stage's encoder thread: return quickly)

    func consume(_ unit: H264AccessUnit, from connection: CaptureConnection) {
        lock.withLock {
            guard session != nil else { return }
            if unit.parameterSets != parameterSets || unit.dimensions != dimensions { newEncoder(unit) }
            guard initSegment != nil else { return }
            newestSerial += 1
            let f = pool.take(unit, serial: newestSerial, generation: generation)
            let slot = Int(newestSerial % UInt64(Self.ringSize))
            ring[slot]?.letGo()
            f.hold()
            ring[slot] = f
            swap(&waiting, &toWake)
        }
        for w in toWake { w.wake() }
        toWake.removeAll(keepingCapacity: true)
    }

    /// A new encoder (the first, or after a format change): a new init segment; clients of the
    /// old one end their streams. Under `lock`.
    private func newEncoder(_ unit: H264AccessUnit) {
        parameterSets = unit.parameterSets
        dimensions = unit.dimensions
        generation += 1
        if let sets = MP4Boxes.parameterSets(Array(unit.parameterSets)) {
            initSegment = MP4Boxes.initSegment(sps: sets.sps, pps: sets.pps, width: unit.dimensions.width, height: unit.dimensions.height)
            codec = MP4Boxes.codec(sps: sets.sps)
        } else {
            initSegment = nil
        }
    }

    func consumeDrop(_ drop: DroppedFrames, from connection: CaptureConnection) {}

    func h264StageFailed(_ error: H264StageError, from connection: CaptureConnection) {
        lock.withLock {
            failure = error
            swap(&waiting, &toWake)
        }
        for w in toWake { w.wake() }
        toWake.removeAll(keepingCapacity: true)
    }

    // MARK: Clients (daemon thread, under `lock`)

    /// What `client` sends next: the init segment, or the next fragment it should send (after a
    /// key frame when it starts or fell behind); nil to wait, after noting its waker.
    func nextLocked(for client: MP4Client, waker: RouteWaker) -> MP4Client.Next {
        if failure != nil || session == nil { return .end }
        if client.generation == 0 {
            guard let initSegment else {
                waiting.append(waker)
                return .wait
            }
            client.generation = generation
            return .initSegment(initSegment)
        }
        if client.generation != generation { return .end }
        if newestSerial >= client.next, newestSerial - client.next >= UInt64(Self.maxLag) {
            // Behind: skip to the next key frame.
            client.needsKey = true
            port?.requestKeyFrame()
        }
        if newestSerial >= client.next + UInt64(Self.ringSize) {
            // Past the ring: what it missed is gone (counted at once).
            let gone = newestSerial - UInt64(Self.ringSize) + 1 - client.next
            client.skip(Int(gone))
            client.needsKey = true
        }
        while client.next <= newestSerial {
            guard let f = ring[Int(client.next % UInt64(Self.ringSize))], f.serial == client.next, f.generation == generation else {
                // Gone from the ring already: the client is far behind.
                client.skip()
                client.needsKey = true
                continue
            }
            if client.needsKey && !f.isKey {
                client.skip()
                continue
            }
            client.needsKey = false
            client.next += 1
            return .fragment(f)
        }
        waiting.append(waker)
        return .wait
    }
}
