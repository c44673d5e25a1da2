#if canImport(Glibc)
import Glibc
#endif
import CaptureImaging
import CaptureBackend
import CaptureSystem

/// A camera that lives inside your process: it streams a test pattern like a real V4L2 camera
/// and lets you inject the faults real cameras have. Use it where no camera is attached (CI,
/// containers, your own tests); it behaves like a device, it is not a stub.
///
/// Once installed, it is listed by `CaptureDevice` discovery next to the V4L2 cameras (with the
/// path and unique ID `virtual:<name>`), and everything works on it as on a real camera:
/// inputs, sessions, still photos, video data outputs, controls.
///
/// ```swift
/// @Test func myAppSurvivesAnUnplug() async throws {
///     let camera = VirtualCamera(name: "Test Camera", position: .back)
///     VirtualCamera.install(camera)
///     defer { VirtualCamera.uninstall(camera) }
///
///     // Open it like any camera.
///     let device = try #require(CaptureDevice.device(withUniqueID: camera.uniqueID))
///     let session = CaptureSession()
///     session.beginConfiguration()
///     session.addInput(try CaptureDeviceInput(device: device))
///     let output = CaptureVideoDataOutput()
///     session.addOutput(output)
///     _ = session.commitConfiguration()
///     try session.start()
///
///     // Read which frame arrived from its pixels.
///     for await sample in output.sampleBuffers() {
///         print(VirtualCamera.frameNumber(in: sample)!)   // 0, 1, 2, ...
///         break
///     }
///
///     // Inject the faults real cameras have.
///     camera.injectDroppedFrames(3)   // the next frame's sequence number jumps by 3
///     camera.injectCorruptFrame()     // the next frame is flagged damaged: a "corrupt" drop
///     camera.stall(for: .seconds(2))  // no frames for two seconds, then they resume
///     camera.disconnect()             // the stream ends: a `.deviceDisconnected` event
///     camera.reconnect()              // new inputs can open it again
/// }
/// ```
///
/// Your own code can install cameras the same way for its users (a demo mode, a kiosk without
/// a camera). `installDefaultPair()` installs a front and a back camera with the default modes.
///
/// The picture: a still image of yours (``picture``, e.g. a QR code for a scanner's tests), or
/// the test pattern: frame counter in the top rows (the sequence number as 32 black/white cells,
/// most significant first; `VirtualCamera.frameNumber(in:)` reads it back), a black band with
/// a white box that moves one step a frame, and below it the 75 % colour bars of the kernel's
/// vivid driver in the same order (white, yellow, cyan, green, magenta, red, blue, black), with
/// the camera's ``label`` at the right edge under the band, if it has one. Raw YUV frames use the limited video range, MJPEG and RGB the full range.
///
/// Frames come at the selected mode's rate on the monotonic clock, from a fixed pool of
/// buffers, like a driver: a frame you hold keeps its buffer, and when every buffer is held the
/// camera has nowhere to write, so frames are lost (the sequence number still advances) until
/// you let one go. One stream at a time: a second input that starts streaming while the first
/// runs gets `.deviceBusy`.
///
/// Thread safety: every method may be called from any thread.
public final class VirtualCamera: Sendable, CustomStringConvertible {
    /// One pixel format and size the camera can stream, with its frame rates.
    public struct Mode: Sendable, Hashable, CustomStringConvertible {
        public var pixelFormat: PixelFormat
        public var dimensions: VideoDimensions
        /// Frame rates in frames per second, each a discrete choice (V4L2 `DISCRETE` intervals).
        public var frameRates: [Double]
        /// MJPEG only: leave the Huffman tables (DHT) out of each frame, as many UVC cameras do.
        /// Decoders that know Motion-JPEG supply the standard tables.
        public var omitsHuffmanTables: Bool

        /// - Parameters:
        ///   - pixelFormat: one of `VirtualCamera.supportedPixelFormats`.
        ///   - width, height: even, 64...8192.
        ///   - frameRates: at least one, each 0 < rate <= 1000.
        public init(
            _ pixelFormat: PixelFormat, width: Int, height: Int, frameRates: [Double] = [30, 15],
            omitsHuffmanTables: Bool = false
        ) {
            self.pixelFormat = pixelFormat
            self.dimensions = VideoDimensions(width: width, height: height)
            self.frameRates = frameRates
            self.omitsHuffmanTables = omitsHuffmanTables
        }

        public var description: String {
            "\(pixelFormat) \(dimensions) @ \(frameRates.map { "\($0)" }.joined(separator: "/")) fps"
                + (omitsHuffmanTables ? " (no DHT)" : "")
        }

        /// Rates as frame intervals, in the order given.
        package var intervals: [FrameInterval] { frameRates.map { FrameInterval(framesPerSecond: $0) } }

        /// The interval a fresh stream uses: the rate closest to 30 fps.
        package var defaultInterval: FrameInterval {
            let best = frameRates.min { abs($0 - 30) < abs($1 - 30) } ?? 30
            return FrameInterval(framesPerSecond: best)
        }

        package var problem: String? {
            guard VirtualCamera.supportedPixelFormats.contains(pixelFormat) else {
                return "pixel format \(pixelFormat) is not one the virtual camera can draw"
            }
            let w = dimensions.width, h = dimensions.height
            guard w % 2 == 0, h % 2 == 0, (64...8192).contains(w), (64...8192).contains(h) else {
                return "size \(dimensions) must be even and between 64 and 8192"
            }
            guard !frameRates.isEmpty, frameRates.allSatisfy({ $0 > 0 && $0 <= 1000 }) else {
                return "frame rates \(frameRates) must be non-empty, each above 0 and at most 1000"
            }
            return nil
        }
    }

    /// The pixel formats a mode may use.
    public static let supportedPixelFormats: [PixelFormat] = [
        .yuyv, .uyvy, .yvyu, .vyuy, .nv12, .nv21, .nv16, .nv61, .yuv420, .yvu420, .yuv422p,
        .rgb24, .bgr24, .grey, .mjpeg,
    ]

    /// YUYV, NV12 and MJPEG (with Huffman tables) at 320x240, 640x480, 1280x720 and 1920x1080.
    /// The two small sizes run at 60, 30, 15 or 5 fps, the two large ones at 30, 15 or 5.
    public static let defaultModes: [Mode] = {
        var modes: [Mode] = []
        for format in [PixelFormat.yuyv, .nv12, .mjpeg] {
            for (w, h) in [(320, 240), (640, 480), (1280, 720), (1920, 1080)] {
                modes.append(Mode(format, width: w, height: h, frameRates: w <= 640 ? [60, 30, 15, 5] : [30, 15, 5]))
            }
        }
        return modes
    }()

    /// What the camera has produced since it was made.
    public struct Statistics: Sendable, Hashable {
        /// Sequence numbers used: every frame the camera's "sensor" made, delivered or not.
        /// Equals `framesQueued + framesDroppedByInjection + framesDroppedForLackOfBuffers`.
        public var framesProduced: UInt64 = 0
        /// Frames written into a buffer for the client (good and corrupt).
        public var framesQueued: UInt64 = 0
        /// Of those, frames flagged corrupt by `injectCorruptFrame()`.
        public var framesCorrupt: UInt64 = 0
        /// Of those, frames delivered with a damaged payload by `injectDamagedFrame(_:)`.
        public var framesDamaged: UInt64 = 0
        /// Frames lost by `injectDroppedFrames(_:)`.
        public var framesDroppedByInjection: UInt64 = 0
        /// Frames lost because every buffer was held or waiting to be dequeued.
        public var framesDroppedForLackOfBuffers: UInt64 = 0
    }

    /// The name shown as the device's localized name.
    public let name: String
    /// Where the camera faces.
    public let position: DevicePosition
    /// The modes it offers, in the order it lists them.
    public let formats: [Mode]
    /// `virtual:<name>`: the device's unique ID and path.
    public var uniqueID: String { "virtual:" + name }

    public var description: String { "VirtualCamera(\(uniqueID), \(position))" }

    package enum Stall: Sendable {
        case none
        case until(CaptureTime)
        case forever
    }

    package struct State: Sendable {
        package var connected = true
        /// Bumped by `disconnect()`: sources opened before it stay dead even after `reconnect()`
        /// (as a V4L2 node reconnects only for new opens).
        package var generation: UInt64 = 0
        package var pendingDrops = 0
        package var pendingCorrupt = 0
        package var pendingDamage: [FrameDamage] = []
        package var stall = Stall.none
        package var pendingBandwidthFailures = 0
        /// Another client takes the camera when its stream next stops (`injectTakeover`).
        package var takeoverPending = false
        package var streamOwner: ObjectIdentifier?
        package var streamSignal: StreamCondition?
        package var statistics = Statistics()
        /// Every control's value, by V4L2 control ID (`VirtualControls.swift`).
        package var controlValues = VirtualCamera.defaultControlValues
        /// Bumped whenever the picture's static part changes.
        package var patternVersion: UInt64 = 0
        package var label: String?
        package var showsTimeCode = false
        /// Shown instead of the pattern, when set (`VirtualPicture.swift`).
        package var picture: Picture?
        package var pictureFit = PictureFit.letterbox
    }

    package let state = Locked(State())

    /// Makes a camera; it is not listed until you `install` it.
    /// - Parameters:
    ///   - name: shown as the device name; the unique ID is `virtual:<name>`.
    ///   - position: where it faces.
    ///   - formats: the modes it offers (a precondition checks each, and that no two share a
    ///     pixel format and size).
    public init(
        name: String = "Virtual Camera", position: DevicePosition = .front,
        formats: [Mode] = VirtualCamera.defaultModes
    ) {
        precondition(!formats.isEmpty, "VirtualCamera needs at least one mode")
        var seen = Set<String>()
        for mode in formats {
            if let problem = mode.problem { preconditionFailure("VirtualCamera mode \(mode): \(problem)") }
            precondition(
                seen.insert("\(mode.pixelFormat.rawValue) \(mode.dimensions)").inserted,
                "VirtualCamera: two modes with \(mode.pixelFormat) \(mode.dimensions)")
        }
        self.name = name
        self.position = position
        self.formats = formats
    }

    /// Text drawn on the picture at its right edge, just under the moving box's band, white in a
    /// black box (letters, digits, space, '-' and '.'; anything else as a space), or nil for none.
    /// The pair of `installDefaultPair()` says "FRONT" and "BACK", so a switch between them can
    /// be seen. Frames drawn after a change show the new text. Any thread.
    public var label: String? {
        get { state.withLock { $0.label } }
        set { changePicture { $0.label = newValue } }
    }

    /// Makes a change to what frames show; frames drawn after it are drawn anew.
    package func changePicture(_ change: (inout State) -> Void) {
        state.withLock {
            change(&$0)
            $0.patternVersion &+= 1
        }
    }

    /// Whether each frame shows the time it was captured, for measuring the latency from the
    /// camera to a screen (a browser, a preview) by reading it back from the picture there: in
    /// the top 16 rows, 32 blocks of 16x16 pixels from x = 0, most significant bit first, white =
    /// 1 and black = 0, the capture time in milliseconds since the Unix epoch (`CLOCK_REALTIME`)
    /// modulo 2^32. It takes the place of the frame counter (so `frameNumber(in:)` does not read
    /// such frames); frames narrower than 512 pixels hold only its first width/16 bits. Read it
    /// with `timeCode(in:)`. From the next frame on. Any thread.
    public var showsTimeCode: Bool {
        get { state.withLock { $0.showsTimeCode } }
        set { state.withLock { $0.showsTimeCode = newValue } }
    }

    // MARK: Installation

    /// The installed cameras, in installation order. Device discovery lists these next to the
    /// V4L2 cameras.
    public static var installed: [VirtualCamera] { VirtualCameraRegistry.shared.cameras }

    /// Makes `camera` discoverable. Installing it again does nothing; installing a different
    /// camera with the same unique ID replaces the old one in the list.
    public static func install(_ camera: VirtualCamera) { VirtualCameraRegistry.shared.install(camera) }

    /// Removes `camera` from discovery. Streams already open keep running; use `disconnect()`
    /// to simulate an unplug.
    public static func uninstall(_ camera: VirtualCamera) { VirtualCameraRegistry.shared.uninstall(camera) }

    /// Installs a front camera ("Virtual Front Camera") and a back camera ("Virtual Back
    /// Camera") with the default modes, labelled "FRONT" and "BACK" on the picture (``label``),
    /// or returns the installed ones if they already are.
    @discardableResult
    public static func installDefaultPair() -> (front: VirtualCamera, back: VirtualCamera) {
        VirtualCameraRegistry.shared.installDefaultPair()
    }

    /// Calls `observer` (on the installing thread) after every change to `installed`; for
    /// hot-plug notifications.
    package static func addInstallationObserver(_ observer: @escaping @Sendable () -> Void) {
        VirtualCameraRegistry.shared.addObserver(observer)
    }

    /// Calls `observer` (on the thread that called `disconnect()` or `reconnect()`) with the
    /// camera and whether it is connected now, after each change; for hot-plug notifications.
    package static func addConnectionObserver(_ observer: @escaping @Sendable (VirtualCamera, Bool) -> Void) {
        VirtualCameraRegistry.shared.addConnectionObserver(observer)
    }

    /// The stream owner that stands for the other client of a takeover.
    static let takeoverOwner = ObjectIdentifier(TakeoverClient.shared)
    private final class TakeoverClient: Sendable { static let shared = TakeoverClient() }

    // MARK: Backend

    /// The identity device discovery reports.
    package var info: SourceInfo {
        SourceInfo(
            uniqueID: uniqueID, name: name, driver: "virtual", busInfo: "virtual", path: uniqueID,
            position: position)
    }

    /// Opens the camera, as `open()` on a V4L2 node. Fails with `.disconnected` while unplugged.
    package func makeSource() throws(CaptureError) -> any VideoSource {
        let generation = try state.withLock { s throws(CaptureError) -> UInt64 in
            guard s.connected else { throw Self.disconnectedError(name) }
            return s.generation
        }
        return VirtualVideoSource(camera: self, generation: generation)
    }

    package static func disconnectedError(_ name: String) -> CaptureError {
        CaptureError(.disconnected, "the virtual camera \"\(name)\" is disconnected; call reconnect() and open it again")
    }

    /// Throws `.disconnected` unless the camera is connected and was not unplugged since
    /// `generation`.
    package func checkConnected(_ generation: UInt64) throws(CaptureError) {
        let ok = state.withLock { $0.connected && $0.generation == generation }
        if !ok { throw Self.disconnectedError(name) }
    }

    /// Claims the camera's one stream for `owner`.
    package func claimStream(owner: ObjectIdentifier, signal: StreamCondition, generation: UInt64) throws(CaptureError) {
        try state.withLock { s throws(CaptureError) in
            guard s.connected, s.generation == generation else { throw Self.disconnectedError(name) }
            if let o = s.streamOwner, o != owner { throw Self.busyError(name) }
            if s.pendingBandwidthFailures > 0 {
                s.pendingBandwidthFailures -= 1
                throw CaptureError(
                    .deviceBusy, "Not enough USB bandwidth to stream from the virtual camera \"\(name)\" (injected).",
                    errno: ENOSPC, operation: "VIDIOC_STREAMON")
            }
            s.streamOwner = owner
            s.streamSignal = signal
        }
    }

    /// Throws `.deviceBusy` when a stream other than `owner`'s runs, without claiming it.
    package func checkAvailable(owner: ObjectIdentifier, generation: UInt64) throws(CaptureError) {
        try state.withLock { s throws(CaptureError) in
            guard s.connected, s.generation == generation else { throw Self.disconnectedError(name) }
            if let o = s.streamOwner, o != owner { throw Self.busyError(name) }
        }
    }

    package static func busyError(_ name: String) -> CaptureError {
        CaptureError(.deviceBusy, "the virtual camera \"\(name)\" is already streaming to another input; stop that session first")
    }

    package func releaseStream(owner: ObjectIdentifier) {
        state.withLock { s in
            if s.streamOwner == owner {
                s.streamOwner = nil
                s.streamSignal = nil
                if s.takeoverPending {
                    s.takeoverPending = false
                    s.streamOwner = Self.takeoverOwner
                }
            }
        }
    }

    /// What the producer should do at a frame tick.
    package enum Tick {
        case disconnected
        case stalled(until: CaptureTime?)
        /// Make a frame: skip `drops` sequence numbers first; `corrupt` flags it, `damage`
        /// spoils its payload. Without a free buffer the frame is lost.
        case produce(drops: Int, corrupt: Bool, damage: FrameDamage?)
    }

    /// Decides one tick and counts it. Called by the producer with its stream lock held.
    package func tick(generation: UInt64, hasFreeBuffer: Bool, now: CaptureTime) -> Tick {
        state.withLock { s in
            guard s.connected, s.generation == generation else { return .disconnected }
            switch s.stall {
            case .forever: return .stalled(until: nil)
            case .until(let t) where now.nanoseconds < t.nanoseconds: return .stalled(until: t)
            case .until: s.stall = .none
            case .none: break
            }
            let drops = s.pendingDrops
            s.pendingDrops = 0
            s.statistics.framesDroppedByInjection += UInt64(drops)
            s.statistics.framesProduced += UInt64(drops) + 1
            guard hasFreeBuffer else {
                s.statistics.framesDroppedForLackOfBuffers += 1
                return .produce(drops: drops, corrupt: false, damage: nil)
            }
            s.statistics.framesQueued += 1
            var corrupt = false
            if s.pendingCorrupt > 0 {
                s.pendingCorrupt -= 1
                s.statistics.framesCorrupt += 1
                corrupt = true
            }
            var damage: FrameDamage?
            if !corrupt, !s.pendingDamage.isEmpty {
                damage = s.pendingDamage.removeFirst()
                s.statistics.framesDamaged += 1
            }
            return .produce(drops: drops, corrupt: corrupt, damage: damage)
        }
    }

    /// The picture settings and their version, for the producer.
    package func patternSettings() -> (
        kind: TestPatternKind, adjust: PatternColor.Adjustments, label: String?, version: UInt64, timeCode: Bool,
        picture: Picture?, fit: PictureFit
    ) {
        state.withLock { s in
            let v = s.controlValues
            let kind = TestPatternKind(rawValue: v[ControlID.testPattern] ?? 0) ?? .colorBars75
            let adjust = PatternColor.Adjustments(
                brightness: v[ControlID.brightness] ?? 128, contrast: v[ControlID.contrast] ?? 128,
                saturation: v[ControlID.saturation] ?? 128,
                exposure: VirtualCamera.exposureFactor(v))
            return (kind, adjust, s.label, s.patternVersion, s.showsTimeCode, s.picture, s.pictureFit)
        }
    }
}
