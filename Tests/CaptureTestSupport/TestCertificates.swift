import Foundation

/// A throw-away certificate authority and a server certificate for 127.0.0.1 and localhost
/// signed by it (P-256, valid two days), made with `openssl` in a temporary folder, and a key of
/// no certificate, for HTTPS tests. Removed by `remove()`.
public struct TestCertificates: Sendable {
    public let folder: URL
    /// The CA's certificate: what a client trusts (`curl --cacert`, `ffprobe -ca_file`).
    public var caFile: String { folder.appendingPathComponent("ca.pem").path }
    public var certificateFile: String { folder.appendingPathComponent("server.pem").path }
    public var keyFile: String { folder.appendingPathComponent("server.key").path }
    /// A valid key that is not the certificate's.
    public var otherKeyFile: String { folder.appendingPathComponent("other.key").path }

    public init() throws {
        folder = FileManager.default.temporaryDirectory.appendingPathComponent("test-tls-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        let dir = folder
        let f = { (name: String) in dir.appendingPathComponent(name).path }
        try Self.openssl(
            ["req", "-x509"] + ec + ["-keyout", f("ca.key"), "-out", f("ca.pem"), "-days", "2", "-subj", "/CN=swift-capture test CA"])
        try Self.openssl(["req"] + ec + ["-keyout", f("server.key"), "-out", f("server.csr"), "-subj", "/CN=127.0.0.1"])
        try Data("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n".utf8)
            .write(to: folder.appendingPathComponent("server.ext"))
        try Self.openssl([
            "x509", "-req", "-in", f("server.csr"), "-CA", f("ca.pem"), "-CAkey", f("ca.key"), "-CAcreateserial", "-out", f("server.pem"),
            "-days", "2", "-extfile", f("server.ext"),
        ])
        try Self.openssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", f("other.key")])
    }

    public func remove() { try? FileManager.default.removeItem(at: folder) }

    private static func openssl(_ arguments: [String]) throws {
        let r = try runProcess("/usr/bin/openssl", arguments)
        guard r.status == 0 else { throw TestFailure("openssl \(arguments.prefix(2).joined(separator: " ")) failed: \(r.stderr)") }
    }
}
