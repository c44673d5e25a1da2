// The seam through which other products of this package (fragmented MP4, WebRTC signaling) add
// routes to a `CaptureStreamServer`: what a route owns, what a request carries to it and how it
// answers (now, later from another thread, or with a stream pulled like the MJPEG `/stream`).
import CCaptureServerShim
import CaptureSystem
import Foundation

/// Routes a product adds to a server with `CaptureStreamServer.add(_:)` before `start()`. The
/// server runs its own checks first (Host allow-list, credentials, preflight, body size, method,
/// and for POST, PUT, PATCH and DELETE the origin and `X-Requested-With` rules of `/api/*`), then
/// calls `respond(to:with:)`.
///
/// Thread-safe: `respond` is called on the server's daemon thread (one thread for every
/// connection: it must return at once and answer later from another thread when it needs time);
/// `serverWillStart` and `serverDidStop` on the thread that calls `start()` or `stop()`.
package protocol ServerRoutes: AnyObject, Sendable {
    /// The paths owned (fixed for the routes' life).
    var routes: [ServerRoute] { get }
    /// Answers `request` through `responder`: at once (on this thread) or later (any thread).
    func respond(to request: RouteRequest, with responder: RouteResponder)
    /// The server starts (before it listens); a throw stops the start.
    func serverWillStart(_ server: CaptureStreamServer) throws(CaptureServerError)
    /// The server stopped (every connection is closed): let go of what the routes hold.
    func serverDidStop(_ server: CaptureStreamServer)
    /// What `/state` shows for these routes under `result.routes.NAME`, keyed by NAME; nil for nothing.
    func state() -> (name: String, value: [String: Any])?
}

extension ServerRoutes {
    package func serverWillStart(_ server: CaptureStreamServer) throws(CaptureServerError) {}
    package func serverDidStop(_ server: CaptureStreamServer) {}
    package func state() -> (name: String, value: [String: Any])? { nil }
}

/// One path (or every path under a prefix) and what may be asked of it.
package struct ServerRoute: Sendable, Hashable {
    /// The path, e.g. `/stream.mp4`; with `isPrefix`, every path that starts with it (`/whep/`).
    package var path: String
    package var isPrefix: Bool
    /// Methods accepted, upper case (HEAD is not implied by GET); others get 405 with `Allow`.
    package var methods: [String]
    /// Body bytes at most: a request with more gets 413 before its body is read. 0 takes no body:
    /// then, as on the server's own routes, a chunked body gets 411.
    package var bodyLimit: Int
    /// Whether a state change that a browser sends only after a CORS preflight (PUT, PATCH,
    /// DELETE, or a POST whose `Content-Type` is not one a form can send, such as
    /// `application/sdp`) needs no `X-Requested-With`: for protocols whose clients are not the web
    /// app (WHEP players). The origin rules hold all the same.
    package var acceptsPreflightedRequests: Bool

    package init(_ path: String, prefix: Bool = false, methods: [String], bodyLimit: Int = 0, acceptsPreflightedRequests: Bool = false) {
        self.path = path
        self.isPrefix = prefix
        self.methods = methods.map { $0.uppercased() }
        self.bodyLimit = max(0, min(bodyLimit, RouteLimits.largestBody))
        self.acceptsPreflightedRequests = acceptsPreflightedRequests
    }

    func matches(_ url: String) -> Bool { isPrefix ? url.hasPrefix(path) : url == path }

    /// Methods that change state: held to the origin rules of `/api/*`.
    static func changesState(_ method: String) -> Bool { ["POST", "PUT", "PATCH", "DELETE"].contains(method) }

    /// Whether a browser sends `method` with `contentType` only after a CORS preflight (the
    /// request is not one a form or a plain cross-site fetch can make).
    static func needsPreflight(_ method: String, contentType: String?) -> Bool {
        guard method == "POST" else { return method != "GET" && method != "HEAD" }
        guard let type = contentType?.split(separator: ";").first?.trimmingCharacters(in: .whitespaces).lowercased() else { return false }
        return !["application/x-www-form-urlencoded", "multipart/form-data", "text/plain"].contains(type)
    }
}

/// Bounds the server keeps for added routes.
package enum RouteLimits {
    /// The largest body any route may take.
    package static let largestBody = 1024 * 1024
    /// Answers pending (given later from another thread) at most at once; more get 503.
    package static let pendingAnswers = 32
    /// Seconds an answer may take before the request gets 504.
    package static let answerDeadline = 10.0
}

/// A request as a route sees it: plain values, valid on any thread.
package struct RouteRequest: Sendable {
    /// GET, HEAD, POST, DELETE, ...
    package var method: String
    /// The path without the query, e.g. `/whep/3`.
    package var path: String
    /// Header values by lowercased name (the last one of a repeated header).
    package var headers: [String: String]
    /// Query arguments by name.
    package var query: [String: String]
    /// The body (empty for routes that take none).
    package var body: [UInt8]

    package init(method: String, path: String, headers: [String: String] = [:], query: [String: String] = [:], body: [UInt8] = []) {
        self.method = method
        self.path = path
        self.headers = headers
        self.query = query
        self.body = body
    }
}

/// An answer: status, headers (the server adds `Cache-Control` and the CORS headers) and a body.
package struct RouteResponse: Sendable {
    package enum Body: Sendable {
        case bytes([UInt8])
        /// Pulled by the server as the client reads (see `RouteStream`).
        case stream(any RouteStream)
    }
    package var status: Int
    package var headers: [(name: String, value: String)]
    package var body: Body

    package init(status: Int, headers: [(name: String, value: String)] = [], body: Body = .bytes([])) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// A plain-text answer (a message that says what to do).
    package static func text(_ status: Int, _ message: String) -> RouteResponse {
        RouteResponse(status: status, headers: [("Content-Type", "text/plain; charset=utf-8")], body: .bytes(Array(message.utf8)))
    }
}

/// What `RouteStream.read` gives.
package enum RouteStreamRead: Sendable, Equatable {
    /// This many bytes were written into the buffer (0 counts as `wait`).
    case bytes(Int)
    /// Nothing now: the connection is suspended until the stream calls `waker.wake()`.
    case wait
    /// The stream is over.
    case end
}

/// A response body made as the client reads it, like the MJPEG `/stream`: the server asks for
/// bytes only when the client's socket takes them, so a slow client never blocks the daemon's
/// thread or other clients; a client that stops reading is closed after the server's connection
/// time-out. Thread-safe: `read` and `ended` are called on the daemon's thread, one at a time.
package protocol RouteStream: AnyObject, Sendable {
    /// Writes the next bytes into `buffer`, or says to wait (then calls `waker.wake()` from any
    /// thread once there are more; a wake before the wait is kept) or that the stream ended.
    func read(into buffer: UnsafeMutableRawBufferPointer, waker: RouteWaker) -> RouteStreamRead
    /// The connection is gone (the client left, timed out, or the server stopped): let go of
    /// what the stream holds. Called once.
    func ended()
}

/// Wakes a stream's suspended connection. Thread-safe: any thread, any number of times; after the
/// connection is gone it does nothing.
package final class RouteWaker: @unchecked Sendable {
    weak var server: CaptureStreamServer?
    let connection: HTTP.Connection
    // Guarded by the server's lock.
    var isSuspended = false
    var wakePending = false
    var isGone = false
    /// The server stops: the stream ends at its next wait.
    var isClosing = false

    init(server: CaptureStreamServer, connection: HTTP.Connection) {
        self.server = server
        self.connection = connection
    }

    /// There are new bytes to read.
    package func wake() { server?.wake(self) }

    /// Bytes written to the client's socket that the client has not taken yet (the kernel's send
    /// queue, `SIOCOUTQ`), or nil when unknown: it grows while a client does not read, long
    /// before the server's time-out can see it stall (the kernel buffers megabytes). Only on the
    /// daemon's thread, from `RouteStream.read` (the connection is valid there).
    package var unsentBytes: Int? {
        let fd = capture_server_connection_fd(connection)
        guard fd >= 0 else { return nil }
        var queued: Int32 = 0
        let r = Syscall.run("ioctl(SIOCOUTQ)", mock: nil, failure: Int32(-1)) { ioctl(fd, UInt(TIOCOUTQ), &queued) }
        guard case .success = r else { return nil }
        return Int(queued)
    }
}

/// Answers one request, once: from inside `respond` (on the daemon's thread) or later from any
/// thread. Answers after the first, after the request's deadline or after the server stopped are
/// dropped. Thread-safe.
package final class RouteResponder: @unchecked Sendable {
    weak var server: CaptureStreamServer?
    let connection: HTTP.Connection
    // Guarded by the server's lock.
    enum State { case inCall, suspended, done }
    var state = State.inCall
    var early: RouteResponse?
    var deadline: Double

    init(server: CaptureStreamServer, connection: HTTP.Connection, deadline: Double) {
        self.server = server
        self.connection = connection
        self.deadline = deadline
    }

    /// Sends `response`.
    package func answer(_ response: RouteResponse) { server?.answer(self, response) }

    /// Whether the request is still waiting for its answer (false once answered, timed out or
    /// the server stopped): work for it can be given up when false.
    package var isWaiting: Bool { server?.lock.withLock { state != .done } ?? false }
}
