import Capture
import CaptureServer
import CaptureServerMP4
import CaptureTestSupport
import Foundation
import Testing

/// HTTPS (`Configuration.tls`) and token links (`Configuration.accessToken`): a test CA made with
/// openssl, curl and ffprobe as clients, all on loopback.
@Suite struct HTTPSTests {
    static let token = "link-Token_42"

    /// A served camera over HTTPS with the test certificate (and whatever `configure` adds).
    static func served(
        _ certificates: TestCertificates, configure: (inout CaptureStreamServer.Configuration) -> Void = { _ in },
        prepare: (CaptureStreamServer) throws -> Void = { _ in }
    ) throws -> ServedCamera {
        let identity = try CaptureStreamServer.TLSIdentity(certificateFile: certificates.certificateFile, keyFile: certificates.keyFile)
        return try ServedCamera(
            configure: {
                $0.tls = identity
                configure(&$0)
            }, prepare: prepare)
    }

    @Test func curlReadsASnapshotOverHTTPSAndPlainHTTPGetsNoPicture() throws {
        let certificates = try TestCertificates()
        defer { certificates.remove() }
        let served = try Self.served(certificates)
        defer { served.close() }
        #expect(served.server.url.absoluteString == "https://127.0.0.1:\(served.port)/")
        let https = "https://127.0.0.1:\(served.port)"
        let snapshot = try curl(https + "/snapshot", ["--cacert", certificates.caFile])
        #expect(snapshot.status == 200)
        let image = try #require(TestJPEG.decode(snapshot.body), "not a JPEG: \(snapshot.headers)")
        #expect(image.width == 320 && image.height == 240)
        // Without the CA curl refuses the certificate (60): nothing is read.
        let untrusted = try runProcess("/usr/bin/curl", ["-s", "--max-time", "30", "-o", "-", https + "/snapshot"])
        #expect(untrusted.status == 60 && untrusted.stdout.isEmpty, "\(untrusted.status)")
        // Plain HTTP to the TLS port: the handshake fails, the connection closes, no picture.
        let client = try RawClient(port: served.port)
        client.send("GET /snapshot HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        let answer = client.readUntilClosed()
        #expect(answer.closed, "the server keeps a plain HTTP connection open")
        #expect(!answer.bytes.starts(with: Array("HTTP/".utf8)) && !answer.bytes.contains(0xD8), "\(answer.bytes.prefix(64))")
        // More than 64 query arguments over TLS: closed at once (no plain 414 fits in a TLS
        // stream), never left waiting.
        let query = (0..<70).map { "a\($0)=1" }.joined(separator: "&")
        let long = try runProcess(
            "/usr/bin/curl", ["-s", "--max-time", "30", "--cacert", certificates.caFile, "-o", "-", https + "/snapshot?" + query])
        #expect(long.status != 0 && long.status != 28 && !long.stdout.contains(0xD8), "curl with 70 arguments: \(long.status)")
        let plain = try runProcess("/usr/bin/curl", ["-s", "--max-time", "30", "-o", "-", "http://127.0.0.1:\(served.port)/snapshot"])
        #expect(plain.status != 0 && !plain.stdout.contains(0xD8), "curl over plain HTTP: \(plain.status)")
    }

    @Test func aBadCertificateOrKeyIsATypedError() throws {
        let certificates = try TestCertificates()
        defer { certificates.remove() }
        let garbage = certificates.folder.appendingPathComponent("garbage.pem").path
        try Data("not a key\n".utf8).write(to: URL(fileURLWithPath: garbage))
        for (cert, key) in [
            (certificates.folder.appendingPathComponent("missing.pem").path, certificates.keyFile),
            (certificates.certificateFile, garbage), (certificates.keyFile, certificates.keyFile),
            (certificates.certificateFile, certificates.certificateFile),
        ] {
            let error = #expect(throws: CaptureServerError.self) {
                _ = try CaptureStreamServer.TLSIdentity(certificateFile: cert, keyFile: key)
            }
            #expect(error?.code == .badCertificate && error?.message.contains("give") == true, "\(String(describing: error))")
        }
        // A key that is not the certificate's: found when libmicrohttpd loads them.
        var config = CaptureStreamServer.Configuration(port: 0)
        config.tls = try CaptureStreamServer.TLSIdentity(certificateFile: certificates.certificateFile, keyFile: certificates.otherKeyFile)
        let server = try CaptureStreamServer(session: CaptureSession(), configuration: config)
        let error = #expect(throws: CaptureServerError.self) { try server.start() }
        #expect(error?.code == .badCertificate, "\(String(describing: error))")
        #expect(!server.isRunning)
    }

    @Test func tokenLinksOverHTTPS() throws {
        let certificates = try TestCertificates()
        defer { certificates.remove() }
        let served = try Self.served(
            certificates, configure: { $0.accessToken = Self.token }, prepare: { try $0.addFragmentedMP4Stream() })
        defer { served.close() }
        let https = "https://127.0.0.1:\(served.port)"
        let ca = ["--cacert", certificates.caFile]
        let snapshot = try curl(https + "/snapshot?token=\(Self.token)", ca)
        #expect(snapshot.status == 200 && TestJPEG.decode(snapshot.body) != nil)
        #expect(try curl(https + "/?action=snapshot&token=\(Self.token)", ca).status == 200)
        #expect(try curl(https + "/snapshot", ca + ["-H", "Authorization: Bearer \(Self.token)"]).status == 200)
        // The H.264 stream's first box (its first 16 bytes: curl ends when head has them).
        let firstBytes = "curl -s --max-time 30 --cacert \"$1\" \"$2\" | head -c 16"
        let mp4 = try runProcess("/bin/sh", ["-c", firstBytes, "sh", certificates.caFile, https + "/stream.mp4?token=\(Self.token)"])
        #expect(mp4.stdout.count == 16 && mp4.stdout.dropFirst(4).starts(with: Array("ftyp".utf8)), "\(mp4.text)")
        for bad in ["", "wrong", "link-Token_4", "link-Token_42x", "link-Token_42%00", "link-Token_42%00x", "LINK-TOKEN_42"] {
            let r = try curl(https + "/snapshot?token=\(bad)", ca)
            #expect(r.status == 401, "token '\(bad)': \(r.status)")
            #expect(r.headers.contains("WWW-Authenticate: Bearer"), "\(r.headers)")
        }
        #expect(try curl(https + "/snapshot", ca).status == 401)
        #expect(try curl(https + "/stream.mp4?token=nope", ca).status == 401)
        // ffprobe reads the MJPEG stream by the link, trusting the test CA.
        let probe = try runProcess(
            "/usr/bin/ffprobe",
            [
                "-v", "error", "-tls_verify", "1", "-ca_file", certificates.caFile, "-show_streams", "-of", "json",
                https + "/stream?token=\(Self.token)",
            ],
            timeout: 30)
        #expect(probe.status == 0 && probe.text.contains("\"mjpeg\""), "\(probe.stderr)")
        // The page sets a cookie its own requests pass with; the token is in nothing it shows.
        let page = try curl(https + "/?token=\(Self.token)", ca)
        let cookie = try #require(page.headers.split(separator: "\r\n").first { $0.hasPrefix("Set-Cookie: capture-token=") })
        #expect(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict") && cookie.contains("Secure"))
        let value = String(cookie.dropFirst("Set-Cookie: ".count).prefix { $0 != ";" })
        #expect(try curl(https + "/state", ca + ["-H", "Cookie: \(value)"]).status == 200)
        #expect(try curl(https + "/state", ca + ["-H", "Cookie: capture-token=00"]).status == 401)
        let state = try curl(https + "/state?token=\(Self.token)", ca)
        #expect(state.status == 200 && !String(decoding: state.body, as: UTF8.self).contains(Self.token))
    }

    /// With a password too, either credential lets a client in; the state-changing rules hold
    /// under https (its origin is https://HOST).
    @Test func aTokenBesideAPasswordAndTheOriginRulesUnderHTTPS() throws {
        let certificates = try TestCertificates()
        defer { certificates.remove() }
        let served = try Self.served(certificates) {
            $0.accessToken = Self.token
            $0.credentials = .init(user: "u", password: "pw")
        }
        defer { served.close() }
        let https = "https://127.0.0.1:\(served.port)"
        let ca = ["--cacert", certificates.caFile]
        #expect(try curl(https + "/state", ca + ["-u", "u:pw"]).status == 200)
        #expect(try curl(https + "/state?token=\(Self.token)", ca).status == 200)
        let refused = try curl(https + "/state?token=wrong", ca + ["-u", "u:nope"])
        #expect(refused.status == 401 && refused.headers.contains("WWW-Authenticate: Basic"), "\(refused.headers)")
        #expect(try curl(https + "/state", ca).status == 401)
        // The host rules hold over TLS.
        #expect(try curl(https + "/state?token=\(Self.token)", ca + ["-H", "Host: rebound.example"]).status == 403)
        let still = ca + apiPost + ["-u", "u:pw"]
        #expect(try curl(https + "/api/still", still + ["-H", "Origin: \(https)"]).status == 200)
        #expect(try curl(https + "/api/still", still + ["-H", "Origin: http://127.0.0.1:\(served.port)"]).status == 403)
        #expect(try curl(https + "/api/still", still + ["-H", "Origin: https://evil.example"]).status == 403)
    }

    @Test func anEmptyOrNULTokenIsRefusedInTheConfiguration() {
        for bad in ["", "a\u{0}b", String(repeating: "t", count: 4097)] {
            var config = CaptureStreamServer.Configuration(port: 0)
            config.accessToken = bad
            #expect(throws: CaptureServerError.self) { _ = try CaptureStreamServer(session: CaptureSession(), configuration: config) }
        }
    }
}
