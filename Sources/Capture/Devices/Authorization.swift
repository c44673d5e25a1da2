import CaptureBackend
import CapturePortal
import CaptureSystem
import CaptureVirtual
import Foundation

extension CaptureDevice {
    /// Whether the app may use cameras or microphones, as `AVAuthorizationStatus`.
    public enum AuthorizationStatus: String, Sendable, Hashable, CaseIterable {
        /// Nothing decides yet: no such device exists and the user is not in its group, or (cameras,
        /// where the camera portal decides) the portal has not been asked in this process.
        case notDetermined
        /// A policy outside the user's reach forbids it: a sandbox without device access and no
        /// camera portal on the session bus, or the desktop's lockdown setting.
        case restricted
        /// The devices exist but the user may not open them, or the camera portal refused;
        /// `authorizationAdvice(for:)` says what to do.
        case denied
        /// The user may open the devices (or root, or a member of their group), the camera
        /// portal granted the camera to this process, or a virtual device of the kind is
        /// installed (it needs no permission).
        case authorized
    }

    /// What Linux decides for `mediaType` (`.video`: the `/dev/video*` nodes, group `video`;
    /// `.audio`: the ALSA capture nodes `/dev/snd/pcmC*D*c`, group `audio`): `.authorized` when
    /// the process may open one of them read-write (root may open all), or, with none present, when
    /// it is in the group that owns them, or when a virtual device of the kind is installed (a
    /// connected `VirtualCamera`, a `VirtualMicrophone`: the process can capture from it whatever
    /// the nodes say); `.denied` when they exist and it may open none;
    /// `.notDetermined` when none exists and it is not in the group; `.restricted` for microphones
    /// inside a Flatpak sandbox that was given no device access. Cheap (a few `access` calls); any
    /// thread.
    ///
    /// Cameras inside a Flatpak sandbox (`/.flatpak-info`) without device nodes, or anywhere with
    /// the environment variable `CAPTURE_FORCE_PORTAL=1`, are the camera portal's to decide
    /// (`org.freedesktop.portal.Camera` on the session bus): `.notDetermined` until
    /// `requestAccess(for:)` asked it in this process (the portal answers only a request, which
    /// may prompt the user), then `.authorized` or `.denied` as it answered, for the rest of the
    /// process; `.restricted` when no portal with a camera interface is on the session bus (or
    /// libdbus-1 is missing) or the desktop's lockdown disables the camera. That check is one
    /// D-Bus round trip (at most 2 s). A granted camera is reached through PipeWire
    /// (`OpenPipeWireRemote`), not through `/dev/video*`: device discovery does not list it yet.
    public static func authorizationStatus(for mediaType: MediaType) -> AuthorizationStatus {
        AuthorizationCheck(mediaType: mediaType).status
    }

    /// What the user can do about a status other than `.authorized` (nil when authorized), in
    /// words: e.g. "add the user to the group 'video' and log in again".
    public static func authorizationAdvice(for mediaType: MediaType) -> String? {
        AuthorizationCheck(mediaType: mediaType).advice
    }

    /// Asks for access, as `requestAccess(for:completionHandler:)`; the answer comes on a private
    /// queue. Where the camera portal decides (see `authorizationStatus(for:)`), this asks it
    /// (`AccessCamera`, which may show the desktop's prompt) and waits for its answer, at most
    /// `CAPTURE_PORTAL_TIMEOUT` seconds (default 120): false when it refuses, is missing or does
    /// not answer in time (`authorizationAdvice(for:)` then says which). Elsewhere Linux shows no
    /// prompt: the answer is whether `authorizationStatus(for:)` is `.authorized`.
    public static func requestAccess(for mediaType: MediaType, completionHandler: @escaping @Sendable (Bool) -> Void) {
        let environment = ProcessInfo.processInfo.environment
        DispatchQueue.global().async { completionHandler(PortalAuthorization.requestAccess(for: mediaType, environment: environment)) }
    }

    /// Asks for access; see `requestAccess(for:completionHandler:)`.
    public static func requestAccess(for mediaType: MediaType) async -> Bool {
        await withCheckedContinuation { answer in requestAccess(for: mediaType) { answer.resume(returning: $0) } }
    }
}

/// The camera portal's part of authorization: when it decides, what it answered this process
/// (per session bus), and the blocking request. Internal; any thread.
enum PortalAuthorization {
    /// What a request to the portal came to.
    enum Answer: Equatable {
        case granted, refused
        /// The portal answered NotAllowed: the desktop's lockdown disables the camera.
        case lockedDown
        /// No answer (no portal, a timeout, a broken bus); the status stays as the portal says.
        case failed(PortalError)
    }

    /// The answers of this process's requests, by session bus address.
    static let answers = Locked<[String: Answer]>([:])

    /// Whether the portal decides for `mediaType` here: cameras only, inside Flatpak when the
    /// sandbox shows no camera nodes (with `--device=all` the nodes decide, as on the host), or
    /// anywhere when forced.
    static func decides(for mediaType: MediaType, sandboxed: Bool, nodesVisible: Bool, environment: [String: String]) -> Bool {
        mediaType == .video && ((sandboxed && !nodesVisible) || environment["CAPTURE_FORCE_PORTAL"] == "1")
    }

    /// How long a request waits for the portal's answer (the user may be reading a prompt).
    static func timeout(_ environment: [String: String]) -> Double {
        environment["CAPTURE_PORTAL_TIMEOUT"].flatMap(Double.init).flatMap { $0 > 0 ? $0 : nil } ?? 120
    }

    /// `requestAccess(for:)`'s work, blocking: asks the portal where it decides (and the nodes do
    /// not already allow it), remembering the answer.
    static func requestAccess(
        for mediaType: MediaType, environment: [String: String], timeout: Double? = nil, virtualDevices: Bool? = nil
    ) -> Bool {
        let check = AuthorizationCheck(mediaType: mediaType, environment: environment, askPortal: false, virtualDevices: virtualDevices)
        guard check.portalDecides else { return check.status == .authorized }
        if check.nodesAllow || check.virtualAllows { return true }
        guard let address = DBusConnection.sessionBusAddress(environment: environment) else { return false }
        if answers.withLock({ $0[address] }) == .granted { return true }
        let answer: Answer
        do {
            let response = try CameraPortal(address: address).accessCamera(timeout: timeout ?? Self.timeout(environment))
            answer = response == .granted ? .granted : .refused
        } catch {
            answer = error.notAllowed ? .lockedDown : .failed(error)
        }
        answers.withLock { $0[address] = answer }
        return answer == .granted
    }
}

/// The facts behind an authorization status. Internal.
struct AuthorizationCheck {
    let mediaType: MediaType
    let nodes: [String]
    let group: String
    let environment: [String: String]
    /// Inside Flatpak (`/.flatpak-info`) device nodes are visible only with `--device=all`.
    let sandboxed: Bool
    /// Where the portal decides: this process's answer from it, and what it says now (nil
    /// before asked, or when built with `askPortal: false`).
    private(set) var portalAnswer: PortalAuthorization.Answer?
    private(set) var cameraPresent: Result<Bool, PortalError>?
    /// Whether the camera portal decides (cameras, inside Flatpak with no nodes, or with CAPTURE_FORCE_PORTAL=1).
    let portalDecides: Bool
    /// Whether a node lets this process open it (root may open all, and those that appear, except
    /// in a sandbox, which shows it none). Forcing the portal outside a sandbox leaves the nodes
    /// out, so the portal alone decides. (Found once: `status` and `advice` both need it.)
    let nodesAllow: Bool
    /// Whether an installed virtual device of the kind lets this process capture (it needs no
    /// permission). Tests pass it; otherwise read from the installed devices.
    let virtualAllows: Bool

    init(
        mediaType: MediaType, root: String = "/dev", environment: [String: String] = ProcessInfo.processInfo.environment,
        sandboxed: Bool = FileManager.default.fileExists(atPath: "/.flatpak-info"), askPortal: Bool = true,
        virtualDevices: Bool? = nil
    ) {
        self.mediaType = mediaType
        self.environment = environment
        self.sandboxed = sandboxed
        virtualAllows =
            virtualDevices
            ?? (mediaType == .video
                ? VirtualCamera.installed.contains { $0.isConnected } : VirtualMicrophone.installed.contains { $0.isConnected })
        switch mediaType {
        case .video:
            group = "video"
            nodes = ((try? FileSystem.names(in: root).get()) ?? []).filter { $0.hasPrefix("video") }.sorted().map { root + "/" + $0 }
        case .audio:
            group = "audio"
            nodes = ((try? FileSystem.names(in: root + "/snd").get()) ?? [])
                .filter { $0.hasPrefix("pcmC") && $0.hasSuffix("c") }.sorted().map { root + "/snd/" + $0 }
        }
        portalDecides = PortalAuthorization.decides(
            for: mediaType, sandboxed: sandboxed, nodesVisible: !nodes.isEmpty, environment: environment)
        nodesAllow =
            if portalDecides && !sandboxed {
                false
            } else if ProcessAccess.isRoot && !(sandboxed && nodes.isEmpty) {
                true
            } else {
                nodes.contains(where: { if case .success = ProcessAccess.mayOpen($0) { true } else { false } })
            }
        guard askPortal, portalDecides, !nodesAllow, !virtualAllows else { return }
        guard let address = DBusConnection.sessionBusAddress(environment: environment) else {
            cameraPresent = .failure(.noSessionBus)
            return
        }
        portalAnswer = PortalAuthorization.answers.withLock { $0[address] }
        if portalAnswer == .granted || portalAnswer == .refused || portalAnswer == .lockedDown { return }
        // The portal is asked whether it is there (and sees a camera); it cannot say more without a request.
        cameraPresent = Result { () throws(PortalError) in try CameraPortal(address: address).isCameraPresent(timeout: 2) }
    }

    var status: CaptureDevice.AuthorizationStatus {
        if nodesAllow || virtualAllows { return .authorized }
        if portalDecides {
            switch portalAnswer {
            case .granted: return .authorized
            case .refused: return .denied
            case .lockedDown: return .restricted
            case .failed, nil:
                if case .failure(let error) = cameraPresent, error.portalMissing || !isTransient(error) { return .restricted }
                return .notDetermined
            }
        }
        if !nodes.isEmpty { return .denied }
        if sandboxed { return .restricted }
        return ProcessAccess.isMember(ofGroup: group) ? .authorized : .notDetermined
    }

    /// A failure that says nothing about the portal's presence (it is there but did not answer in time).
    private func isTransient(_ error: PortalError) -> Bool {
        if case .timedOut = error { true } else { false }
    }

    var advice: String? {
        let kind = mediaType == .video ? "cameras" : "microphones"
        let status = status
        if portalDecides && status != .authorized { return portalAdvice(status) }
        switch status {
        case .authorized:
            return nil
        case .denied:
            // The first node a group other than root's owns (a udev rule gave it that group);
            // with none, the usual group, which a udev rule would give.
            let owned = nodes.lazy.compactMap { node in ProcessAccess.owningGroup(of: node).flatMap { $0 == "root" ? nil : (node, $0) } }
                .first
            let (node, owner) = owned ?? (nodes[0], group)
            return
                "This user may not open the \(kind) (\(node)): add it to the group '\(owner)' (sudo usermod -aG \(owner) $USER) and log in again."
        case .notDetermined:
            return
                "No \(kind) are present, and this user is not in the group '\(group)': add it (sudo usermod -aG \(group) $USER) so that it may open them when they appear."
        case .restricted:
            // Cameras in a sandbox are the portal's (`portalAdvice`); this is the microphones'.
            return "The sandbox hides the \(kind): run the app with device access (flatpak run --device=all)."
        }
    }

    /// The words where the camera portal decides.
    private func portalAdvice(_ status: CaptureDevice.AuthorizationStatus) -> String {
        let app = environment["FLATPAK_ID"].flatMap { $0.isEmpty ? nil : $0 } ?? "APPID"
        let ask = "ask with CaptureDevice.requestAccess(for: .video), which may show the desktop's prompt"
        switch (status, portalAnswer) {
        case (.denied, _):
            return
                "The camera portal refused the camera: allow the camera in the desktop's privacy settings, or `flatpak permission-set devices camera \(app) yes`, then ask again."
        case (.restricted, .lockedDown):
            return
                "The desktop's lockdown settings disable the camera (the camera portal answered NotAllowed): only the desktop's administrator can allow it."
        case (.notDetermined, .failed(.timedOut(_, let seconds))):
            return
                "The camera portal did not answer within \(seconds) s (a prompt nobody answered?): \(ask) again (CAPTURE_PORTAL_TIMEOUT sets the wait in seconds)."
        case (.notDetermined, _):
            if case .success(false) = cameraPresent {
                return "The camera portal sees no camera (PipeWire lists none): connect one; \(ask)."
            }
            return "The camera portal decides: \(ask)."
        default:
            let why: String
            switch cameraPresent {
            case .failure(.libraryMissing): why = "libdbus-1 (libdbus-1.so.3) is missing, so the camera portal cannot be asked"
            case .failure(.noSessionBus): why = "there is no session bus (DBUS_SESSION_BUS_ADDRESS) to reach the camera portal on"
            case .failure(let error) where error.portalMissing:
                why =
                    "no camera portal is on the session bus (xdg-desktop-portal with a backend, such as xdg-desktop-portal-gtk, provides it)"
            case .failure(let error): why = "the camera portal could not be asked (\(error))"
            default: why = "the camera portal could not be asked"
            }
            let whose = sandboxed ? "The sandbox hides the cameras" : "CAPTURE_FORCE_PORTAL=1 leaves the cameras to the camera portal"
            return "\(whose), and \(why): install or start it, or run the app with device access (flatpak run --device=all)."
        }
    }
}
