import Foundation
import Testing
import Glibc
import CaptureVirtual
@testable import Capture

@Suite("Authorization")
struct AuthorizationTests {
    /// The status agrees with what the kernel lets this process do: root, or a node it can open
    /// read-write, is authorized; nodes it cannot open are denied, with advice naming the group.
    @Test(arguments: [MediaType.video, .audio])
    func statusMatchesWhatTheProcessMayOpen(_ mediaType: MediaType) async throws {
        let check = AuthorizationCheck(mediaType: mediaType)
        let opens = check.nodes.contains { path in
            let fd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC)
            if fd >= 0 { close(fd) }
            return fd >= 0 || errno == EBUSY
        }
        let status = CaptureDevice.authorizationStatus(for: mediaType)
        // (Other tests install virtual devices meanwhile, which authorize by themselves.)
        if geteuid() == 0 || opens || status == .authorized && check.virtualAllows {
            #expect(status == .authorized)
            #expect(CaptureDevice.authorizationAdvice(for: mediaType) == nil)
            #expect(await CaptureDevice.requestAccess(for: mediaType))
        } else if !check.nodes.isEmpty {
            #expect(status == .denied)
            #expect(CaptureDevice.authorizationAdvice(for: mediaType)?.contains("usermod -aG") == true)
        } else {
            #expect(status == .notDetermined || status == .authorized || status == .restricted)
        }
        // The completion form says the same, once.
        let answer = await withCheckedContinuation { (c: CheckedContinuation<Bool, Never>) in
            CaptureDevice.requestAccess(for: mediaType) { c.resume(returning: $0) }
        }
        #expect(answer == (status == .authorized))
    }

    /// An installed virtual device is authorized whatever the nodes say (an unprivileged user
    /// with no camera had `.notDetermined` while the virtual pair worked): here with no nodes in
    /// a sandbox, which alone gives `.restricted` or leaves it to the portal.
    @Test(arguments: [MediaType.video, .audio])
    func virtualDevicesAreAuthorized(_ mediaType: MediaType) throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("auth-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: root + "/snd", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: root) }
        func check(_ virtual: Bool?) -> AuthorizationCheck {
            AuthorizationCheck(
                mediaType: mediaType, root: root, environment: [:], sandboxed: true, askPortal: false, virtualDevices: virtual)
        }
        #expect(check(false).status != .authorized)
        #expect(check(false).advice != nil)
        #expect(check(true).status == .authorized)
        #expect(check(true).advice == nil)
        // Read from what is installed: a device of this test's own is there while it runs.
        if mediaType == .video {
            let camera = VirtualCamera(name: "Auth \(UUID().uuidString.prefix(6))")
            VirtualCamera.install(camera)
            defer { VirtualCamera.uninstall(camera) }
            #expect(check(nil).virtualAllows)
        } else {
            let microphone = VirtualMicrophone(name: "Auth \(UUID().uuidString.prefix(6))")
            VirtualMicrophone.install(microphone)
            defer { VirtualMicrophone.uninstall(microphone) }
            #expect(check(nil).virtualAllows)
        }
    }

    @Test func nodesAreFoundWhereLinuxPutsThem() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("auth-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: root + "/snd", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: root) }
        for name in ["video0", "video11", "media0", "snd/pcmC0D0c", "snd/pcmC0D0p", "snd/controlC0"] {
            _ = FileManager.default.createFile(atPath: root + "/" + name, contents: nil)
        }
        #expect(AuthorizationCheck(mediaType: .video, root: root).nodes == [root + "/video0", root + "/video11"])
        #expect(AuthorizationCheck(mediaType: .audio, root: root).nodes == [root + "/snd/pcmC0D0c"])
    }
}
