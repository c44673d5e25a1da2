// Words for a file the library or its tools could not write or read, from an errno or from the
// Foundation error that wraps one, so no caller shows a raw `Error Domain=NSCocoaErrorDomain` dump.
import CaptureBackend
import Foundation
#if canImport(Glibc)
import Glibc
#endif

extension CaptureError {
    /// A failed file operation on `path` in the library's words: `.diskFull` (ENOSPC, EDQUOT),
    /// `.readOnlyFileSystem` (EROFS), `.permissionDenied` (EACCES, EPERM), `.invalidArgument`
    /// (a missing folder or a path through a file), else `.ioError` with the system's reason.
    /// `path` names a file, or with `inFolder` the folder a file was to go into; `subject` says
    /// what was being written ("the photo (N bytes)").
    package static func file(
        errno code: Int32, path: String, operation: String, inFolder: Bool = false,
        subject: String? = nil
    ) -> CaptureError {
        let folder = inFolder ? path : (path as NSString).deletingLastPathComponent
        let write = inFolder ? "write in" : "write"
        switch code {
        case ENOSPC, EDQUOT:
            let room = subject.map { ": there is no room for \($0)" } ?? ""
            return CaptureError(
                .diskFull, "the disk holding \(path) is full\(room); free some space or write to another folder",
                errno: code, operation: operation)
        case EROFS:
            return CaptureError(
                .readOnlyFileSystem, "\(path) is on a read-only file system; remount it read-write or write to another folder",
                errno: code, operation: operation)
        case EACCES, EPERM:
            return CaptureError(
                .permissionDenied,
                "no permission to \(write) \(path); check \(inFolder ? "its" : "the folder's") owner and mode or write to another folder",
                errno: code, operation: operation)
        case ENOENT:
            return CaptureError(
                .invalidArgument, "no such folder: \(folder.isEmpty ? path : folder); create it first or write to another folder",
                errno: code, operation: operation)
        case ENOTDIR:
            return CaptureError(
                .invalidArgument,
                inFolder
                    ? "\(path) is not a folder; write to a folder that exists"
                    : "a part of \(path) is not a folder; write to a folder that exists",
                errno: code, operation: operation)
        case EISDIR:
            return CaptureError(.invalidArgument, "\(path) is a folder; name a file", errno: code, operation: operation)
        default:
            let what = subject.map { "could not write \($0) in \(path)" } ?? "\(operation) \(path) failed"
            return CaptureError(
                .ioError, "\(what): \(String(cString: strerror(code)))",
                errno: code, operation: operation)
        }
    }

    /// The `CaptureError` for a Foundation or POSIX file error (`CocoaError`, `POSIXError`, an
    /// `NSError` in either domain, with the errno underneath where Foundation keeps one); nil for
    /// any other error.
    package init?(foundation error: any Error) {
        let ns = error as NSError
        var code: Int32?
        var path = ns.userInfo[NSFilePathErrorKey] as? String ?? (ns.userInfo[NSURLErrorKey] as? URL)?.path
        if ns.domain == NSPOSIXErrorDomain {
            code = Int32(ns.code)
        } else if ns.domain == NSCocoaErrorDomain {
            if let under = ns.userInfo[NSUnderlyingErrorKey] as? NSError, under.domain == NSPOSIXErrorDomain {
                code = Int32(under.code)
            } else {
                switch CocoaError.Code(rawValue: ns.code) {
                case .fileWriteOutOfSpace: code = ENOSPC
                case .fileWriteVolumeReadOnly: code = EROFS
                case .fileWriteNoPermission, .fileReadNoPermission: code = EACCES
                case .fileNoSuchFile, .fileReadNoSuchFile: code = ENOENT
                case .fileWriteFileExists: code = EEXIST
                default: code = nil
                }
            }
            if code == nil, ns.code >= 256, ns.code < 1024 { code = EIO }
        }
        guard let code else { return nil }
        if path == nil { path = "the file" }
        self = CaptureError.file(errno: code, path: path ?? "the file", operation: "write")
    }
}
