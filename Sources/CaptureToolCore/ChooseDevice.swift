// Which camera or microphone a command uses: from --device (a path, a unique ID, `virtual`, or
// `file:PATH` for a virtual camera showing a picture), or the default; with none on the machine,
// the library's virtual ones, said on standard error.
import Capture
import Foundation

/// Installs the camera `file:PATH` names (a picture or a movie, read with capture-full's libraries) and
/// returns it: capture-full sets it; `capture` hands a command with a `file:` camera over to it.
nonisolated(unsafe) package var fileCamera: (String) throws -> CaptureDevice = { _ in
    throw ToolError(message: "a file: camera needs capture-full")
}

/// Finds the camera to use; with no camera at all, says so and installs the virtual pair.
package func chooseCamera(_ spec: String?) throws -> CaptureDevice {
    if let spec, spec.hasPrefix("file:") { return try fileCamera(String(spec.dropFirst(5))) }
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

/// Finds the microphone to use; with none at all, says so and installs the virtual microphone.
package func chooseMicrophone(_ spec: String?) throws -> CaptureDevice {
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
