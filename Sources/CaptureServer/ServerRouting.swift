// Every request: its size, host, origin, preflight and credentials checks, then the route table,
// and the headers and plain answers all routes share.
import CMicroHTTPD
import Capture
import Foundation

extension CaptureStreamServer {
    // MARK: Requests (on the daemon's thread)

    func handle(
        _ c: HTTP.Connection, url: String, method: String, state: UnsafeMutablePointer<UnsafeMutableRawPointer?>? = nil
    ) -> MHD_Result {
        // A route added by another product (`ServerRoutes`), with its own body limit.
        let added = addedRoute(for: url)
        let bodyLimit = added?.route.bodyLimit ?? 0
        // A route that reads no body refuses a big one before anything else (libmicrohttpd drops
        // it). A chunked body's size is not known before the route would run, so it needs a length;
        // a route that reads a body reads a chunked one up to its limit.
        if bodyLimit == 0, HTTP.value(c, MHD_ValueKind.HEADER_KIND, "Transfer-Encoding") != nil {
            return queueText(c, 411, "send a request body with a Content-Length (this route needs no body)\n")
        }
        let limit = bodyLimit > 0 ? bodyLimit : RequestLimits.bodyBytes
        if let length = HTTP.value(c, MHD_ValueKind.HEADER_KIND, "Content-Length").flatMap({ UInt64($0) }), length > UInt64(limit) {
            return queueText(
                c, 413,
                bodyLimit > 0
                    ? "a request body for \(url) may have \(limit) bytes at most\n"
                    : "a request body may have \(limit) bytes at most; this route needs none\n")
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
            if let added {
                HTTP.addHeader(r, "Access-Control-Allow-Methods", (added.route.methods + ["OPTIONS"]).joined(separator: ", "))
                HTTP.addHeader(r, "Access-Control-Allow-Headers", "Authorization, X-Requested-With, Content-Type")
            } else {
                HTTP.addHeader(r, "Access-Control-Allow-Methods", url.hasPrefix("/api/") ? "POST, GET, OPTIONS" : "GET, HEAD, OPTIONS")
                HTTP.addHeader(r, "Access-Control-Allow-Headers", "Authorization, X-Requested-With")
            }
            HTTP.addHeader(r, "Access-Control-Max-Age", "600")
            return HTTP.queue(c, 204, r)
        }
        // Every route needs the credentials or the token, when there are some.
        let token = HTTP.bytes(c, MHD_ValueKind.GET_ARGUMENT_KIND, "token")
        if !policy.authorizes(
            HTTP.value(c, MHD_ValueKind.HEADER_KIND, "Authorization"), token: token,
            cookie: HTTP.bytes(c, MHD_ValueKind.COOKIE_KIND, RequestPolicy.cookieName))
        {
            let r = HTTP.response("authentication required\n")
            addCommonHeaders(r, type: "text/plain; charset=utf-8")
            defer { MHD_destroy_response(r) }
            // Browsers ask for a password only when the server has one.
            guard policy.expectedAuthorization != nil else {
                HTTP.addHeader(r, "WWW-Authenticate", "Bearer realm=\"swift-capture\"")
                return MHD_queue_response(c, 401, r)
            }
            return MHD_queue_basic_auth_fail_response(c, "swift-capture", r)
        }
        if let added { return handleAdded(c, url: url, method: method, host: host, origin: origin, added, state: state) }
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
            let paths = (["/", "/stream", "/snapshot", "/state"] + addedPaths).joined(separator: ", ")
            return queueText(c, 404, "not found: try \(paths)\n")
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
            // The page's own requests carry no token: a cookie lets them in.
            if let cookie = policy.tokenCookie(for: token) { HTTP.addHeader(r, "Set-Cookie", cookie) }
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

    /// An added route, past the host, preflight and credentials checks: its method, then the
    /// origin rules for a method that changes state.
    private func handleAdded(
        _ c: HTTP.Connection, url: String, method: String, host: String?, origin: String?,
        _ added: (routes: any ServerRoutes, route: ServerRoute), state: UnsafeMutablePointer<UnsafeMutableRawPointer?>?
    ) -> MHD_Result {
        guard added.route.methods.contains(method) else {
            let r = HTTP.response("method \(method) not allowed here\n")
            addCommonHeaders(r, type: "text/plain; charset=utf-8")
            HTTP.addHeader(r, "Allow", added.route.methods.joined(separator: ", "))
            return HTTP.queue(c, 405, r)
        }
        let preflighted =
            added.route.acceptsPreflightedRequests
            && ServerRoute.needsPreflight(method, contentType: HTTP.value(c, MHD_ValueKind.HEADER_KIND, "Content-Type"))
        if ServerRoute.changesState(method),
            let why = policy.refusesStateChange(
                host: host, origin: origin, referer: HTTP.value(c, MHD_ValueKind.HEADER_KIND, "Referer"),
                requestedWith: HTTP.value(c, MHD_ValueKind.HEADER_KIND, "X-Requested-With"), preflighted: preflighted)
        {
            return queueText(c, 403, why + "\n")
        }
        return startRouteRequest(c, url: url, method: method, match: added, state: state)
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
}
