// The metadata types `capture metadata --types` and `capture preview --metadata` name.
import CaptureVision

/// The types `--types` or `--metadata` names (a comma-separated list of short names), each one the
/// output has; all it has when `list` is nil.
func metadataTypes(_ list: String?, option: String, available: [MetadataObjectType]) throws -> [MetadataObjectType] {
    guard let list else { return available }
    return try list.split(separator: ",").map { name -> MetadataObjectType in
        guard let t = MetadataObjectType(name: String(name)), available.contains(t) else {
            throw ToolError(message: "--\(option): '\(name)' is not one of \(available.map(\.name).joined(separator: ", "))")
        }
        return t
    }
}
