import CaptureBackend
import CaptureSystem
import Foundation

extension CaptureDevice {
    /// Whether the app may use cameras or microphones, as `AVAuthorizationStatus`.
    public enum AuthorizationStatus: String, Sendable, Hashable, CaseIterable {
        /// Nothing decides yet: no such device exists, and the user is not in its group.
        case notDetermined
        /// A policy outside the user's reach forbids it (a sandbox without the camera portal).
        case restricted
        /// The devices exist but the user may not open them; `authorizationAdvice(for:)` says
        /// what to do.
        case denied
        /// The user may open the devices (or root, or a member of their group).
        case authorized
    }

    /// What Linux decides for `mediaType` (`.video`: the `/dev/video*` nodes, group `video`;
    /// `.audio`: the ALSA capture nodes `/dev/snd/pcmC*D*c`, group `audio`): `.authorized` when
    /// the process may open one of them read-write (root may open all), or, with none present, when
    /// it is in the group that owns them; `.denied` when they exist and it may open none;
    /// `.notDetermined` when none exists and it is not in the group; `.restricted` inside a
    /// Flatpak sandbox that was given no device access. Cheap (a few `access` calls); any thread.
    public static func authorizationStatus(for mediaType: MediaType) -> AuthorizationStatus {
        AuthorizationCheck(mediaType: mediaType).status
    }

    /// What the user can do about a status other than `.authorized` (nil when authorized), in
    /// words: e.g. "add the user to the group 'video' and log in again".
    public static func authorizationAdvice(for mediaType: MediaType) -> String? {
        AuthorizationCheck(mediaType: mediaType).advice
    }

    /// Asks for access, as `requestAccess(for:completionHandler:)`. Linux shows no prompt: the
    /// answer is whether `authorizationStatus(for:)` is `.authorized`, given on a private queue.
    public static func requestAccess(for mediaType: MediaType, completionHandler: @escaping @Sendable (Bool) -> Void) {
        DispatchQueue.global().async { completionHandler(authorizationStatus(for: mediaType) == .authorized) }
    }

    /// Asks for access; see `requestAccess(for:completionHandler:)`.
    public static func requestAccess(for mediaType: MediaType) async -> Bool {
        authorizationStatus(for: mediaType) == .authorized
    }
}

/// The facts behind an authorization status. Internal.
struct AuthorizationCheck {
    let mediaType: MediaType
    let nodes: [String]
    let group: String

    init(mediaType: MediaType, root: String = "/dev") {
        self.mediaType = mediaType
        let fm = FileManager.default
        switch mediaType {
        case .video:
            group = "video"
            nodes = ((try? fm.contentsOfDirectory(atPath: root)) ?? []).filter { $0.hasPrefix("video") }.sorted().map { root + "/" + $0 }
        case .audio:
            group = "audio"
            nodes = ((try? fm.contentsOfDirectory(atPath: root + "/snd")) ?? [])
                .filter { $0.hasPrefix("pcmC") && $0.hasSuffix("c") }.sorted().map { root + "/snd/" + $0 }
        }
    }

    /// Inside Flatpak (`/.flatpak-info`) device nodes are visible only with `--device=all`.
    private var sandboxed: Bool { FileManager.default.fileExists(atPath: "/.flatpak-info") }

    var status: CaptureDevice.AuthorizationStatus {
        if ProcessAccess.isRoot { return .authorized }
        if nodes.contains(where: { if case .success = ProcessAccess.mayOpen($0) { true } else { false } }) { return .authorized }
        if !nodes.isEmpty { return .denied }
        if sandboxed { return .restricted }
        return ProcessAccess.isMember(ofGroup: group) ? .authorized : .notDetermined
    }

    var advice: String? {
        let kind = mediaType == .video ? "cameras" : "microphones"
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
            return "The sandbox hides the \(kind): run the app with device access (flatpak run --device=all, or the camera portal)."
        }
    }
}
