// Seed 003: is there a camera, which way does it face, can we toggle? Prints a report.
// Usage: camera-check [--virtual]   (--virtual installs the virtual front/back pair first)
import Capture
import Foundation

// Whether this app may use this machine's cameras and microphones, and what to do if not (inside
// Flatpak: the camera portal's answer); read before the virtual pair, which needs no permission.
let authorization = [MediaType.video, .audio].map { type in
    let advice = CaptureDevice.authorizationAdvice(for: type).map { ": " + $0 } ?? ""
    return "\(type.rawValue) authorization: \(CaptureDevice.authorizationStatus(for: type).rawValue)\(advice)"
}

if CommandLine.arguments.contains("--virtual") || !CaptureDevice.isCameraAvailable {
    if !CommandLine.arguments.contains("--virtual") { print("no camera found: installing the virtual camera") }
    _ = VirtualCamera.installDefaultPair()
}

print("camera available: \(CaptureDevice.isCameraAvailable)")
print("front camera available: \(CaptureDevice.isFrontCameraAvailable)")
print("rear camera available: \(CaptureDevice.isRearCameraAvailable)")
print("multiple cameras: \(CaptureDevice.hasMultipleCameras)")
for device in CaptureDevice.devices(for: .video) {
    print("camera: \(device.localizedName) | \(device.path) | position \(device.position.rawValue) | id \(device.uniqueID)")
    let formats = device.formats
    for f in formats.prefix(12) { print("  format: \(f)") }
    if formats.count > 12 { print("  ... \(formats.count - 12) more formats") }
}
for device in CaptureDevice.devices(for: .audio) {
    print("microphone: \(device.localizedName) | \(device.path) | id \(device.uniqueID)")
}
for line in authorization { print(line) }
