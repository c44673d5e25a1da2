// The tool's one error line: every failure, whoever typed it, printed as "capture: WHAT TO DO".
import Capture
import Foundation

/// A failure in the tool's own words found at run time (a device missing, a still with no data):
/// exit status 1.
package struct ToolError: Error {
    package var message: String
    package init(message: String) { self.message = message }
}

/// The words of the errors only capture-full's libraries throw (`CaptureServerError`,
/// `PreviewError`, `RecordingError`): capture-full sets it, so that the core links none of them.
nonisolated(unsafe) package var productErrorText: (any Error) -> String? = { _ in nil }

/// A mistake in the command line, found from the words alone (an unknown command or option, an
/// option without its value, a value of the wrong form or out of range, options that exclude each
/// other): exit status 2, as getopt-based tools use it.
package struct UsageError: Error {
    package var message: String
    package init(_ message: String) { self.message = message }
}

/// The one line the tool prints for any error: the library's words (`CaptureError` and the
/// products' errors), Foundation and POSIX file errors mapped to the same words, never a raw
/// `Error Domain=...` dump. Newlines are folded so it stays one line.
package func errorText(_ error: any Error) -> String {
    let text: String
    switch error {
    case let e as ToolError: text = e.message
    case let e as UsageError: text = e.message
    case let e as CaptureError: text = e.message
    default:
        if let t = productErrorText(error) {
            text = t
        } else if let e = CaptureError(foundation: error) {
            text = e.message
        } else {
            let ns = error as NSError
            text = ns.localizedFailureReason ?? ns.localizedDescription
        }
    }
    return text.split(whereSeparator: \.isNewline).joined(separator: "; ")
}

/// Prints `error` as one line on standard error.
package func report(_ error: any Error) { FileHandle.standardError.write(Data(("capture: " + errorText(error) + "\n").utf8)) }
