// Which camera or microphone a command uses: from --device (a path, a unique ID, `virtual`, or
// `file:PATH` for a virtual camera showing a picture), or the default; with none on the machine,
// the library's virtual ones, said on standard error.
import Capture
import CaptureCodecs
import CapturePreview
import Foundation

/// The movie a `file:` camera plays, kept for the life of the command.
nonisolated(unsafe) private var moviePlayer: VirtualMoviePlayer?

/// Finds the camera to use; with no camera at all, says so and installs the virtual pair.
func chooseCamera(_ spec: String?) throws -> CaptureDevice {
    if let spec, spec.hasPrefix("file:") { return try pictureCamera(path: String(spec.dropFirst(5))) }
    if spec == "virtual" || spec?.hasPrefix("virtual:") == true {
        if VirtualCamera.installed.isEmpty { _ = VirtualCamera.installDefaultPair() }
        let all = CaptureDevice.devices(for: .video).filter(\.isVirtual)
        if let spec, spec != "virtual" { if let d = all.first(where: { $0.path == spec || $0.uniqueID == spec }) { return d } }
        guard let d = all.first else { throw ToolError(message: "the virtual camera could not be installed") }
        return d
    }
    if let spec {
        if let d = CaptureDevice.device(withUniqueID: spec), d.mediaType == .video { return d }
        if !FileManager.default.fileExists(atPath: spec) {
            throw ToolError(message: "no camera at '\(spec)': run 'capture devices' to list them")
        }
        throw ToolError(message: "'\(spec)' is not a camera (no video capture): run 'capture devices' to list cameras")
    }
    if let d = CaptureDevice.default(for: .video) { return d }
    FileHandle.standardError.write(Data("capture: no camera on this machine; using the virtual camera\n".utf8))
    _ = VirtualCamera.installDefaultPair()
    guard let d = CaptureDevice.default(for: .video) else { throw ToolError(message: "the virtual camera could not be installed") }
    return d
}

/// Installs a virtual camera that shows the picture at `path` (JPEG, or PNG read with the
/// preview's libpng reader), or plays the video file there in a loop (FFmpeg), and returns it.
func pictureCamera(path: String) throws -> CaptureDevice {
    // The first bytes say picture or movie (a movie is not read whole).
    guard let handle = FileHandle(forReadingAtPath: path) else {
        throw ToolError(message: "cannot read '\(path)': give file:PATH with a JPEG or PNG picture or a video file")
    }
    let head = handle.readData(ofLength: 8)
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

/// Finds the microphone to use; with none at all, says so and installs the virtual microphone.
func chooseMicrophone(_ spec: String?) throws -> CaptureDevice {
    if spec == "virtual" || (spec == nil && CaptureDevice.devices(for: .audio).isEmpty) {
        if spec == nil {
            FileHandle.standardError.write(Data("capture: no audio capture device on this machine; using the virtual microphone\n".utf8))
        }
        if VirtualMicrophone.installed.isEmpty { VirtualMicrophone.install(VirtualMicrophone()) }
        guard let d = CaptureDevice.devices(for: .audio).first(where: { $0.virtualMicrophone != nil }) else {
            throw ToolError(message: "the virtual microphone could not be installed")
        }
        return d
    }
    if let spec { return try CaptureDevice.audioDevice(named: spec) }
    guard let d = CaptureDevice.default(for: .audio) else { throw ToolError(message: "no audio capture device") }
    return d
}
