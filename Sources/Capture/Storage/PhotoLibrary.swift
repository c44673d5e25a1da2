import CaptureImaging
import CaptureBackend
import CaptureSystem
import Foundation
import Dispatch
#if canImport(Glibc)
import Glibc
#endif

/// What a saved photo says about itself, written as EXIF when the JPEG has none.
public struct PhotoMetadata: Sendable, Hashable {
    /// When the photo was taken; also names the file.
    public var date: Date
    /// The camera maker (EXIF `Make`).
    public var make: String?
    /// The camera model (EXIF `Model`), e.g. the device's localized name.
    public var model: String?
    /// How a viewer must turn the stored pixels (EXIF `Orientation`).
    public var orientation: EXIFOrientation

    public init(date: Date = Date(), make: String? = nil, model: String? = nil, orientation: EXIFOrientation = .up) {
        self.date = date
        self.make = make
        self.model = model
        self.orientation = orientation
    }
}

/// The user's photo album: the Linux counterpart of `UIImageWriteToSavedPhotosAlbum`.
///
/// Photos go to the pictures folder of the freedesktop user-dirs spec: `XDG_PICTURES_DIR`,
/// else the `XDG_PICTURES_DIR` line of `$XDG_CONFIG_HOME/user-dirs.dirs` (default
/// `~/.config/user-dirs.dirs`), else `~/Pictures`; the folder is created when missing.
///
/// Each save is atomic and never overwrites: the bytes go to a hidden temporary file in the
/// same folder, are flushed to disk (`fsync`), then renamed to a name nobody holds
/// (`IMG_20261202_153045_123.jpg`, then `_2`, `_3`... on a collision) without replacing
/// anything (`renameat2(RENAME_NOREPLACE)`, else `link`), and the folder is flushed. On any
/// failure the temporary file is removed: there is never a partial or empty photo.
///
/// A JPEG without EXIF gets an EXIF block (date, make, model, orientation); one that lacks
/// Huffman tables (an MJPEG frame) gets the standard ones, so every viewer can open it.
///
/// Errors: `.diskFull` (ENOSPC, EDQUOT), `.readOnlyFileSystem` (EROFS), `.permissionDenied`
/// (EACCES, EPERM), `.invalidArgument` (not a complete JPEG), `.ioError` (anything else).
///
/// Thread safety: any thread. Saves run one after another on the library's own queue.
public final class PhotoLibrary: Sendable {
    /// The user's pictures folder, looked up again at each save (so a changed `HOME` or
    /// `XDG_PICTURES_DIR` is honoured).
    public static let shared = PhotoLibrary(fixedDirectory: nil, clock: { Date() })

    private let fixedDirectory: URL?
    private let queue = DispatchQueue(label: "swift-capture.photo-library", qos: .utility)
    private let clock: @Sendable () -> Date

    /// A library that saves into `directory` (created when missing).
    public convenience init(directory: URL) {
        self.init(fixedDirectory: directory, clock: { Date() })
    }

    /// `clock` dates photos saved without metadata (tests pin it to check the naming).
    init(fixedDirectory: URL?, clock: @escaping @Sendable () -> Date) {
        self.fixedDirectory = fixedDirectory
        self.clock = clock
    }

    /// Where photos go now.
    public var directory: URL {
        fixedDirectory ?? Self.picturesDirectory(environment: Self.currentEnvironment())
    }

    /// Saves `jpeg` on the library's queue and calls `completion` with the new file's URL or
    /// the error, on `queue` (default: the library's own queue).
    public func save(
        jpeg: Data, metadata: PhotoMetadata? = nil, queue completionQueue: DispatchQueue? = nil,
        completion: @escaping @Sendable (Result<URL, CaptureError>) -> Void
    ) {
        queue.async { [self] in
            let result: Result<URL, CaptureError>
            do throws(CaptureError) {
                result = .success(try write(jpeg: jpeg, metadata: metadata))
            } catch {
                result = .failure(error)
            }
            if let completionQueue { completionQueue.async { completion(result) } } else { completion(result) }
        }
    }

    /// Saves `jpeg` and returns the new file's URL.
    public func save(jpeg: Data, metadata: PhotoMetadata? = nil) async throws(CaptureError) -> URL {
        let result = await withCheckedContinuation { (c: CheckedContinuation<Result<URL, CaptureError>, Never>) in
            save(jpeg: jpeg, metadata: metadata) { c.resume(returning: $0) }
        }
        return try result.get()
    }

    /// Saves `jpeg` on the calling thread (blocking it until the data is on disk).
    public func saveSynchronously(jpeg: Data, metadata: PhotoMetadata? = nil) throws(CaptureError) -> URL {
        let result = queue.sync { () -> Result<URL, CaptureError> in
            do throws(CaptureError) { return .success(try write(jpeg: jpeg, metadata: metadata)) } catch { return .failure(error) }
        }
        return try result.get()
    }

    /// Saves `jpeg` at `url` the way the album saves (whole JPEG checked, EXIF with `metadata`
    /// added when it has none, written to a hidden temporary file in the same folder, flushed,
    /// then renamed over `url`): a reader sees the old file or the new one, never a partial one,
    /// and on any failure nothing is left behind. The folder must exist. For a file name the
    /// caller chooses (`capture snap --output`); an existing regular file at `url` is replaced,
    /// anything else there (a FIFO, a device node, a symbolic link, a folder) never is.
    ///
    /// Errors as for the album, plus `.invalidArgument` when the folder does not exist or `url`
    /// is not a regular file.
    public static func write(jpeg: Data, metadata: PhotoMetadata? = nil, to url: URL) throws(CaptureError) {
        let bytes = try prepare(jpeg, metadata: metadata, date: metadata?.date ?? Date())
        let path = url.path
        let folder = url.deletingLastPathComponent().path
        var st = stat()
        if case .failure(let e) = Syscall.run("stat", mock: nil, failure: -1, { stat(folder, &st) }) {
            throw storageError(e.rawValue, operation: "stat", path: folder)
        }
        guard st.st_mode & S_IFMT == S_IFDIR else { throw storageError(ENOTDIR, operation: "stat", path: folder) }
        // Checked before writing (and again when placing): a FIFO's or a device's open would
        // block or write into it.
        if case .success(let kind?) = FileSystem.kind(at: path), kind != .regular { throw notAFile(path, kind) }
        let temp = try writeTemporary(bytes, in: folder)
        switch FileSystem.place(temp, at: path) {
        case .success:
            syncDirectory(folder)
        case .failure(let failure):
            removeFile(temp)
            switch failure {
            case .notARegularFile(let kind): throw notAFile(path, kind)
            case .failed(let e): throw storageError(e.errno.rawValue, operation: e.operation, path: folder)
            }
        }
    }

    /// The error for a destination that is not a regular file, which is never replaced.
    package static func notAFile(_ path: String, _ kind: FileKind) -> CaptureError {
        if kind == .directory {
            return CaptureError(
                .invalidArgument, "\(path) is a folder; name a file in it, or end the path with / to save numbered photos there")
        }
        let what =
            switch kind {
            case .symbolicLink: "a symbolic link"
            case .fifo: "a FIFO (named pipe)"
            case .characterDevice: "a character device"
            case .blockDevice: "a block device"
            case .socket: "a socket"
            default: "not a regular file"
            }
        return CaptureError(
            .invalidArgument, "\(path) is \(what), which is never replaced; nothing was written: name a regular file or a new one")
    }

    // MARK: Folder

    static func currentEnvironment() -> [String: String] {
        var env: [String: String] = [:]
        for key in ["XDG_PICTURES_DIR", "XDG_CONFIG_HOME", "HOME"] {
            if let v = getenv(key) { env[key] = String(cString: v) }
        }
        return env
    }

    /// The pictures folder for an environment (see the type's documentation).
    static func picturesDirectory(environment env: [String: String]) -> URL {
        var home = env["HOME"] ?? ""
        if home.isEmpty { home = SystemIdentity.homeDirectory() ?? "/" }
        func expand(_ path: String) -> String? {
            if path == "$HOME" { return home }
            if path.hasPrefix("$HOME/") { return home + path.dropFirst(5) }
            return path.hasPrefix("/") ? path : nil
        }
        if let v = env["XDG_PICTURES_DIR"], let p = expand(v) { return URL(fileURLWithPath: p, isDirectory: true) }
        var config = env["XDG_CONFIG_HOME"] ?? ""
        if !config.hasPrefix("/") { config = home + "/.config" }
        if let text = try? String(contentsOfFile: config + "/user-dirs.dirs", encoding: .utf8),
            let v = userDirsValue(text, key: "XDG_PICTURES_DIR"), let p = expand(v)
        {
            return URL(fileURLWithPath: p, isDirectory: true)
        }
        return URL(fileURLWithPath: home, isDirectory: true).appendingPathComponent("Pictures", isDirectory: true)
    }

    /// The value of `KEY="value"` in a user-dirs.dirs file (the last one wins, as in a shell);
    /// `#` lines are comments.
    static func userDirsValue(_ text: String, key: String) -> String? {
        var found: String?
        for raw in text.split(whereSeparator: \.isNewline) {
            let line = raw.trimmingCharacters(in: .whitespaces)
            guard !line.hasPrefix("#"), line.hasPrefix(key + "=") else { continue }
            var value = Substring(line.dropFirst(key.count + 1))
            if value.hasPrefix("\""), value.hasSuffix("\""), value.count >= 2 { value = value.dropFirst().dropLast() }
            var unescaped = ""
            var escaping = false
            for ch in value {
                if escaping { unescaped.append(ch); escaping = false } else if ch == "\\" { escaping = true } else { unescaped.append(ch) }
            }
            found = unescaped
        }
        return found
    }

    // MARK: Writing

    /// The whole save, on the calling thread.
    func write(jpeg: Data, metadata: PhotoMetadata?) throws(CaptureError) -> URL {
        let date = metadata?.date ?? clock()
        let bytes = try Self.prepare(jpeg, metadata: metadata, date: date)
        let folder = directory
        try Self.makeDirectory(folder.path)
        Self.removeStalePartials(in: folder.path)
        let temp = try Self.writeTemporary(bytes, in: folder.path)
        do throws(CaptureError) {
            let final = try Self.publish(temp, in: folder.path, stem: Self.fileStem(date))
            Self.syncDirectory(folder.path)
            return URL(fileURLWithPath: final)
        } catch {
            Self.removeFile(temp)
            throw error
        }
    }

    /// Checks that `jpeg` is a whole JPEG and adds EXIF (when it has none) and Huffman tables
    /// (when missing).
    static func prepare(_ jpeg: Data, metadata: PhotoMetadata?, date: Date) throws(CaptureError) -> [UInt8] {
        let result = jpeg.withUnsafeBytes { raw -> Result<[UInt8], CaptureError> in
            do throws(CaptureError) {
                let markers = try JPEGMarkers(parsing: raw)
                var out: [UInt8] = []
                let exif: EXIFInfo? =
                    markers.exifSegment != nil
                    ? nil
                    : EXIFInfo(orientation: metadata?.orientation ?? .up, make: metadata?.make, model: metadata?.model, date: date)
                try MJPEG.makeStill(raw, exif: exif, into: &out)
                return .success(out)
            } catch {
                return .failure(
                    CaptureError(.invalidArgument, "the data to save is not a complete JPEG (\(error.message)); nothing was written"))
            }
        }
        return try result.get()
    }

    /// `IMG_yyyyMMdd_HHmmss_SSS`, local time.
    static func fileStem(_ date: Date) -> String {
        // Whole milliseconds first, so that binary fractions (.123 is .12299...) name right.
        let totalMs = Int64((date.timeIntervalSince1970 * 1000).rounded())
        let (secs, ms) = (totalMs / 1000 - (totalMs % 1000 < 0 ? 1 : 0), Int((totalMs % 1000 + 1000) % 1000))
        var t = time_t(secs)
        var parts = tm()
        localtime_r(&t, &parts)
        func pad(_ v: Int, _ n: Int) -> String {
            let s = String(v)
            return String(repeating: "0", count: max(0, n - s.count)) + s
        }
        return "IMG_" + pad(Int(parts.tm_year) + 1900, 4) + pad(Int(parts.tm_mon) + 1, 2) + pad(Int(parts.tm_mday), 2)
            + "_" + pad(Int(parts.tm_hour), 2) + pad(Int(parts.tm_min), 2) + pad(Int(parts.tm_sec), 2) + "_" + pad(ms, 3)
    }

    /// `mkdir -p` with mode 0755.
    static func makeDirectory(_ path: String) throws(CaptureError) {
        var st = stat()
        if case .success = Syscall.run("stat", mock: nil, failure: -1, { stat(path, &st) }) {
            guard st.st_mode & S_IFMT == S_IFDIR else {
                throw CaptureError(.invalidArgument, "\(path) exists and is not a folder; cannot save photos there")
            }
            return
        }
        let parent = (path as NSString).deletingLastPathComponent
        if !parent.isEmpty, parent != path { try makeDirectory(parent) }
        if case .failure(let e) = Syscall.run("mkdir", mock: nil, failure: -1, { mkdir(path, 0o755) }), e.rawValue != EEXIST {
            throw storageError(e.rawValue, operation: "mkdir", path: path)
        }
    }

    /// Writes `bytes` to a new hidden file in `folder` and flushes it. Returns its path.
    static func writeTemporary(_ bytes: [UInt8], in folder: String) throws(CaptureError) -> String {
        var opened: Result<Int32, Errno> = .failure(Errno(rawValue: EEXIST))
        var path = ""
        for _ in 0..<100 {
            path = folder + "/.IMG-\(getpid())-\(UInt64.random(in: 0...UInt64.max)).jpg.partial"
            opened = Syscall.run("open", mock: nil, failure: -1) { open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644) }
            if opened != .failure(Errno(rawValue: EEXIST)) { break }
        }
        let fd: Int32
        switch opened {
        case .success(let d): fd = d
        case .failure(let failed):
            let e = failed.rawValue
            // The folder is there but refuses new files with ENOENT: a virtual file system.
            if e == ENOENT, case .success(.directory?) = FileSystem.kind(at: folder) {
                throw CaptureError(
                    .invalidArgument,
                    "\(folder) does not take new files (a virtual file system such as /proc or /sys); write to another folder",
                    errno: e, operation: "open")
            }
            throw storageError(e, operation: "open", path: folder)
        }
        var failure: CaptureError?
        bytes.withUnsafeBytes { raw in
            var done = 0
            while done < raw.count {
                switch Syscall.run("write", mock: nil, failure: -1, { Glibc.write(fd, raw.baseAddress! + done, raw.count - done) }) {
                case .failure(let e):
                    failure = storageError(e.rawValue, operation: "write", path: folder, size: raw.count)
                    return
                case .success(0):
                    failure = storageError(ENOSPC, operation: "write", path: folder, size: raw.count)
                    return
                case .success(let n):
                    done += n
                }
            }
        }
        if failure == nil, case .failure(let e) = Syscall.run("fsync", mock: nil, failure: -1, { fsync(fd) }) {
            failure = storageError(e.rawValue, operation: "fsync", path: folder, size: bytes.count)
        }
        // close can report a deferred write error (NFS, quotas).
        if case .failure(let e) = Syscall.run("close", mock: nil, failure: -1, retryOnInterrupt: false, { close(fd) }),
            failure == nil, e != .interrupted
        {
            failure = storageError(e.rawValue, operation: "close", path: folder, size: bytes.count)
        }
        if let failure {
            removeFile(path)
            throw failure
        }
        return path
    }

    /// Removes temporary files that a save in a process that no longer runs left behind (it
    /// crashed or was killed mid-write), once they are ten minutes old. Files of running
    /// processes are left alone.
    static func removeStalePartials(in folder: String) {
        // (A folder that cannot be listed to its end is not cleaned up this time.)
        guard case .success(let names) = FileSystem.names(in: folder) else { return }
        for name in names {
            guard name.hasPrefix(".IMG-"), name.hasSuffix(".jpg.partial") else { continue }
            let parts = name.dropFirst(5).split(separator: "-")
            guard parts.count == 2, let pid = pid_t(parts[0]), pid > 0 else { continue }
            // Also older than ten minutes: a writer in another PID namespace looks dead from here.
            let path = folder + "/" + name
            guard case .success(let status) = FileSystem.status(at: path), time(nil) - status.modificationTime > 600
            else { continue }
            if case .failure(Errno(rawValue: ESRCH)) = Syscall.run("kill", mock: nil, failure: -1, { kill(pid, 0) }) { removeFile(path) }
        }
    }

    private typealias Renameat2 = @convention(c) (Int32, UnsafePointer<CChar>?, Int32, UnsafePointer<CChar>?, UInt32) -> Int32
    /// glibc's `renameat2` (2.28+); looked up at run time because Swift's Glibc module does not
    /// export it.
    private static let renameat2: Renameat2? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "renameat2") else { return nil }
        return unsafeBitCast(symbol, to: Renameat2.self)
    }()
    private static let renameNoReplace: UInt32 = 1  // RENAME_NOREPLACE

    /// Gives `temp` its final name `stem.jpg` (or `stem_N.jpg`) without replacing any file.
    static func publish(_ temp: String, in folder: String, stem: String) throws(CaptureError) -> String {
        for n in 1...10_000 {
            let final = folder + "/" + stem + (n == 1 ? "" : "_\(n)") + ".jpg"
            if let rename2 = renameat2 {
                let renamed = Syscall.run("renameat2", mock: nil, failure: -1) {
                    rename2(AT_FDCWD, temp, AT_FDCWD, final, renameNoReplace)
                }
                guard case .failure(let failed) = renamed else { return final }
                let e = failed.rawValue
                if e == EEXIST { continue }
                // EINVAL / ENOSYS: the file system or kernel cannot refuse to replace; use link.
                if e != EINVAL && e != ENOSYS { throw storageError(e, operation: "renameat2", path: folder) }
            }
            // link fails with EEXIST rather than replacing, atomically.
            guard case .failure(let failed) = Syscall.run("link", mock: nil, failure: -1, { link(temp, final) }) else {
                removeFile(temp)
                return final
            }
            let e = failed.rawValue
            if e == EEXIST { continue }
            throw storageError(e, operation: "link", path: folder)
        }
        throw CaptureError(.ioError, "10000 photos named \(stem) already exist in \(folder); nothing was written")
    }

    static func syncDirectory(_ folder: String) {
        guard case .success(let fd) = Syscall.run("open", mock: nil, failure: -1, { open(folder, O_RDONLY | O_DIRECTORY | O_CLOEXEC) })
        else { return }
        // The rename is what must reach the disk; a folder fsync error leaves the photo in
        // place, so it is not reported as a failed save.
        _ = Syscall.run("fsync", mock: nil, failure: -1, { fsync(fd) })
        _ = Syscall.run("close", mock: nil, failure: -1, retryOnInterrupt: false, { close(fd) })
    }

    /// Removes a file this save made (a temporary one); a failure leaves it for
    /// `removeStalePartials`.
    static func removeFile(_ path: String) {
        _ = Syscall.run("unlink", mock: nil, failure: -1, { unlink(path) })
    }

    /// A failed step of saving a photo into `folder`, in the words every file error has.
    static func storageError(_ code: Int32, operation: String, path folder: String, size: Int? = nil) -> CaptureError {
        CaptureError.file(
            errno: code, path: folder, operation: operation, inFolder: true,
            subject: size.map { "the photo (\($0) bytes)" } ?? "the photo")
    }
}
