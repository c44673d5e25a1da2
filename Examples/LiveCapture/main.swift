// Seed 004: live capture. Video (and, with --audio, audio) sample buffers on serial queues,
// per-second statistics, a camera toggle half way through.
// With --preview, the picture in a window with seed 000's overlay layer (placed through
// layerPointConverted) while the delegate counts frames; the statistics then come from a timer on
// the main queue, which the window's event loop runs.
// Usage: live-capture [--device PATH|virtual] [--seconds S] [--audio DEVICE] [--preview]
import Capture
import CapturePreview
import Foundation

let args = CommandLine.arguments
func value(_ flag: String) -> String? { args.firstIndex(of: flag).flatMap { $0 + 1 < args.count ? args[$0 + 1] : nil } }
func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("live-capture: \(message)\n".utf8))
    exit(1)
}

if value("--device") == "virtual" || !CaptureDevice.isCameraAvailable {
    print("using the virtual camera")
    _ = VirtualCamera.installDefaultPair()
}
let seconds = Double(value("--seconds") ?? "4") ?? 4

/// Receives both media types, told apart by connection, as the seed's delegate does.
final class Receiver: CaptureVideoDataOutputSampleBufferDelegate, @unchecked Sendable {
    let lock = NSLock()
    var video = 0, audio = 0, drops = 0
    var lastSequence: UInt64?, size = "", format = ""
    func captureOutput(_ output: CaptureOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection) {
        lock.withLock {
            if connection.mediaType == .video {
                video += 1
                lastSequence = sampleBuffer.sequenceNumber
                size = sampleBuffer.dimensions?.description ?? ""
                format = sampleBuffer.pixelFormat?.description ?? ""
            } else {
                audio += 1
            }
        }
    }
    func captureOutput(_ output: CaptureOutput, didDrop drop: DroppedFrames, from connection: CaptureConnection) {
        lock.withLock { drops += drop.count }
    }
}

func camera(_ position: CaptureDevice.Position) -> CaptureDevice? {
    CaptureDevice.devices(for: .video).first { $0.position == position }
}
let wanted = value("--device").flatMap { $0 == "virtual" ? nil : CaptureDevice.device(withUniqueID: $0) }
guard let videoDevice = wanted ?? camera(.front) ?? CaptureDevice.default(for: .video) else { fail("no camera") }

let session = CaptureSession()
let receiver = Receiver()
var videoInput: CaptureDeviceInput
do { videoInput = try CaptureDeviceInput(device: videoDevice) } catch { fail("\(error)") }
if session.canAddInput(videoInput) { session.addInput(videoInput) }
let videoOutput = CaptureVideoDataOutput()
videoOutput.setSampleBufferDelegate(receiver, queue: DispatchQueue(label: "Video Capture Queue"))
if session.canAddOutput(videoOutput) { session.addOutput(videoOutput) }
LiveAudio.attach(to: session, device: value("--audio"), receiver: receiver)
session.sessionPreset = .medium
let videoConnection = videoOutput.connection(with: .video)
do { try session.start() } catch { fail("cannot start: \(error)") }
print("capturing from \(videoDevice.localizedName) for \(seconds) s")

@MainActor func toggle() {
    let other =
        camera(videoInput.device.position == .front ? .back : .front)
        ?? CaptureDevice.devices(for: .video).first { $0 !== videoInput.device }
    guard let other, other !== videoInput.device, let input = try? CaptureDeviceInput(device: other) else {
        print("toggle: no other camera")
        return
    }
    session.beginConfiguration()
    session.removeInput(videoInput)
    if session.canAddInput(input) { session.addInput(input); videoInput = input } else { session.addInput(videoInput) }
    print("toggle: now \(videoInput.device.localizedName) (\(session.commitConfiguration()))")
}

let start = Date()
var toggled = false
@MainActor func report() {
    let line = receiver.lock.withLock {
        "t=\(Int(Date().timeIntervalSince(start)))s video=\(receiver.video) audio=\(receiver.audio) dropped=\(receiver.drops) last_sequence=\(receiver.lastSequence.map(String.init) ?? "-") \(receiver.size) \(receiver.format)"
    }
    print(line)
    if !toggled, Date().timeIntervalSince(start) >= seconds / 2 { toggled = true; toggle() }
}
if args.contains("--preview") {
    let window: PreviewWindow
    do { window = try PreviewWindow(title: "live-capture", size: CGSize(width: 640, height: 360)) } catch { fail(error.message) }
    let preview = CaptureVideoPreviewLayer(session: session)
    preview.videoGravity = .resizeAspectFill
    preview.frame = window.rootLayer.bounds
    window.rootLayer.addSublayer(preview)
    // Seed 000's face layer, over the middle of the picture, outlined.
    let face = Layer()
    face.zPosition = 1
    face.frame = preview.layerRectConverted(fromMetadataOutputRect: CGRect(x: 0.35, y: 0.3, width: 0.3, height: 0.4))
    face.borderColor = Color(red: 1, green: 0.8, blue: 0)
    face.borderWidth = 3
    preview.addSublayer(face)
    window.eventHandler = { event in
        switch event {
        case .keyDown(.escape, _), .keyDown(Key("q"), _), .closeRequested: window.close()
        case .resized:
            preview.frame = window.rootLayer.bounds
            face.frame = preview.layerRectConverted(fromMetadataOutputRect: CGRect(x: 0.35, y: 0.3, width: 0.3, height: 0.4))
        default: break
        }
    }
    window.show()
    // A main-actor task: it runs on the main queue, which the event loop services between frames.
    let ticker = Task { @MainActor in
        while !Task.isCancelled {
            try? await Task.sleep(for: .seconds(1))
            report()
            if Date().timeIntervalSince(start) >= seconds { PreviewWindow.stopEventLoop() }
        }
    }
    PreviewWindow.runEventLoop()
    ticker.cancel()
    window.close()
} else {
    while Date().timeIntervalSince(start) < seconds {
        Thread.sleep(forTimeInterval: 1)
        report()
    }
}
session.stopRunning()
_ = videoConnection
let total = receiver.lock.withLock { receiver.video }
print("done: \(total) video frames")
exit(total > 0 ? 0 : 1)
