// Finding cameras among the video4linux nodes and opening them (failures as `BackendError`).
import CaptureBackend
import CaptureSystem
#if canImport(Glibc)
import Glibc
#endif
import Foundation

/// Discovery of V4L2 cameras.
package enum V4L2Discovery {
    /// The device folder scanned (tests may not change it; it is a constant for clarity).
    package static let deviceDirectory = "/dev"

    /// `/dev/video*` node paths, sorted by number (video2 before video10).
    package static func videoNodePaths() -> [String] {
        let names = (try? FileSystem.names(in: deviceDirectory).get()) ?? []
        let numbered = names.compactMap { name -> (Int, String)? in
            guard name.hasPrefix("video"), let n = Int(name.dropFirst(5)) else { return nil }
            return (n, deviceDirectory + "/" + name)
        }
        return numbered.sorted { $0.0 < $1.0 }.map(\.1)
    }

    /// Every node whose `device_caps` include video capture (single- or multi-planar), in node
    /// order. Output, metadata, VBI, radio, SDR, touch and codec nodes are left out, and so are
    /// nodes that cannot be opened.
    package static func captureDevices() -> [SourceInfo] {
        var found: [SourceInfo] = []
        for path in videoNodePaths() {
            guard let device = try? V4L2Device.openNode(path), device.bufferType != nil else { continue }
            found.append(sourceInfo(device))
        }
        return disambiguated(found)
    }

    /// The identity of an open node. `uniqueID` is "v4l2:" + driver + ":" + bus info + ":" + card.
    package static func sourceInfo(_ device: V4L2Device) -> SourceInfo {
        let c = device.capability
        let node = (device.path as NSString).lastPathComponent
        return SourceInfo(
            uniqueID: "v4l2:\(c.driver):\(c.busInfo):\(c.card)", name: c.card, driver: c.driver,
            busInfo: c.busInfo, path: device.path,
            position: position(
                orientation: device.orientation(), busInfo: c.busInfo,
                port: usbPort(ofNode: node)))
    }

    /// Position: the orientation control when present; else a USB camera on a fixed
    /// (non-removable) port, the built-in webcam of a laptop, faces the user (`.front`), one on
    /// any other port is `.external`; else unspecified.
    package static func position(orientation: DevicePosition?, busInfo: String, port: USBPort = .unknown) -> DevicePosition {
        if let orientation { return orientation }
        guard busInfo.hasPrefix("usb-") else { return .unspecified }
        return port == .fixed ? .front : .external
    }

    /// What the kernel says of a USB device's port (sysfs `removable`, from ACPI or the hub).
    package enum USBPort: String, Sendable {
        /// Built into the machine: it cannot be unplugged.
        case fixed
        case removable
        case unknown
    }

    /// The port of the USB device behind video node `node` (e.g. "video0"): sysfs links the
    /// node's `device` to the USB interface, whose parent folder is the USB device with its
    /// `removable` attribute. `sysfs` is the root to read (tests lay one out in a folder).
    package static func usbPort(ofNode node: String, sysfs: String = "/sys") -> USBPort {
        let link = sysfs + "/class/video4linux/" + node + "/device"
        let interface = URL(fileURLWithPath: link).resolvingSymlinksInPath()
        let file = interface.deletingLastPathComponent().appendingPathComponent("removable").path
        guard let text = try? String(contentsOfFile: file, encoding: .utf8) else { return .unknown }
        return USBPort(rawValue: text.trimmingCharacters(in: .whitespacesAndNewlines)) ?? .unknown
    }

    /// Makes IDs unique when several capture nodes share driver, bus and card (one device with
    /// two capture nodes): the second gets ":2", the third ":3", in node order.
    package static func disambiguated(_ infos: [SourceInfo]) -> [SourceInfo] {
        var seen: [String: Int] = [:]
        return infos.map { info in
            var info = info
            let n = (seen[info.uniqueID] ?? 0) + 1
            seen[info.uniqueID] = n
            if n > 1 { info.uniqueID += ":\(n)" }
            return info
        }
    }

    /// Opens the node at `path` as a camera. Throws the failed call (`open`: ENOENT, EACCES,
    /// EBUSY...; `VIDIOC_QUERYCAP`: ENOTTY for a node that is not V4L2), `.notADeviceNode` or
    /// `.notACamera`.
    package static func open(path: String) throws(BackendError) -> V4L2VideoSource {
        let device = try V4L2Device.open(path)
        let info = disambiguatedInfo(for: device)
        return try V4L2VideoSource(device: device, info: info)
    }

    /// Opens a discovered device. If its node now holds a different device (renumbered after a
    /// replug), the node with the same unique ID is used instead; if none, `.noLongerConnected`.
    package static func open(_ info: SourceInfo) throws(BackendError) -> V4L2VideoSource {
        let device = try V4L2Device.open(info.path)
        let current = disambiguatedInfo(for: device)
        if current.uniqueID == info.uniqueID { return try V4L2VideoSource(device: device, info: current) }
        guard let moved = captureDevices().first(where: { $0.uniqueID == info.uniqueID }) else {
            throw BackendError.video(.noLongerConnected(name: info.name, uniqueID: info.uniqueID), info.path, operation: "open")
        }
        return try open(path: moved.path)
    }

    /// The info of an open node with the same ID discovery would give it.
    private static func disambiguatedInfo(for device: V4L2Device) -> SourceInfo {
        let own = sourceInfo(device)
        return captureDevices().first { $0.path == device.path } ?? own
    }
}
