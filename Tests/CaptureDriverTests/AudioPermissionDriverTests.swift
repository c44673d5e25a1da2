import CaptureALSA
import Foundation
import Testing
@testable import Capture

/// Runs as an unprivileged user in the VM (scripts/test's "user" configuration, with snd-aloop):
/// /dev/snd is root-only there (devtmpfs 0600, no udev).
@Suite struct AudioPermissionDriverTests {
    @Test func unprivilegedUserSeesDevicesButGetsPermissionDenied() throws {
        let env = ProcessInfo.processInfo.environment
        try #require(
            env["CAPTURE_VM"] == "1" && env["CAPTURE_VM_AS_USER"] == "1" && env["CAPTURE_VM_ALOOP"] != nil,
            "run through scripts/test (VM with snd-aloop, as an unprivileged user)")
        for name in ["hw:Loopback,1,0", "hw:CARD=Loopback,DEV=1"] {
            do {
                _ = try ALSADiscovery.open(name)
                Issue.record("\(name) opened by uid \(getuid())")
            } catch {
                let error = CaptureError(error)
                #expect(error.code == .permissionDenied, "\(name): \(error)")
                #expect(error.errno == EACCES)
                #expect(error.message.contains("audio"), "says which group to join: \(error.message)")
            }
        }
        // Still listed (from /proc/asound), without formats; the input says why it cannot open.
        let device = try #require(
            CaptureDevice.devices(for: .audio).first { $0.uniqueID == "hw:CARD=Loopback,DEV=1" },
            "\(CaptureDevice.devices(for: .audio).map(\.uniqueID))")
        #expect(device.audioFormats == nil)
        do {
            _ = try CaptureDeviceInput(device: device)
            Issue.record("an input opened as uid \(getuid())")
        } catch {
            #expect(error.code == .permissionDenied, "\(error)")
        }
    }
}
