import CaptureVirtual
import CaptureImaging
import CaptureBackend
import CaptureSystem
import Foundation

/// Links one input to one output for one media type, as `AVCaptureConnection`.
///
/// Thread-safe. Video connections of still-image, photo, video data and preview outputs support
/// a turn (`videoRotationAngle`, or `videoOrientation`) and mirroring: a still's JPEG carries them
/// as its EXIF orientation tag (lossless, no re-encoding); a video data output turns and mirrors
/// the pixels (one pass into a buffer of its own); a preview shows them turned.
public final class CaptureConnection: @unchecked Sendable, CustomStringConvertible {
    /// The input feeding the connection.
    public let input: CaptureInput
    /// The output receiving from it; nil once that output is gone (a connection does not keep
    /// its output alive: the output owns its connections). As `AVCaptureConnection.output`.
    public var output: CaptureOutput? { weakOutput }
    // Set once in init; weak loads are atomic, so any thread may read it.
    private weak var weakOutput: CaptureOutput?
    /// The media type carried.
    public let mediaType: MediaType

    struct State {
        var isEnabled = true
        var orientation: VideoOrientation = .landscapeRight
        var mirrored = false
        var audioLevels: [AudioChannelLevel] = []
    }
    let state = Locked(State())

    /// A connection from `input` to `output` for `mediaType`, as
    /// `AVCaptureConnection(inputPorts:output:)`; it carries data once added to a
    /// `CaptureMultiCamSession` with `addConnection(_:)` (a `CaptureSession` connects by itself).
    public init(input: CaptureInput, output: CaptureOutput, mediaType: MediaType = .video) {
        self.input = input
        self.weakOutput = output
        self.mediaType = mediaType
    }

    /// The device behind the input, when it is a device input.
    public var device: CaptureDevice? { (input as? CaptureDeviceInput)?.device }

    /// Whether data flows through the connection.
    public var isEnabled: Bool {
        get { state.withLock { $0.isEnabled } }
        set { state.withLock { $0.isEnabled = newValue } }
    }

    /// Whether the connection is part of a running session.
    public var isActive: Bool { output?.session?.isRunning ?? false }

    /// Whether `videoOrientation` has an effect (video connections of still, photo, video data
    /// and preview outputs).
    public var isVideoOrientationSupported: Bool { mediaType == .video && output?.supportsOrientation == true }
    /// How the picture is turned (the same setting as `videoRotationAngle`).
    public var videoOrientation: VideoOrientation {
        get { state.withLock { $0.orientation } }
        set { state.withLock { $0.orientation = newValue } }
    }

    /// The clockwise turn in degrees applied to the picture, as AVFoundation's
    /// `videoRotationAngle`: 0 (the sensor's landscape, `videoOrientation` `.landscapeRight`),
    /// 90 (`.portrait`), 180 (`.landscapeLeft`) or 270 (`.portraitUpsideDown`). A video data
    /// output turned 90 or 270 delivers frames with width and height swapped. Assigning an angle
    /// `isVideoRotationAngleSupported(_:)` refuses traps, as AVFoundation raises.
    public var videoRotationAngle: Double {
        get { videoOrientation.rotationAngle }
        set {
            guard isVideoRotationAngleSupported(newValue), let o = VideoOrientation(rotationAngle: newValue) else {
                fatalError(
                    "CaptureConnection.videoRotationAngle = \(newValue): not supported on this connection (a video connection of a still, photo, video data or preview output takes 0, 90, 180 or 270); check isVideoRotationAngleSupported(_:) first"
                )
            }
            videoOrientation = o
        }
    }

    /// Whether `angle` can be assigned to `videoRotationAngle`: a quarter-turn multiple (0, 90,
    /// 180, 270) on a connection whose output turns the picture.
    public func isVideoRotationAngleSupported(_ angle: Double) -> Bool {
        isVideoOrientationSupported && VideoOrientation(rotationAngle: angle) != nil
    }

    /// Whether `isVideoMirrored` has an effect (as `isVideoOrientationSupported`).
    public var isVideoMirroringSupported: Bool { mediaType == .video && output?.supportsOrientation == true }
    /// Whether the picture is mirrored left to right (after the turn).
    public var isVideoMirrored: Bool {
        get { state.withLock { $0.mirrored } }
        set { state.withLock { $0.mirrored = newValue } }
    }

    /// The turn and mirroring a video data output applies to pixels.
    var frameTransform: FrameTransform? {
        state.withLock { FrameTransform(angle: Int($0.orientation.rotationAngle), mirrored: $0.mirrored) }
    }

    /// Per-channel levels of the newest audio buffer (audio connections), as `audioChannels`.
    public var audioChannels: [AudioChannelLevel] { state.withLock { $0.audioLevels } }
    func setAudioLevels(_ levels: [AudioChannelLevel]) { state.withLock { $0.audioLevels = levels } }

    public var description: String {
        "CaptureConnection(\(mediaType.rawValue): \(input) -> \(output.map { "\(type(of: $0))" } ?? "released output"))"
    }
}
