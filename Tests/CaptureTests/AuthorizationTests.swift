import Foundation
import Testing
import Glibc
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
        if geteuid() == 0 || opens {
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
