// `capture preview`: the camera in a window, with keys for a still, the other camera and an
// info overlay (PreviewInfo.swift).
import Capture
import CapturePreview
import CaptureSystem
import CaptureToolCore
import CaptureVision
import CaptureVisionPreview
import Foundation

/// A window with the live picture: space takes a still into the album (printing its path), `t`
/// switches to the other camera inside begin/commitConfiguration, `i` shows or hides an overlay
/// with fps, drops, pixel format and size,
/// q/Esc (or the window's close button, Ctrl-C, SIGTERM) quits with status 0.
@MainActor
func previewCommand(_ args: Arguments) throws {
    let device = try chooseCamera(args.values["device"])
    let gravityName = args.values["gravity"] ?? "resizeAspect"
    guard let gravity = VideoGravity(rawValue: gravityName) else {
        throw UsageError("--gravity takes one of \(VideoGravity.allCases.map(\.rawValue).joined(separator: ", ")), not '\(gravityName)'")
    }
    let windowText = args.values["window"] ?? "640x360"
    guard let windowSize = VideoDimensions(windowText), windowSize.width > 0, windowSize.height > 0 else {
        throw UsageError("--window takes WxH, e.g. 640x360, not '\(windowText)'")
    }
    // SDL turns Ctrl-C and SIGTERM into a close request; a parent that spawned us from a thread
    // blocking them (as Dispatch's threads do) would otherwise leave them pending for ever.
    ProcessSignals.unblock([SIGINT, SIGTERM])
    // The display first: without one there is nothing to start the camera for.
    try PreviewWindow.checkDisplay(ProcessInfo.processInfo.environment)
    let still = CaptureStillImageOutput()
    let watch = SessionWatch()
    let session = try makeSession(device, args, outputs: [still], beforeStart: watch.watch)
    defer { session.stopRunning() }
    let preview = CaptureVideoPreviewLayer(session: session)
    preview.videoGravity = gravity
    let mirror = args.flags.contains("mirror")
    preview.connection?.isVideoMirrored = mirror
    let window = try PreviewWindow(
        title: "capture preview: \(device.localizedName)", size: CGSize(width: windowSize.width, height: windowSize.height))
    preview.frame = window.rootLayer.bounds
    window.rootLayer.addSublayer(preview)
    // Codes and faces outlined over the picture, in a layer of their own above it.
    let metadata = CaptureMetadataOutput()
    var overlay: MetadataOutlines?
    if let list = args.values["metadata"] {
        session.addOutput(metadata)
        try metadata.setMetadataObjectTypes(metadataTypes(list, option: "metadata", available: metadata.availableMetadataObjectTypes))
        let o = MetadataOutlines(preview: preview)
        window.rootLayer.addSublayer(o.layer)
        metadata.setMetadataObjectsDelegate(o, queue: .main)
        overlay = o
    }
    let info = PreviewInfoOverlay(preview: preview)
    window.rootLayer.addSublayer(info.layer)
    var current = device

    func takeStill() {
        guard let connection = still.connection(with: .video) else { return }
        let metadata = PhotoMetadata(make: current.manufacturer, model: current.localizedName)
        Task.detached {
            do throws(CaptureError) {
                let sample = try await still.captureStillImage(from: connection)
                guard let jpeg = CaptureStillImageOutput.jpegStillImageDataRepresentation(sample) else { return }
                let url = try await PhotoLibrary.shared.save(jpeg: jpeg, metadata: metadata)
                let bytes = OutputPath.size(url.path).map(String.init) ?? "?"
                say("\(url.path)\t\(sample.dimensions.map(\.description) ?? "?")\t\(bytes) bytes")
            } catch {
                report(ToolError(message: "still failed: \(error.message)"))
            }
        }
    }

    func toggleCamera() {
        let cameras = CaptureDevice.devices(for: .video)
        let opposite: DevicePosition? = current.position == .front ? .back : current.position == .back ? .front : nil
        let other =
            cameras.first { $0.uniqueID != current.uniqueID && $0.position == opposite }
            ?? cameras.first { $0.uniqueID != current.uniqueID && $0.position != current.position }
            ?? cameras.first { $0.uniqueID != current.uniqueID }
        guard let other else {
            FileHandle.standardError.write(Data("capture: \(current.localizedName) is the only camera\n".utf8))
            return
        }
        do {
            try session.replaceInputs(with: try CaptureDeviceInput(device: other))
            current = other
            preview.connection?.isVideoMirrored = mirror
            say("camera: \(other.localizedName)")
        } catch {
            report(ToolError(message: "cannot switch to \(other.localizedName): \(errorText(error))"))
        }
    }

    window.eventHandler = { event in
        switch event {
        case .keyDown(.escape, _), .keyDown(Key("q"), _), .closeRequested:
            window.close()
        case .keyDown(.space, false):
            takeStill()
        case .keyDown(Key("t"), false):
            toggleCamera()
        case .keyDown(Key("i"), false):
            info.toggle(in: window.rootLayer)
        case .resized:
            preview.frame = window.rootLayer.bounds
            overlay?.layer.frame = preview.frame
            info.place(in: window.rootLayer)
        default:
            break
        }
    }
    if args.flags.contains("fullscreen") { window.isFullscreen = true }
    window.show()
    // The loop runs main-actor work between frames: this closes the window when the camera is
    // unplugged or fails (the session's events come on another queue).
    let ended = Task { @MainActor in
        while !window.isClosed {
            if watch.error != nil { window.close() }
            try? await Task.sleep(for: .milliseconds(50))
        }
    }
    defer { ended.cancel() }
    PreviewWindow.runEventLoop()
    if let e = watch.error { throw e }
}
