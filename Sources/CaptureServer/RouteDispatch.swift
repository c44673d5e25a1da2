// Requests for added routes (`ServerRoutes`): their body read up to the route's limit, the route
// called, its answer queued now or later, and its streams pulled, suspended and woken.
import CMicroHTTPD
import Capture
import Foundation

extension CaptureStreamServer {
    /// Adds `routes` (before `start()`). Throws `.alreadyRunning` while running, and
    /// `.invalidConfiguration` for a path the server or routes added before own.
    package func add(_ routes: any ServerRoutes) throws(CaptureServerError) {
        lock.lock()
        defer { lock.unlock() }
        guard daemon == nil else { throw CaptureServerError(.alreadyRunning, "add routes before start()") }
        for r in routes.routes {
            let builtIn =
                ["/", "/stream", "/snapshot", "/state", "/favicon.ico"].contains(r.path)
                || r.path.hasPrefix("/api/") || r.path.hasPrefix("/album/") || !r.path.hasPrefix("/")
            let taken = addedRoutes.contains { $0.routes.contains { $0.path == r.path } }
            guard !builtIn, !taken else {
                throw CaptureServerError(.invalidConfiguration, "the path \(r.path) is taken: choose another")
            }
        }
        addedRoutes.append(routes)
    }

    /// The added route for `url`, if any. On the daemon's thread.
    func addedRoute(for url: String) -> (routes: any ServerRoutes, route: ServerRoute)? {
        lock.withLock {
            for routes in addedRoutes {
                if let r = routes.routes.first(where: { $0.matches(url) }) { return (routes, r) }
            }
            return nil
        }
    }

    /// The paths added routes own, for the 404 message.
    var addedPaths: [String] { lock.withLock { addedRoutes.flatMap { $0.routes.map { $0.isPrefix ? $0.path + "…" : $0.path } } } }

    // MARK: Requests (on the daemon's thread)

    /// The first call for a request of an added route, once the server's checks passed: a route
    /// that takes a body reads it first (`state` keeps it), the others are answered now.
    func startRouteRequest(
        _ c: HTTP.Connection, url: String, method: String, match: (routes: any ServerRoutes, route: ServerRoute),
        state: UnsafeMutablePointer<UnsafeMutableRawPointer?>?
    ) -> MHD_Result {
        if match.route.bodyLimit > 0, let state {
            state.pointee = Unmanaged.passRetained(RouteBody(routes: match.routes, route: match.route, url: url, method: method)).toOpaque()
            return HTTP.yes
        }
        return dispatch(
            c, match.routes,
            RouteRequest(method: method, path: url, headers: Self.values(c, .HEADER_KIND), query: Self.values(c, .GET_ARGUMENT_KIND)))
    }

    /// More of a request's body (or, with none, its end). On the daemon's thread.
    func continueRouteRequest(
        _ c: HTTP.Connection, _ body: RouteBody, data: UnsafePointer<CChar>?, size: UnsafeMutablePointer<Int>?
    ) -> MHD_Result {
        if let size, size.pointee != 0 {
            let n = size.pointee
            size.pointee = 0
            guard !body.isTooBig else {
                // libmicrohttpd queues no answer before the body's end: the rest of a chunked body
                // over the limit is dropped, up to a bound past which the connection is closed.
                body.dropped += n
                return body.dropped > 16 * body.route.bodyLimit ? HTTP.no : HTTP.yes
            }
            guard body.bytes.count + n <= body.route.bodyLimit, let data else {
                body.isTooBig = true
                body.dropped = body.bytes.count + n
                body.bytes = []
                return HTTP.yes
            }
            data.withMemoryRebound(to: UInt8.self, capacity: n) { body.bytes.append(contentsOf: UnsafeBufferPointer(start: $0, count: n)) }
            return HTTP.yes
        }
        if body.answered { return HTTP.yes }
        body.answered = true
        if body.isTooBig {
            return queueText(c, 413, "a request body for \(body.route.path) may have \(body.route.bodyLimit) bytes at most\n")
        }
        let request = RouteRequest(
            method: body.method, path: body.url, headers: Self.values(c, .HEADER_KIND), query: Self.values(c, .GET_ARGUMENT_KIND),
            body: body.bytes)
        body.bytes = []
        return dispatch(c, body.routes, request)
    }

    /// Calls the route; queues its answer when it gave one at once, else suspends `c` for it.
    private func dispatch(_ c: HTTP.Connection, _ routes: any ServerRoutes, _ request: RouteRequest) -> MHD_Result {
        let responder: RouteResponder? = lock.withLock {
            guard !stopping, pendingAnswers.count < RouteLimits.pendingAnswers else { return nil }
            return RouteResponder(server: self, connection: c, deadline: CaptureTime.now().seconds + RouteLimits.answerDeadline)
        }
        guard let responder else { return queueText(c, 503, "the server is busy or stopping: try again shortly\n") }
        routes.respond(to: request, with: responder)
        return lock.withLock {
            switch responder.state {
            case .done:
                return queueText(c, 503, "the server is stopping\n")
            case .suspended:
                return HTTP.yes
            case .inCall:
                if let response = responder.early {
                    responder.state = .done
                    responder.early = nil
                    return queueRoute(c, response)
                }
                if stopping {
                    responder.state = .done
                    return queueText(c, 503, "the server is stopping\n")
                }
                responder.state = .suspended
                pendingAnswers[ObjectIdentifier(responder)] = responder
                MHD_suspend_connection(c)
                return HTTP.yes
            }
        }
    }

    /// A route's answer, from any thread.
    func answer(_ responder: RouteResponder, _ response: RouteResponse) {
        lock.withLock {
            switch responder.state {
            case .inCall:
                if responder.early == nil { responder.early = response }
            case .suspended:
                responder.state = .done
                pendingAnswers[ObjectIdentifier(responder)] = nil
                queueRoute(responder.connection, response)
                MHD_resume_connection(responder.connection)
            case .done:
                // Late (timed out, or the server stopped): the stream, if any, never starts.
                if case .stream(let s) = response.body { s.ended() }
            }
        }
    }

    /// Answers the pending requests past their deadline (504), or all of them when stopping (503). Under `lock`.
    func expirePendingAnswersLocked(now: Double, stopping: Bool) {
        for (key, r) in pendingAnswers where stopping || now > r.deadline {
            r.state = .done
            pendingAnswers[key] = nil
            if stopping {
                queueText(r.connection, 503, "the server is stopping\n")
            } else {
                queueText(r.connection, 504, "the answer took more than \(Int(RouteLimits.answerDeadline)) s: try again\n")
            }
            MHD_resume_connection(r.connection)
        }
    }

    /// Queues `response` for `c`: on the daemon's thread, or under `lock` for a suspended connection.
    @discardableResult
    func queueRoute(_ c: HTTP.Connection, _ response: RouteResponse) -> MHD_Result {
        let r: OpaquePointer?
        switch response.body {
        case .bytes(let bytes):
            r = bytes.withUnsafeBytes { HTTP.response($0) }
        case .stream(let stream):
            let waker = RouteWaker(server: self, connection: c)
            let held = RouteStreamConnection(stream: stream, waker: waker)
            routeStreams[ObjectIdentifier(waker)] = held
            r = MHD_create_response_from_callback(
                UInt64.max, 32 * 1024, routeStreamReader, Unmanaged.passRetained(held).toOpaque(), routeStreamFreed)
            if r == nil {
                routeStreams[ObjectIdentifier(waker)] = nil
                stream.ended()
            }
        }
        let type = response.headers.first { $0.name.lowercased() == "content-type" }?.value
        addCommonHeaders(r, type: type)
        let own = response.headers.filter { $0.name.lowercased() != "content-type" }
        for h in own { HTTP.addHeader(r, h.name, h.value) }
        // A page of the allowed origin may read them (WHEP's Location, for one).
        if configuration.allowedOrigin != nil, !own.isEmpty {
            HTTP.addHeader(r, "Access-Control-Expose-Headers", own.map(\.name).joined(separator: ", "))
        }
        return HTTP.queue(c, response.status, r)
    }

    // MARK: Streams

    /// The next bytes of an added route's stream. On the daemon's thread.
    func readRouteStream(_ held: RouteStreamConnection, into buffer: UnsafeMutableRawBufferPointer) -> Int {
        let waker = held.waker
        while true {
            lock.withLock { waker.wakePending = false }
            switch held.stream.read(into: buffer, waker: waker) {
            case .bytes(let n) where n > 0: return min(n, buffer.count)
            case .end: return -1  // MHD_CONTENT_READER_END_OF_STREAM
            case .bytes, .wait:
                // A wake that came while the stream was read is not lost: read again.
                let next: Int? = lock.withLock {
                    if waker.isClosing { return -1 }
                    if waker.wakePending { return nil }
                    waker.isSuspended = true
                    MHD_suspend_connection(waker.connection)
                    return 0
                }
                if let next { return next }
            }
        }
    }

    /// A stream's waker: resumes its connection, or keeps the wake for the next wait.
    func wake(_ waker: RouteWaker) {
        lock.withLock {
            guard !waker.isGone else { return }
            if waker.isSuspended {
                waker.isSuspended = false
                MHD_resume_connection(waker.connection)
            } else {
                waker.wakePending = true
            }
        }
    }

    func routeStreamEnded(_ held: RouteStreamConnection) {
        lock.withLock {
            held.waker.isGone = true
            routeStreams[ObjectIdentifier(held.waker)] = nil
        }
        held.stream.ended()
    }

    /// Ends every added route's stream at its next wait (the server stops). Under `lock`.
    func closeRouteStreamsLocked() {
        for held in routeStreams.values where !held.waker.isGone {
            held.waker.isClosing = true
            if held.waker.isSuspended {
                held.waker.isSuspended = false
                MHD_resume_connection(held.waker.connection)
            }
        }
    }

    /// The values of one kind (headers with lowercased names, query arguments) of `c`.
    static func values(_ c: HTTP.Connection, _ kind: MHD_ValueKind) -> [String: String] {
        var values: [String: String] = [:]
        withUnsafeMutablePointer(to: &values) { p in
            let context = UnsafeMutableRawPointer(p)
            _ = MHD_get_connection_values(
                c, kind,
                { cls, kind, key, value in
                    guard let cls, let key else { return MHD_Result.YES }
                    let d = cls.assumingMemoryBound(to: [String: String].self)
                    let name = String(cString: key)
                    d.pointee[kind == .HEADER_KIND ? name.lowercased() : name] = value.map { String(cString: $0) } ?? ""
                    return MHD_Result.YES
                }, context)
        }
        return values
    }
}

/// A request of an added route whose body is being read. Used on the daemon's thread only.
final class RouteBody {
    let routes: any ServerRoutes
    let route: ServerRoute
    let url: String
    let method: String
    var bytes: [UInt8] = []
    /// A chunked body passed the limit: the rest is dropped and the answer is 413.
    var isTooBig = false
    var dropped = 0
    /// Answered already (the route was called, or 413).
    var answered = false

    init(routes: any ServerRoutes, route: ServerRoute, url: String, method: String) {
        self.routes = routes
        self.route = route
        self.url = url
        self.method = method
    }
}

/// A route stream and its connection's waker, held by libmicrohttpd's response.
final class RouteStreamConnection: @unchecked Sendable {
    let stream: any RouteStream
    let waker: RouteWaker
    init(stream: any RouteStream, waker: RouteWaker) {
        self.stream = stream
        self.waker = waker
    }
}

// MARK: libmicrohttpd's callbacks (on the daemon's thread)

func routeStreamReader(_ cls: UnsafeMutableRawPointer?, _ position: UInt64, _ buffer: UnsafeMutablePointer<CChar>?, _ max: Int) -> Int {
    guard let cls, let buffer else { return -2 }
    let held = Unmanaged<RouteStreamConnection>.fromOpaque(cls).takeUnretainedValue()
    guard let server = held.waker.server else { return -1 }
    return server.readRouteStream(held, into: UnsafeMutableRawBufferPointer(start: buffer, count: max))
}

func routeStreamFreed(_ cls: UnsafeMutableRawPointer?) {
    guard let cls else { return }
    let held = Unmanaged<RouteStreamConnection>.fromOpaque(cls).takeRetainedValue()
    if let server = held.waker.server {
        server.routeStreamEnded(held)
    } else {
        held.stream.ended()
    }
}
