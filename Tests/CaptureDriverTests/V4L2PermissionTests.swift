// The V4L2 layer as an unprivileged user (scripts/test's "user" configuration).
import CaptureV4L2
import Foundation
import Testing
import Glibc
@testable import Capture

/// Runs as an unprivileged user in the VM (scripts/test's "user" configuration): vivid's nodes
/// are root-only there.
@Suite struct V4L2PermissionDriverTests {
    @Test func unprivilegedOpenIsPermissionDenied() throws {
        let env = ProcessInfo.processInfo.environment
        try #require(
            env["CAPTURE_VM"] == "1" && env["CAPTURE_VM_AS_USER"] == "1",
            "run through scripts/test (VM, as an unprivileged user)")
        let nodes = try FileManager.default.contentsOfDirectory(atPath: "/sys/class/video4linux").filter { $0.hasPrefix("video") }
        let node = try #require(nodes.sorted().first, "needs vivid loaded")
        do {
            _ = try V4L2Discovery.open(path: "/dev/" + node)
            Issue.record("/dev/\(node) opened by uid \(getuid())")
        } catch {
            let error = CaptureError(error)
            #expect(error.code == .permissionDenied)
            #expect(error.errno == EACCES)
            #expect(error.message.contains("video"), "says which group to join: \(error.message)")
        }
        // Nodes that cannot be opened are not listed as cameras.
        #expect(V4L2Discovery.captureDevices().isEmpty)
    }
}

/// Authorization as an unprivileged user without the `video` and `audio` groups (the "user"
/// configuration): vivid's and snd-aloop's nodes exist but are root-only, so both are denied, and
/// the advice names the group to join.
@Suite struct AuthorizationDriverTests {
    @Test func unprivilegedUserIsDeniedWithAdvice() async throws {
        let env = ProcessInfo.processInfo.environment
        try #require(
            env["CAPTURE_VM"] == "1" && env["CAPTURE_VM_AS_USER"] == "1",
            "run through scripts/test (VM, as an unprivileged user)")
        #expect(CaptureDevice.authorizationStatus(for: .video) == .denied)
        let advice = try #require(CaptureDevice.authorizationAdvice(for: .video))
        #expect(advice.contains("group '") && advice.contains("/dev/video"), "\(advice)")
        #expect(await CaptureDevice.requestAccess(for: .video) == false)
        #expect(CaptureDevice.authorizationStatus(for: .audio) == .denied)
        #expect(CaptureDevice.authorizationAdvice(for: .audio)?.contains("/dev/snd/pcmC") == true)
    }
}
