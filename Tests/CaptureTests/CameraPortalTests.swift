import CaptureSystem
import CaptureTestSupport
import Foundation
import Glibc
import Testing
@testable import Capture
@testable import CapturePortal

/// A private session bus with the real desktop portal: `dbus-daemon` activating
/// `xdg-desktop-portal`, `xdg-permission-store` and the GTK backend (which the portal needs for its
/// camera interface; it runs on a private Xvfb display), all with a private HOME and
/// XDG_RUNTIME_DIR. With `portal: false`, the same bus with no portal to activate.
final class PortalBus: @unchecked Sendable {
    let dir: URL
    /// The bus's address, and the environment a client of it (and of the portal) runs in.
    let address: String
    let environment: [String: String]
    private let xvfb: RunningProcess?
    private let bus: RunningProcess
    /// The PipeWire daemon, with one camera node (`videotestsrc`, media.role Camera), when asked for.
    private(set) var pipewire: RunningProcess?

    /// The service files the bus may activate, as Debian installs them.
    private static let services = [
        "org.freedesktop.portal.Desktop", "org.freedesktop.impl.portal.PermissionStore", "org.freedesktop.impl.portal.desktop.gtk",
    ]

    init(portal: Bool = true, pipewire withPipeWire: Bool = false) throws {
        dir = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("portal-bus-\(UUID().uuidString)")
        let fm = FileManager.default
        for sub in ["home", "run", "data", "config", "cache", "services"] {
            try fm.createDirectory(at: dir.appendingPathComponent(sub), withIntermediateDirectories: true)
        }
        chmod(dir.appendingPathComponent("run").path, 0o700)
        if portal {
            for name in Self.services {
                let file = "/usr/share/dbus-1/services/\(name).service"
                guard fm.fileExists(atPath: file) else {
                    throw TestFailure("\(file) is missing: scripts/test installs xdg-desktop-portal and xdg-desktop-portal-gtk (apt-get)")
                }
                try fm.copyItem(atPath: file, toPath: dir.appendingPathComponent("services/\(name).service").path)
            }
            // The GTK backend needs a display; -displayfd picks a free one and prints its number.
            let x = try RunningProcess(
                URL(fileURLWithPath: "/usr/bin/Xvfb"), ["-displayfd", "1", "-nolisten", "tcp", "-screen", "0", "64x64x24"])
            guard x.waitFor(timeout: 20, { $0.hasSuffix("\n") }) else { throw TestFailure("Xvfb printed no display: \(x.stderr)") }
            xvfb = x
        } else {
            xvfb = nil
        }
        let run = dir.appendingPathComponent("run").path
        let socket = run + "/bus"
        try """
        <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
         "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
        <busconfig>
          <type>session</type>
          <listen>unix:path=\(socket)</listen>
          <servicedir>\(dir.appendingPathComponent("services").path)</servicedir>
          <policy context="default"><allow send_destination="*" eavesdrop="true"/><allow eavesdrop="true"/><allow own="*"/></policy>
        </busconfig>
        """.write(to: dir.appendingPathComponent("bus.conf"), atomically: true, encoding: .utf8)
        var env = ProcessInfo.processInfo.environment
        env["HOME"] = dir.appendingPathComponent("home").path
        env["XDG_RUNTIME_DIR"] = run
        env["XDG_DATA_HOME"] = dir.appendingPathComponent("data").path
        env["XDG_CONFIG_HOME"] = dir.appendingPathComponent("config").path
        env["XDG_CACHE_HOME"] = dir.appendingPathComponent("cache").path
        env["XDG_CURRENT_DESKTOP"] = "GNOME"
        env["DBUS_SESSION_BUS_ADDRESS"] = "unix:path=\(socket)"
        env["DISPLAY"] = xvfb.map { ":" + $0.stdout.trimmingCharacters(in: .whitespacesAndNewlines) }
        env["GTK_A11Y"] = "none"
        env["NO_AT_BRIDGE"] = "1"
        env.removeValue(forKey: "CAPTURE_FORCE_PORTAL")
        environment = env
        address = "unix:path=\(socket)"
        bus = try RunningProcess(
            URL(fileURLWithPath: "/usr/bin/dbus-daemon"),
            ["--config-file=\(dir.appendingPathComponent("bus.conf").path)", "--nofork", "--nopidfile", "--print-address=1"],
            environment: env)
        guard bus.waitFor(timeout: 20, { $0.hasSuffix("\n") }) else { throw TestFailure("dbus-daemon printed no address: \(bus.stderr)") }
        guard withPipeWire else { return }
        // Debian's pipewire.conf with a drop-in adding the camera; started after the bus, which its
        // portal module watches to know the portal's own connections.
        let dropIns = dir.appendingPathComponent("config/pipewire/pipewire.conf.d")
        try fm.createDirectory(at: dropIns, withIntermediateDirectories: true)
        try """
        context.spa-libs = { videotestsrc = videotestsrc/libspa-videotestsrc }
        context.objects = [
          { factory = adapter args = { factory.name = videotestsrc node.name = capture-test-camera
                                        media.class = Video/Source media.role = Camera } }
        ]
        """.write(to: dropIns.appendingPathComponent("camera.conf"), atomically: true, encoding: .utf8)
        let daemon = try RunningProcess(URL(fileURLWithPath: "/usr/bin/pipewire"), [], environment: env)
        pipewire = daemon
        let deadline = ContinuousClock.now + .seconds(10)
        while !fm.fileExists(atPath: run + "/pipewire-0") {
            guard ContinuousClock.now < deadline, daemon.process.isRunning else {
                throw TestFailure("pipewire made no socket: \(daemon.stderr)")
            }
            usleep(20_000)
        }
    }

    deinit {
        // SIGKILL, not `terminate`: that waits for the pipes, which the services the bus started
        // hold until they see the bus go (then they exit).
        for p in [pipewire, bus, xvfb].compactMap({ $0 }) where p.process.isRunning {
            p.signal(SIGKILL)
            p.process.waitForExit()
        }
        try? FileManager.default.removeItem(at: dir)
    }

    /// What the bus and the services it started wrote (for failure messages).
    var log: String { bus.stderr + bus.stdout + (pipewire?.stderr ?? "") }
}

extension PortalBus {
    /// Stores the portal's answer for the app `appID` (host apps: "") in the permission store, as
    /// the desktop's privacy settings or `flatpak permission-set devices camera APPID yes|no` do.
    func setCameraPermission(_ value: String, app appID: String = "") throws {
        let store = try DBusConnection(address: address)
        _ = try store.call(
            destination: "org.freedesktop.impl.portal.PermissionStore", path: "/org/freedesktop/impl/portal/PermissionStore",
            interface: "org.freedesktop.impl.portal.PermissionStore", member: "SetPermission",
            arguments: [
                .string("devices"), .bool(true), .string("camera"), .string(appID), .array([.string(value)], elementSignature: "s"),
            ],
            timeout: 10)
    }

    /// Runs `capture ARGUMENTS` as the Flatpak app `appID` would run: bubblewrap with a root of
    /// its own (system files read-only, an empty /dev, no /dev/video*), a `/.flatpak-info` naming
    /// the app (where the portal and the library look) and this bus's socket.
    func runSandboxed(appID: String, _ arguments: [String], tool name: String = "capture", bubblewrap extra: [String] = []) throws
        -> ProcessResult
    {
        let info = dir.appendingPathComponent("flatpak-info-\(appID)")
        try "[Application]\nname=\(appID)\nruntime=runtime/org.freedesktop.Platform/x86_64/23.08\n\n[Instance]\ninstance-id=1\n"
            .write(to: info, atomically: true, encoding: .utf8)
        let tool = try builtTool(name)
        // A fresh /tmp first: bubblewrap mounts in order, and the tool's folder may be under /tmp.
        var binds: [String] = ["--tmpfs", "/tmp"]
        // The system, the Swift runtime the tool links (/opt/swift here) and the tool's own folder.
        for path in ["/usr", "/etc", "/opt", tool.deletingLastPathComponent().path] where FileManager.default.fileExists(atPath: path) {
            binds += ["--ro-bind", path, path]
        }
        let run = environment["XDG_RUNTIME_DIR"]!
        let arguments =
            binds + [
                "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/bin", "/bin",
                "--proc", "/proc", "--dev", "/dev", "--bind", run, run,
                "--ro-bind", info.path, "/.flatpak-info", "--setenv", "FLATPAK_ID", appID,
                "--unsetenv", "CAPTURE_FORCE_PORTAL", "--die-with-parent",
            ] + extra + ["--", tool.path] + arguments
        return try runProcess("/usr/bin/bwrap", arguments, environment: environment, timeout: 60)
    }

    /// The environment of an app the portal decides for: this bus, CAPTURE_FORCE_PORTAL=1.
    var forcedEnvironment: [String: String] { environment.merging(["CAPTURE_FORCE_PORTAL": "1"]) { $1 } }
}

/// Cameras decided by the real xdg-desktop-portal (1.16 in Debian 12) on a private session bus, as a
/// sandboxed app meets it: what it answers a request is what the permission store (table
/// "devices", id "camera") says for the app; with nothing stored it prompts (the GTK backend's
/// dialog on Xvfb) and waits for the user. The app here is unsandboxed, so its app ID is "";
/// CAPTURE_FORCE_PORTAL=1 makes the library ask the portal all the same.
@Suite("Camera portal", .serialized)
struct CameraPortalTests {
    private func check(_ bus: PortalBus) -> AuthorizationCheck {
        // (Other tests' virtual cameras would authorize by themselves.)
        AuthorizationCheck(mediaType: .video, environment: bus.forcedEnvironment, sandboxed: false, virtualDevices: false)
    }

    /// Not determined until asked; a stored "yes" grants the request at once, and the camera stays
    /// authorized for this process (on this bus).
    @Test func portalGrants() throws {
        let bus = try PortalBus()
        #expect(check(bus).status == .notDetermined, "\(bus.log)")
        #expect(check(bus).advice?.contains("requestAccess") == true)
        try bus.setCameraPermission("yes")
        let start = ContinuousClock.now
        #expect(
            PortalAuthorization.requestAccess(for: .video, environment: bus.forcedEnvironment, timeout: 20, virtualDevices: false),
            "\(bus.log)")
        #expect(ContinuousClock.now - start < .seconds(10))
        #expect(check(bus).status == .authorized)
        #expect(check(bus).advice == nil)
        // Asked again: remembered, whatever the store says now.
        try bus.setCameraPermission("no")
        #expect(PortalAuthorization.requestAccess(for: .video, environment: bus.forcedEnvironment, timeout: 20, virtualDevices: false))
    }

    /// A stored "no" refuses: denied, with the words that say where to allow it.
    @Test func portalRefuses() throws {
        let bus = try PortalBus()
        try bus.setCameraPermission("no")
        #expect(
            !PortalAuthorization.requestAccess(for: .video, environment: bus.forcedEnvironment, timeout: 20, virtualDevices: false),
            "\(bus.log)")
        let refused = check(bus)
        #expect(refused.status == .denied)
        #expect(refused.advice?.contains("privacy settings") == true, "\(refused.advice ?? "")")
        #expect(refused.advice?.contains("flatpak permission-set devices camera APPID yes") == true, "\(refused.advice ?? "")")
        // Allowed later (in the settings): the next request asks again and is granted.
        try bus.setCameraPermission("yes")
        #expect(PortalAuthorization.requestAccess(for: .video, environment: bus.forcedEnvironment, timeout: 20, virtualDevices: false))
        #expect(check(bus).status == .authorized)
    }

    /// With nothing stored the portal prompts; nobody answers, so the request gives up after its
    /// timeout with false and the status stays not determined, its advice saying so.
    @Test func unansweredPromptTimesOut() throws {
        let bus = try PortalBus()
        let start = ContinuousClock.now
        #expect(
            !PortalAuthorization.requestAccess(for: .video, environment: bus.forcedEnvironment, timeout: 1, virtualDevices: false),
            "\(bus.log)")
        let waited = ContinuousClock.now - start
        #expect(waited >= .seconds(1) && waited < .seconds(10), "\(waited)")
        let after = check(bus)
        #expect(after.status == .notDetermined)
        #expect(after.advice?.contains("did not answer within 1.0 s") == true, "\(after.advice ?? "")")
    }

    /// A real sandbox: the portal knows the app by the ID in its `/.flatpak-info` and answers
    /// what the permission store holds for that ID; the library inside finds the sandbox and no
    /// device nodes, and asks the portal without being forced to.
    @Test func sandboxedAppsAreDecidedByTheirID() throws {
        let bus = try PortalBus()
        try bus.setCameraPermission("yes", app: "org.example.Allowed")
        try bus.setCameraPermission("no", app: "org.example.Refused")
        let asked = try bus.runSandboxed(appID: "org.example.Allowed", ["devices"])
        #expect(asked.text.contains("video authorization: notDetermined: The camera portal"), "\(asked.text)\(asked.stderr)\(bus.log)")
        let allowed = try bus.runSandboxed(appID: "org.example.Allowed", ["devices", "--request-access"])
        #expect(allowed.status == 0)
        #expect(allowed.text.contains("video authorization: authorized\n"), "\(allowed.text)\(allowed.stderr)\(bus.log)")
        let refused = try bus.runSandboxed(appID: "org.example.Refused", ["devices", "--request-access"])
        #expect(
            refused.text.contains("video authorization: denied: ")
                && refused.text.contains("flatpak permission-set devices camera org.example.Refused yes"),
            "\(refused.text)\(refused.stderr)\(bus.log)")
        // Audio is not the camera portal's: the sandbox hides the microphones.
        #expect(refused.text.contains("audio authorization: restricted"), "\(refused.text)")
    }

    /// With PipeWire running, the portal sees its camera node; `OpenPipeWireRemote` is refused
    /// before a grant and afterwards gives a connection to that PipeWire daemon (the door for a
    /// PipeWire capture backend).
    @Test func pipeWireRemoteAfterAGrant() throws {
        let bus = try PortalBus(pipewire: true)
        let portal = try CameraPortal(address: bus.address)
        // The portal's camera monitor connects to PipeWire as it starts; give it a moment.
        let deadline = ContinuousClock.now + .seconds(10)
        var present = try portal.isCameraPresent()
        while !present && ContinuousClock.now < deadline {
            usleep(50_000)
            present = try portal.isCameraPresent()
        }
        #expect(present, "\(bus.log)")
        #expect(check(bus).advice?.hasPrefix("The camera portal decides") == true, "\(check(bus).advice ?? "")")
        #expect(throws: PortalError.self) { _ = try portal.openPipeWireRemote() }
        do { _ = try portal.openPipeWireRemote() } catch { #expect(error.notAllowed, "\(error)") }
        try bus.setCameraPermission("yes")
        #expect(try portal.accessCamera(timeout: 20) == .granted)
        let remote = try portal.openPipeWireRemote()
        // struct ucred (pid, uid, gid), which Glibc's module leaves out without _GNU_SOURCE.
        var peer: (pid: Int32, uid: UInt32, gid: UInt32) = (0, 0, 0)
        var size = socklen_t(MemoryLayout.size(ofValue: peer))
        #expect(getsockopt(remote.rawValue, SOL_SOCKET, SO_PEERCRED, &peer, &size) == 0)
        #expect(peer.pid == bus.pipewire?.process.processIdentifier, "the remote's peer is pid \(peer.pid)")
    }

    /// The core does not link libdbus (the `capture` tool does, through SDL2 and FFmpeg): an app
    /// of `Capture` alone (camera-check) runs in a sandbox without it, its cameras restricted with
    /// words that name the missing library.
    @Test func withoutLibDBus() throws {
        let bus = try PortalBus(portal: false)
        let lib = URL(fileURLWithPath: "/usr/lib/x86_64-linux-gnu/libdbus-1.so.3").resolvingSymlinksInPath().path
        try #require(FileManager.default.fileExists(atPath: lib), "no \(lib): scripts/test installs libdbus-1-3")
        let run = try bus.runSandboxed(appID: "org.example.NoDBus", [], tool: "camera-check", bubblewrap: ["--ro-bind", "/dev/null", lib])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(
            run.text.contains("video authorization: restricted: The sandbox hides the cameras, and libdbus-1"), "\(run.text)\(run.stderr)")
    }

    /// A bus that accepts the connection and never answers costs the caller its timeout, not a hang.
    @Test func silentBusTimesOut() throws {
        let path = NSTemporaryDirectory() + "silent-bus-\(UUID().uuidString)"
        let listener = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(listener); unlink(path) }
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &addr.sun_path) { raw in path.utf8CString.withUnsafeBytes { raw.copyMemory(from: $0) } }
        let bound = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        try #require(bound == 0 && listen(listener, 4) == 0)
        let start = ContinuousClock.now
        #expect(throws: PortalError.timedOut(what: "connecting to unix:path=\(path)", seconds: 0.5)) {
            _ = try DBusConnection(address: "unix:path=\(path)", timeout: 0.5)
        }
        #expect(ContinuousClock.now - start < .seconds(5))
    }

    /// A bus without the portal: restricted at once, the request false, the advice naming the portal.
    @Test func noPortalOnTheBus() throws {
        let bus = try PortalBus(portal: false)
        let before = check(bus)
        #expect(before.status == .restricted)
        #expect(before.advice?.contains("xdg-desktop-portal") == true, "\(before.advice ?? "")")
        let start = ContinuousClock.now
        #expect(!PortalAuthorization.requestAccess(for: .video, environment: bus.forcedEnvironment, timeout: 20, virtualDevices: false))
        #expect(ContinuousClock.now - start < .seconds(5))
        #expect(check(bus).status == .restricted)
    }

    /// No session bus at all (no address, no socket in XDG_RUNTIME_DIR): restricted, saying why.
    @Test func noSessionBus() throws {
        var env = ProcessInfo.processInfo.environment
        env["DBUS_SESSION_BUS_ADDRESS"] = nil
        env["XDG_RUNTIME_DIR"] = NSTemporaryDirectory()
        env["CAPTURE_FORCE_PORTAL"] = "1"
        let none = AuthorizationCheck(mediaType: .video, environment: env, sandboxed: false, virtualDevices: false)
        #expect(none.status == .restricted)
        #expect(none.advice?.contains("no session bus") == true, "\(none.advice ?? "")")
        #expect(!PortalAuthorization.requestAccess(for: .video, environment: env, timeout: 5, virtualDevices: false))
    }

    /// The portal decides for cameras only: in a sandbox that shows no camera nodes, or anywhere
    /// with CAPTURE_FORCE_PORTAL=1; a sandbox with device access (nodes visible) and the host are
    /// decided by the nodes, microphones never by the portal.
    @Test func portalDecidesOnlyForSandboxedOrForcedCameras() {
        let forced = ["CAPTURE_FORCE_PORTAL": "1"]
        #expect(!PortalAuthorization.decides(for: .video, sandboxed: false, nodesVisible: false, environment: [:]))
        #expect(!PortalAuthorization.decides(for: .video, sandboxed: false, nodesVisible: true, environment: [:]))
        #expect(PortalAuthorization.decides(for: .video, sandboxed: true, nodesVisible: false, environment: [:]))
        #expect(!PortalAuthorization.decides(for: .video, sandboxed: true, nodesVisible: true, environment: [:]))
        #expect(PortalAuthorization.decides(for: .video, sandboxed: false, nodesVisible: true, environment: forced))
        #expect(!PortalAuthorization.decides(for: .audio, sandboxed: true, nodesVisible: false, environment: forced))
    }
}
