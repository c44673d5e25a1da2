// AVFoundation's notifications, observed through NotificationCenter as iOS code observes them:
// the session's start, stop, runtime error and interruptions (object the session, the error and
// the reason under their user-info keys, posted off the caller's thread), and a virtual camera's
// connection changes with no DeviceMonitor started.
import CaptureVirtual
import Capture
import CaptureTestSupport
import Foundation
import Testing

/// The notifications of some names, as an observer saw them, with the thread each came on.
private final class NotificationLog: @unchecked Sendable {
    struct Entry {
        var name: Notification.Name
        var object: AnyObject?
        var userInfo: [AnyHashable: Any]
        var thread: pthread_t
    }
    private let condition = NSCondition()
    private var list: [Entry] = []
    private var tokens: [any NSObjectProtocol] = []

    init(_ names: [Notification.Name], object: AnyObject?) {
        tokens = names.map { name in
            NotificationCenter.default.addObserver(forName: name, object: object, queue: nil) { [weak self] n in
                self?.append(Entry(name: n.name, object: n.object as AnyObject?, userInfo: n.userInfo ?? [:], thread: pthread_self()))
            }
        }
    }
    deinit { for t in tokens { NotificationCenter.default.removeObserver(t) } }

    private func append(_ e: Entry) {
        condition.withLock {
            list.append(e)
            condition.broadcast()
        }
    }

    var entries: [Entry] { condition.withLock { list } }
    var names: [Notification.Name] { entries.map(\.name) }

    /// Waits up to `timeout` seconds until `done` holds for the entries so far.
    func wait(timeout: Double = 10, until done: ([Entry]) -> Bool) -> Bool {
        let end = Date() + timeout
        return condition.withLock {
            while !done(list) {
                if !condition.wait(until: end) { return done(list) }
            }
            return true
        }
    }
    func wait(timeout: Double = 10, for name: Notification.Name, count: Int = 1) -> Bool {
        wait(timeout: timeout) { $0.filter { $0.name == name }.count >= count }
    }
}

@Suite(.timeLimit(.minutes(2))) struct NotificationTests {
    private static let sessionNames = [
        CaptureSession.didStartRunningNotification, CaptureSession.didStopRunningNotification,
        CaptureSession.runtimeErrorNotification, CaptureSession.wasInterruptedNotification,
        CaptureSession.interruptionEndedNotification,
    ]

    /// A session on a new virtual camera with a video data output.
    private func rig(_ name: String) throws -> (VirtualCamera, CaptureDevice, CaptureSession, FrameCollector) {
        let r = try VirtualSessionRig(name, modes: [.init(.yuyv, width: 320, height: 240, frameRates: [30])], position: .external)
        return (r.camera, r.device, r.session, r.collector)
    }

    /// A session let go right after stopRunning() frees its camera for the next session at once:
    /// the notifications still to be posted do not keep it (capture-bench's preview, which opens
    /// a camera twice in a row, was refused the second time).
    @Test func aSessionLetGoAfterItsStopFreesItsCameraAtOnce() throws {
        let (cam, device, first, _) = try rig("Notify Let Go")
        defer { VirtualCamera.uninstall(cam) }
        try first.start()
        first.stopRunning()
        var session: CaptureSession? = first
        _ = consume first
        for round in 0..<20 {
            session = nil
            let next = CaptureSession()
            let input = try CaptureDeviceInput(device: device)
            #expect(next.canAddInput(input), "round \(round): \(String(describing: next.reasonCannotAddInput(input)))")
            next.addInput(input)
            try next.start()
            next.stopRunning()
            session = next
        }
        #expect(session != nil)
    }

    /// The same while an observer of the first session's didStopRunning is still running (the
    /// notification names the session, so it lives until delivered): the next session's
    /// canAddInput waits for that delivery instead of calling the camera busy. (The CI's
    /// address-sanitizer run lost the race above without an observer: 1 of 20 rounds.)
    @Test func aCameraIsFreedOnceTheLetGoSessionsLastNotificationIsDelivered() throws {
        let (cam, device, first, _) = try rig("Notify Slow Observer")
        defer { VirtualCamera.uninstall(cam) }
        let id = ObjectIdentifier(first)
        let entered = DispatchSemaphore(value: 0)
        let token = NotificationCenter.default.addObserver(
            forName: CaptureSession.didStopRunningNotification, object: nil, queue: nil
        ) { note in
            guard let o = note.object as AnyObject?, ObjectIdentifier(o) == id else { return }
            entered.signal()
            Thread.sleep(forTimeInterval: 0.1)
        }
        defer { NotificationCenter.default.removeObserver(token) }
        try first.start()
        first.stopRunning()
        // Held until the observer has it (one let go before is posted with no object).
        withExtendedLifetime(first) {
            #expect(entered.wait(timeout: .now() + 20) == .success, "didStopRunning was never delivered")
        }
        _ = consume first
        let next = CaptureSession()
        let input = try CaptureDeviceInput(device: device)
        #expect(next.canAddInput(input), "\(String(describing: next.reasonCannotAddInput(input)))")
    }

    /// Start, stop, then an unplug: didStart, didStop, didStart, runtimeError (the CaptureError
    /// under CaptureSessionErrorKey), didStop, each with the session as object, none on the
    /// thread that started or stopped it; another session's are not seen.
    @Test func startStopAndRuntimeErrorAreNotified() throws {
        let (cam, _, session, collector) = try rig("Notify Run")
        defer { VirtualCamera.uninstall(cam) }
        let log = NotificationLog(Self.sessionNames, object: session)
        let caller = pthread_self()
        try session.start()
        #expect(log.wait(for: CaptureSession.didStartRunningNotification))
        session.stopRunning()
        #expect(log.wait(for: CaptureSession.didStopRunningNotification))
        try session.start()
        defer { session.stopRunning() }
        #expect(collector.wait(for: 2, timeout: 5))
        cam.disconnect()
        defer { cam.reconnect() }
        #expect(log.wait(for: CaptureSession.didStopRunningNotification, count: 2), "\(log.names)")
        #expect(
            log.names == [
                CaptureSession.didStartRunningNotification, CaptureSession.didStopRunningNotification,
                CaptureSession.didStartRunningNotification, CaptureSession.runtimeErrorNotification,
                CaptureSession.didStopRunningNotification,
            ], "\(log.names)")
        let entries = log.entries
        #expect(entries.allSatisfy { $0.object === session })
        #expect(entries.allSatisfy { pthread_equal($0.thread, caller) == 0 }, "posted on the caller's thread")
        let error = try #require(entries.first { $0.name == CaptureSession.runtimeErrorNotification }?.userInfo[CaptureSessionErrorKey])
        #expect((error as? CaptureError)?.code == .disconnected, "\(error)")
        #expect(entries.filter { $0.name != CaptureSession.runtimeErrorNotification }.allSatisfy { $0.userInfo.isEmpty })
    }

    /// Another client holds the camera when the session starts: wasInterrupted with the reason's
    /// raw value under CaptureSessionInterruptionReasonKey and the device, then
    /// interruptionEnded once the other client lets go.
    @Test func interruptionsAreNotified() throws {
        let (cam, device, session, collector) = try rig("Notify Busy")
        defer { VirtualCamera.uninstall(cam) }
        let log = NotificationLog(Self.sessionNames, object: session)
        let other = try cam.makeSource()
        try other.startStreaming(bufferCount: 2)
        session.startRunning()
        defer { session.stopRunning() }
        #expect(log.wait(for: CaptureSession.wasInterruptedNotification), "\(log.names)")
        let began = try #require(log.entries.first { $0.name == CaptureSession.wasInterruptedNotification })
        let reason = began.userInfo[CaptureSessionInterruptionReasonKey] as? String
        #expect(reason.flatMap(CaptureSession.InterruptionReason.init(rawValue:)) == .videoDeviceInUseByAnotherClient)
        #expect((began.userInfo[CaptureSessionInterruptedDeviceKey] as? CaptureDevice) === device)
        #expect(began.object === session)
        other.stopStreaming()
        #expect(log.wait(for: CaptureSession.interruptionEndedNotification), "\(log.names)")
        #expect(collector.wait(for: 2, timeout: 5))
        let ended = try #require(log.entries.first { $0.name == CaptureSession.interruptionEndedNotification })
        #expect((ended.userInfo[CaptureSessionInterruptedDeviceKey] as? CaptureDevice) === device)
        #expect(
            log.names == [
                CaptureSession.didStartRunningNotification, CaptureSession.wasInterruptedNotification,
                CaptureSession.interruptionEndedNotification,
            ], "\(log.names)")
    }

    /// With no DeviceMonitor started (as an AVFoundation app observes): installing, unplugging,
    /// plugging back and uninstalling a virtual camera post connected, disconnected, connected,
    /// disconnected, on the thread that made the change, the device as object.
    @Test func aVirtualCameraComingAndGoingIsNotified() throws {
        // Apps list their cameras first; from then on changes are announced.
        _ = CaptureDevice.devices(for: .video)
        let cam = VirtualCamera(name: "Notify Plug \(UUID().uuidString.prefix(6))", position: .external)
        let log = NotificationLog([CaptureDevice.wasConnectedNotification, CaptureDevice.wasDisconnectedNotification], object: nil)
        func mine() -> [NotificationLog.Entry] {
            log.entries.filter { ($0.object as? CaptureDevice)?.uniqueID == cam.uniqueID }
        }
        let caller = pthread_self()
        VirtualCamera.install(cam)
        defer { VirtualCamera.uninstall(cam) }
        #expect(mine().map(\.name) == [CaptureDevice.wasConnectedNotification])
        let device = try #require(CaptureDevice.device(withUniqueID: cam.uniqueID))
        cam.disconnect()
        #expect(!device.isConnected)
        cam.reconnect()
        VirtualCamera.uninstall(cam)
        #expect(
            mine().map(\.name) == [
                CaptureDevice.wasConnectedNotification, CaptureDevice.wasDisconnectedNotification,
                CaptureDevice.wasConnectedNotification, CaptureDevice.wasDisconnectedNotification,
            ], "\(mine().map(\.name))")
        #expect(mine().allSatisfy { $0.object === device && pthread_equal($0.thread, caller) != 0 })
    }
}
