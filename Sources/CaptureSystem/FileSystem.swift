// Paths in the file system, through the funnel: what is at a path (following a symbolic link or
// not), the names in a folder, and putting a finished file in place without ever replacing
// anything but a regular file.
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

/// What `stat` or `lstat` tells of a path that the library looks at.
package struct FileStatus: Sendable, Hashable {
    package var kind: FileKind
    /// Bytes, for a regular file.
    package var size: Int64
    /// Last modification, in whole seconds since 1970.
    package var modificationTime: Int
}

package enum FileSystem {
    /// What is at `path`, nil when nothing is; a symbolic link is reported as one.
    package static func kind(at path: String) -> Result<FileKind?, SystemCallError> {
        switch status(at: path, followingLinks: false) {
        case .success(let status): return .success(status.kind)
        case .failure(let e) where e.errno == .noSuchFileOrDirectory: return .success(nil)
        case .failure(let e): return .failure(e)
        }
    }

    /// What is at `path` (`stat`: what a symbolic link points at; `lstat` when `followingLinks`
    /// is false: the link itself), or the failed call (`ENOENT` when nothing is there).
    package static func status(at path: String, followingLinks: Bool = true) -> Result<FileStatus, SystemCallError> {
        var st = stat()
        let operation = followingLinks ? "stat" : "lstat"
        let done = Syscall.run(operation, mock: nil, failure: -1) { followingLinks ? stat(path, &st) : lstat(path, &st) }
        if case .failure(let e) = done { return .failure(SystemCallError(operation: operation, errno: e)) }
        return .success(FileStatus(st))
    }

    /// What the open descriptor `fd` is (`fstat`), or the failed call. Another thread may close
    /// `fd` meanwhile: that is `EBADF`, not a programming error.
    package static func status(ofDescriptor fd: Int32) -> Result<FileStatus, SystemCallError> {
        var st = stat()
        if case .failure(let e) = Syscall.runOnSharedDescriptor("fstat", failure: -1, { fstat(fd, &st) }) {
            return .failure(SystemCallError(operation: "fstat", errno: e))
        }
        return .success(FileStatus(st))
    }

    /// The names in the folder `path` (without `.` and `..`), in the order the file system keeps
    /// them, or the failed call.
    package static func names(in path: String) -> Result<[String], SystemCallError> {
        let opened = Syscall.run("opendir", mock: nil, failure: nil) { opendir(path) }
        guard case .success(let found) = opened, let dir = found else {
            return .failure(SystemCallError(operation: "opendir", errno: opened.errno ?? .noSuchFileOrDirectory))
        }
        defer { _ = Syscall.run("closedir", mock: nil, failure: -1, retryOnInterrupt: false) { closedir(dir) } }
        var names: [String] = []
        while true {
            // readdir's end and its failure both return nil: the errno cleared before the call
            // tells them apart (still 0 at the end).
            let next = Syscall.run("readdir", mock: nil, failure: nil) { () -> UnsafeMutablePointer<dirent>? in
                errno = 0
                return readdir(dir)
            }
            switch next {
            case .failure(Errno(rawValue: 0)): return .success(names)
            case .failure(let e): return .failure(SystemCallError(operation: "readdir", errno: e))
            case .success(let entry):
                let name = withUnsafeBytes(of: entry!.pointee.d_name) { raw in
                    String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
                }
                if name != ".", name != ".." { names.append(name) }
            }
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

extension FileStatus {
    fileprivate init(_ st: stat) {
        self.init(kind: Self.kind(st.st_mode), size: Int64(st.st_size), modificationTime: Int(st.st_mtim.tv_sec))
    }

    private static func kind(_ mode: mode_t) -> FileKind {
        switch mode & S_IFMT {
        case S_IFREG: .regular
        case S_IFDIR: .directory
        case S_IFLNK: .symbolicLink
        case S_IFIFO: .fifo
        case S_IFCHR: .characterDevice
        case S_IFBLK: .blockDevice
        case S_IFSOCK: .socket
        default: .other
        }
    }
}
