// DeviceMonitor on the host: virtual cameras installed and uninstalled while a monitor runs;
// the inotify watch on /dev even though the host has no video node.
import CaptureVirtual
import CaptureSystem
import Capture
import CaptureTestSupport
import Foundation
import Testing

/// Events a monitor's handler received, for assertions.
final class MonitorLog: Sendable {
    private let list = Locked<[DeviceMonitor.Event]>([])
    init(_ monitor: DeviceMonitor) { monitor.addHandler { [self] e in list.withLock { $0.append(e) } } }
    var events: [DeviceMonitor.Event] { list.withLock { $0 } }
    /// Waits up to `timeout` seconds until `match` holds for the events so far.
    func wait(timeout: Double = 5, _ match: ([DeviceMonitor.Event]) -> Bool) -> Bool {
        waitUntil(timeout: timeout) { match(events) }
    }
}

@Suite(.serialized) struct DeviceMonitorTests {
    @Test func virtualCameraInstallAndUninstallArePosted() throws {
        let monitor = DeviceMonitor()
        let log = MonitorLog(monitor)
        try monitor.start()
        defer { monitor.stop() }
        #expect(monitor.isWatchingDeviceFolder, "inotify on /dev must work without any video node")
        let camera = VirtualCamera(name: "Monitor \(UUID().uuidString.prefix(8))")
        VirtualCamera.install(camera)
        #expect(
            log.wait { $0.contains { if case .connected(let d) = $0 { d.uniqueID == camera.uniqueID } else { false } } },
            "events: \(log.events)")
        #expect(monitor.devices.contains { $0.uniqueID == camera.uniqueID })
        // The device in the event is the one discovery hands out (one device, one object).
        // (Other suites install cameras meanwhile: pick this camera's event.)
        if case .connected(let d)? = log.events.last(where: {
            if case .connected(let d) = $0 { d.uniqueID == camera.uniqueID } else { false }
        }) {
            #expect(d === CaptureDevice.device(withUniqueID: camera.uniqueID))
        }
        VirtualCamera.uninstall(camera)
        #expect(log.wait { $0.contains(.disconnected(camera.uniqueID)) }, "events: \(log.events)")
        #expect(!monitor.devices.contains { $0.uniqueID == camera.uniqueID })
        // Exactly one of each for this camera: nothing repeated, nothing spurious.
        let mine = log.events.filter {
            switch $0 {
            case .connected(let d): d.uniqueID == camera.uniqueID
            case .disconnected(let id): id == camera.uniqueID
            }
        }
        #expect(mine.count == 2, "events: \(mine)")
    }

    @Test func asyncStreamSeesChangesInOrderAndEndsAtStop() async throws {
        let monitor = DeviceMonitor()
        try monitor.start()
        let stream = monitor.events()
        // Ends the stream if the events never come, so the test fails instead of hanging.
        let deadline = Task {
            try? await Task.sleep(for: .seconds(10)); monitor.stop()
        }
        defer { deadline.cancel() }
        let a = VirtualCamera(name: "Monitor A \(UUID().uuidString.prefix(8))")
        let b = VirtualCamera(name: "Monitor B \(UUID().uuidString.prefix(8))")
        VirtualCamera.install(a)
        VirtualCamera.install(b)
        VirtualCamera.uninstall(a)
        VirtualCamera.uninstall(b)
        let ids: Set = [a.uniqueID, b.uniqueID]
        var seen: [String] = []
        for await e in stream {
            switch e {
            case .connected(let d) where ids.contains(d.uniqueID): seen.append("+" + d.localizedName)
            case .disconnected(let id) where ids.contains(id): seen.append("-" + id.dropFirst("virtual:".count))
            default: break
            }
            if seen.count == 4 { monitor.stop() }
        }
        // The stream ended (stop finishes it) after the four changes, in the order they happened.
        #expect(seen == ["+" + a.name, "+" + b.name, "-" + a.name, "-" + b.name])
    }

    @Test func nothingIsPostedBeforeStartOrAfterStop() throws {
        let monitor = DeviceMonitor()
        let log = MonitorLog(monitor)
        let camera = VirtualCamera(name: "Monitor C \(UUID().uuidString.prefix(8))")
        VirtualCamera.install(camera)
        try monitor.start()
        // Installed before start: part of the baseline, not an event.
        #expect(monitor.devices.contains { $0.uniqueID == camera.uniqueID })
        monitor.stop()
        VirtualCamera.uninstall(camera)
        // Time for an event to come, were one (wrongly) sent.
        Thread.sleep(forTimeInterval: 0.2)
        // Other suites install and remove cameras of their own while this one runs: only this
        // camera's events count.
        let mine = log.events.filter { e in
            switch e {
            case .connected(let d): d.uniqueID == camera.uniqueID
            case .disconnected(let id): id == camera.uniqueID
            }
        }
        #expect(mine.isEmpty, "events: \(log.events)")
    }

    @Test func aDroppedMonitorStopsItsThread() throws {
        weak var weakMonitor: DeviceMonitor?
        do {
            let monitor = DeviceMonitor()
            try monitor.start()
            weakMonitor = monitor
        }
        // Another suite installing a camera may hold it for a moment while it notifies it.
        for _ in 0..<200 where weakMonitor != nil { Thread.sleep(forTimeInterval: 0.01) }
        #expect(weakMonitor == nil, "the watcher thread must not keep the monitor alive")
        // Changes after the monitor is gone reach nobody and crash nothing.
        let camera = VirtualCamera(name: "Monitor D \(UUID().uuidString.prefix(8))")
        VirtualCamera.install(camera)
        VirtualCamera.uninstall(camera)
    }
}
