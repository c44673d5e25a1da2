/// A failure of the WebRTC publisher: what went wrong, in one line that says what to do.
/// Plain value; any thread.
public struct WebRTCError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The kinds of failure a caller can meet.
    public enum Code: String, Sendable, Hashable {
        /// The offer is not SDP (garbage, empty, or larger than an offer can be): a WHEP server
        /// answers 400.
        case invalidOffer
        /// The offer asks for no video (no `m=video` line): 400.
        case noVideo
        /// The offer's video has no H.264 with packetization-mode=1, the only video sent: 400
        /// (or 406).
        case noH264
        /// A GStreamer element is missing: the message names the Debian package to install.
        case missingElement
        /// As many viewers as `Configuration.maxViewers` watch already: 503.
        case tooManyViewers
        /// No viewer has this ID (it ended, or never was): 404.
        case unknownViewer
        /// GStreamer could not answer the offer or build the viewer's branch.
        case negotiationFailed
        /// The shared H.264 encoder cannot encode this camera's frames.
        case encoderFailed
        /// The publisher was stopped.
        case stopped
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
