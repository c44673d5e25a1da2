import CaptureBackend
import CaptureSystem
import Foundation

/// Positions the user gives devices, which win over what the device says: for a laptop whose
/// built-in camera is not reported as such, or a rig whose cameras face known ways.
///
/// Read once per process, from the environment variable `CAPTURE_DEVICE_POSITIONS`
/// (`KEY=POSITION` entries separated by `;`) and then the file
/// `$XDG_CONFIG_HOME/swift-capture/positions` (default `~/.config/swift-capture/positions`; one
/// `KEY = POSITION` per line, `#` starts a comment). A KEY is a device's `uniqueID` or its `path`
/// (`/dev/video0`); a POSITION is `front`, `back`, `external` or `unspecified`. The environment wins
/// over the file. Any thread.
public struct DevicePositionOverrides: Sendable, Hashable {
    /// Positions by unique ID or path.
    public var positions: [String: DevicePosition]
    /// Entries that could not be read, as "source: entry" (shown by `capture devices`).
    public var problems: [String]

    public init(positions: [String: DevicePosition] = [:], problems: [String] = []) {
        self.positions = positions
        self.problems = problems
    }

    /// The overrides in `environment` and `fileText` (the environment's win).
    public init(environment: String?, fileText: String?) {
        self.init()
        if let fileText { read(fileText.split(separator: "\n", omittingEmptySubsequences: false), source: "positions file") }
        if let environment { read(environment.split(separator: ";"), source: "CAPTURE_DEVICE_POSITIONS") }
    }

    private mutating func read(_ entries: [Substring], source: String) {
        for raw in entries {
            let entry = String(raw.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first ?? "")
            let text = entry.trimmingCharacters(in: .whitespaces)
            guard !text.isEmpty else { continue }
            // The key may hold '=' (a card name); the position is after the last one.
            guard let eq = text.lastIndex(of: "=") else {
                problems.append("\(source): '\(text)' has no '=POSITION'")
                continue
            }
            let key = text[..<eq].trimmingCharacters(in: .whitespaces)
            let value = text[text.index(after: eq)...].trimmingCharacters(in: .whitespaces).lowercased()
            guard !key.isEmpty, let position = DevicePosition(rawValue: value) else {
                problems.append("\(source): '\(text)': the position must be front, back, external or unspecified")
                continue
            }
            positions[key] = position
        }
    }

    /// The override for a device, by unique ID first, then path.
    public func position(uniqueID: String, path: String) -> DevicePosition? {
        positions[uniqueID] ?? positions[path]
    }

    /// The file read, following XDG.
    public static var filePath: String {
        let env = ProcessInfo.processInfo.environment
        let base = env["XDG_CONFIG_HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? (NSHomeDirectory() + "/.config")
        return base + "/swift-capture/positions"
    }

    private static let loaded = Locked<DevicePositionOverrides?>(nil)

    /// The overrides of this process (read on first use).
    public static var current: DevicePositionOverrides {
        loaded.withLock { o in
            if let o { return o }
            let read = DevicePositionOverrides(
                environment: ProcessInfo.processInfo.environment["CAPTURE_DEVICE_POSITIONS"],
                fileText: try? String(contentsOfFile: filePath, encoding: .utf8))
            o = read
            return read
        }
    }

    /// Reads the environment and the file again (after the app changed them); `replacing`
    /// sets the overrides outright instead (tests, apps with their own settings).
    public static func reload(replacing overrides: DevicePositionOverrides? = nil) {
        loaded.withLock { $0 = overrides }
    }
}
