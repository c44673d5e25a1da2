// Paths in the file system, through the funnel: what is at a path (without following a symbolic
// link), and putting a finished file in place without ever replacing anything but a regular file.
#if canImport(Glibc)
import Glibc
#endif

/// What a path names, as `lstat` sees it (a symbolic link is itself, not its target).
package enum FileKind: Sendable, Hashable {
    case regular, directory, symbolicLink, fifo, characterDevice, blockDevice, socket, other
}

/// Why `FileSystem.place` did not put a file in place.
package enum PlaceError: Error, Sendable, Hashable {
    /// Something other than a regular file is at the destination; it was left as it was.
    case notARegularFile(FileKind)
    /// A call failed.
    case failed(SystemCallError)
}

package enum FileSystem {
    /// What is at `path`, nil when nothing is; a symbolic link is reported as one.
    package static func kind(at path: String) -> Result<FileKind?, SystemCallError> {
        var st = stat()
        switch Syscall.run("lstat", mock: nil, failure: -1, { lstat(path, &st) }) {
        case .failure(.noSuchFileOrDirectory): return .success(nil)
        case .failure(let e): return .failure(SystemCallError(operation: "lstat", errno: e))
        case .success: break
        }
        switch st.st_mode & S_IFMT {
        case S_IFREG: return .success(.regular)
        case S_IFDIR: return .success(.directory)
        case S_IFLNK: return .success(.symbolicLink)
        case S_IFIFO: return .success(.fifo)
        case S_IFCHR: return .success(.characterDevice)
        case S_IFBLK: return .success(.blockDevice)
        case S_IFSOCK: return .success(.socket)
        default: return .success(.other)
        }
    }

    /// Moves the finished file `source` to `destination` in the same file system when nothing is
    /// there (never replacing what appears meanwhile) or a regular file is (replaced atomically).
    /// A FIFO, device node, symbolic link, folder or socket at `destination` is left as it was;
    /// `source` stays for the caller to remove on any failure.
    package static func place(_ source: String, at destination: String) -> Result<Void, PlaceError> {
        // Twice at most: something may appear at the destination between the look and the link.
        for _ in 0..<2 {
            let kind: FileKind?
            switch self.kind(at: destination) {
            case .success(let k): kind = k
            case .failure(let e): return .failure(.failed(e))
            }
            if let kind, kind != .regular { return .failure(.notARegularFile(kind)) }
            if kind == .regular {
                // (A regular file swapped for something else in the instant between the lstat and
                // the rename would be replaced; rename has no "regular files only" flag.)
                return Syscall.run("rename", mock: nil, failure: -1, { rename(source, destination) })
                    .map { _ in () }.mapError { .failed(SystemCallError(operation: "rename", errno: $0)) }
            }
            // Nothing there: a hard link fails if anything appeared meanwhile, where rename would
            // replace it.
            switch Syscall.run("link", mock: nil, failure: -1, { link(source, destination) }) {
            case .success:
                _ = Syscall.run("unlink", mock: nil, failure: -1, { unlink(source) })
                return .success(())
            case .failure(Errno(rawValue: EEXIST)):
                continue
            case .failure(.notPermitted), .failure(Errno(rawValue: EOPNOTSUPP)), .failure(Errno(rawValue: EMLINK)):
                // A file system without hard links (FAT, some network ones): the rename, at once.
                return Syscall.run("rename", mock: nil, failure: -1, { rename(source, destination) })
                    .map { _ in () }.mapError { .failed(SystemCallError(operation: "rename", errno: $0)) }
            case .failure(let e):
                return .failure(.failed(SystemCallError(operation: "link", errno: e)))
            }
        }
        return .failure(.failed(SystemCallError(operation: "link", errno: Errno(rawValue: EEXIST))))
    }
}
