// Where `capture snap` puts its photos (--output, or the album), checked before the camera opens.
import Capture
import Foundation

/// Where `capture snap` puts its photos.
enum SnapDestination {
    case album
    case file(String)
    case folder(String)

    /// `--output`: a path ending in / or naming a folder is a folder (created when missing),
    /// anything else a file whose folder must exist. Checked before the camera opens.
    init(_ output: String?) throws {
        guard let output else { self = .album; return }
        var isDir: ObjCBool = false
        if output.hasSuffix("/") || FileManager.default.fileExists(atPath: output, isDirectory: &isDir) && isDir.boolValue {
            try FileManager.default.createDirectory(atPath: output, withIntermediateDirectories: true)
            try OutputPath.checkWritable(output, naming: output)
            self = .folder(output)
        } else {
            try OutputPath.checkWritable(URL(fileURLWithPath: output).deletingLastPathComponent().path, naming: output)
            try OutputPath.checkReplaceable(output)
            try OutputPath.checkExtension(output, command: "snap", writes: "JPEG", as: Self.extensions)
            self = .file(output)
        }
    }

    /// What a photo's file may be called: it holds JPEG.
    static let extensions = ["jpg", "jpeg"]

    /// Saves photo `index` of `count` and returns where it went.
    func save(_ jpeg: Data, metadata: PhotoMetadata, index: Int, count: Int) throws -> URL {
        switch self {
        case .album:
            let library = PhotoLibrary.shared
            return try library.saveSynchronously(jpeg: jpeg, metadata: metadata)
        case .file(let path):
            // Several photos: numbered before the extension given (x.jpeg: x-0001.jpeg), .jpg without one.
            let given = URL(fileURLWithPath: path)
            let ext = given.pathExtension.isEmpty ? "jpg" : given.pathExtension
            let url = count == 1 ? given : URL(fileURLWithPath: given.deletingPathExtension().path + String(format: "-%04d.", index) + ext)
            try PhotoLibrary.write(jpeg: jpeg, metadata: metadata, to: url)
            return url
        case .folder(let path):
            let url = URL(fileURLWithPath: path).appendingPathComponent(String(format: "snap-%04d.jpg", index))
            try PhotoLibrary.write(jpeg: jpeg, metadata: metadata, to: url)
            return url
        }
    }
}
