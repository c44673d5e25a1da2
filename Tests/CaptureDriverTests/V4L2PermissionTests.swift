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
        try #require(env["CAPTURE_VM"] == "1" && env["CAPTURE_VM_AS_USER"] == "1",
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
