// The web app's actions (`/api/still`, `/api/toggle`, `/api/control`, answered off the daemon's
// thread), the controls it shows (`/api/controls`) and `/state`.
import CMicroHTTPD
import Capture
import Foundation

extension CaptureStreamServer {
    // MARK: Actions (answered off the daemon's thread)

    typealias Answer = @Sendable (Int, [String: Any]) -> Void

    /// Suspends `c`, runs `work` on the action queue (Dispatch, not the cooperative pool, which a
    /// host program may keep busy) and queues the answer it gives for `c`.
    func answerLater(_ c: HTTP.Connection, _ work: @escaping @Sendable (CaptureStreamServer, @escaping Answer) -> Void)
        -> MHD_Result
    {
        let accepted: Bool = lock.withLock {
            guard !stopping else { return false }
            MHD_suspend_connection(c)
            pendingWork.enter()
            return true
        }
        guard accepted else { return queueText(c, 503, "the server is stopping\n") }
        let connection = SendableConnection(c)
        actions.async { [self] in
            work(self) { status, body in
                self.lock.withLock {
                    self.queueJSON(connection.pointer, status, body)
                    MHD_resume_connection(connection.pointer)
                }
                self.pendingWork.leave()
            }
        }
        return HTTP.yes
    }

    func takeStill(_ answer: @escaping Answer) {
        guard let still = session.outputs.lazy.compactMap({ $0 as? CaptureStillImageOutput }).first,
            let connection = still.connection(with: .video)
        else {
            return answer(503, Self.failure("the session has no still image output: add a CaptureStillImageOutput"))
        }
        let library = configuration.photoLibrary
        still.captureStillImageAsynchronously(from: connection) { [self] sample, error in
            guard let sample, let jpeg = CaptureStillImageOutput.jpegStillImageDataRepresentation(sample) else {
                return answer(500, Self.failure("the still failed: \(error?.message ?? "it has no JPEG data")"))
            }
            let d = sample.dimensions
            library.save(jpeg: jpeg, metadata: nil) { [self] result in
                switch result {
                case .failure(let e):
                    answer(500, Self.failure("the still could not be saved: \(e.message)"))
                case .success(let url):
                    // Its name only: where the album is on the server's disk is none of the client's business.
                    let name = url.lastPathComponent
                    // What the album holds (with the metadata it added), for `/album/NAME`.
                    let saved = (try? Data(contentsOf: url)) ?? jpeg
                    lock.withLock {
                        stills.append((name, saved))
                        if stills.count > 8 { stills.removeFirst() }
                    }
                    answer(
                        200,
                        [
                            "ok": true,
                            "result": [
                                "url": "/album/" + name, "name": name, "bytes": saved.count,
                                "width": d?.width ?? 0, "height": d?.height ?? 0,
                            ],
                        ])
                }
            }
        }
    }

    func toggleCamera() -> (Int, [String: Any]) {
        guard let current = (session.inputs.first as? CaptureDeviceInput)?.device else {
            return (503, Self.failure("the session has no camera"))
        }
        // The other side's cameras first (front for back and back for front, as the seeds toggle),
        // then other positions, then the same; one that cannot be used (busy, gone) is skipped.
        let cameras = CaptureDevice.devices(for: .video).filter { $0.uniqueID != current.uniqueID }
        let opposite: DevicePosition? = current.position == .front ? .back : current.position == .back ? .front : nil
        let candidates =
            cameras.filter { $0.position == opposite }
            + cameras.filter { $0.position != opposite && $0.position != current.position }
            + cameras.filter { $0.position == current.position }
        guard !candidates.isEmpty else { return (409, Self.failure("\(current.localizedName) is the only camera")) }
        var problems: [String] = []
        for other in candidates {
            do throws(CaptureError) {
                try session.replaceInputs(with: try CaptureDeviceInput(device: other))
                return (
                    200,
                    ["ok": true, "result": ["camera": other.localizedName, "id": other.uniqueID, "position": other.position.rawValue]]
                )
            } catch {
                problems.append("\(other.localizedName): \(error.message)")
            }
        }
        return (409, Self.failure("cannot switch camera: " + problems.joined(separator: "; ")))
    }

    func setControl(_ id: CaptureDevice.ControlID, _ value: Int64) -> (Int, [String: Any]) {
        guard let device = (session.inputs.first as? CaptureDeviceInput)?.device else {
            return (503, Self.failure("the session has no camera"))
        }
        do throws(CaptureError) {
            try device.lockForConfiguration()
            defer { device.unlockForConfiguration() }
            try device.setValue(value, for: id)
            return (200, ["ok": true, "result": ["id": Int(id.rawValue), "value": try device.value(of: id)]])
        } catch {
            return (400, Self.failure("cannot set control \(id): \(error.message)"))
        }
    }

    func controlsJSON() -> [String: Any] {
        guard let device = (session.inputs.first as? CaptureDeviceInput)?.device else {
            return ["ok": true, "result": ["controls": [Any]()]]
        }
        let controls = (try? device.controls()) ?? []
        // What a page needs to draw each control as its type says (a menu by its items' names);
        // string and compound controls have no value the web app can set.
        let list: [[String: Any]] = controls.filter { !$0.isReadOnly && ![.string, .other].contains($0.kind) }.map { c in
            [
                "id": Int(c.id.rawValue), "name": c.name, "type": Self.typeName(c.kind), "minimum": c.minimum, "maximum": c.maximum,
                "step": Int(c.step), "default": c.defaultValue, "value": (try? device.value(of: c.id)) ?? c.defaultValue,
                "inactive": c.isInactive, "menu": c.menuItems.map { ["value": $0.value, "name": $0.name] as [String: Any] },
            ]
        }
        return ["ok": true, "result": ["camera": device.localizedName, "controls": list]]
    }

    /// A control kind's name in `/api/controls`.
    static func typeName(_ kind: CaptureDevice.Control.Kind) -> String {
        switch kind {
        case .integer: "integer"
        case .boolean: "boolean"
        case .menu: "menu"
        case .integerMenu: "integerMenu"
        case .button: "button"
        case .integer64: "integer64"
        case .string: "string"
        case .other: "other"
        }
    }

    // MARK: State

    /// `/state` in uStreamer's shape, with this server's figures added.
    func stateJSON() -> [String: Any] {
        let device = (session.inputs.first as? CaptureDeviceInput)?.device
        let desired = device?.activeVideoMinFrameDuration?.framesPerSecond ?? 0
        // What added routes report (asked outside the lock: they may take their own).
        var routes: [String: Any] = [:]
        var paths: [String] = []
        for r in lock.withLock({ addedRoutes }) {
            if let (name, value) = r.state() { routes[name] = value }
            paths += r.routes.map(\.path)
        }
        return lock.withLock {
            let now = CaptureTime.now()
            var stats: [String: Any] = [:]
            for c in clients.values {
                stats[String(c.id)] = [
                    "fps": c.fps, "frames": c.sent, "skipped": c.skipped, "extra_headers": false,
                    "advance_headers": false, "dual_final_frames": false, "zero_data": false, "key": "",
                ]
            }
            let d = newest?.dimensions ?? device?.activeFormat?.dimensions
            return [
                "ok": true,
                "result": [
                    "instance_id": "",
                    // The release the server was built from, as `capture --version` prints it.
                    "version": captureVersion,
                    "encoder": ["type": "CPU", "quality": configuration.quality],
                    "source": [
                        "resolution": ["width": d?.width ?? 0, "height": d?.height ?? 0],
                        "online": isOnlineLocked(now: now), "desired_fps": (desired * 100).rounded() / 100,
                        "captured_fps": capturedFPS, "device": device?.localizedName ?? "",
                    ],
                    "stream": [
                        "queued_fps": capturedFPS, "clients": clients.count, "clients_stat": stats,
                        "clients_refused": refused,
                    ],
                    "frames": received,
                    "drops": dropped.values.reduce(0, +),
                    "drop_reasons": Dictionary(uniqueKeysWithValues: dropped.map { ($0.key.rawValue, $0.value) }),
                    "routes": routes,
                    // What the web app may play besides /stream (e.g. /stream.mp4, /whep).
                    "paths": paths,
                ] as [String: Any],
            ]
        }
    }
}

/// A connection pointer handed to the thread that answers it (used there only under the lock).
struct SendableConnection: @unchecked Sendable {
    let pointer: HTTP.Connection
    init(_ p: HTTP.Connection) { pointer = p }
}
