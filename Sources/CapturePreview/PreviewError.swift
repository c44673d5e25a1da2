/// A failure of the preview module: what went wrong, in one line that says what to do.
/// Plain value; any thread.
public struct PreviewError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The kinds of failure a caller can meet.
    public enum Code: String, Sendable, Hashable {
        /// No display to open a window on (no `DISPLAY`/`WAYLAND_DISPLAY`, or it cannot be used).
        case noDisplay
        /// The window or its renderer could not be made.
        case windowFailed
        /// Image bytes that are not a usable image.
        case invalidImage
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
