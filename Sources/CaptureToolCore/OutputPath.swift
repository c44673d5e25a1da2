// The output paths `snap` and `audio` are given, checked before the device opens: the extension
// names what is written, the folder takes new files, and only a regular file is ever replaced.
// Their system calls go through the funnel (CaptureSystem's `Syscall`).
import Capture
import CaptureSystem
import Foundation

package enum OutputPath {
    /// Refuses a name whose extension says another format than the one `command` writes
    /// (`format`, with `extensions`, the first preferred); a name without one is taken as it is.
    package static func checkExtension(_ path: String, command: String, writes format: String, as extensions: [String]) throws {
        let ext = URL(fileURLWithPath: path).pathExtension
        guard !ext.isEmpty, !extensions.contains(ext.lowercased()) else { return }
        let names = extensions.map { "." + $0 }
        let choice = names.count == 1 ? names[0] : names.dropLast().joined(separator: ", ") + " or " + names.last!
        throw UsageError("\(command) writes \(format), not .\(ext): name the output \(choice)")
    }

    /// A missing, read-only or forbidden `folder` is found before anything is recorded; `path` is
    /// the name the user gave, for the error.
    package static func checkWritable(_ folder: String, naming path: String) throws {
        if case .failure(let e) = Syscall.run("access", mock: nil, failure: -1, { access(folder, W_OK) }) {
            throw CaptureError.file(errno: e.rawValue, path: path, operation: "access")
        }
    }

    /// A FIFO (whose open would block), a device node or a symbolic link at `path` is never
    /// written over.
    package static func checkReplaceable(_ path: String) throws {
        if case .success(let kind?) = FileSystem.kind(at: path), kind != .regular { throw PhotoLibrary.notAFile(path, kind) }
    }

    /// Removes a half-written file; a failure leaves it (the error that made it half-written is
    /// the one reported).
    package static func remove(_ path: String) { _ = Syscall.run("unlink", mock: nil, failure: -1) { unlink(path) } }

    /// The size of the file at `path` as written, or nil when it cannot be read.
    package static func size(_ path: String) -> Int64? {
        var st = stat()
        guard case .success = Syscall.run("stat", mock: nil, failure: -1, { stat(path, &st) }) else { return nil }
        return Int64(st.st_size)
    }
}
