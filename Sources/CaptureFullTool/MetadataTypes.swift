// The metadata types `capture metadata --types` and `capture preview --metadata` name.
import CaptureToolCore
import CaptureVision
import Foundation

/// The types `--types` or `--metadata` names (a comma-separated list of short names), each one the
/// output has; all it has when `list` is nil.
func metadataTypes(_ list: String?, option: String, available: [MetadataObjectType]) throws -> [MetadataObjectType] {
    guard let list else { return available }
    let names = list.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    guard !names.isEmpty else {
        throw UsageError("--\(option) names no type: give one or more of \(available.map(\.name).joined(separator: ", "))")
    }
    return try names.map { name -> MetadataObjectType in
        guard let t = MetadataObjectType(name: String(name)), available.contains(t) else {
            throw UsageError("--\(option): '\(name)' is not one of \(available.map(\.name).joined(separator: ", "))")
        }
        return t
    }
}
