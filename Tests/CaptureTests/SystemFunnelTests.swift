// Host tests of CaptureSystem's helpers around the funnel: paths, folders, signals, names.
import CaptureSystem
import Foundation
import Glibc
import Testing

@Suite struct SystemFunnelTests {
    /// A fresh folder under the temporary directory, removed by the caller.
    private func makeFolder() throws -> String {
        let path = NSTemporaryDirectory() + "funnel-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
        return path
    }

    private func failure<T>(_ result: Result<T, SystemCallError>) -> SystemCallError? {
        if case .failure(let e) = result { e } else { nil }
    }

    @Test func folderNamesAreListedWithoutDotEntries() throws {
        let folder = try makeFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        #expect(try FileSystem.names(in: folder).get() == [])
        for name in ["a.jpg", ".hidden", "b"] { #expect(FileManager.default.createFile(atPath: folder + "/" + name, contents: nil)) }
        #expect(try FileSystem.names(in: folder).get().sorted() == [".hidden", "a.jpg", "b"])
        let missing = FileSystem.names(in: folder + "/none")
        #expect(failure(missing) == SystemCallError(operation: "opendir", errno: .noSuchFileOrDirectory))
    }

    @Test func statusFollowsSymbolicLinksOnlyWhenAsked() throws {
        let folder = try makeFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let file = folder + "/file", link = folder + "/link"
        #expect(FileManager.default.createFile(atPath: file, contents: Data(count: 1234)))
        #expect(symlink(file, link) == 0)
        let target = try FileSystem.status(at: link).get()
        #expect(target.kind == .regular && target.size == 1234)
        #expect(abs(target.modificationTime - Int(time(nil))) < 60)
        #expect(try FileSystem.status(at: link, followingLinks: false).get().kind == .symbolicLink)
        #expect(try FileSystem.status(at: folder).get().kind == .directory)
        #expect(try FileSystem.kind(at: folder + "/none").get() == nil)
        #expect(failure(FileSystem.status(at: folder + "/none")) == SystemCallError(operation: "stat", errno: .noSuchFileOrDirectory))
    }

    @Test func aClosedDescriptorIsAnOutcomeOnTheSharedPath() throws {
        let fd = open("/dev/null", O_WRONLY | O_CLOEXEC)
        try #require(fd >= 0)
        defer { close(fd) }
        #expect(try FileSystem.status(ofDescriptor: fd).get().kind == .characterDevice)
        // A number never open (closing one here could hit a descriptor a parallel test opens
        // meanwhile): where `Syscall.run` traps, the shared path reports it.
        let notOpen = Int32.max
        #expect(failure(FileSystem.status(ofDescriptor: notOpen)) == SystemCallError(operation: "fstat", errno: .badFileDescriptor))
        var byte: UInt8 = 0
        #expect(Syscall.runOnSharedDescriptor("write", failure: -1, { write(notOpen, &byte, 1) }) == .failure(.badFileDescriptor))
    }

    @Test func aReaderGoingAwayIsBrokenPipeNotASignal() throws {
        var ends: [Int32] = [0, 0]
        try #require(pipe(&ends) == 0)
        close(ends[0])
        defer { close(ends[1]) }
        var byte: UInt8 = 1
        let wrote = ProcessSignals.withBrokenPipeBlocked {
            Syscall.runOnSharedDescriptor("write", failure: -1) { write(ends[1], &byte, 1) }
        }
        #expect(wrote == .failure(.brokenPipe))
        // The SIGPIPE it raised was taken back, not left pending for this thread.
        var pending = sigset_t()
        sigpending(&pending)
        #expect(sigismember(&pending, SIGPIPE) == 0)
    }

    /// A signal that comes after `holdForDispatch` and before Dispatch has registered its source
    /// neither ends the process (its default action) nor is lost: the source made afterwards
    /// sees it. (SIGUSR2, which nothing else here uses: it ends up blocked on this process's
    /// threads, as Dispatch wants its signals.)
    @Test func aSignalBeforeItsDispatchSourceIsKeptForIt() async throws {
        try ProcessSignals.holdForDispatch([SIGUSR2]).get()
        // To the process, as a stop signal comes (Dispatch's threads, this one among them, block
        // signals: a thread-directed one would wait on the thread): a thread that takes it
        // blocks it and sends it again, until it is pending for the process.
        #expect(kill(getpid(), SIGUSR2) == 0)
        let fired = DispatchSemaphore(value: 0)
        let source = DispatchSource.makeSignalSource(signal: SIGUSR2, queue: .global())
        source.setEventHandler { fired.signal() }
        source.resume()
        defer { source.cancel() }
        let seen = await Task.detached { fired.wait(timeout: .now() + 10) == .success }.value
        #expect(seen, "the signal sent before the source was made never reached it")
    }

    /// A server's host names: IP literals, localhost names, the listened-on name and the
    /// allowed ones pass, with or without a port (a `Host` header) or brackets (a parsed URL's
    /// IPv6 address has none); any other name, or a header with a port that is not a number, fails.
    @Test func hostNamesAreTheServersOwn() {
        let names = HostNames(listenAddress: "cam.lan", allowed: ["Camera.Example."])
        for header in ["127.0.0.1", "127.0.0.1:8080", "[::1]", "[::1]:80", "localhost", "a.localhost:1", "cam.lan", "camera.example:8554"] {
            #expect(names.allowsHostHeader(header), "\(header)")
        }
        #expect(names.allowsHostHeader(nil) && names.allowsHostHeader(""))
        for header in ["rebound.test", "rebound.test:80", "localhost.rebound.test", "127.0.0.1:http", "[::1", "[::1]x", "::1"] {
            #expect(!names.allowsHostHeader(header), "\(header)")
        }
        for name in ["::1", "fe80::1", "10.0.0.1", "LOCALHOST", "camera.example"] { #expect(names.allowsName(name), "\(name)") }
        for name in ["rebound.test", "10.0.0.1.rebound.test", ""] { #expect(!names.allowsName(name), "\(name)") }
        #expect(HostNames(listenAddress: "127.0.0.1", allowed: ["*"]).allowsHostHeader("anything.test:1"))
    }

    @Test func aSignalThatCannotBeCaughtIsTheFailedCall() {
        #expect(failure(ProcessSignals.holdForDispatch([SIGKILL])) == SystemCallError(operation: "sigaction", errno: .invalidArgument))
    }

    @Test func hostNameAndHomeAreTheSystemsOwn() throws {
        let kernelName = try String(contentsOfFile: "/proc/sys/kernel/hostname", encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(try SystemIdentity.hostName().get() == kernelName)
        let expected = getpwuid(getuid()).flatMap { $0.pointee.pw_dir }.map { String(cString: $0) }
        #expect(SystemIdentity.homeDirectory() == expected)
    }

    @Test func addressLiteralsResolveToTheirFamily() throws {
        #expect(try SocketAddress.resolving(host: "127.0.0.1", port: 8080).get().family == AF_INET)
        #expect(try SocketAddress.resolving(host: "::1", port: 8080).get().family == AF_INET6)
        let port = try SocketAddress.resolving(host: "127.0.0.1", port: 8080).get().withSockaddr { sa, length in
            sa.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { (Int(UInt16(bigEndian: $0.pointee.sin_port)), length) }
        }
        #expect(port.0 == 8080 && Int(port.1) == MemoryLayout<sockaddr_in>.size)
    }

    /// Group lookups read the record while its buffer lives: the names /etc/group gives.
    @Test func groupLookupsReadWhatTheGroupFileSays() throws {
        let lines = try String(contentsOfFile: "/etc/group", encoding: .utf8).split(separator: "\n")
        let owner = try #require(lines.first { $0.hasPrefix("root:") }.map { $0.split(separator: ":", omittingEmptySubsequences: false) })
        #expect(ProcessAccess.owningGroup(of: "/etc/group") == String(owner[0]))
        if getegid() == 0 { #expect(ProcessAccess.isMember(ofGroup: "root")) }
        #expect(!ProcessAccess.isMember(ofGroup: "no-such-group-\(UUID().uuidString.prefix(8))"))
    }
}
