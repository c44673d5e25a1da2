// The session every camera command runs: its inputs and outputs, and the camera's format from
// --preset, --size, --format and --fps, each refused in the tool's words when the camera cannot.
import Capture
import Foundation

/// `--preset` and `--size` both choose the camera's size: a command's `Options` take one or the other.
package let presetOrSize = ["preset", "size"]

/// What --preset, --size, --format and --fps ask for, read from the words alone: main.swift reads
/// them before the command runs, so a mistake in them is a usage error before any device opens.
struct SessionOptions {
    /// The size asked for; with it the session takes the camera's format as set (no preset).
    var size: VideoDimensions?
    /// The preset, `high` unless given (not used with `size`).
    var preset: CaptureSession.Preset
    var format: PixelFormat?
    var fps: Double?

    init(_ args: Arguments) throws {
        format = try args.values["format"].map { s -> PixelFormat in
            guard (1...4).contains(s.utf8.count),
                let f = PixelFormat(fourCC: s.uppercased().padding(toLength: 4, withPad: " ", startingAt: 0))
            else {
                throw UsageError("--format takes a FourCC such as YUYV, NV12 or MJPG, not '\(s)'")
            }
            return f
        }
        size = try args.values["size"].map { s -> VideoDimensions in
            guard let size = VideoDimensions(s) else { throw UsageError("--size takes WxH, e.g. 1280x720, not '\(s)'") }
            return size
        }
        let presetName = args.values["preset"] ?? "high"
        guard let preset = CaptureSession.Preset(rawValue: presetName) else {
            throw UsageError(
                "unknown preset '\(presetName)'; one of \(CaptureSession.Preset.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        self.preset = preset
        fps = try args.values["fps"].map { text -> Double in
            guard let fps = Double(text), fps > 0, fps <= 1000 else {
                throw UsageError("--fps takes frames per second, e.g. 30, not '\(text)'")
            }
            return fps
        }
    }
}

/// Builds a running session for `device` with `outputs`, honouring --preset/--size/--format (and
/// --time-code, for a command that takes it: the virtual camera stamps each frame's capture time).
/// `beforeStart` gets the configured session before it starts: event handlers go there, since an
/// unplug right after the start must not be missed.
package func makeSession(
    _ device: CaptureDevice, _ args: Arguments, outputs: [CaptureOutput],
    extraInputs: [CaptureDeviceInput] = [], beforeStart: (CaptureSession) -> Void = { _ in }
) throws -> CaptureSession {
    let wanted = try SessionOptions(args)
    if args.flags.contains("time-code") {
        guard let camera = VirtualCamera.installed.first(where: { $0.uniqueID == device.uniqueID }) else {
            throw UsageError("--time-code draws into the virtual camera's frames: add --device virtual")
        }
        camera.showsTimeCode = true
    }
    let session = CaptureSession()
    let input = try CaptureDeviceInput(device: device)
    session.beginConfiguration()
    // The inputs first, at no preset; the preset asked for is checked against them below.
    session.sessionPreset = .inputPriority
    for i in [input] + extraInputs {
        guard session.canAddInput(i) else { throw ToolError(message: "cannot add \(i.device.localizedName) to a session") }
        session.addInput(i)
    }
    for o in outputs where session.canAddOutput(o) { session.addOutput(o) }
    let format = wanted.format
    if let size = wanted.size {
        guard let chosen = device.bestFormat(for: size, pixelFormat: format) else {
            let sizes = Set(device.formats.filter { format == nil || $0.pixelFormat == format }.map(\.dimensions.description)).sorted()
            throw ToolError(
                message:
                    "\(device.localizedName) cannot capture \(format.map { "\($0) " } ?? "")\(size); it has \(sizes.joined(separator: ", "))"
            )
        }
        try device.lockForConfiguration()
        defer { device.unlockForConfiguration() }
        try device.setActiveFormat(chosen)
        session.sessionPreset = .inputPriority
    } else {
        let preset = wanted.preset
        if let format {
            // A format without a size: the preset's size in that format.
            if !device.formats.contains(where: { $0.pixelFormat == format }) {
                throw ToolError(
                    message:
                        "\(device.localizedName) has no \(format) format; it has \(Set(device.formats.map(\.pixelFormat.description)).sorted().joined(separator: ", "))"
                )
            }
            for case let o as CaptureVideoDataOutput in outputs { o.videoSettings = .init(pixelFormat: format) }
            if !outputs.contains(where: { $0 is CaptureVideoDataOutput }) {
                // A still-only session picks its format from a video data output's wish.
                let v = CaptureVideoDataOutput()
                v.videoSettings = .init(pixelFormat: format)
                if session.canAddOutput(v) { session.addOutput(v) }
            }
        }
        guard session.canSetSessionPreset(preset) else {
            throw ToolError(
                message:
                    "\(device.localizedName) cannot do preset \(preset.rawValue): try --size with one of \(Set(device.formats.map(\.dimensions.description)).sorted().joined(separator: ", "))"
            )
        }
        session.sessionPreset = preset
    }
    if case .rejected(let e) = session.commitConfiguration() { throw e }
    if let fps = wanted.fps, let text = args.values["fps"] {
        let format = device.activeFormat
        do throws(CaptureError) {
            try device.lockForConfiguration()
            defer { device.unlockForConfiguration() }
            try device.setActiveVideoMinFrameDuration(FrameInterval(framesPerSecond: fps))
        } catch {
            let rates = format?.videoSupportedFrameRateRanges.map(\.description).joined(separator: ", ") ?? "none"
            throw ToolError(
                message: "\(device.localizedName) cannot capture \(format.map { "\($0.dimensions) " } ?? "")at \(text) fps; it has \(rates)"
            )
        }
    }
    beforeStart(session)
    try session.start()
    return session
}
