// HTTPS: the certificate and key the server serves TLS with (libmicrohttpd over GnuTLS), read and
// checked before the daemon starts, and held as C strings while it runs.
import CMicroHTTPD
import Foundation

extension CaptureStreamServer {
    /// The certificate chain and private key the server serves HTTPS with, both PEM.
    public struct TLSIdentity: Sendable, Hashable {
        /// The server's certificate, then any intermediate certificates, PEM.
        public var certificatePEM: String
        /// The certificate's private key, PEM, not encrypted.
        public var privateKeyPEM: String

        /// An identity from PEM text. Throws `.badCertificate` when either is not PEM of its kind.
        public init(certificatePEM: String, privateKeyPEM: String) throws(CaptureServerError) {
            guard certificatePEM.contains("-----BEGIN CERTIFICATE-----") else {
                throw CaptureServerError(
                    .badCertificate, "the certificate is not PEM (-----BEGIN CERTIFICATE-----): give the server's certificate in PEM")
            }
            guard privateKeyPEM.contains("-----BEGIN"), privateKeyPEM.contains("PRIVATE KEY-----") else {
                throw CaptureServerError(
                    .badCertificate, "the key is not a PEM private key (-----BEGIN ... PRIVATE KEY-----): give the certificate's key, PEM")
            }
            guard !privateKeyPEM.contains("ENCRYPTED") else {
                throw CaptureServerError(
                    .badCertificate, "the private key is encrypted: give it without a passphrase (openssl pkey -in KEY -out PLAIN)")
            }
            self.certificatePEM = certificatePEM
            self.privateKeyPEM = privateKeyPEM
        }

        /// An identity read from PEM files (at most 1 MiB each). Throws `.badCertificate` when a
        /// file cannot be read or is not PEM of its kind.
        public init(certificateFile: String, keyFile: String) throws(CaptureServerError) {
            try self.init(
                certificatePEM: Self.read(certificateFile, what: "certificate"), privateKeyPEM: Self.read(keyFile, what: "key"))
        }

        private static func read(_ path: String, what: String) throws(CaptureServerError) -> String {
            let data: Data
            do {
                let handle = try FileHandle(forReadingFrom: URL(fileURLWithPath: path))
                defer { try? handle.close() }
                data = try handle.read(upToCount: 1 << 20) ?? Data()
            } catch {
                throw CaptureServerError(.badCertificate, "cannot read the TLS \(what) file \(path): give a readable PEM file")
            }
            guard let text = String(data: data, encoding: .utf8), text.contains("-----BEGIN") else {
                throw CaptureServerError(.badCertificate, "the TLS \(what) file \(path) is not PEM: give a PEM file (-----BEGIN ...)")
            }
            return text
        }
    }
}

/// The certificate and key as the C strings libmicrohttpd takes (MHD_OPTION_HTTPS_MEM_CERT and
/// _KEY): it keeps the pointers, so they live until the daemon has stopped. The key's copy is
/// zeroed before it is freed.
final class TLSStrings {
    let certificate: UnsafeMutablePointer<CChar>
    let key: UnsafeMutablePointer<CChar>
    private let keyLength: Int

    init(_ identity: CaptureStreamServer.TLSIdentity) {
        certificate = strdup(identity.certificatePEM)!
        key = strdup(identity.privateKeyPEM)!
        keyLength = identity.privateKeyPEM.utf8.count
    }

    /// The option items of the daemon's TLS.
    var options: [MHD_OptionItem] {
        [
            MHD_OptionItem(option: MHD_OPTION.HTTPS_MEM_CERT, value: 0, ptr_value: UnsafeMutableRawPointer(certificate)),
            MHD_OptionItem(option: MHD_OPTION.HTTPS_MEM_KEY, value: 0, ptr_value: UnsafeMutableRawPointer(key)),
        ]
    }

    deinit {
        memset(key, 0, keyLength)
        free(certificate)
        free(key)
    }
}
