// `--device file:PATH`: a virtual camera showing a picture (JPEG, or PNG through the preview's
// libpng reader) or playing a movie in a loop (FFmpeg); capture-full's alone, for those libraries.
import Capture
import CaptureCodecs
import CapturePreview
import CaptureToolCore
import Foundation

/// The movie a `file:` camera plays, kept for the life of the command.
nonisolated(unsafe) private var moviePlayer: VirtualMoviePlayer?

/// Installs a virtual camera that shows the picture at `path`, or plays the video file there in a
/// loop, and returns it.
func pictureCamera(path: String) throws -> CaptureDevice {
    // The first bytes say picture or movie (a movie is not read whole).
    var isFolder: ObjCBool = false
    if FileManager.default.fileExists(atPath: path, isDirectory: &isFolder), isFolder.boolValue {
        throw ToolError(message: "'\(path)' is a folder: give file:PATH with a JPEG or PNG picture or a video file")
    }
    // (`readData(ofLength:)` traps on a read error; `read(upToCount:)` throws.)
    guard let handle = FileHandle(forReadingAtPath: path), let head = try? handle.read(upToCount: 8) else {
        throw ToolError(message: "cannot read '\(path)': give file:PATH with a JPEG or PNG picture or a video file")
    }
    try? handle.close()
    let camera = VirtualCamera(name: "File " + (path as NSString).lastPathComponent, position: .back)
    let isPNG = head.starts(with: PNGDecoding.signature)
    if !isPNG, !head.starts(with: [0xFF, 0xD8]) {
        moviePlayer = try VirtualMoviePlayer(path: path, camera: camera)
        return try install(camera, path)
    }
    guard let data = FileManager.default.contents(atPath: path) else { throw ToolError(message: "cannot read '\(path)'") }
    let picture: VirtualCamera.Picture
    if isPNG {
        switch PNGDecoding.decode(data) {
        case .success(let (w, h, rgba)): picture = try VirtualCamera.Picture(rgba: rgba, width: w, height: h)
        case .failure(let f): throw ToolError(message: "'\(path)' is not a PNG libpng can read: \(f.description)")
        }
    } else {
        picture = try VirtualCamera.Picture(contentsOfFile: path)
    }
    camera.picture = picture
    return try install(camera, path)
}

private func install(_ camera: VirtualCamera, _ path: String) throws -> CaptureDevice {
    VirtualCamera.install(camera)
    guard let d = CaptureDevice.device(withUniqueID: camera.uniqueID) else {
        throw ToolError(message: "the picture camera for '\(path)' could not be installed")
    }
    return d
}
