import CaptureV4L2
import Foundation
import Testing
@testable import Capture

@Suite("Device positions", .serialized)
struct DevicePositionTests {
    /// A sysfs tree as the kernel lays it out for a USB camera: the video node's `device` links
    /// to the USB interface, whose parent folder is the USB device with `removable`.
    private func sysfs(removable: String?) throws -> String {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("sysfs-\(UUID().uuidString)").path
        let usb = root + "/devices/pci0000:00/0000:00:14.0/usb1/1-4"
        let interface = usb + "/1-4:1.0"
        let node = root + "/class/video4linux/video0"
        let fm = FileManager.default
        try fm.createDirectory(atPath: interface, withIntermediateDirectories: true)
        try fm.createDirectory(atPath: node, withIntermediateDirectories: true)
        try fm.createSymbolicLink(
            atPath: node + "/device", withDestinationPath: "../../../devices/pci0000:00/0000:00:14.0/usb1/1-4/1-4:1.0")
        if let removable { try (removable + "\n").write(toFile: usb + "/removable", atomically: true, encoding: .utf8) }
        return root
    }

    @Test("a USB camera on a fixed port is the built-in front camera; on another port, external")
    func fixedPortIsFront() throws {
        for (removable, port, position) in [
            ("fixed", V4L2Discovery.USBPort.fixed, DevicePosition.front),
            ("removable", .removable, .external), ("unknown", .unknown, .external),
        ] {
            let root = try sysfs(removable: removable)
            defer { try? FileManager.default.removeItem(atPath: root) }
            #expect(V4L2Discovery.usbPort(ofNode: "video0", sysfs: root) == port)
            #expect(V4L2Discovery.position(orientation: nil, busInfo: "usb-0000:00:14.0-4", port: port) == position)
        }
        let bare = try sysfs(removable: nil)
        defer { try? FileManager.default.removeItem(atPath: bare) }
        #expect(V4L2Discovery.usbPort(ofNode: "video0", sysfs: bare) == .unknown)
        #expect(V4L2Discovery.usbPort(ofNode: "video9", sysfs: bare) == .unknown)
        // The orientation control wins; a platform camera has no USB port.
        #expect(V4L2Discovery.position(orientation: .back, busInfo: "usb-1", port: .fixed) == .back)
        #expect(V4L2Discovery.position(orientation: nil, busInfo: "platform:vivid-000", port: .fixed) == .unspecified)
    }

    @Test("overrides are read from the environment over the file, by unique ID or path; bad entries are reported")
    func overridesParse() {
        let file = """
            # my laptop
            v4l2:uvcvideo:usb-0000:00:14.0-4:Integrated Camera = front
            /dev/video2 = back   # the rear one
            /dev/video4 = sideways
            nonsense
            """
        let o = DevicePositionOverrides(environment: "/dev/video2=external; virtual:x=y=back", fileText: file)
        #expect(o.position(uniqueID: "v4l2:uvcvideo:usb-0000:00:14.0-4:Integrated Camera", path: "/dev/video0") == .front)
        #expect(o.position(uniqueID: "other", path: "/dev/video2") == .external)
        #expect(o.position(uniqueID: "virtual:x=y", path: "") == .back)
        #expect(o.position(uniqueID: "other", path: "/dev/video7") == nil)
        #expect(o.problems.count == 2, "\(o.problems)")
        #expect(o.problems.allSatisfy { $0.hasPrefix("positions file:") })
    }

    @Test("an override turns a camera to the front: discovery, availability and default(for:position:) follow it")
    func overrideWins() throws {
        let camera = VirtualCamera(name: "Position Test \(UUID().uuidString.prefix(8))", position: .back)
        VirtualCamera.install(camera)
        defer {
            VirtualCamera.uninstall(camera)
            DevicePositionOverrides.reload()
        }
        let device = try #require(CaptureDevice.device(withUniqueID: camera.uniqueID))
        #expect(device.position == .back)
        DevicePositionOverrides.reload(replacing: DevicePositionOverrides(positions: [camera.uniqueID: .front]))
        #expect(device.position == .front)
        let found = CaptureDevice.DiscoverySession(mediaType: .video, position: .front).devices
        #expect(found.contains(device))
        #expect(!CaptureDevice.DiscoverySession(mediaType: .video, position: .back).devices.contains(device))
        #expect(CaptureDevice.isFrontCameraAvailable)
    }
}
