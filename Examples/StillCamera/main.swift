// Seeds 000/001/002: a still camera. Back camera, preset 1280x720, shoot, toggle to the other
// camera inside begin/commit (falling back to the old one if the new cannot be added), shoot
// again, save both to the photo album.
// With --preview, the seeds' screen instead: the preview (aspect fill) in a window with three
// image-layer buttons found by hitTest, shutter (centre), toggle (right) and close (left), or
// space, t and Esc. With --faces too, the face-outline layer seed 000 leaves room for: a
// metadata output finds faces and each gets a yellow box over the preview.
// Usage: still-camera [--device PATH|virtual|file:PICTURE] [--album DIR] [--preview [--faces]]
import Capture
import CapturePreview
import CaptureVision
import CaptureVisionPreview
import Foundation

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("still-camera: \(message)\n".utf8))
    exit(1)
}

let args = CommandLine.arguments
func value(_ flag: String) -> String? { args.firstIndex(of: flag).flatMap { $0 + 1 < args.count ? args[$0 + 1] : nil } }

if value("--device") == "virtual" || !CaptureDevice.isCameraAvailable {
    print("using the virtual camera")
    _ = VirtualCamera.installDefaultPair()
}
let library = value("--album").map { PhotoLibrary(directory: URL(fileURLWithPath: $0)) } ?? PhotoLibrary.shared

func camera(at position: CaptureDevice.Position) -> CaptureDevice? {
    CaptureDevice.devices(for: .video).first { $0.position == position }
}

// `file:PICTURE`: a virtual camera showing that JPEG (a face for --faces).
if let spec = value("--device"), spec.hasPrefix("file:") {
    let camera = VirtualCamera(name: "Picture", position: .back)
    do { camera.picture = try VirtualCamera.Picture(contentsOfFile: String(spec.dropFirst(5))) } catch { fail("\(error)") }
    VirtualCamera.install(camera)
}
let wanted = value("--device").flatMap {
    $0 == "virtual"
        ? nil : $0.hasPrefix("file:") ? CaptureDevice.device(withUniqueID: "virtual:Picture") : CaptureDevice.device(withUniqueID: $0)
}
guard let first = wanted ?? camera(at: .back) ?? CaptureDevice.default(for: .video) else { fail("no camera") }

/// The seeds' view controller, without the UI: session, input, still output, toggle, shoot.
final class StillCamera: @unchecked Sendable {
    let session = CaptureSession()
    var input: CaptureDeviceInput
    let output = CaptureStillImageOutput()
    let library: PhotoLibrary

    init(device: CaptureDevice, library: PhotoLibrary) throws {
        self.library = library
        input = try CaptureDeviceInput(device: device)
        output.outputSettings = .init(codec: .jpeg, quality: 90)
        if session.canAddInput(input) { session.addInput(input) }
        if session.canAddOutput(output) { session.addOutput(output) }
        session.sessionPreset = session.canSetSessionPreset(.hd1280x720) ? .hd1280x720 : .high
    }

    func shoot(_ label: String) async {
        guard let connection = output.connection(with: .video) else { fail("take photo failed: no connection") }
        if connection.isVideoOrientationSupported { connection.videoOrientation = .landscapeRight }
        do {
            let sample = try await output.captureStillImage(from: connection)
            guard let jpeg = CaptureStillImageOutput.jpegStillImageDataRepresentation(sample) else { fail("no JPEG data") }
            let url = try await library.save(jpeg: jpeg, metadata: nil)
            print(
                "saved \(label): \(url.path) \(sample.dimensions?.description ?? "?") \(jpeg.count) bytes from \(input.device.localizedName)"
            )
        } catch {
            fail("take photo failed: \(error)")
        }
    }

    /// Toggles to the camera on the other side, as the seeds do.
    func toggleCamera() {
        guard CaptureDevice.hasMultipleCameras else { print("only one camera: no toggle"); return }
        // The other side's camera; cameras that do not say where they face just take turns.
        let other =
            camera(at: input.device.position == .front ? .back : .front)
            ?? CaptureDevice.devices(for: .video).first { $0 !== input.device }
        guard let other, let newInput = try? CaptureDeviceInput(device: other) else { print("toggle camera failed"); return }
        session.beginConfiguration()
        session.removeInput(input)
        if session.canAddInput(newInput) {
            session.addInput(newInput)
            input = newInput
        } else {
            session.addInput(input)
        }
        let result = session.commitConfiguration()
        print("toggled to \(input.device.localizedName) (\(input.device.position.rawValue)): \(result)")
    }
}

/// Draws a yellow box in `layer` for each face the metadata output reports (on the main queue).
final class FaceOutlines: CaptureMetadataOutputObjectsDelegate, @unchecked Sendable {
    let layer: Layer
    let preview: CaptureVideoPreviewLayer
    init(layer: Layer, preview: CaptureVideoPreviewLayer) {
        self.layer = layer
        self.preview = preview
    }
    func metadataOutput(_ output: CaptureMetadataOutput, didOutput objects: [MetadataObject], from connection: CaptureConnection) {
        for old in layer.sublayers ?? [] { old.removeFromSuperlayer() }
        for face in objects.compactMap({ preview.transformedMetadataObject(for: $0) }) {
            let box = Layer()
            box.frame = face.bounds
            box.borderColor = Color(red: 1, green: 1, blue: 0)
            box.borderWidth = 3
            layer.addSublayer(box)
        }
    }
}

let still: StillCamera
do { still = try StillCamera(device: first, library: library) } catch { fail("cannot open \(first.localizedName): \(error)") }
do { try still.session.start() } catch { fail("cannot start: \(error)") }
if args.contains("--preview") {
    let size = CGSize(width: 640, height: 360)
    let window: PreviewWindow
    do { window = try PreviewWindow(title: "still-camera", size: size) } catch { fail(error.message) }
    let preview = CaptureVideoPreviewLayer(session: still.session)
    preview.videoGravity = .resizeAspectFill
    preview.frame = window.rootLayer.bounds
    window.rootLayer.addSublayer(preview)
    // The seeds' buttons: images in layers, centred 60 points above the bottom edge.
    func button(_ name: String, side: CGFloat, centreX: CGFloat, _ color: Color) -> Layer {
        let b = Layer()
        b.name = name
        b.frame = CGRect(x: centreX - side / 2, y: size.height - 60 - side / 2, width: side, height: side)
        b.contents = LayerImage(color: color, width: 4, height: 4)
        b.borderColor = .white
        b.borderWidth = 2
        b.zPosition = 1
        window.rootLayer.addSublayer(b)
        return b
    }
    // The seeds' face-outline layer over the preview, fed by a metadata output.
    let faceRectLayer = Layer()
    faceRectLayer.zPosition = 1
    faceRectLayer.frame = window.rootLayer.bounds
    faceRectLayer.backgroundColor = .clear
    window.rootLayer.addSublayer(faceRectLayer)
    let faces = FaceOutlines(layer: faceRectLayer, preview: preview)
    let metadata = CaptureMetadataOutput()
    if args.contains("--faces") {
        still.session.addOutput(metadata)
        do { try metadata.setMetadataObjectTypes([.face]) } catch { fail("\(error)") }
        metadata.setMetadataObjectsDelegate(faces, queue: .main)
    }
    _ = button("close", side: 40, centreX: 60, Color(red: 0.8, green: 0.1, blue: 0.1))
    _ = button("shutter", side: 60, centreX: size.width / 2, Color(red: 0.9, green: 0.9, blue: 0.9))
    _ = button("toggle", side: 40, centreX: size.width - 60, Color(red: 0.1, green: 0.4, blue: 0.9))
    func act(_ name: String?) {
        switch name {
        case "close": window.close()
        case "shutter": Task.detached { await still.shoot("photo") }
        case "toggle": still.toggleCamera()
        default: break
        }
    }
    window.eventHandler = { event in
        switch event {
        case .pointerDown(let p, button: 1): act(window.rootLayer.hitTest(p)?.name)
        case .keyDown(.space, false): act("shutter")
        case .keyDown(Key("t"), false): act("toggle")
        case .keyDown(.escape, _), .keyDown(Key("q"), _), .closeRequested: act("close")
        default: break
        }
    }
    window.show()
    PreviewWindow.runEventLoop()
    still.session.stopRunning()
    exit(0)
}

let done = DispatchSemaphore(value: 0)
Task.detached {
    await still.shoot("first")
    still.toggleCamera()
    await still.shoot("second")
    still.session.stopRunning()
    done.signal()
}
done.wait()
