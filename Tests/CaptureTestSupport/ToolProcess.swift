// Running programs from tests: this package's tools (built beside the test bundle) and the
// system's readers and peers (curl, ffprobe, ffmpeg). Output is collected as it comes, so a
// child that writes a lot never stalls on a full pipe.
import Foundation

/// A failure of a test's own set-up (a missing tool, a file that cannot be made).
public struct TestFailure: Error, CustomStringConvertible, Sendable {
    public var description: String
    public init(_ d: String) { description = d }
}

/// A program's exit status and output.
public struct ProcessResult: Sendable {
    /// The exit status; 128 + the signal when a signal ended it; -1 while it runs.
    public var status: Int32
    public var stdout: Data
    public var stderr: String
    /// Standard output as text.
    public var text: String { String(decoding: stdout, as: UTF8.self) }
}

/// An executable of this package (`capture`, `capture-bench`), built beside the test bundle.
public func builtTool(_ name: String = "capture") throws -> URL {
    let dir = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
    for candidate in [dir.appendingPathComponent(name), dir.deletingLastPathComponent().appendingPathComponent(name)]
    where FileManager.default.isExecutableFile(atPath: candidate.path) {
        return candidate
    }
    throw TestFailure("no \(name) beside \(CommandLine.arguments[0]): build with 'swift build --build-tests'")
}

/// A started program whose output is collected as it comes. Thread-safe.
public final class RunningProcess: @unchecked Sendable {
    public let process = Process()
    /// The fresh, empty HOME it runs with (removed with this object), when one was asked for.
    public let home: URL?
    private let sink = Sink()

    /// What the two pipes brought so far; each pipe has one reader thread, so the bytes stay in order.
    private final class Sink: @unchecked Sendable {
        let lock = NSLock()
        var out = Data(), err = Data()
        let readers = DispatchGroup()

        func read(_ handle: FileHandle, toErr: Bool) {
            readers.enter()
            let t = Thread { [self] in
                while true {
                    let d = handle.availableData
                    if d.isEmpty { break }
                    lock.withLock { if toErr { err.append(d) } else { out.append(d) } }
                }
                readers.leave()
            }
            t.start()
        }
    }

    /// Starts `executable` with `arguments` in `environment` (default: this process's); with
    /// `freshHome`, HOME is a new empty folder (the album lands there).
    public init(_ executable: URL, _ arguments: [String], environment: [String: String]? = nil, freshHome: Bool = false) throws {
        guard FileManager.default.isExecutableFile(atPath: executable.path) else {
            throw TestFailure("\(executable.path) is missing: scripts/test installs it (apt-get)")
        }
        var env = environment ?? ProcessInfo.processInfo.environment
        if freshHome {
            let dir = FileManager.default.temporaryDirectory.appendingPathComponent("tool-home-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
            env["HOME"] = dir.path
            home = dir
        } else {
            home = nil
        }
        process.executableURL = executable
        process.arguments = arguments
        process.environment = env
        let o = Pipe(), e = Pipe()
        process.standardOutput = o
        process.standardError = e
        // A child inherits the mask of the thread that spawns it, and worker threads (Dispatch's,
        // the test runner's) block signals: unblocked for the spawn, so that SIGTERM, SIGINT and
        // SIGHUP reach the program.
        var deliverable = sigset_t()
        sigemptyset(&deliverable)
        for sig in [SIGTERM, SIGINT, SIGHUP] { sigaddset(&deliverable, sig) }
        var previous = sigset_t()
        pthread_sigmask(SIG_UNBLOCK, &deliverable, &previous)
        defer { pthread_sigmask(SIG_SETMASK, &previous, nil) }
        try process.run()
        sink.read(o.fileHandleForReading, toErr: false)
        sink.read(e.fileHandleForReading, toErr: true)
    }

    /// Starts this package's `tool` (see `builtTool`).
    public convenience init(
        tool: String = "capture", _ arguments: [String], environment: [String: String]? = nil,
        freshHome: Bool = false
    ) throws {
        try self.init(try builtTool(tool), arguments, environment: environment, freshHome: freshHome)
    }

    deinit {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitForExit()
        }
        if let home { try? FileManager.default.removeItem(at: home) }
    }

    /// Standard output so far.
    public var stdout: String { sink.lock.withLock { String(decoding: sink.out, as: UTF8.self) } }
    /// Standard error so far.
    public var stderr: String { sink.lock.withLock { String(decoding: sink.err, as: UTF8.self) } }
    /// Status (-1 while it runs) and output so far.
    public var output: ProcessResult {
        let status = process.isRunning ? -1 : Self.status(of: process)
        return sink.lock.withLock { ProcessResult(status: status, stdout: sink.out, stderr: String(decoding: sink.err, as: UTF8.self)) }
    }

    /// Waits up to `timeout` s until the program catches, ignores or blocks `sig` (its
    /// `/proc/PID/status` says so), so that sending it tests the program's handling, not the
    /// default action on a program still starting (a loaded machine starts it late). False: it
    /// did not, or it ended.
    public func waitUntilHandles(_ sig: Int32, timeout: Double = 60) -> Bool {
        let deadline = Date(timeIntervalSinceNow: timeout)
        let bit = UInt64(1) << UInt64(sig - 1)
        while Date() < deadline, process.isRunning {
            let status = (try? String(contentsOfFile: "/proc/\(process.processIdentifier)/status", encoding: .utf8)) ?? ""
            for line in status.split(separator: "\n")
            where line.hasPrefix("SigCgt:") || line.hasPrefix("SigIgn:") || line.hasPrefix("SigBlk:") {
                if let mask = UInt64(line.split(separator: "\t").last ?? "", radix: 16), mask & bit != 0 { return true }
            }
            Thread.sleep(forTimeInterval: 0.02)
        }
        return false
    }

    /// Waits up to `timeout` s until standard output satisfies `condition` (false: it did not,
    /// or the program ended without it).
    public func waitFor(timeout: Double = 20, _ condition: (String) -> Bool) -> Bool {
        let deadline = Date(timeIntervalSinceNow: timeout)
        while Date() < deadline {
            if condition(stdout) { return true }
            if !process.isRunning {
                drained()
                return condition(stdout)
            }
            usleep(50_000)
        }
        return false
    }

    /// Sends `sig`.
    public func signal(_ sig: Int32) { kill(process.processIdentifier, sig) }

    /// Waits up to `timeout` s for the exit and gives its status (128 + the signal when one
    /// ended it); nil when it hung, after killing it.
    public func exitStatus(timeout: Double = 30) -> Int32? {
        let deadline = Date(timeIntervalSinceNow: timeout)
        while process.isRunning, Date() < deadline { usleep(20_000) }
        let hung = process.isRunning
        if hung { kill(process.processIdentifier, SIGKILL) }
        process.waitForExit()
        drained()
        return hung ? nil : Self.status(of: process)
    }

    /// SIGTERM, then `exitStatus(timeout:)`.
    public func terminate(timeout: Double = 20) -> Int32? {
        if process.isRunning { signal(SIGTERM) }
        return exitStatus(timeout: timeout)
    }

    /// Once it ended: waits for the readers to reach the end of both pipes (bounded, in case a
    /// child of the program still holds them).
    private func drained() { _ = sink.readers.wait(timeout: .now() + 5) }

    private static func status(of p: Process) -> Int32 {
        p.terminationReason == .exit ? p.terminationStatus : 128 + p.terminationStatus
    }
}

extension Process {
    /// Blocks until the process has ended. Foundation's `waitUntilExit` gives the thread that
    /// calls it a run loop (an epoll, an eventfd and a timerfd) for as long as the thread lives,
    /// so the process's descriptors would rise and fall with which of Dispatch's threads waited,
    /// and a leak count would see 3 come or go; yet it must be called, or the process and its
    /// pipes are never freed. So this polls until the end, then one thread of its own calls it.
    public func waitForExit() {
        while isRunning { usleep(5_000) }
        ExitWaiter.shared.finish(self)
    }
}

/// The one thread that calls `waitUntilExit` (on processes that have ended: it returns at once).
private final class ExitWaiter: @unchecked Sendable {
    static let shared = ExitWaiter()
    private let lock = NSLock()
    private var queue: [(Process, DispatchSemaphore)] = []  // guarded by `lock`
    private let ready = DispatchSemaphore(value: 0)

    private init() {
        let thread = Thread { [unowned self] in
            while true {
                ready.wait()
                let (process, done) = lock.withLock { queue.removeFirst() }
                process.waitUntilExit()
                done.signal()
            }
        }
        thread.name = "test process waiter"
        thread.start()
    }

    func finish(_ process: Process) {
        let done = DispatchSemaphore(value: 0)
        lock.withLock { queue.append((process, done)) }
        ready.signal()
        done.wait()
    }
}

/// Runs `executable` to its end; kills it after `timeout` s (a guard against hangs, not a speed
/// bound): then its status says the signal.
public func runProcess(
    _ executable: String, _ arguments: [String], environment: [String: String]? = nil,
    timeout: Double = 60
) throws -> ProcessResult {
    let p = try RunningProcess(URL(fileURLWithPath: executable), arguments, environment: environment)
    _ = p.exitStatus(timeout: timeout)
    return p.output
}

extension RunningProcess {
    /// The URL `capture serve` prints ("... at http://HOST:PORT/ ...", or https), with its
    /// slash, once it does; nil when it ends first or `timeout` s pass.
    public func servedURL(timeout: Double = 60) -> String? {
        var url: String?
        _ = waitFor(timeout: timeout) { text in
            for scheme in ["http://", "https://"] {
                guard let r = text.range(of: " at " + scheme), let end = text[r.upperBound...].firstIndex(of: "/") else { continue }
                url = scheme + text[r.upperBound..<end] + "/"
                return true
            }
            return false
        }
        return url
    }
}
