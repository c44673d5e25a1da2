import CCaptureServerShim
import CMicroHTTPD
import CaptureSystem
import Foundation

/// The listening socket, bound by us so that a port in use or a bad address is a typed error
/// with its real errno (libmicrohttpd's start only says "failed"); libmicrohttpd takes over a
/// `duplicate()` of it and closes that.
struct ListeningSocket {
    let descriptor: Int32
    let port: Int
    let isIPv6: Bool

    static func bind(host: String, port: Int) throws(CaptureServerError) -> ListeningSocket {
        guard case .success(let resolved) = SocketAddress.resolving(host: host, port: port) else {
            throw CaptureServerError(
                .badAddress,
                "cannot listen on '\(host)': not an address of this machine or a known host name; use e.g. --host 127.0.0.1 or --host 0.0.0.0"
            )
        }
        let family = resolved.family
        let fd: Int32
        switch Syscall.run(
            "socket", mock: nil, failure: Int32(-1), { socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0) })
        {
        case .success(let d): fd = d
        case .failure(let e): throw CaptureServerError(.startFailed, "cannot make a socket (\(e)); check the process's descriptor limit")
        }
        var one: Int32 = 1
        _ = Syscall.run("setsockopt", mock: nil, failure: Int32(-1)) {
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        }
        let bound = resolved.withSockaddr { sa, length in Syscall.run("bind", mock: nil, failure: Int32(-1)) { Glibc.bind(fd, sa, length) }
        }
        if case .failure(let e) = bound {
            closeDescriptor(fd)
            switch e.rawValue {
            case EADDRINUSE:
                throw CaptureServerError(
                    .portInUse, "port \(port) on \(host) is in use by another program: stop it or choose another port (--port)")
            case EADDRNOTAVAIL, EAFNOSUPPORT:
                throw CaptureServerError(
                    .badAddress, "\(host) is not an address of this machine: use one of its addresses, 127.0.0.1 or 0.0.0.0")
            case EACCES, EPERM:
                throw CaptureServerError(.permissionDenied, "port \(port) needs privileges: choose a port from 1024 up (--port)")
            default:
                throw CaptureServerError(.startFailed, "cannot listen on \(host):\(port) (\(e)); choose another address or port")
            }
        }
        if case .failure(let e) = Syscall.run("listen", mock: nil, failure: Int32(-1), { listen(fd, 128) }) {
            closeDescriptor(fd)
            throw CaptureServerError(
                e.rawValue == EADDRINUSE ? .portInUse : .startFailed,
                "cannot listen on \(host):\(port) (\(e)): choose another port (--port)")
        }
        var address = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let actualPort: Int = withUnsafeMutablePointer(to: &address) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
                guard case .success = Syscall.run("getsockname", mock: nil, failure: Int32(-1), { getsockname(fd, sa, &length) })
                else { return port }
                if Int32(sa.pointee.sa_family) == AF_INET6 {
                    return sa.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { Int(UInt16(bigEndian: $0.pointee.sin6_port)) }
                }
                return sa.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { Int(UInt16(bigEndian: $0.pointee.sin_port)) }
            }
        }
        return ListeningSocket(descriptor: fd, port: actualPort, isIPv6: family == AF_INET6)
    }

    /// A second descriptor of the socket (close-on-exec), for libmicrohttpd to own.
    func duplicate() throws(CaptureServerError) -> Int32 {
        switch Syscall.run("fcntl", mock: nil, failure: Int32(-1), { fcntl(descriptor, F_DUPFD_CLOEXEC, Int32(0)) }) {
        case .success(let d): return d
        case .failure(let e):
            throw CaptureServerError(.startFailed, "cannot hand the socket over (\(e)); check the process's descriptor limit")
        }
    }

    /// Closes this descriptor of the socket.
    func close() { Self.closeDescriptor(descriptor) }

    private static func closeDescriptor(_ fd: Int32) {
        _ = Syscall.run("close", mock: nil, failure: Int32(-1), retryOnInterrupt: false) { Glibc.close(fd) }
    }
}

/// libmicrohttpd's calls, typed for Swift. Responses are made and queued only on the daemon's
/// thread, or (for a suspended connection) under the server's lock.
enum HTTP {
    typealias Connection = OpaquePointer

    static let yes = MHD_Result.YES
    static let no = MHD_Result.NO

    /// A response with `body` (copied by libmicrohttpd).
    static func response(_ body: UnsafeRawBufferPointer) -> OpaquePointer? {
        MHD_create_response_from_buffer(
            body.count, UnsafeMutableRawPointer(mutating: body.baseAddress), MHD_ResponseMemoryMode.RESPMEM_MUST_COPY)
    }

    static func response(_ text: String) -> OpaquePointer? {
        var text = text
        return text.withUTF8 { response(UnsafeRawBufferPointer($0)) }
    }

    static func addHeader(_ r: OpaquePointer?, _ name: String, _ value: String) {
        _ = MHD_add_response_header(r, name, value)
    }

    /// Queues `r` with `status` and lets go of our reference (libmicrohttpd keeps its own).
    @discardableResult
    static func queue(_ c: Connection, _ status: Int, _ r: OpaquePointer?) -> MHD_Result {
        guard let r else { return no }
        defer { MHD_destroy_response(r) }
        return MHD_queue_response(c, UInt32(status), r)
    }

    static func value(_ c: Connection, _ kind: MHD_ValueKind, _ key: String) -> String? {
        MHD_lookup_connection_value(c, kind, key).map { String(cString: $0) }
    }

    /// The bytes of value `key` (a query argument decoded) in full: a `%00` and what follows it
    /// are kept (a C string would end at the NUL). Nil when the request has no such value.
    static func bytes(_ c: Connection, _ kind: MHD_ValueKind, _ key: String) -> [UInt8]? {
        var value: UnsafePointer<CChar>?
        var size = 0
        guard MHD_lookup_connection_value_n(c, kind, key, key.utf8.count, &value, &size) == yes else { return nil }
        guard let value else { return [] }
        return Array(UnsafeRawBufferPointer(start: value, count: size))
    }
}
