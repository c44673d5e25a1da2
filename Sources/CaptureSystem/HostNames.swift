// The names a server on this machine answers to, against DNS rebinding: a page whose own name
// was made to point at this machine reaches the server under that name, and is refused.
#if canImport(Glibc)
import Glibc
#endif

/// IP literals, localhost names, the address listened on when it is a name, this machine's
/// names (`hostname`, `hostname.local`) and the names allowed besides ("*": any). A value.
package struct HostNames: Sendable, Hashable {
    /// Lowercased names answered besides IP literals and localhost names.
    package let names: Set<String>

    /// The names of a server listening on `listenAddress`, with `allowed` besides.
    package init(listenAddress: String, allowed: [String]) {
        var names = Set(allowed.map(Self.normalized))
        names.insert(Self.normalized(listenAddress))
        if case .success(let name) = SystemIdentity.hostName() {
            let n = Self.normalized(name)
            if !n.isEmpty { names.formUnion([n, n + ".local"]) }
        }
        self.names = names
    }

    /// Whether a request whose `Host` header (`name`, `name:port`, `[v6]` or `[v6]:port`) is
    /// this is for this server; a request with none (HTTP/1.0) is.
    package func allowsHostHeader(_ header: String?) -> Bool {
        guard let header, !header.isEmpty else { return true }
        if names.contains("*") { return true }
        if header.hasPrefix("[") {
            guard let close = header.firstIndex(of: "]") else { return false }
            let rest = header[header.index(after: close)...]
            guard rest.isEmpty || (rest.hasPrefix(":") && Int(rest.dropFirst()) != nil) else { return false }
            return Self.isIPv6(String(header[header.index(after: header.startIndex)..<close]))
        }
        if let colon = header.lastIndex(of: ":") {
            guard Int(header[header.index(after: colon)...]) != nil else { return false }
            return allowsName(String(header[..<colon]))
        }
        return allowsName(header)
    }

    /// Whether a bare host name or address (no port; an IPv6 address without brackets, as a
    /// parsed URL gives it) is one this server answers to.
    package func allowsName(_ name: String) -> Bool {
        if names.contains("*") || Self.isIPv6(name) { return true }
        var a4 = in_addr()
        if inet_pton(AF_INET, name, &a4) == 1 { return true }
        let n = Self.normalized(name)
        return n == "localhost" || n.hasSuffix(".localhost") || names.contains(n)
    }

    private static func isIPv6(_ text: String) -> Bool {
        var a6 = in6_addr()
        return inet_pton(AF_INET6, text, &a6) == 1
    }

    private static func normalized(_ name: String) -> String {
        var n = name.lowercased()
        while n.hasSuffix(".") { n.removeLast() }
        return n
    }
}
