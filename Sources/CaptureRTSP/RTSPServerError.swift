/// A failure of the RTSP server: what went wrong, in one line that says what to do.
/// Plain value; any thread.
public struct RTSPServerError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The kinds of failure a caller can meet.
    public enum Code: String, Sendable, Hashable {
        /// A GStreamer element or gst-rtsp-server is missing: the message names the Debian package.
        case missingElement
        /// The address and port cannot be listened on (taken, not this machine's, not allowed).
        case cannotListen
        /// A configuration value is out of range (port, path, credentials, bitrate).
        case invalidConfiguration
    }
    /// What kind of failure it is.
    public var code: Code
    /// One line: what happened and what to do.
    public var message: String

    /// A failure of kind `code`, told by `message`.
    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    /// The message.
    public var description: String { message }
}
