import CaptureVirtual
import CaptureImaging
import CaptureBackend
import CaptureSystem
import Foundation
import Synchronization

/// Takes JPEG stills from the session's camera, as `AVCaptureStillImageOutput`. Thread-safe.
///
/// Each capture uses the newest frame (frames already queued in the driver are skipped). Raw
/// frames are encoded with libjpeg-turbo; MJPEG frames pass through unchanged, with the
/// standard Huffman tables inserted when the camera left them out. The connection's
/// `videoOrientation` and `isVideoMirrored` turn the pixels (EXIF orientation 1), or, with
/// `OutputSettings.orientationMode` `.exifOnly`, are written as the EXIF orientation tag.
public class CaptureStillImageOutput: CaptureOutput, @unchecked Sendable {
    /// The still's encoding, as the output settings dictionary (`AVVideoCodecKey`, `AVVideoQualityKey`).
    public struct OutputSettings: Sendable, Hashable {
        /// The codec. Only JPEG exists.
        public enum Codec: String, Sendable, Hashable { case jpeg }
        public var codec: Codec
        /// JPEG quality from 1 to 100.
        public var quality: Int
        /// Chroma subsampling; nil keeps the camera's (4:2:2 for YUYV, 4:2:0 for NV12).
        public var subsampling: ChromaSubsampling?
        /// Turn the pixels (the default) or only tag the orientation in EXIF.
        public var orientationMode: StillOrientationMode
        public init(
            codec: Codec = .jpeg, quality: Int = 90, subsampling: ChromaSubsampling? = nil,
            orientationMode: StillOrientationMode = .rotatePixels
        ) {
            self.codec = codec
            self.quality = quality
            self.subsampling = subsampling
            self.orientationMode = orientationMode
        }
    }

    private struct Request {
        var connection: CaptureConnection
        /// The encoding of this capture (the output's settings when it was asked for).
        var settings: OutputSettings
        /// EXIF always (photos: orientation, make, model, date), else only to say a turn.
        var alwaysEXIF: Bool
        /// Called on the encode queue once the capture has its frame, before `completion`
        /// (the photo delegate's `willCapturePhotoFor`/`didCapturePhotoFor`).
        var frameChosen: (@Sendable () -> Void)?
        var completion: @Sendable (SampleBuffer?, CaptureError?) -> Void
        var id: UInt64
        var deadline: DispatchTime
        /// How long it waits for a frame while the camera has a buffer to write into.
        var timeout: DispatchTimeInterval
        /// The last damaged frame this request skipped, for the time-out's message.
        var skipped: CaptureError?
    }
    private struct State {
        var settings = OutputSettings()
        var pending: [Request] = [] {
            // (No `oldValue`: the array is changed in place, not copied.)
            didSet { demand.set(!pending.isEmpty) }
        }
        /// Whether captures wait, for the capture thread (see `FrameSubscription.stills`).
        let demand = StillDemand()
        var nextID: UInt64 = 0
        /// The frame chosen for `assigned` requests, waiting for the encode queue, with a hold
        /// this output took on it (`handleFrame`).
        var frame: SampleBuffer?
        var assigned: [Request] = []
        var timerRunning = false
    }
    /// Dispatch sources are thread-safe; the types are just not marked so.
    private struct Sources: @unchecked Sendable {
        let encode: DispatchSourceUserDataAdd
        let timeouts: DispatchSourceTimer
    }
    private let state: Locked<State>
    private let encodeQueue = DispatchQueue(label: "swift-capture.still-encode")
    // Wake the encode queue without allocating (unlike `async`): one for frames, one timer that
    // runs only while captures wait.
    private let sources: Sources
    // Touched only on `encodeQueue`.
    private var encoder: JPEGEncoder?
    private var encoderKey: (OutputSettings, PixelFormat)?
    private var batch: [Request] = []
    private var passThroughBytes: [UInt8] = []
    // Made on the first still that turns its pixels.
    private var orienter: JPEGOrienter?
    // The still's bytes, reused once the app let go of the face it was handed.
    private let stills = JPEGSampleRing(count: 1)

    public override init() {
        var st = State()
        st.pending.reserveCapacity(8)
        st.assigned.reserveCapacity(8)
        state = Locked(st)
        sources = Sources(
            encode: DispatchSource.makeUserDataAddSource(queue: encodeQueue),
            timeouts: DispatchSource.makeTimerSource(queue: encodeQueue))
        super.init()
        batch.reserveCapacity(8)
        sources.encode.setEventHandler { [weak self] in self?.encodeAssigned() }
        sources.encode.activate()
        sources.timeouts.setEventHandler { [weak self] in self?.failExpired() }
        sources.timeouts.schedule(deadline: .now() + .milliseconds(250), repeating: .milliseconds(250), leeway: .milliseconds(50))
        // Created suspended: `captureStillImageAsynchronously` resumes it.
    }

    deinit {
        // Released while captures wait (the app dropped this output and its session): their
        // completions still run, with `.cancelled`; a completion is never left uncalled.
        // That includes captures that already have their frame but whose encode had not run.
        let (orphaned, frame) = state.withLock { st in
            defer {
                st.pending.removeAll()
                st.assigned.removeAll()
                st.frame = nil
            }
            return (st.pending + st.assigned, st.frame)
        }
        frame?.release()
        if !orphaned.isEmpty {
            let error = CaptureError(.cancelled, "the still image output was released while the capture waited for a frame")
            encodeQueue.async { for r in orphaned { r.completion(nil, error) } }
        }
        sources.encode.cancel()
        sources.timeouts.setEventHandler {}
        sources.timeouts.cancel()
        // A suspended (or never started) source must be resumed before it is released.
        if state.withLock({ !$0.timerRunning }) { sources.timeouts.resume() }
    }

    /// The encoding of the next stills.
    public var outputSettings: OutputSettings {
        get { state.withLock { $0.settings } }
        set { state.withLock { $0.settings = newValue } }
    }

    /// Whether a capture is waiting for its frame.
    public var isCapturingStillImage: Bool { state.withLock { !$0.pending.isEmpty } }

    /// Takes a still from `connection` and calls `completionHandler` (on a private queue) with a
    /// sample buffer holding the JPEG, or with an error: `.invalidState` when the session does not
    /// run, `.disconnected` when the camera goes away, `.timedOut` when no frame comes within
    /// max(5 s, 20 frame intervals) while the camera has a buffer to write into (while the app
    /// holds every buffer, the capture waits for it to let one go), `.corruptFrame` when within
    /// that time only damaged frames come (a damaged frame is skipped, the next one taken),
    /// `.cancelled` when the session stops or this output is released first. The handler is
    /// called exactly once.
    public func captureStillImageAsynchronously(
        from connection: CaptureConnection,
        completionHandler: @escaping @Sendable (SampleBuffer?, CaptureError?) -> Void
    ) {
        capture(from: connection, settings: outputSettings, alwaysEXIF: false, completionHandler: completionHandler)
    }

    /// A capture at `settings`, completed as `captureStillImageAsynchronously` describes.
    func capture(
        from connection: CaptureConnection, settings: OutputSettings, alwaysEXIF: Bool,
        frameChosen: (@Sendable () -> Void)? = nil,
        completionHandler: @escaping @Sendable (SampleBuffer?, CaptureError?) -> Void
    ) {
        guard connection.output === self, connection.mediaType == .video else {
            encodeQueue.async {
                completionHandler(
                    nil, CaptureError(.invalidArgument, "the connection is not one of this output's: use connection(with: .video)"))
            }
            return
        }
        guard session?.isRunning == true else {
            encodeQueue.async {
                completionHandler(
                    nil, CaptureError(.invalidState, "the session is not running: call startRunning() before capturing a still"))
            }
            return
        }
        let interval = connection.device?.activeVideoMinFrameDuration?.seconds ?? (1.0 / 30)
        let timeout = DispatchTimeInterval.milliseconds(Int(max(5.0, 20 * interval) * 1000))
        let id: UInt64 = state.withLock { st in
            st.nextID += 1
            st.pending.append(
                Request(
                    connection: connection, settings: settings, alwaysEXIF: alwaysEXIF,
                    frameChosen: frameChosen, completion: completionHandler, id: st.nextID, deadline: .now() + timeout,
                    timeout: timeout))
            runTimeouts(&st)
            return st.nextID
        }
        // The session may have stopped between the check above and the queueing, after it
        // cancelled what was pending: then this request is cancelled here (once: only if it is
        // still pending), not left to its time-out.
        if session?.isRunning != true {
            let late: [Request] = state.withLock { st in
                defer { st.pending.removeAll { $0.id == id } }
                return st.pending.filter { $0.id == id }
            }
            let e = CaptureError(.cancelled, "the session stopped while the still was requested")
            if !late.isEmpty { encodeQueue.async { for r in late { r.completion(nil, e) } } }
        }
    }

    /// Takes a still from `connection`; see `captureStillImageAsynchronously(from:completionHandler:)`.
    public func captureStillImage(from connection: CaptureConnection) async throws(CaptureError) -> SampleBuffer {
        // The result crosses through a lock, not the continuation: ThreadSanitizer cannot follow
        // a resume from the encode queue to the task, and would flag the still's first read.
        let box = Locked<Result<SampleBuffer, CaptureError>?>(nil)
        await withCheckedContinuation { (cont: CheckedContinuation<Void, Never>) in
            captureStillImageAsynchronously(from: connection) { sample, error in
                box.withLock { r in
                    r = sample.map { .success($0) } ?? .failure(error ?? CaptureError(.driverError, "the still capture failed"))
                }
                cont.resume()
            }
        }
        let result = box.withLock { $0 } ?? .failure(CaptureError(.driverError, "the still capture failed"))
        return try result.get()
    }

    /// The JPEG bytes of a still, as `jpegStillImageNSDataRepresentation`. Nil for a sample
    /// buffer that is not a still.
    public static func jpegStillImageDataRepresentation(_ sampleBuffer: SampleBuffer) -> Data? {
        sampleBuffer.jpegData
    }

    /// The JPEG bytes of a still, under the name iOS code uses
    /// (`AVCaptureStillImageOutput.jpegStillImageNSDataRepresentation(_:)`): the same as
    /// ``jpegStillImageDataRepresentation(_:)``.
    public static func jpegStillImageNSDataRepresentation(_ sampleBuffer: SampleBuffer) -> Data? {
        jpegStillImageDataRepresentation(sampleBuffer)
    }

    override var acceptedMediaTypes: Set<MediaType> { [.video] }
    override var supportsOrientation: Bool { true }
    override var subscription: FrameSubscription { FrameSubscription(stills: state.withLock { $0.demand }) }
    /// While captures wait, all at the same settings: the JPEG a video data output at those
    /// settings has made of the frame anyway (the still then only gets its EXIF, no second encode).
    /// Not while a capture turns its pixels: a raw frame turned before its one encode costs
    /// less than transforming the shared JPEG (which redoes its entropy coding).
    override var acceptsSharedJPEG: JPEGProduct? {
        let (product, connection, mayTurn): (JPEGProduct?, CaptureConnection?, Bool) = state.withLock { st in
            guard let first = st.pending.first,
                st.pending.allSatisfy({
                    $0.settings.quality == first.settings.quality && $0.settings.subsampling == first.settings.subsampling
                })
            else { return (nil, nil, false) }
            return (
                JPEGProduct(quality: first.settings.quality, subsampling: first.settings.subsampling), first.connection,
                st.pending.contains { $0.settings.orientationMode == .rotatePixels }
            )
        }
        // The connection is read outside this output's lock (it has its own).
        if mayTurn, let connection,
            EXIFOrientation(videoOrientation: connection.videoOrientation, mirrored: connection.isVideoMirrored) != .up
        {
            return nil
        }
        return product
    }

    /// Raw frames this output encoded itself (not counting JPEGs it took from the input's stage).
    package var ownEncodes: Int { encodeCount.load(ordering: .relaxed) }
    private let encodeCount = Atomic<Int>(0)

    override func handleEncodedFrame(_ jpeg: SampleBuffer, connection: CaptureConnection) {
        handleFrame(jpeg, connection: connection)
    }

    override func handleFrame(_ frame: SampleBuffer, connection: CaptureConnection) {
        let (wake, replaced): (Bool, SampleBuffer?) = state.withLock { st in
            guard st.pending.contains(where: { $0.connection === connection }) else { return (false, nil) }
            for r in st.pending where r.connection === connection { st.assigned.append(r) }
            st.pending.removeAll { $0.connection === connection }
            // Not picked up yet: the earlier requests get this newer frame too.
            frame.hold()
            let replaced = st.frame
            st.frame = frame
            return (true, replaced)
        }
        replaced?.release()
        if wake { sources.encode.add(data: 1) }
    }

    /// On `encodeQueue`: encodes the chosen frame and completes its requests.
    private func encodeAssigned() {
        let frame: SampleBuffer? = state.withLock { st in
            swap(&st.assigned, &batch)
            defer { st.frame = nil }
            return st.frame
        }
        defer { batch.removeAll(keepingCapacity: true) }
        // Its buffer goes back once the still is made.
        defer { frame?.release() }
        guard let frame, let first = batch.first else { return }
        let connection = first.connection
        let orientation = EXIFOrientation(videoOrientation: connection.videoOrientation, mirrored: connection.isVideoMirrored)
        let device = connection.device
        // One still per distinct request (settings, EXIF), from the same frame.
        // (Grouped as slices of the reused batch, so a still allocates nothing here.)
        var done = 0
        while done < batch.count {
            let key = batch[done]
            let (settings, alwaysEXIF) = (key.settings, key.alwaysEXIF)
            let start = done
            // Usually all want the same; only mixed settings reorder the batch (which may copy it).
            if batch[start...].allSatisfy({ $0.settings == settings && $0.alwaysEXIF == alwaysEXIF }) {
                done = batch.count
            } else {
                done = batch[start...].partition { !($0.settings == settings && $0.alwaysEXIF == alwaysEXIF) }
            }
            let group = batch[start..<done]
            let turns = orientation != .up && key.settings.orientationMode == .rotatePixels
            // A turned still says "up" (1) in its EXIF, so no viewer turns it again.
            let exif: EXIFInfo? =
                orientation == .up && !key.alwaysEXIF
                ? nil
                : EXIFInfo(
                    orientation: turns ? .up : orientation, make: key.alwaysEXIF ? device?.manufacturer : nil,
                    model: device?.localizedName, date: Date())
            let result: Result<SampleBuffer, CaptureError>
            do throws(CaptureError) {
                result = .success(try encode(frame, settings: key.settings, exif: exif, turn: turns ? orientation : nil))
            } catch {
                // A damaged frame (a truncated USB transfer, garbled MJPEG) is skipped: the requests
                // wait for the next frame, within their deadline, as if this one never came.
                if error.code == .corruptFrame, session?.isRunning == true {
                    wait(again: Array(group), skipped: error)
                    continue
                }
                result = .failure(error)
            }
            // The app gets the still's face (a JPEG of its own is its own face); the ring's hold
            // goes back once the completions let go of the face, or when the app does.
            let made = try? result.get()
            var face = made?.handOut()
            made?.release()
            for r in group {
                // Not before the encode: a damaged frame skipped above was not this capture's.
                r.frameChosen?()
                switch result {
                case .success: r.completion(face, nil)
                case .failure(let e): r.completion(nil, e)
                }
            }
            // Unless a completion kept it, the face ends here and the ring's slot is free again.
            face = nil
        }
    }

    /// On `encodeQueue`: the still for `frame`, in the reused sample when the app let go of the
    /// previous one, else in a new one.
    private func encode(
        _ frame: SampleBuffer, settings: OutputSettings, exif: EXIFInfo?,
        turn orientation: EXIFOrientation?
    ) throws(CaptureError) -> SampleBuffer {
        var dims = frame.dimensions ?? VideoDimensions(width: 0, height: 0)
        var turn: StillEncoding.Turn?
        if let orientation {
            if orienter == nil { orienter = JPEGOrienter() }
            turn = StillEncoding.Turn(orientation: orientation, orienter: orienter!, quality: settings.quality)
            if orientation.swapsDimensions { dims = VideoDimensions(width: dims.height, height: dims.width) }
        }
        let meta = FrameMetadata(
            sequence: UInt32(truncatingIfNeeded: frame.sequenceNumber), timestamp: frame.presentationTimeStamp,
            bufferIndex: -1)
        // The still in the reused sample when the app let go of the previous one, else a new one.
        let handOut = { (jpeg: UnsafeRawBufferPointer) in
            self.stills.sample(copying: jpeg, dimensions: dims, metadata: meta)
                ?? SampleBuffer(jpeg: Data(jpeg), dimensions: dims, metadata: meta)
        }
        if frame.jpegData != nil {
            // A JPEG the input's stage made at these settings: only the EXIF is ours to add.
            // (`withUnsafeBytes` rethrows untyped, so the typed error comes out as a result.)
            let made: Result<SampleBuffer, CaptureError> = frame.withUnsafeBytes { jpeg in
                do throws(CaptureError) {
                    return .success(try StillEncoding.still(jpeg: jpeg, exif: exif, turn: turn, scratch: &passThroughBytes, handOut))
                } catch { return .failure(error) }
            }
            return try made.get()
        }
        return try frame.withVideoImage { image throws(CaptureError) -> SampleBuffer in
            guard let image else { throw CaptureError(.invalidArgument, "not a raw video sample") }
            if !image.pixelFormat.isCompressed { encodeCount.add(1, ordering: .relaxed) }
            let key = (settings, image.pixelFormat)
            if encoderKey.map({ $0 != key }) ?? true {
                encoder = nil
                encoderKey = key
            }
            return try StillEncoding.still(
                image, encoder: &encoder, settings: settings, exif: exif, turn: turn,
                scratch: &passThroughBytes, handOut)
        }
    }

    /// On `encodeQueue`: puts `requests` back to wait for the connection's next frame.
    private func wait(again requests: [Request], skipped: CaptureError) {
        state.withLock { st in
            for var r in requests {
                r.skipped = skipped
                st.pending.append(r)
            }
            runTimeouts(&st)
        }
    }

    /// Starts the time-out timer if it is suspended. Called under the state lock, so that its
    /// resume and suspend (in `failExpired`) always alternate.
    private func runTimeouts(_ st: inout State) {
        guard !st.timerRunning else { return }
        st.timerRunning = true
        sources.timeouts.resume()
    }

    /// On `encodeQueue`, every 250 ms while captures wait: fails those past their deadline.
    private func failExpired() {
        let now = DispatchTime.now()
        let expired: Bool = state.withLock { st in
            if st.pending.isEmpty, st.timerRunning {
                st.timerRunning = false
                sources.timeouts.suspend()
            }
            // While the app holds every buffer of the camera (a slow delegate that keeps late
            // frames, sample buffers kept), the wait is the app's own, not a stalled device: it
            // ends when a buffer goes back, or with `.cancelled` when the session stops.
            for i in st.pending.indices where st.pending[i].deadline <= now {
                if (st.pending[i].connection.input as? CaptureDeviceInput)?.appHoldsEveryBuffer.load(ordering: .relaxed) == true {
                    st.pending[i].deadline = now + st.pending[i].timeout
                }
            }
            return st.pending.contains { $0.deadline <= now }
        }
        if expired {
            let late: (Request) -> Bool = { $0.deadline <= now }
            fail(where: late) { r in
                if let skipped = r.skipped {
                    return CaptureError(
                        .corruptFrame,
                        "no undamaged frame arrived in time (the last one: \(skipped.message)): check the camera's cable and bandwidth, or use another format"
                    )
                }
                return CaptureError(.timedOut, "no frame arrived in time: check that the camera delivers (a stalled device?)")
            }
        }
    }

    private func fail(where match: (Request) -> Bool, _ error: CaptureError) {
        fail(where: match) { _ in error }
    }

    private func fail(where match: (Request) -> Bool, _ error: (Request) -> CaptureError) {
        let failed: [Request] = state.withLock { st in
            let f = st.pending.filter(match)
            st.pending.removeAll(where: match)
            return f
        }
        for r in failed { r.completion(nil, error(r)) }
    }

    override func connectionRemoved(_ connection: CaptureConnection) {
        inputDidStop(
            connection,
            error: CaptureError(.cancelled, "the camera's input was removed from the session: capture from the output's new connection"))
    }

    override func inputDidStop(_ connection: CaptureConnection, error: CaptureError?) {
        let e = error ?? CaptureError(.cancelled, "the camera's input was removed from the session")
        let failed: [Request] = state.withLock { st in
            let f = st.pending.filter { $0.connection === connection }
            st.pending.removeAll { $0.connection === connection }
            return f
        }
        // On the queue completions always run on; without this output, which may be going away.
        if !failed.isEmpty { encodeQueue.async { for r in failed { r.completion(nil, e) } } }
    }
}
