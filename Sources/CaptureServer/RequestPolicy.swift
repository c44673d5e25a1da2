import CaptureSystem
import Foundation

/// Who may ask what of the server: the host names it answers to (against DNS rebinding), the
/// origins whose pages may change its state (against cross-site requests), the credentials and
/// the access token. Plain value, checked on the daemon's thread.
struct RequestPolicy: Sendable {
    /// The names the server answers to (against DNS rebinding).
    let hosts: HostNames
    /// The origin allowed besides the server's own ("*" for any); nil for none.
    let allowedOrigin: String?
    /// `user:password` as the client must send it, byte for byte; nil asks for none.
    let expectedAuthorization: [UInt8]?
    /// The access token of token links (`?token=`) and `Authorization: Bearer`; nil takes none.
    let expectedToken: [UInt8]?
    /// The token as the web app's cookie carries it (`cookieName`): its bytes in hex.
    let expectedCookie: [UInt8]?
    /// The cookie a page opened with a valid `?token=` gets, so that its own requests pass.
    static let cookieName = "capture-token"
    /// The scheme pages of the server's own origin use: "https" when it serves TLS.
    let scheme: String

    init(configuration c: CaptureStreamServer.Configuration) {
        hosts = HostNames(listenAddress: c.host, allowed: c.allowedHosts)
        allowedOrigin = c.allowedOrigin
        expectedAuthorization = c.credentials.map { Array("\($0.user):\($0.password)".utf8) }
        expectedToken = c.accessToken.map { Array($0.utf8) }
        expectedCookie = c.accessToken.map { Array($0.utf8.map { String(format: "%02x", $0) }.joined().utf8) }
        scheme = c.tls == nil ? "http" : "https"
    }

    /// Whether a request with this `Host` header is for this server: none (HTTP/1.0), an IP
    /// literal, a localhost name, the address listened on, this machine's name or one allowed.
    /// A rebound DNS name (a page's own name pointing at this machine) is none of them.
    func allowsHost(_ header: String?) -> Bool { hosts.allowsHostHeader(header) }

    /// Whether a request that changes state comes from the server's own page or the allowed
    /// origin: it carries `X-Requested-With` (a cross-site form cannot set a header, and a
    /// cross-site script that does is held by the browser's preflight) or is itself one browsers
    /// preflight (`preflighted`, for routes that accept that), and its `Origin` (or else its
    /// `Referer`) is the server's own or the allowed one. Nil when allowed, else why not.
    func refusesStateChange(host: String?, origin: String?, referer: String?, requestedWith: String?, preflighted: Bool = false) -> String?
    {
        // A request browsers preflight cannot come from another site without its consent (the
        // origin rules below); others must carry the header no form or simple fetch can add.
        if !preflighted, requestedWith?.isEmpty ?? true {
            return "a request that changes state needs the X-Requested-With header (the web app sends it)"
        }
        let own = host.map { scheme + "://" + $0.lowercased() }
        if let origin, origin != "null" {
            return isAllowedOrigin(origin.lowercased(), own: own) ? nil : "requests from \(origin) may not change state here"
        }
        if origin == "null" { return "requests from an opaque origin may not change state here" }
        if let referer, let from = Self.origin(ofURL: referer) {
            return isAllowedOrigin(from, own: own) ? nil : "requests from \(from) may not change state here"
        }
        return nil
    }

    /// `scheme://host[:port]` of an absolute URL, lowercased, as the `Host` header spells it (an
    /// IPv6 address in brackets); nil for anything else.
    static func origin(ofURL url: String) -> String? {
        guard let separator = url.range(of: "://") else { return nil }
        let scheme = url[..<separator.lowerBound]
        guard !scheme.isEmpty, scheme.allSatisfy({ $0.isLetter || $0.isNumber || "+-.".contains($0) }) else { return nil }
        let authority = url[separator.upperBound...].prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        // Without the user information, if any.
        let hostPort = authority.lastIndex(of: "@").map { authority[authority.index(after: $0)...] } ?? authority
        guard !hostPort.isEmpty else { return nil }
        return "\(scheme)://\(hostPort)".lowercased()
    }

    private func isAllowedOrigin(_ origin: String, own: String?) -> Bool {
        if origin == own { return true }
        guard let allowed = allowedOrigin else { return false }
        return allowed == "*" || allowed.lowercased() == origin
    }

    /// Whether a preflight from `origin` is to be answered (only the allowed origin's).
    func answersPreflight(from origin: String?) -> Bool {
        guard let allowed = allowedOrigin, let origin else { return false }
        return allowed == "*" || allowed.lowercased() == origin.lowercased()
    }

    /// Whether a request may be answered: always when the server asks for neither credentials
    /// nor a token; else when either one it asks for is given. `authorization` is the
    /// `Authorization` header (Basic with the credentials, or Bearer with the token), `token`
    /// the `token` query argument's decoded bytes, a NUL and what follows it included, `cookie`
    /// the value of the `cookieName` cookie.
    func authorizes(_ authorization: String?, token: [UInt8]?, cookie: [UInt8]? = nil) -> Bool {
        if expectedAuthorization == nil, expectedToken == nil { return true }
        if let expected = expectedToken, let expectedCookie {
            if let token, Self.equalInConstantTime(token, expected) { return true }
            if let cookie, Self.equalInConstantTime(cookie, expectedCookie) { return true }
            if let given = Self.credential(authorization, scheme: "bearer "), Self.equalInConstantTime(Array(given.utf8), expected) {
                return true
            }
        }
        if let expected = expectedAuthorization, let encoded = Self.credential(authorization, scheme: "basic "),
            let given = Data(base64Encoded: encoded).map(Array.init)
        {
            return Self.equalInConstantTime(given, expected)
        }
        return false
    }

    /// The `Set-Cookie` value for a page opened with a valid `?token=` (nil for any other):
    /// only for this server's own pages (SameSite=Strict), out of scripts' reach (HttpOnly).
    func tokenCookie(for token: [UInt8]?) -> String? {
        guard let token, let expected = expectedToken, let expectedCookie, Self.equalInConstantTime(token, expected) else { return nil }
        let secure = scheme == "https" ? "; Secure" : ""
        return "\(Self.cookieName)=\(String(decoding: expectedCookie, as: UTF8.self)); Path=/; HttpOnly; SameSite=Strict\(secure)"
    }

    /// What follows `scheme` (lowercase, with its space) in an `Authorization` header, trimmed.
    private static func credential(_ header: String?, scheme: String) -> String? {
        guard let header, header.count > scheme.count, header.prefix(scheme.count).lowercased() == scheme else { return nil }
        return header.dropFirst(scheme.count).trimmingCharacters(in: .whitespaces)
    }

    /// Whether `given` is `expected`, compared over the full bytes of both (a NUL and what follows
    /// it count) in time that depends only on the lengths.
    static func equalInConstantTime(_ given: [UInt8], _ expected: [UInt8]) -> Bool {
        var diff = UInt8(given.count == expected.count ? 0 : 1)
        for i in 0..<max(given.count, expected.count) {
            diff |= (i < given.count ? given[i] : 0) ^ (i < expected.count ? expected[i] : 0xFF)
        }
        return diff == 0
    }
}
