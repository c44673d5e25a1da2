/// A failure of the camera server: what went wrong, in one line that says what to do.
/// Plain value; any thread.
public struct CaptureServerError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The kinds of failure a caller can meet.
    public enum Code: String, Sendable, Hashable {
        /// Another program (or server) listens on the port already.
        case portInUse
        /// The host is not an address of this machine, or not an address at all.
        case badAddress
        /// The system refused the port (below 1024 needs privileges).
        case permissionDenied
        /// A configuration value out of range (quality, client limit, credentials, token).
        case invalidConfiguration
        /// `start()` on a server that runs already.
        case alreadyRunning
        /// libmicrohttpd could not start its daemon.
        case startFailed
        /// The TLS certificate or key cannot be read, is not PEM, or the key is not the
        /// certificate's.
        case badCertificate
    }
    public var code: Code
    /// One line: what happened and what to do.
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { message }
}
