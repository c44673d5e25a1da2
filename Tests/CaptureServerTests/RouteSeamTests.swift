import Capture
import CaptureServer
import CaptureTestSupport
import Foundation
import Testing

/// The seam other products add routes through (`ServerRoutes`): the server's checks run first,
/// bodies are read up to the route's limit, answers may come later from another thread, and
/// streams are pulled per client. The routes here are the test's own: the seam is the contract.
@Suite struct RouteSeamTests {
    /// A server with `TestRoutes` on a free port (its session never runs: the routes need no frames).
    final class Served: @unchecked Sendable {
        let server: CaptureStreamServer
        let routes = TestRoutes()
        var base: String { "http://127.0.0.1:\(server.port)" }
        var port: Int { server.port }

        init(configure: (inout CaptureStreamServer.Configuration) -> Void = { _ in }) throws {
            var config = CaptureStreamServer.Configuration(port: 0, connectionTimeout: 2)
            configure(&config)
            server = try CaptureStreamServer(session: CaptureSession(), configuration: config)
            try server.add(routes)
            try server.start()
        }

        func close() { server.stop() }
    }

    @Test func aBodyOverTheRouteLimitGets413AndOneWithinItIsRead() throws {
        let s = try Served()
        defer { s.close() }
        let small = String(repeating: "a", count: 1000)
        let ok = try curl(s.base + "/echo", apiPost + ["--data-binary", small])
        #expect(ok.status == 200)
        #expect(ok.body == Data(small.utf8))
        let big = try curl(s.base + "/echo", apiPost + ["--data-binary", String(repeating: "b", count: 1025)])
        #expect(big.status == 413)
        // A chunked body is read up to the limit.
        let chunked = try curl(s.base + "/echo", apiPost + ["-H", "Transfer-Encoding: chunked", "--data-binary", small])
        #expect(chunked.status == 200)
        #expect(chunked.body == Data(small.utf8))
        let chunkedBig = try curl(
            s.base + "/echo", apiPost + ["-H", "Transfer-Encoding: chunked", "--data-binary", String(repeating: "c", count: 5000)])
        #expect(chunkedBig.status == 413)
        // A route that takes no body keeps the server's rule for chunked bodies.
        let noBody = try curl(s.base + "/later", apiPost + ["-H", "Transfer-Encoding: chunked", "--data-binary", "x"])
        #expect(noBody.status == 411)
        #expect(s.routes.calls.value == 2, "the route was called for a refused request")
        // The server keeps serving.
        #expect(try curl(s.base + "/state").status == 200)
    }

    @Test func aForeignOriginMayNotPostAndThePreflightListsTheRouteMethods() throws {
        let s = try Served { $0.allowedOrigin = "http://allowed.example" }
        defer { s.close() }
        for extra in [
            ["-H", "Origin: http://attacker.example", "-H", "X-Requested-With: x"],
            ["-H", "Origin: \(s.base)"],  // no X-Requested-With
            ["-H", "Origin: null", "-H", "X-Requested-With: x"],
        ] {
            let r = try curl(s.base + "/echo", ["-X", "POST", "--data-binary", "hi"] + extra)
            #expect(r.status == 403, "\(extra)")
        }
        #expect(try curl(s.base + "/echo", apiPost + ["-H", "Origin: http://allowed.example", "--data-binary", "hi"]).status == 200)
        #expect(s.routes.calls.value == 1)
        let preflight = try curl(
            s.base + "/echo",
            ["-X", "OPTIONS", "-H", "Origin: http://allowed.example", "-H", "Access-Control-Request-Method: POST"])
        #expect(preflight.status == 204)
        #expect(preflight.headers.lowercased().contains("access-control-allow-methods: post, options"), "\(preflight.headers)")
        #expect(preflight.headers.lowercased().contains("content-type"))
        // Headers of the route's own are exposed to the allowed origin's pages.
        let waiting = try RawClient(port: s.port)
        waiting.send("POST /later HTTP/1.0\r\nHost: 127.0.0.1\r\nX-Requested-With: t\r\nOrigin: http://allowed.example\r\n\r\n")
        try waitUntil { s.routes.held.value == 1 }
        s.routes.releaseHeld()
        let later = waiting.responseHead()
        #expect(later?.status == 202 && later?.headers["access-control-expose-headers"] == "X-Route", "\(String(describing: later))")
        let wrong = try curl(s.base + "/echo")
        #expect(wrong.status == 405)
        #expect(wrong.headers.contains("Allow: POST"))
        let missing = try curl(s.base + "/nothing")
        #expect(missing.status == 404)
        #expect(String(decoding: missing.body, as: UTF8.self).contains("/ticks"))
    }

    /// A route for clients other than the web app (WHEP players) takes, without X-Requested-With,
    /// the state changes browsers preflight; a form-like POST still needs it, and the origin rules
    /// hold for every one.
    @Test func aPreflightedRequestNeedsNoRequestedWithButKeepsTheOriginRules() throws {
        let s = try Served()
        defer { s.close() }
        let sdp = ["-X", "POST", "-H", "Content-Type: application/sdp", "--data-binary", "v=0"]
        #expect(try curl(s.base + "/signal", sdp).status == 200)
        #expect(try curl(s.base + "/signal", sdp + ["-H", "Origin: \(s.base)"]).status == 200)
        #expect(try curl(s.base + "/signal/1", ["-X", "DELETE"]).status == 200)
        // What a cross-site form or simple fetch can send: refused without the header.
        for type in ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"] {
            #expect(
                try curl(s.base + "/signal", ["-X", "POST", "-H", "Content-Type: \(type)", "--data-binary", "v=0"]).status == 403, "\(type)"
            )
        }
        // Another site's page (its preflight unanswered here, or a forged request): refused.
        #expect(try curl(s.base + "/signal", sdp + ["-H", "Origin: http://attacker.example"]).status == 403)
        #expect(try curl(s.base + "/signal/1", ["-X", "DELETE", "-H", "Origin: http://attacker.example"]).status == 403)
        // The other routes keep the header rule for the same request.
        #expect(try curl(s.base + "/echo", sdp).status == 403)
        #expect(s.routes.calls.value == 3)
    }

    @Test func aForeignHostAndMissingCredentialsAreRefusedBeforeTheRoute() throws {
        let s = try Served { $0.credentials = .init(user: "ada", password: "pw") }
        defer { s.close() }
        #expect(try curl(s.base + "/echo", apiPost + ["--data-binary", "hi"]).status == 401)
        let auth = ["-u", "ada:pw"]
        #expect(try curl(s.base + "/echo", apiPost + auth + ["-H", "Host: rebound.example", "--data-binary", "hi"]).status == 403)
        #expect(s.routes.calls.value == 0)
        let ok = try curl(s.base + "/echo", apiPost + auth + ["--data-binary", "hi"])
        #expect(ok.status == 200)
        #expect(ok.body == Data("hi".utf8))
    }

    /// An answer given later from another thread: the daemon's thread serves others meanwhile.
    @Test func anAnswerMayComeLaterFromAnotherThread() throws {
        let s = try Served()
        defer { s.close() }
        let waiting = try RawClient(port: s.port)
        waiting.send("POST /later HTTP/1.0\r\nHost: 127.0.0.1\r\nX-Requested-With: t\r\n\r\n")
        try waitUntil { s.routes.held.value == 1 }
        // The route holds its answer: other requests are answered meanwhile.
        #expect(try curl(s.base + "/state").status == 200)
        #expect(try curl(s.base + "/echo", apiPost + ["--data-binary", "x"]).status == 200)
        s.routes.releaseHeld()
        let head = waiting.responseHead()
        #expect(head?.status == 202)
        #expect(head?.headers["x-route"] == "later")
    }

    /// Stopping the server answers what is pending (503) and ends every stream.
    @Test func stopAnswersPendingRequestsAndEndsStreams() throws {
        let s = try Served()
        let waiting = try RawClient(port: s.port)
        waiting.send("POST /later HTTP/1.0\r\nHost: 127.0.0.1\r\nX-Requested-With: t\r\n\r\n")
        let reader = try RawClient(port: s.port)
        reader.send("GET /ticks HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        #expect(reader.responseHead()?.status == 200)
        try waitUntil { s.routes.held.value == 1 && s.routes.openStreams.value == 1 }
        s.close()
        // Answered 503, or closed with the daemon if that came first: never left waiting.
        let (bytes, closed) = waiting.readUntilClosed()
        #expect(closed)
        #expect(bytes.isEmpty || String(decoding: bytes, as: UTF8.self).hasPrefix("HTTP/1.1 503"), "\(bytes.count) bytes")
        #expect(reader.readUntilClosed().closed)
        #expect(s.routes.openStreams.value == 0)
        #expect(s.routes.stopped.value == 1)
        // A late answer is dropped.
        s.routes.releaseHeld()
    }

    /// A client that stops reading a stream neither blocks another client nor keeps its
    /// connection: it is timed out and its stream ended.
    @Test func aStreamClientThatStopsReadingBlocksNobodyAndIsTimedOut() throws {
        let s = try Served { $0.connectionTimeout = 1 }
        defer { s.close() }
        let stalled = try RawClient(port: s.port, receiveBuffer: 4096)
        stalled.send("GET /ticks HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        try waitUntil { s.routes.openStreams.value == 1 }
        let reader = try RawClient(port: s.port)
        reader.send("GET /ticks HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        #expect(reader.responseHead()?.headers["content-type"] == "application/octet-stream")
        // 200 ticks of 64 KiB: far more than the stalled client's socket buffers hold.
        var last = 0
        while last < 200 {
            guard let chunk = reader.bytes(TestRoutes.tickBytes) else { break }
            let tick = chunk.withUnsafeBytes { Int($0.loadUnaligned(as: UInt32.self)) }
            #expect(tick > last)
            last = tick
        }
        #expect(last >= 200)
        try waitUntil(seconds: 15) { s.routes.openStreams.value == 1 }
        _ = stalled
    }

    func waitUntil(seconds: Double = 10, _ condition: () -> Bool) throws {
        let deadline = Date().addingTimeInterval(seconds)
        while !condition() {
            guard Date() < deadline else { throw TestFailure("condition not met within \(seconds) s") }
            usleep(5000)
        }
    }
}

/// The test's routes: `/echo` (POST, 1 KiB body, answered at once), `/later` (POST, no body,
/// answered 202 from another thread once released) and `/ticks` (GET, a stream of 64 KiB ticks
/// numbered from 1, one every 2 ms).
final class TestRoutes: ServerRoutes, @unchecked Sendable {
    static let tickBytes = 64 * 1024
    let routes = [
        ServerRoute("/echo", methods: ["POST"], bodyLimit: 1024),
        ServerRoute("/later", methods: ["POST"]),
        ServerRoute("/ticks", methods: ["GET"]),
        // As WHEP's: players send no X-Requested-With, and browsers preflight what they send.
        ServerRoute("/signal", prefix: true, methods: ["POST", "DELETE"], bodyLimit: 1024, acceptsPreflightedRequests: true),
    ]
    let calls = RouteCount()
    let held = RouteCount()
    let openStreams = RouteCount()
    let stopped = RouteCount()
    private let lock = NSLock()
    private var responders: [RouteResponder] = []
    private var streams: [TickStream] = []
    private var timer: DispatchSourceTimer?
    private var tick = 0

    func respond(to request: RouteRequest, with responder: RouteResponder) {
        calls.add()
        switch request.path {
        case let path where path == "/echo" || path.hasPrefix("/signal"):
            responder.answer(RouteResponse(status: 200, headers: [("Content-Type", "text/plain")], body: .bytes(request.body)))
        case "/later":
            lock.withLock { responders.append(responder) }
            held.add()
        default:
            let stream = TickStream(routes: self)
            lock.withLock { streams.append(stream) }
            openStreams.add()
            responder.answer(RouteResponse(status: 200, headers: [("Content-Type", "application/octet-stream")], body: .stream(stream)))
        }
    }

    func releaseHeld() {
        for r in lock.withLock({ responders }) {
            r.answer(RouteResponse(status: 202, headers: [("X-Route", "later")], body: .bytes(Array("later\n".utf8))))
        }
    }

    func serverWillStart(_ server: CaptureStreamServer) throws(CaptureServerError) {
        let t = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "test-ticks"))
        t.schedule(deadline: .now(), repeating: .milliseconds(2))
        t.setEventHandler { [self] in
            let live = lock.withLock {
                tick += 1
                return streams
            }
            for s in live { s.waker?.wake() }
        }
        t.resume()
        lock.withLock { timer = t }
    }

    func serverDidStop(_ server: CaptureStreamServer) {
        lock.withLock { timer }?.cancel()
        stopped.add()
    }

    var currentTick: Int { lock.withLock { tick } }

    func streamEnded(_ s: TickStream) {
        lock.withLock { streams.removeAll { $0 === s } }
        openStreams.subtract()
    }
}

/// A count shared between threads.
final class RouteCount: @unchecked Sendable {
    private var count = 0
    private let lock = NSLock()
    func add() { lock.withLock { count += 1 } }
    func subtract() { lock.withLock { count -= 1 } }
    var value: Int { lock.withLock { count } }
}

/// One client's ticks: each is `tickBytes` bytes, the tick number first.
final class TickStream: RouteStream, @unchecked Sendable {
    let routes: TestRoutes
    private let lock = NSLock()
    private var waiting: RouteWaker?
    /// The waker of a stream that waits (taken by the ticking thread).
    var waker: RouteWaker? { lock.withLock { waiting } }
    private var sentTick = 0
    private var offset = TestRoutes.tickBytes

    init(routes: TestRoutes) { self.routes = routes }

    func read(into buffer: UnsafeMutableRawBufferPointer, waker: RouteWaker) -> RouteStreamRead {
        if offset == TestRoutes.tickBytes {
            let now = routes.currentTick
            guard now > sentTick else {
                lock.withLock { waiting = waker }
                return .wait
            }
            sentTick = now
            offset = 0
        }
        let n = min(buffer.count, TestRoutes.tickBytes - offset)
        buffer.baseAddress!.initializeMemory(as: UInt8.self, repeating: 0, count: n)
        if offset == 0 { buffer.storeBytes(of: UInt32(sentTick), as: UInt32.self) }
        offset += n
        return .bytes(n)
    }

    func ended() { routes.streamEnded(self) }
}
