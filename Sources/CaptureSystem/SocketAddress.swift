// A host name or address literal turned into a socket address (`getaddrinfo`), kept as a value
// so that no `addrinfo` list outlives the lookup.
#if canImport(Glibc)
import Glibc
#endif

/// Why `SocketAddress.resolving` found no address: `getaddrinfo`'s own code (`EAI_*`, which
/// `gai_strerror` names) and, for `EAI_SYSTEM`, the errno.
package struct AddressResolutionError: Error, Hashable, Sendable, CustomStringConvertible {
    package var code: Int32
    package var errno: Errno?
    package var description: String {
        let text = "getaddrinfo: \(String(cString: gai_strerror(code)))"
        return errno.map { "\(text) (\($0))" } ?? text
    }
}

/// The first address `getaddrinfo` gives for a stream socket.
package struct SocketAddress: Sendable {
    /// `AF_INET` or `AF_INET6`.
    package let family: Int32
    private let storage: sockaddr_storage
    private let length: socklen_t

    /// The address to listen on at `host` (a name or literal) and `port` (`AI_PASSIVE`).
    package static func resolving(host: String, port: Int) -> Result<SocketAddress, AddressResolutionError> {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = AI_PASSIVE
        var list: UnsafeMutablePointer<addrinfo>?
        // Its own codes, not -1 and errno, and EAI_SYSTEM's errno is read at once; EAI_AGAIN is a
        // name server's answer, not an interruption, so nothing is retried.
        let rc = getaddrinfo(host, String(port), &hints, &list)
        let failedErrno = rc == EAI_SYSTEM ? Errno.current : nil
        guard rc == 0, let first = list else { return .failure(AddressResolutionError(code: rc, errno: failedErrno)) }
        defer { freeaddrinfo(list) }
        var storage = sockaddr_storage()
        let length = min(first.pointee.ai_addrlen, socklen_t(MemoryLayout<sockaddr_storage>.size))
        withUnsafeMutableBytes(of: &storage) {
            $0.copyMemory(from: UnsafeRawBufferPointer(start: first.pointee.ai_addr, count: Int(length)))
        }
        return .success(SocketAddress(family: first.pointee.ai_family, storage: storage, length: length))
    }

    /// Runs `body` with the address as `bind` and `connect` take it.
    package func withSockaddr<R>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> R) -> R {
        withUnsafeBytes(of: storage) { raw in body(raw.baseAddress!.assumingMemoryBound(to: sockaddr.self), length) }
    }
}
