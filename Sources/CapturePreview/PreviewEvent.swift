// What a window reports to its handler, and the keys in it.
import Foundation

/// Something that happened to a window: a key, the pointer, a resize, a close request.
/// Plain value; any thread.
public enum PreviewEvent: Sendable, Hashable {
    /// A key went down (auto-repeats included, `isRepeat` true).
    case keyDown(Key, isRepeat: Bool)
    /// A key came up.
    case keyUp(Key)
    /// A pointer button went down at a point in window (root layer) coordinates; 1 is the left
    /// button.
    case pointerDown(CGPoint, button: Int)
    /// A pointer button came up.
    case pointerUp(CGPoint, button: Int)
    /// The pointer moved.
    case pointerMoved(CGPoint)
    /// The window's size changed (the root layer already has the new frame).
    case resized(CGSize)
    /// The user asked to close the window (its close button, Ctrl-C or SIGTERM); the window
    /// stays open until `close()`.
    case closeRequested
}

/// A keyboard key: SDL's key code (for printable keys, the lower-case character's code point).
/// Plain value; any thread.
public struct Key: Sendable, Hashable, CustomStringConvertible {
    public var code: Int32
    public init(code: Int32) { self.code = code }
    /// The key that types `character` (lower-case letters, digits, punctuation).
    public init(_ character: Character) { code = Int32(character.unicodeScalars.first.map { $0.value } ?? 0) }

    public static let escape = Key(code: 27)
    public static let space = Key(code: 32)
    public static let enter = Key(code: 13)

    public var description: String {
        switch code {
        case 27: "Esc"
        case 32: "Space"
        case 13: "Enter"
        case 33..<127: String(UnicodeScalar(UInt8(code)))
        default: "key \(code)"
        }
    }
}
