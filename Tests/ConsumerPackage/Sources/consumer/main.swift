// Ported the way an iOS developer writes capture code: device settings assigned inside the
// configuration lock, a data output read plane by plane through its pixel buffer (NV12, then
// I420), a connection turned with videoRotationAngle, session notifications observed through
// NotificationCenter, and a photo delegate's five callbacks. Prints PASS/FAIL lines; exits 1 on
// any FAIL.
// Usage: consumer [--device PATH]   (without: a virtual camera with NV12 720p and I420 VGA modes)
import Capture
import Foundation

var failures = 0
@MainActor func check(_ ok: Bool, _ what: String) {
    print("\(ok ? "PASS" : "FAIL")  \(what)")
    if !ok { failures += 1 }
}

// The camera: the one named, else a virtual one (the Simulator's missing camera).
let args = CommandLine.arguments
let camera: CaptureDevice
if let i = args.firstIndex(of: "--device"), i + 1 < args.count {
    guard let d = CaptureDevice.devices(for: .video).first(where: { $0.path == args[i + 1] }) else {
        print("FAIL  no camera at \(args[i + 1])")
        exit(1)
    }
    camera = d
} else {
    let virtual = VirtualCamera(
        name: "Consumer Camera", position: .back,
        formats: [
            .init(.nv12, width: 1280, height: 720, frameRates: [30]),
            .init(.yuv420, width: 640, height: 480, frameRates: [30]),
        ])
    VirtualCamera.install(virtual)
    guard let d = CaptureDevice.device(withUniqueID: virtual.uniqueID) else { exit(1) }
    camera = d
}

/// The video data output's delegate: keeps what the newest frame's pixel buffer says.
final class FrameReader: NSObject, CaptureVideoDataOutputSampleBufferDelegate, @unchecked Sendable {
    struct Seen {
        var planeCount = 0
        var planes: [(width: Int, height: Int, bytesPerRow: Int)] = []
        var size = (width: 0, height: 0)
        var lumaReadable = false
        var subType = ""
    }
    private let lock = NSLock()
    private var seen: [Seen] = []
    func captureOutput(_ output: CaptureOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection) {
        guard let imageBuffer = sampleBuffer.imageBuffer else { return }
        var s = Seen()
        s.planeCount = imageBuffer.planeCount
        s.size = (imageBuffer.width, imageBuffer.height)
        s.subType = sampleBuffer.formatDescription?.mediaSubType ?? ""
        for plane in 0..<imageBuffer.planeCount {
            s.planes.append(
                (imageBuffer.widthOfPlane(plane), imageBuffer.heightOfPlane(plane), imageBuffer.bytesPerRowOfPlane(plane)))
        }
        // The luma plane's middle row, read through its base address as CVPixelBuffer code does.
        if let base = imageBuffer.baseAddressOfPlane(0) {
            let row = base + imageBuffer.bytesPerRowOfPlane(0) * (imageBuffer.heightOfPlane(0) / 2)
            var sum = 0
            for x in 0..<imageBuffer.widthOfPlane(0) { sum += Int(row.load(fromByteOffset: x, as: UInt8.self)) }
            s.lumaReadable = sum > 0
        }
        lock.withLock { seen.append(s) }
    }
    func frames() -> [Seen] { lock.withLock { seen } }
    func reset() { lock.withLock { seen.removeAll() } }
}

/// The photo delegate: the order of its callbacks and the settings' IDs they carried.
final class PhotoCaptureProcessor: NSObject, CapturePhotoCaptureDelegate, @unchecked Sendable {
    private let lock = NSLock()
    private(set) var calls: [(String, Int64)] = []
    let done = DispatchSemaphore(value: 0)
    var photoBytes = 0
    private func note(_ name: String, _ id: Int64) { lock.withLock { calls.append((name, id)) } }
    func photoOutput(_ output: CapturePhotoOutput, willBeginCaptureFor resolvedSettings: CaptureResolvedPhotoSettings) {
        note("willBeginCapture", resolvedSettings.uniqueID)
    }
    func photoOutput(_ output: CapturePhotoOutput, willCapturePhotoFor resolvedSettings: CaptureResolvedPhotoSettings) {
        note("willCapturePhoto", resolvedSettings.uniqueID)
    }
    func photoOutput(_ output: CapturePhotoOutput, didCapturePhotoFor resolvedSettings: CaptureResolvedPhotoSettings) {
        note("didCapturePhoto", resolvedSettings.uniqueID)
    }
    func photoOutput(_ output: CapturePhotoOutput, didFinishProcessingPhoto photo: CapturePhoto, error: (any Error)?) {
        note("didFinishProcessingPhoto", photo.resolvedSettings.uniqueID)
        lock.withLock { photoBytes = photo.fileDataRepresentation()?.count ?? 0 }
    }
    func photoOutput(
        _ output: CapturePhotoOutput, didFinishCaptureFor resolvedSettings: CaptureResolvedPhotoSettings, error: (any Error)?
    ) {
        note("didFinishCapture", resolvedSettings.uniqueID)
        done.signal()
    }
}

// Notifications, as an app observes them.
final class Observed: @unchecked Sendable {
    let lock = NSLock()
    var names: [Notification.Name] = []
}
let observed = Observed()
let session = CaptureSession()
var tokens: [any NSObjectProtocol] = []
for name in [CaptureSession.didStartRunningNotification, CaptureSession.didStopRunningNotification] {
    tokens.append(
        NotificationCenter.default.addObserver(forName: name, object: session, queue: nil) { note in
            observed.lock.withLock { observed.names.append(note.name) }
        })
}

// Device settings inside the configuration lock, as AVFoundation wants them.
do {
    try camera.lockForConfiguration()
    if camera.isFocusModeSupported(.continuousAutoFocus) { camera.focusMode = .continuousAutoFocus }
    if camera.isExposureModeSupported(.continuousAutoExposure) { camera.exposureMode = .continuousAutoExposure }
    camera.unlockForConfiguration()
    check(true, "device settings assigned inside lockForConfiguration()")
} catch {
    check(false, "lockForConfiguration: \(error)")
}

let input: CaptureDeviceInput
do { input = try CaptureDeviceInput(device: camera) } catch {
    print("FAIL  \(error)")
    exit(1)
}
let reader = FrameReader()
let videoOutput = CaptureVideoDataOutput()
videoOutput.setSampleBufferDelegate(reader, queue: DispatchQueue(label: "consumer.video"))
let photoOutput = CapturePhotoOutput()
session.beginConfiguration()
if session.canAddInput(input) { session.addInput(input) }
if session.canAddOutput(videoOutput) { session.addOutput(videoOutput) }
if session.canAddOutput(photoOutput) { session.addOutput(photoOutput) }
session.sessionPreset = .hd1280x720
videoOutput.videoSettings = .init(pixelFormat: .nv12)
session.commitConfiguration()

// A portrait app turns the data output's connection: 1280x720 frames come as 720x1280.
if let connection = videoOutput.connection(with: .video), connection.isVideoRotationAngleSupported(90) {
    connection.videoRotationAngle = 90
} else {
    check(false, "the video data output's connection takes videoRotationAngle 90")
}

/// The first frame in `subType` (frames of the configuration before may still be on their way).
@MainActor func firstFrame(in subType: String) -> FrameReader.Seen? {
    let end = Date() + 60
    while Date() < end {
        if let f = reader.frames().first(where: { $0.subType == subType }) { return f }
        Thread.sleep(forTimeInterval: 0.02)
    }
    return nil
}

session.startRunning()
check(session.isRunning, "the session runs")
let nv12 = firstFrame(in: "NV12")
check(
    nv12?.subType == "NV12" && nv12?.planeCount == 2,
    "NV12 frames have two planes (\(nv12.map { "\($0.subType) \($0.planeCount)" } ?? "no frame"))")
if let f = nv12 {
    check(f.size == (720, 1280), "videoRotationAngle 90 gives 720x1280 frames (\(f.size))")
    check(
        f.planes.count == 2 && f.planes[0] == (720, 1280, 720) && f.planes[1] == (360, 640, 720),
        "NV12 planes: luma 720x1280, chroma 360x640 pairs (\(f.planes))")
    check(f.lumaReadable, "the luma plane reads through baseAddressOfPlane")
}

let processor = PhotoCaptureProcessor()
let settings = CapturePhotoSettings()
photoOutput.capturePhoto(with: settings, delegate: processor)
let finished = processor.done.wait(timeout: .now() + 60) == .success
let order = processor.calls.map(\.0)
check(
    finished
        && order == ["willBeginCapture", "willCapturePhoto", "didCapturePhoto", "didFinishProcessingPhoto", "didFinishCapture"],
    "the photo delegate's five callbacks in order (\(order))")
check(processor.calls.allSatisfy { $0.1 == settings.uniqueID }, "every callback names the settings' uniqueID")
check(processor.photoBytes > 0, "the photo has JPEG data (\(processor.photoBytes) bytes)")

// I420 at VGA, unturned, as a second configuration of the running session.
session.beginConfiguration()
session.sessionPreset = .vga640x480
videoOutput.videoSettings = .init(pixelFormat: .yuv420)
videoOutput.connection(with: .video)?.videoRotationAngle = 0
reader.reset()
let result = session.commitConfiguration()
check(!result.isRejected, "the session takes I420 at VGA (\(result))")
let i420 = firstFrame(in: "YU12")
check(
    i420?.subType == "YU12" && i420?.planeCount == 3,
    "I420 frames have three planes (\(i420.map { "\($0.subType) \($0.planeCount)" } ?? "no frame"))")
if let f = i420 {
    check(
        f.size == (640, 480) && f.planes.count == 3 && f.planes[0] == (640, 480, 640) && f.planes[1] == (320, 240, 320)
            && f.planes[2] == (320, 240, 320),
        "I420 planes: 640x480, then Cb and Cr at 320x240 (\(f.planes))")
    check(f.lumaReadable, "the I420 luma plane reads through baseAddressOfPlane")
}

session.stopRunning()
let end = Date() + 10
while Date() < end, observed.lock.withLock({ observed.names.count }) < 2 { Thread.sleep(forTimeInterval: 0.02) }
let names = observed.lock.withLock { observed.names }
check(
    names == [CaptureSession.didStartRunningNotification, CaptureSession.didStopRunningNotification],
    "NotificationCenter saw didStartRunning then didStopRunning (\(names.map(\.rawValue)))")
for t in tokens { NotificationCenter.default.removeObserver(t) }
check(
    productOutputsAreOutputs(of: session),
    "a movie file output and a metadata output are in session.outputs once added, connected to the camera, and gone once removed")
print("consumer: linked \(linkedProducts.count) products' types")
print(failures == 0 ? "consumer: all passed" : "consumer: \(failures) failed")
exit(failures == 0 ? 0 : 1)
