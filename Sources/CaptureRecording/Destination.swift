import CaptureSystem
import Foundation

/// The file a recording writes, as FFmpeg's I/O sees it: opened on a thread of its own (a FIFO's
/// open waits for a reader, a network path's may hang) and written without blocking for good,
/// so that a destination that never takes the bytes cannot hold the recording queue past a
/// stop: once `giveUp(after:)` has been called, a write still waiting then fails.
///
/// Thread-safe: `giveUp` and `close` come from any thread, writes from the recording queue.
final class Destination: @unchecked Sendable {
    let path: String
    /// Whether the path named a FIFO before the open (its open waits for a reader).
    let isFIFO: Bool
    /// Whether the path named a regular file or nothing: opened for reading too (the
    /// durations written at a clean stop are found by reading the file's head).
    private let readable: Bool
    /// Whether nothing was at the path before the open (so a regular file there is ours).
    private let wasAbsent: Bool
    private let cond = NSCondition()
    // Under `cond`.
    private var fd: Int32 = -1
    private var openErrno: Int32 = 0
    private var openDone = false
    private var closed = false
    private var deadline: DispatchTime?
    /// How long a write may wait without progress once `giveUp` was called.
    private var grace = 0.5
    /// Why the destination stopped taking bytes, once it did (set with `deadline` passed).
    private var failureMessage: String?
    /// Whether the open descriptor is a regular file (seekable), known once opened.
    private var regular = false
    private var written: Int64 = 0
    /// Calls using `fd` outside the lock now; `close` leaves the descriptor to the last of them,
    /// so its number cannot be reused by another open while one still writes to it.
    private var users = 0
    /// The descriptor `close` left to the last user, or -1.
    private var closeAfterUse: Int32 = -1

    /// Bytes the destination took through `write(_:)`.
    var bytesWritten: Int64 { cond.withLock { written } }

    /// Starts opening `path` for writing (created, or truncated when it is a regular file).
    init(path: String) {
        self.path = path
        if case .success = FileSystem.status(at: path, followingLinks: false) { wasAbsent = false } else { wasAbsent = true }
        // (What a symbolic link points at.)
        let found = try? FileSystem.status(at: path).get().kind
        isFIFO = found == .fifo
        readable = found == nil || found == .regular
        NamedThread.start("cap rec-open") { [self] in openInBackground() }
    }

    private func openInBackground() {
        var opened = Syscall.run("open", mock: nil, failure: -1) {
            Glibc.open(path, (readable ? O_RDWR : O_WRONLY) | O_CREAT | O_TRUNC | O_CLOEXEC, 0o666)
        }
        // (A file the user may write but not read is still written; its durations stay 0.)
        if readable, opened == .failure(.permissionDenied) {
            opened = Syscall.run("open", mock: nil, failure: -1) { Glibc.open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o666) }
        }
        let d: Int32, e: Int32
        switch opened {
        case .success(let got): (d, e) = (got, 0)
        case .failure(let failed): (d, e) = (-1, failed.rawValue)
        }
        let isRegular = d >= 0 && (try? FileSystem.status(ofDescriptor: d).get().kind) == .regular
        // Never blocks for good from here: a pipe that stops taking bytes is waited on in `poll`.
        if d >= 0, !isRegular, case .success(let flags) = Syscall.run("fcntl", mock: nil, failure: -1, { fcntl(d, F_GETFL) }) {
            _ = Syscall.run("fcntl", mock: nil, failure: -1, { fcntl(d, F_SETFL, flags | O_NONBLOCK) })
        }
        cond.lock()
        if closed {
            cond.unlock()
            if d >= 0 { Self.closeDescriptor(d) }
            return
        }
        fd = d
        openErrno = e
        regular = isRegular
        openDone = true
        cond.broadcast()
        cond.unlock()
    }

    /// Waits up to `seconds` for the open; its errno (0: open), or nil while it still waits.
    func waitForOpen(seconds: Double) -> Int32? {
        cond.lock()
        defer { cond.unlock() }
        let end = Date().addingTimeInterval(seconds)
        while !openDone, !closed, cond.wait(until: end) {}
        return openDone ? openErrno : nil
    }

    /// Whether the destination is a regular file (seekable); false until it is open.
    var isRegularFile: Bool { cond.withLock { regular } }

    /// Whether a regular file is at the path where nothing was before the open (this
    /// recording's, even while its open is still under way).
    var createdRegularFile: Bool {
        wasAbsent && (try? FileSystem.status(at: path, followingLinks: false).get().kind) == .regular
    }

    /// Why writing stopped (a reader that never came or stopped reading), once it did.
    var failure: RecordingError? {
        cond.withLock { failureMessage.map { RecordingError(.cannotWriteFile, $0) } }
    }

    /// From `delay` on, a write (or the open) that has waited `grace` without the destination
    /// taking a byte fails: a reader still reading keeps the recording going to its end.
    func giveUp(after delay: Double, grace: Double) {
        cond.lock()
        let d = DispatchTime.now() + delay
        self.grace = grace
        if deadline.map({ d < $0 }) ?? true { deadline = d }
        cond.broadcast()
        cond.unlock()
    }

    private func pastDeadline() -> Bool { deadline.map { DispatchTime.now() >= $0 } ?? false }

    // The calls on the open descriptor below (write, lseek, fstat, pwrite, pread) run between
    // `beginUse` and `endUse`: a `close` from another thread meanwhile leaves the descriptor open
    // until the last of them ends.

    /// The open descriptor (with `regularOnly`, only a regular file's) for a call made outside
    /// the lock, or -1; a descriptor returned must be given back with `endUse`. Under `cond`.
    private func beginUse(regularOnly: Bool = false) -> Int32 {
        guard !closed, fd >= 0, !regularOnly || regular else { return -1 }
        users += 1
        return fd
    }

    /// Ends a `beginUse`; the last user after a `close` closes the descriptor.
    private func endUse() {
        cond.lock()
        users -= 1
        let d = users == 0 ? closeAfterUse : -1
        if d >= 0 { closeAfterUse = -1 }
        cond.unlock()
        if d >= 0 { Self.closeDescriptor(d) }
    }

    /// Writes all of `bytes`: 0, or a negative errno (`-ETIMEDOUT` when it gave up).
    func write(_ bytes: UnsafeRawBufferPointer) -> Int32 {
        cond.lock()
        // The open first (a FIFO's reader may come later).
        while !openDone, !closed {
            if pastDeadline() {
                failureMessage =
                    failureMessage ?? "nothing opened \(path) for reading before the stop: start the reader of the pipe first"
                cond.unlock()
                return -ETIMEDOUT
            }
            _ = cond.wait(until: Date().addingTimeInterval(0.05))
        }
        let e = openErrno, isClosed = closed
        let d = beginUse()
        cond.unlock()
        if isClosed { return -EBADF }
        if d < 0 { return -e }
        defer { endUse() }
        var done = 0
        while done < bytes.count {
            let wrote = ProcessSignals.withBrokenPipeBlocked {
                Syscall.runOnSharedDescriptor("write", failure: -1) { Glibc.write(d, bytes.baseAddress! + done, bytes.count - done) }
            }
            let err: Int32
            switch wrote {
            case .failure(let e): err = e.rawValue
            case .success(let n):
                done += n
                if n > 0 {
                    cond.withLock {
                        written += Int64(n)
                        if let d = deadline { deadline = max(d, DispatchTime.now() + grace) }
                    }
                }
                continue
            }
            guard err == EAGAIN || err == EWOULDBLOCK else { return -err }
            // The reader is behind: wait for room, until a stop's deadline passes (or a close).
            if cond.withLock({ closed }) { return -EBADF }
            if cond.withLock({ pastDeadline() }) {
                cond.withLock {
                    failureMessage =
                        failureMessage
                        ?? "the reader of \(path) stopped reading: the recording was given up at the stop; the file is incomplete"
                }
                return -ETIMEDOUT
            }
            var p = [pollfd(fd: d, events: Int16(POLLOUT), revents: 0)]
            _ = Syscall.poll(&p, timeoutMilliseconds: 50)
        }
        return 0
    }

    /// Repositions a regular file (FFmpeg's seek): the new offset, or a negative errno.
    func seek(_ offset: Int64, whence: Int32) -> Int64 {
        let d = cond.withLock { beginUse(regularOnly: true) }
        guard d >= 0 else { return -Int64(ESPIPE) }
        defer { endUse() }
        if whence == 0x10000 {  // AVSEEK_SIZE
            switch FileSystem.status(ofDescriptor: d) {
            case .success(let status): return status.size
            case .failure(let e): return -Int64(e.errno.rawValue)
            }
        }
        switch Syscall.runOnSharedDescriptor("lseek", failure: -1, { lseek(d, off_t(offset), whence & ~0x20000) }) {  // (AVSEEK_FORCE)
        case .success(let r): return Int64(r)
        case .failure(let e): return -Int64(e.rawValue)
        }
    }

    /// Writes `bytes` at `offset` of a regular file, past FFmpeg (the durations at a clean stop).
    func write(_ bytes: [UInt8], at offset: Int64) -> Bool {
        let d = cond.withLock { beginUse(regularOnly: true) }
        guard d >= 0 else { return false }
        defer { endUse() }
        return bytes.withUnsafeBytes { b in
            Syscall.runOnSharedDescriptor("pwrite", failure: -1) { pwrite(d, b.baseAddress, b.count, off_t(offset)) } == .success(b.count)
        }
    }

    /// Reads `count` bytes at `offset` of a regular file (nil when it cannot).
    func read(count: Int, at offset: Int64) -> [UInt8]? {
        guard count >= 0 else { return nil }
        let d = cond.withLock { beginUse(regularOnly: true) }
        guard d >= 0 else { return nil }
        defer { endUse() }
        var out = [UInt8](repeating: 0, count: count)
        let n = out.withUnsafeMutableBytes { b in
            Syscall.runOnSharedDescriptor("pread", failure: -1) { pread(d, b.baseAddress, count, off_t(offset)) }
        }
        return n == .success(count) ? out : nil
    }

    /// Closes the destination; an open still waiting is let go (a FIFO's is released by opening
    /// it for reading here, so that its thread ends).
    func close() {
        cond.lock()
        let wasClosed = closed
        closed = true
        var d = fd
        fd = -1
        if users > 0, d >= 0 {
            // Closed by the last call still using it.
            closeAfterUse = d
            d = -1
        }
        let pending = !openDone
        cond.broadcast()
        cond.unlock()
        guard !wasClosed else { return }
        if d >= 0 { Self.closeDescriptor(d) }
        if pending, isFIFO,
            case .success(let r) = Syscall.run("open", mock: nil, failure: -1, { Glibc.open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC) })
        {
            Self.closeDescriptor(r)
        }
    }

    private static func closeDescriptor(_ d: Int32) {
        _ = Syscall.run("close", mock: nil, failure: -1, retryOnInterrupt: false, { Glibc.close(d) })
    }

    deinit { close() }
}
