import CaptureVirtual
import CaptureImaging
import CaptureBackend
import CaptureSystem
import Foundation

/// Links one input to one output for one media type, as `AVCaptureConnection`.
///
/// Thread-safe. Still-image connections support orientation and mirroring: the JPEG carries
/// them as its EXIF orientation tag (lossless, no re-encoding); video data connections deliver
/// the sensor's pixels unturned, so they report both as unsupported.
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

    /// Whether `videoOrientation` has an effect (still-image connections).
    public var isVideoOrientationSupported: Bool { mediaType == .video && output?.supportsOrientation == true }
    /// The orientation applied to stills.
    public var videoOrientation: VideoOrientation {
        get { state.withLock { $0.orientation } }
        set { state.withLock { $0.orientation = newValue } }
    }

    /// Whether `isVideoMirrored` has an effect (still-image connections).
    public var isVideoMirroringSupported: Bool { mediaType == .video && output?.supportsOrientation == true }
    /// Whether stills are mirrored left to right.
    public var isVideoMirrored: Bool {
        get { state.withLock { $0.mirrored } }
        set { state.withLock { $0.mirrored = newValue } }
    }

    /// Per-channel levels of the newest audio buffer (audio connections), as `audioChannels`.
    public var audioChannels: [AudioChannelLevel] { state.withLock { $0.audioLevels } }
    func setAudioLevels(_ levels: [AudioChannelLevel]) { state.withLock { $0.audioLevels = levels } }

    public var description: String {
        "CaptureConnection(\(mediaType.rawValue): \(input) -> \(output.map { "\(type(of: $0))" } ?? "released output"))"
    }
}
