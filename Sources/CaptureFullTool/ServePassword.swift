// Where `capture serve` takes its secrets from. The password: a file (--password-file) or the
// environment (CAPTURE_PASSWORD), which other users cannot read, before the command line
// (--password), which every user of the machine can (ps, /proc/PID/cmdline), so it draws a
// warning. The token of token links: a file only (--token-file). The TLS certificate and key:
// their files (--tls-cert, --tls-key).
import CaptureServer
import CaptureSystem
import CaptureToolCore
import Foundation

/// `serve`'s credentials: --user with a password from --password-file, --password or
/// CAPTURE_PASSWORD (in the environment given); nil when neither a user nor a password is given.
func serveCredentials(_ args: Arguments, environment: [String: String]) throws -> CaptureStreamServer.Credentials? {
    let user = args.values["user"]
    let fromEnvironment = environment["CAPTURE_PASSWORD"]
    let password: String?
    if let path = args.values["password-file"] {
        password = try secretFileLine(path, what: "password")
    } else if let given = args.values["password"] {
        FileHandle.standardError.write(
            Data(
                "capture: warning: --password is visible to every user of this machine (ps, /proc/\(getpid())/cmdline); use --password-file FILE or CAPTURE_PASSWORD\n"
                    .utf8))
        password = given
    } else {
        password = fromEnvironment
    }
    guard let user else {
        if args.values["password"] != nil || args.values["password-file"] != nil {
            throw UsageError("--password and --password-file go with --user")
        }
        // A password meant to protect the server must not leave it open.
        if fromEnvironment != nil { throw UsageError("CAPTURE_PASSWORD is set but --user is not: give --user, or unset CAPTURE_PASSWORD") }
        return nil
    }
    guard let password else { throw UsageError("--user needs a password: --password-file FILE, CAPTURE_PASSWORD or --password") }
    guard !password.isEmpty else { throw UsageError("--user's password is empty: give one in --password-file FILE or CAPTURE_PASSWORD") }
    return CaptureStreamServer.Credentials(user: user, password: password)
}

/// `serve`'s access token: the first line of --token-file FILE; nil without the option.
func serveAccessToken(_ args: Arguments) throws -> String? {
    try args.values["token-file"].map { try secretFileLine($0, what: "token") }
}

/// `serve`'s TLS certificate and key: --tls-cert and --tls-key, both or neither. A file that
/// cannot be read or is not PEM is a usage error, found before the camera opens.
func serveTLS(_ args: Arguments) throws -> CaptureStreamServer.TLSIdentity? {
    switch (args.values["tls-cert"], args.values["tls-key"]) {
    case (nil, nil): return nil
    case (let cert?, let key?):
        do {
            return try CaptureStreamServer.TLSIdentity(certificateFile: cert, keyFile: key)
        } catch {
            throw UsageError(error.message)
        }
    default: throw UsageError("--tls-cert and --tls-key go together: give the certificate's PEM file and its key's")
    }
}

/// The first line of the file at `path`, without its line end: the password or token (`what`).
/// At most 4 KiB are read, without waiting (a FIFO with no writer reads as empty).
private func secretFileLine(_ path: String, what: String) throws -> String {
    func failure(_ e: Errno) -> ToolError {
        ToolError(message: "cannot read the \(what) file \(path): \(String(cString: strerror(e.rawValue))); give a readable file")
    }
    let fd: Int32
    switch Syscall.run("open", mock: nil, failure: -1, { open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK) }) {
    case .success(let d): fd = d
    case .failure(let e): throw failure(e)
    }
    defer { _ = Syscall.run("close", mock: nil, failure: -1, retryOnInterrupt: false) { close(fd) } }
    var bytes = [UInt8](repeating: 0, count: 4096)
    let count: Int
    switch Syscall.run("read", mock: nil, failure: -1, { bytes.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) } }) {
    case .success(let n): count = n
    case .failure(let e): throw failure(e)
    }
    let line = bytes[..<count].prefix { $0 != UInt8(ascii: "\n") }
    let secret = String(decoding: line.last == UInt8(ascii: "\r") ? line.dropLast() : line, as: UTF8.self)
    guard !secret.isEmpty else { throw ToolError(message: "the \(what) file \(path) is empty: its first line is the \(what)") }
    return secret
}
