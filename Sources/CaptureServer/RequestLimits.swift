import CCaptureServerShim
import CMicroHTTPD
import CaptureSystem
import Foundation

/// What one request may carry: no route takes more than a few query arguments or any body. A
/// request beyond a limit gets its status (414, 413, 411 for a body of unknown length), never silence.
enum RequestLimits {
    /// Query arguments at most (the web app sends two).
    static let queryArguments = 64
    /// Body bytes at most (no route reads a body).
    static let bodyBytes = 64 * 1024

    /// The request context that marks a request already answered by `refuseLongQuery`.
    static var refused: UnsafeMutableRawPointer { UnsafeMutableRawPointer(bitPattern: 1)! }
    /// The URI callback's context on a server that speaks TLS.
    static var overTLS: UnsafeMutableRawPointer { UnsafeMutableRawPointer(bitPattern: 1)! }

    /// Whether `uri`'s query has more than `queryArguments` arguments.
    static func hasTooManyArguments(_ uri: UnsafePointer<CChar>) -> Bool {
        guard let query = strchr(uri, Int32(UInt8(ascii: "?"))) else { return false }
        var count = 0
        var p = query + 1
        var inField = false
        while p.pointee != 0 {
            if p.pointee == CChar(UInt8(ascii: "&")) {
                inField = false
            } else if !inField {
                inField = true
                count += 1
                if count > queryArguments { return true }
            }
            p += 1
        }
        return false
    }

    /// Answers 414 on `connection`'s socket itself and ends its sending side. libmicrohttpd
    /// keeps every argument in the connection's memory pool: with hundreds of them the pool runs
    /// out before the request reaches the server, and libmicrohttpd then has no room left for an
    /// answer, so the client would wait for the time-out. On the daemon's thread, before
    /// libmicrohttpd parses the arguments.
    /// Over TLS plain bytes cannot be sent: the connection is only shut down.
    static func refuseLongQuery(_ connection: OpaquePointer, overTLS: Bool) {
        let fd = capture_server_connection_fd(connection)
        guard fd >= 0 else { return }
        if overTLS {
            _ = Syscall.run("shutdown", mock: nil, failure: Int32(-1)) { shutdown(fd, Int32(SHUT_RDWR)) }
            return
        }
        let body = "more than \(queryArguments) query arguments: send fewer\n"
        let reply = Array(
            ("HTTP/1.1 414 URI Too Long\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: \(body.utf8.count)\r\n"
                + "Connection: close\r\nCache-Control: no-store\r\n\r\n" + body).utf8)
        // A few hundred bytes into an empty socket buffer: one non-blocking send.
        _ = reply.withUnsafeBytes { b in
            Syscall.run("send", mock: nil, failure: -1) { send(fd, b.baseAddress, b.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT)) }
        }
        _ = Syscall.run("shutdown", mock: nil, failure: Int32(-1)) { shutdown(fd, Int32(SHUT_WR)) }
    }
}

/// libmicrohttpd's URI log callback: sees the request target before its arguments are parsed.
func serverURILogged(
    _ cls: UnsafeMutableRawPointer?, _ uri: UnsafePointer<CChar>?, _ connection: OpaquePointer?
) -> UnsafeMutableRawPointer? {
    guard let uri, let connection, RequestLimits.hasTooManyArguments(uri) else { return nil }
    RequestLimits.refuseLongQuery(connection, overTLS: cls == RequestLimits.overTLS)
    return RequestLimits.refused
}
