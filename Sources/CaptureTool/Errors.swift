// The tool's one error line: every failure, whoever typed it, printed as "capture: WHAT TO DO".
import Capture
import CapturePreview
import CaptureRecording
import CaptureServer
import Foundation

/// A failure in the tool's own words (a bad option, a refused combination).
struct ToolError: Error { var message: String }

/// The one line the tool prints for any error: the library's words (`CaptureError` and the
/// products' errors), Foundation and POSIX file errors mapped to the same words, never a raw
/// `Error Domain=...` dump. Newlines are folded so it stays one line.
func errorText(_ error: any Error) -> String {
    let text: String
    switch error {
    case let e as ToolError: text = e.message
    case let e as CaptureError: text = e.message
    case let e as CaptureServerError: text = e.message
    case let e as PreviewError: text = e.message
    case let e as RecordingError: text = e.message
    default:
        if let e = CaptureError(foundation: error) {
            text = e.message
        } else {
            let ns = error as NSError
            text = ns.localizedFailureReason ?? ns.localizedDescription
        }
    }
    return text.split(whereSeparator: \.isNewline).joined(separator: "; ")
}

/// Prints `error` as one line on standard error.
func report(_ error: any Error) { FileHandle.standardError.write(Data(("capture: " + errorText(error) + "\n").utf8)) }
