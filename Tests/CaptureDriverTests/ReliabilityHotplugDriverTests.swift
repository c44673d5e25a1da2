// Hot-plug against a real driver in the VM: v4l2loopback 0.12.7 has no control device for adding
// and removing nodes (that came with 0.13), so the test unloads and reloads the module; its node
// disappears from and reappears in /dev as a USB camera's would.
import CaptureSystem
import Capture
import CaptureTestSupport
import Foundation
import Testing

@Suite(.serialized) struct ReliabilityHotplugDriverTests {
    /// Runs the harness' modprobe for the VM kernel with `arguments`; returns its exit status.
    static func modprobe(_ arguments: String) throws -> Int32 {
        let command = try #require(ProcessInfo.processInfo.environment["CAPTURE_VM_MODPROBE"], "needs the VM harness")
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/bin/sh")
        p.arguments = ["-c", "\(command) \(arguments)"]
        try p.run()
        p.waitForExit()
        return p.terminationStatus
    }

    @Test func loopbackNodeRemovedAndAddedIsPosted() throws {
        try VM.require()
        let params = try #require(ProcessInfo.processInfo.environment["CAPTURE_VM_LOOPBACK"], "needs v4l2loopback loaded")
        // modelID is the V4L2 driver name ("v4l2 loopback").
        let isLoopback = { (d: CaptureDevice) in d.modelID.lowercased().contains("loopback") }
        let monitor = DeviceMonitor()
        let events = Locked<[(DeviceMonitor.Event, ContinuousClock.Instant)]>([])
        monitor.addHandler { e in events.withLock { $0.append((e, .now)) } }
        try monitor.start()
        defer { monitor.stop() }
        #expect(monitor.isWatchingDeviceFolder)
        let loopback = try #require(
            monitor.devices.first(where: isLoopback),
            "no v4l2loopback camera among \(monitor.devices.map { "\($0.localizedName) \($0.modelID)" })")
        let id = loopback.uniqueID
        func wait(_ match: (DeviceMonitor.Event) -> Bool) -> ContinuousClock.Instant? {
            let end = Date().addingTimeInterval(10)
            while Date() < end {
                if let hit = events.withLock({ $0.first { match($0.0) } }) { return hit.1 }
                Thread.sleep(forTimeInterval: 0.01)
            }
            return nil
        }

        let removed = ContinuousClock.now
        #expect(try Self.modprobe("-r v4l2loopback") == 0, "v4l2loopback could not be unloaded (a descriptor still open?)")
        let gone = wait { $0 == .disconnected(id) }
        #expect(gone != nil, "no disconnected event: \(events.withLock { $0.map(\.0) })")
        #expect(!CaptureDevice.devices(for: .video).contains { $0.uniqueID == id })
        if let gone { print("reliability: hot-plug removal posted after \(gone - removed)") }

        let added = ContinuousClock.now
        #expect(try Self.modprobe("v4l2loopback \(params == "1" ? "" : params)") == 0)
        let back = wait { if case .connected(let d) = $0 { d.uniqueID == id } else { false } }
        #expect(back != nil, "no connected event: \(events.withLock { $0.map(\.0) })")
        #expect(CaptureDevice.devices(for: .video).contains { $0.uniqueID == id })
        if let back { print("reliability: hot-plug arrival posted after \(back - added)") }
        // vivid's cameras were untouched: no event names them.
        let others = events.withLock { $0.map(\.0) }.filter {
            switch $0 {
            case .connected(let d): d.uniqueID != id
            case .disconnected(let other): other != id
            }
        }
        #expect(others.isEmpty, "unrelated events: \(others)")
    }
}
