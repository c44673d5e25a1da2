// Hot-plug: tells when cameras appear and disappear. V4L2 nodes are watched with inotify on the
// device folder; virtual cameras through their installation list. `CaptureDevice.devices(for:)`
// stays the source of truth: every change is found by listing the devices again and comparing.
import CaptureVirtual
import CaptureV4L2
import CaptureBackend
import CaptureSystem
#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Synchronization

/// Watches the camera list and reports cameras that connect or disconnect, as AVFoundation's
/// `AVCaptureDeviceWasConnected` / `WasDisconnected` notifications.
///
/// ```swift
/// let monitor = DeviceMonitor()
/// try monitor.start()
/// for await event in monitor.events() {
///     switch event {
///     case .connected(let device): print("new camera", device.localizedName)
///     case .disconnected(let id): print("gone", id)
///     }
/// }
/// ```
///
/// V4L2 nodes are noticed when `/dev/video*` is created, deleted or changes permissions
/// (inotify `IN_CREATE`, `IN_DELETE`, `IN_ATTRIB`), including on a system that has no video node
/// yet; virtual cameras when they are installed or uninstalled. A vivid `disconnect` or an unplug
/// whose node stays in `/dev` is not a list change: the session reports that one
/// (`CaptureSession.Event.deviceDisconnected`). Thread-safe; handlers run on a private serial
/// queue, in the order the events happened. A started monitor also posts
/// `CaptureDevice.wasConnectedNotification` / `wasDisconnectedNotification` (once per device
/// object, however many monitors run).
public final class DeviceMonitor: Sendable {
    /// A change to the camera list.
    public enum Event: Sendable, Equatable, CustomStringConvertible {
        /// A camera appeared (plugged in, driver loaded, permission granted, virtual camera installed).
        case connected(CaptureDevice)
        /// The camera with this `uniqueID` is no longer listed.
        case disconnected(String)

        public var description: String {
            switch self {
            case .connected(let d): "connected(\(d.localizedName), \(d.uniqueID))"
            case .disconnected(let id): "disconnected(\(id))"
            }
        }
    }

    private struct State {
        var known: [String: CaptureDevice] = [:]
        var handlers: [UUID: @Sendable (Event) -> Void] = [:]
        var streams: [UUID: AsyncStream<Event>.Continuation] = [:]
        var watcher: Watcher?
        var started = false
    }
    private let state = Locked(State())
    /// Serialises rescans, so events come out in the order the list changed.
    // Serialises scans; its value is unused but not empty on purpose (see `Locked`).
    private let scanLock = Locked(0)
    private let handlerQueue = DispatchQueue(label: "swift-capture.device-monitor")

    /// A monitor; nothing is watched until `start()`.
    public init() {}

    deinit {
        state.withLock { $0.watcher }?.stop()
        MonitorList.shared.remove(self)
    }

    /// The cameras as of the last change the monitor saw (after `start()`).
    public var devices: [CaptureDevice] {
        state.withLock { Array($0.known.values) }.sorted { $0.path < $1.path }
    }

    /// Whether inotify watches the device folder (false when it could not be watched; then only
    /// virtual cameras are reported).
    public var isWatchingDeviceFolder: Bool { state.withLock { $0.watcher != nil } }

    /// Takes the current list as the baseline and starts watching. Idempotent. Throws `.ioError`
    /// when inotify is unavailable (virtual cameras are still reported then).
    public func start() throws(CaptureError) {
        let first = state.withLock { st -> Bool in
            defer { st.started = true }
            return !st.started
        }
        guard first else { return }
        let baseline = Dictionary(CaptureDevice.devices(for: .video).map { ($0.uniqueID, $0) }, uniquingKeysWith: { a, _ in a })
        state.withLock { $0.known = baseline }
        MonitorList.shared.add(self)
        let watcher = try Watcher(directory: V4L2Discovery.deviceDirectory) { [weak self] in self?.rescan() }
        state.withLock { $0.watcher = watcher }
        watcher.run()
    }

    /// Stops watching and ends every event stream.
    public func stop() {
        let (watcher, streams) = state.withLock { st in
            defer { st.watcher = nil; st.streams = [:]; st.started = false }
            return (st.watcher, Array(st.streams.values))
        }
        watcher?.stop()
        MonitorList.shared.remove(self)
        for s in streams { s.finish() }
    }

    /// A new stream of list changes (each call gets its own; it ends at `stop()`).
    public func events() -> AsyncStream<Event> {
        let id = UUID()
        let (stream, cont) = AsyncStream<Event>.makeStream(bufferingPolicy: .bufferingNewest(256))
        state.withLock { $0.streams[id] = cont }
        cont.onTermination = { [weak self] _ in _ = self?.state.withLock { $0.streams.removeValue(forKey: id) } }
        return stream
    }

    /// Calls `handler` on a private serial queue for every change; returns a token for `removeHandler`.
    @discardableResult
    public func addHandler(_ handler: @escaping @Sendable (Event) -> Void) -> UUID {
        let id = UUID()
        state.withLock { $0.handlers[id] = handler }
        return id
    }

    /// Stops calling the handler `token` names.
    public func removeHandler(_ token: UUID) { _ = state.withLock { $0.handlers.removeValue(forKey: token) } }

    /// Lists the devices again and posts what changed. Safe from any thread.
    func rescan() {
        scanLock.withLock { _ in
            guard state.withLock({ $0.started }) else { return }
            let now = Dictionary(CaptureDevice.devices(for: .video).map { ($0.uniqueID, $0) }, uniquingKeysWith: { a, _ in a })
            var gone: [String: CaptureDevice] = [:]
            let (events, handlers, streams) = state.withLock {
                st -> ([Event], [@Sendable (Event) -> Void], [AsyncStream<Event>.Continuation]) in
                var events: [Event] = []
                for (id, old) in st.known.sorted(by: { $0.key < $1.key }) where now[id] !== old {
                    events.append(.disconnected(id))
                    gone[id] = old
                }
                for (id, new) in now.sorted(by: { $0.value.path < $1.value.path }) where st.known[id] !== new {
                    events.append(.connected(new))
                }
                st.known = now
                return (events, Array(st.handlers.values), Array(st.streams.values))
            }
            for e in events {
                switch e {
                case .connected(let d): d.announce(connected: true)
                case .disconnected(let id): gone[id]?.announce(connected: false)
                }
                for s in streams { s.yield(e) }
                if !handlers.isEmpty { handlerQueue.async { for h in handlers { h(e) } } }
            }
        }
    }
}

/// The started monitors, told about virtual camera changes through the one installation observer.
private final class MonitorList: Sendable {
    static let shared = MonitorList()
    private struct Weak: @unchecked Sendable { weak var monitor: DeviceMonitor? }
    private let list = Locked<[ObjectIdentifier: Weak]>([:])

    private init() {
        VirtualCamera.addInstallationObserver { [unowned self] in
            for w in list.withLock({ Array($0.values) }) { w.monitor?.rescan() }
        }
    }
    func add(_ m: DeviceMonitor) { list.withLock { $0[ObjectIdentifier(m)] = Weak(monitor: m) } }
    func remove(_ m: DeviceMonitor) { _ = list.withLock { $0.removeValue(forKey: ObjectIdentifier(m)) } }
}

/// The inotify descriptor on the device folder and the thread that waits on it.
private final class Watcher: @unchecked Sendable {
    private let inotify: FileDescriptor
    private let wake: FileDescriptor
    private let onChange: @Sendable () -> Void
    private let done = DispatchSemaphore(value: 0)
    private let stopping = Atomic<Bool>(false)
    private let running = Atomic<Bool>(false)
    /// The watcher thread (`pthread_self`), so a stop from inside a callback does not wait for itself.
    private let thread = Atomic<UInt>(0)

    // IN_CREATE | IN_DELETE | IN_ATTRIB | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF
    private static let mask: UInt32 = 0x100 | 0x200 | 0x004 | 0x040 | 0x080 | 0x400

    init(directory: String, onChange: @escaping @Sendable () -> Void) throws(CaptureError) {
        switch FileDescriptor.inotify(watching: directory, mask: Self.mask) {
        case .success(let fd): inotify = fd
        case .failure(let e):
            throw CaptureError(
                .ioError, "cannot watch \(directory) for cameras (\(e.errno.name)); hot-plug events need inotify",
                errno: e.errno.rawValue, operation: e.operation)
        }
        switch FileDescriptor.makeEventFD() {
        case .success(let fd): wake = fd
        case .failure(let e):
            throw CaptureError(
                .ioError, "cannot create the device monitor's wake-up descriptor (\(e.errno.name))",
                errno: e.errno.rawValue, operation: e.operation)
        }
        self.onChange = onChange
    }

    func run() {
        running.store(true, ordering: .releasing)
        NamedThread.start("cap devices") { [self] in loop() }
    }

    func stop() {
        guard running.load(ordering: .acquiring), !stopping.exchange(true, ordering: .acquiringAndReleasing) else { return }
        wake.signal()
        if thread.load(ordering: .acquiring) != UInt(pthread_self()) { done.wait() }
    }

    private func loop() {
        thread.store(UInt(pthread_self()), ordering: .releasing)
        defer { done.signal() }
        var buffer = [UInt8](repeating: 0, count: 4096)
        var fds = [
            pollfd(fd: inotify.rawValue, events: Int16(POLLIN), revents: 0),
            pollfd(fd: wake.rawValue, events: Int16(POLLIN), revents: 0),
        ]
        var quiet = [pollfd(fd: inotify.rawValue, events: Int16(POLLIN), revents: 0)]
        while !stopping.load(ordering: .acquiring) {
            fds[0].revents = 0
            fds[1].revents = 0
            // A failing poll on our own descriptors cannot recover: the monitor stops.
            guard case .success = Syscall.poll(&fds, timeoutMilliseconds: -1) else { return }
            if fds[1].revents != 0 { return }
            guard fds[0].revents & Int16(POLLIN) != 0 else { continue }
            var relevant = drain(&buffer)
            if relevant {
                // A node and its siblings (a driver registers several) arrive in a burst; list once.
                quiet[0].revents = 0
                while case .success(let n) = Syscall.poll(&quiet, timeoutMilliseconds: 30), n > 0 {
                    relevant = drain(&buffer) || relevant
                    quiet[0].revents = 0
                }
                onChange()
            }
        }
    }

    /// Reads every pending inotify event; true if one names a video node (or overflowed).
    private func drain(_ buffer: inout [UInt8]) -> Bool {
        var relevant = false
        while true {
            // EAGAIN (nothing left) or an error both end this round.
            guard case .success(let n) = buffer.withUnsafeMutableBytes({ inotify.read(into: $0) }), n > 0 else { return relevant }
            buffer.withUnsafeBytes { raw in
                var offset = 0
                // struct inotify_event: wd, mask, cookie, len (4 bytes each), then len bytes of name.
                while offset + 16 <= n {
                    let mask = raw.loadUnaligned(fromByteOffset: offset + 4, as: UInt32.self)
                    let len = Int(raw.loadUnaligned(fromByteOffset: offset + 12, as: UInt32.self))
                    let nameStart = offset + 16
                    let nameEnd = min(n, nameStart + len)
                    let name = raw[nameStart..<nameEnd].prefix { $0 != 0 }
                    // IN_Q_OVERFLOW (0x4000) lost events: rescan to be safe.
                    if mask & 0x4000 != 0 || name.starts(with: Array("video".utf8)) { relevant = true }
                    offset = nameStart + len
                }
            }
        }
    }
}
