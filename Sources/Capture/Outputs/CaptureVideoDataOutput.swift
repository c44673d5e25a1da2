import CaptureVirtual
import CaptureImaging
import CaptureBackend
import CaptureSystem
import Foundation
import Synchronization

/// Receives live video frames from a `CaptureVideoDataOutput`, on the queue given with the
/// delegate, as `AVCaptureVideoDataOutputSampleBufferDelegate`. Its methods are those of
/// ``CaptureDataOutputSampleBufferDelegate``, so one class can adopt this protocol and
/// ``CaptureAudioDataOutputSampleBufferDelegate`` and tell the streams apart by `connection`.
public protocol CaptureVideoDataOutputSampleBufferDelegate: CaptureDataOutputSampleBufferDelegate {}

/// Delivers every frame of the session's camera to a delegate on a serial queue, or as an
/// `AsyncSequence`, as `AVCaptureVideoDataOutput`. Frames are zero-copy views of the driver's
/// buffers. Thread-safe.
public final class CaptureVideoDataOutput: CaptureOutput, @unchecked Sendable {
    private struct State {
        var delegate: (any CaptureVideoDataOutputSampleBufferDelegate)?
        var queue: DispatchQueue?
        /// Wakes `drain` on the delegate's queue; unlike `queue.async` it allocates nothing.
        var wakeup: Wakeup?
        var discardsLate = true
        var settings = VideoSettings()
        /// A drain for the current `wakeup` is scheduled or running. A drain of an older
        /// delegate's wake-up never touches it (its queue may be busy for a long time).
        var busy = false
        /// Frames and drop reports waiting for the delegate, in order.
        var backlog: [Pending] = {
            var b: [Pending] = []; b.reserveCapacity(16); return b
        }()
        var streams: [UUID: AsyncStream<SampleBuffer>.Continuation] = [:]
        var delivered = 0
        var dropped: [DropReason: Int] = [:]
        var latency = LatencyHistogram()
    }

    /// A dispatch source is thread-safe; the type is just not marked so.
    private struct Wakeup: @unchecked Sendable {
        let source: DispatchSourceUserDataAdd
        /// Tells this wake-up's drains from those of an earlier delegate.
        let id: UInt64
        func poke() { source.add(data: 1) }
    }
    private let wakeupIDs = Atomic<UInt64>(0)
    private enum Pending {
        /// A frame waiting; a frame lease here carries a hold this output took (see `enqueue`);
        case frame(SampleBuffer, CaptureConnection)
        case drop(DroppedFrames, CaptureConnection)
        var isFrame: Bool { if case .frame = self { true } else { false } }
    }
    private let state = Locked(State())
    // Used only under `conversion`: after a delegate change the old queue's drain may still be
    // converting while the new one starts.
    // (Its value is unused but not empty on purpose: see `Locked`.)
    private let conversion = Locked(0)
    private var converter: PixelFormatConverter?
    private let conversions = OwnedFrames()
    private let turns = OwnedFrames()

    public override init() { super.init() }

    // The output turns and mirrors pixels as its connection asks.
    override var supportsOrientation: Bool { true }

    /// Pixel formats `videoSettings` can ask for when the device does not deliver them.
    public static let convertiblePixelFormats: [PixelFormat] = [.bgra32, .xbgr32, .nv12, .yuyv]

    /// Sets the delegate and the serial queue its methods run on (nil removes the delegate).
    ///
    /// Takes effect for the next frame, whatever the old queue is doing: frames and drop reports
    /// not yet handed to the old delegate go to the new one, on the new queue (a call already
    /// running on the old queue finishes there). Removing the delegate lets go of the frames
    /// waiting for it. Any thread.
    public func setSampleBufferDelegate(_ delegate: (any CaptureVideoDataOutputSampleBufferDelegate)?, queue: DispatchQueue?) {
        let q = delegate == nil ? nil : (queue ?? DispatchQueue(label: "swift-capture.video-data"))
        // Without a delegate, async sequences are fed from a private queue.
        let wakeup = makeWakeup(on: q ?? sequenceQueue)
        let (old, released, poke, unused): (Wakeup?, [Pending], Bool, Bool) = state.withLock { st in
            let old = st.wakeup
            // With neither a delegate nor a sequence there is nothing to wake.
            st.wakeup = delegate != nil || !st.streams.isEmpty ? wakeup : nil
            st.delegate = delegate
            st.queue = q
            var released: [Pending] = []
            if delegate == nil {
                // Nobody to deliver to: frames waiting would only keep driver buffers (and drop
                // reports were for the delegate).
                released = st.backlog
                Self.discardBacklog(&st)
            }
            // Whatever the old drain is doing, it stops at its next step (its id is stale), and
            // the new queue takes over what waits.
            st.busy = st.wakeup != nil && !st.backlog.isEmpty
            return (old, released, st.busy, st.wakeup == nil)
        }
        if poke { wakeup.poke() }
        old?.source.cancel()
        if unused { wakeup.source.cancel() }
        _ = consume released
    }

    /// Lets go of what waits for a consumer that is gone; its frames count as late and give
    /// their holds back (their buffers go back to the driver unless someone else holds them).
    private static func discardBacklog(_ st: inout State) {
        var frames = 0
        for case .frame(let f, _) in st.backlog {
            frames += 1
            f.release()
        }
        if frames > 0 { st.dropped[.frameWasLate, default: 0] += frames }
        st.backlog.removeAll(keepingCapacity: true)
    }

    /// A wake-up of `drain` on `queue`, with an id of its own.
    private func makeWakeup(on queue: DispatchQueue) -> Wakeup {
        let id = wakeupIDs.add(1, ordering: .relaxed).newValue
        let source = DispatchSource.makeUserDataAddSource(queue: queue)
        source.setEventHandler { [weak self] in self?.drain(id) }
        source.activate()
        return Wakeup(source: source, id: id)
    }
    /// Where frames are converted and handed to the async sequences while there is no delegate.
    private let sequenceQueue = DispatchQueue(label: "swift-capture.video-data.sequences")
    /// The delegate, if set.
    public var sampleBufferDelegate: (any CaptureVideoDataOutputSampleBufferDelegate)? { state.withLock { $0.delegate } }
    /// The queue the delegate runs on.
    public var sampleBufferCallbackQueue: DispatchQueue? { state.withLock { $0.queue } }

    /// When true (the default), a frame that arrives while the delegate is busy replaces any
    /// frame waiting for it, so a slow delegate sees the newest frames; replaced frames are
    /// reported as `.frameWasLate`. When false, frames queue up (holding driver buffers, so the
    /// device eventually reports `.outOfBuffers`).
    public var alwaysDiscardsLateVideoFrames: Bool {
        get { state.withLock { $0.discardsLate } }
        set { state.withLock { $0.discardsLate = newValue } }
    }

    /// The frame format wanted.
    public var videoSettings: VideoSettings {
        get { state.withLock { $0.settings } }
        set {
            let changed = state.withLock { st in
                defer { st.settings = newValue }
                return Self.subscription(of: st.settings) != Self.subscription(of: newValue)
            }
            // The capture threads take the new product from their next frame on.
            if changed { subscriptionChanged() }
        }
    }

    /// Frames delivered so far and frames lost by reason.
    public var statistics: (delivered: Int, dropped: [DropReason: Int]) {
        state.withLock { ($0.delivered, $0.dropped) }
    }

    /// Capture-to-delegate latency of the frames delivered to the delegate so far (or since the
    /// last reset); `resetting` starts a new measurement after this one.
    public func deliveryLatency(resetting: Bool = false) -> DeliveryLatency {
        state.withLock { st in
            defer { if resetting { st.latency.reset() } }
            return st.latency.summary
        }
    }

    /// The frames as an async sequence: the same frames the delegate gets (converted to
    /// `videoSettings`, JPEG in JPEG mode), handed over on the delegate's queue or, without a
    /// delegate, on a private one. `bufferingNewest` frames wait for a slow consumer; older ones
    /// are discarded (and their buffers freed). Ends when the session stops or the input goes.
    public func sampleBuffers(bufferingNewest limit: Int = 1) -> AsyncStream<SampleBuffer> {
        let id = UUID()
        let (stream, cont) = AsyncStream<SampleBuffer>.makeStream(bufferingPolicy: .bufferingNewest(max(1, limit)))
        let wakeup = makeWakeup(on: sequenceQueue)
        let unused: Wakeup? = state.withLock { st in
            st.streams[id] = cont
            guard st.wakeup == nil else { return wakeup }
            st.wakeup = wakeup
            return nil
        }
        unused?.source.cancel()
        cont.onTermination = { [weak self] _ in
            _ = self?.state.withLock { st in
                st.streams.removeValue(forKey: id)
                if st.delegate == nil, st.streams.isEmpty { Self.discardBacklog(&st) }
            }
        }
        return stream
    }

    override var acceptedMediaTypes: Set<MediaType> { [.video] }
    override var preferredPixelFormat: PixelFormat? { state.withLock { $0.settings.pixelFormat } }

    override var subscription: FrameSubscription { state.withLock { Self.subscription(of: $0.settings) } }

    static func subscription(of settings: VideoSettings) -> FrameSubscription {
        guard let jpeg = settings.jpeg else { return FrameSubscription() }
        return FrameSubscription(jpeg: JPEGProduct(quality: jpeg.quality, subsampling: jpeg.subsampling), jpegThreads: max(1, jpeg.threads))
    }

    override func handleFrame(_ sample: SampleBuffer, connection: CaptureConnection) {
        enqueue(sample, connection: connection)
    }

    /// JPEG mode: the input's JPEG stage encoded the frame (once for every output that wants this
    /// quality), or, from an MJPEG camera, the capture thread made it complete (once per frame).
    override func handleEncodedFrame(_ jpeg: SampleBuffer, connection: CaptureConnection) {
        enqueue(jpeg, connection: connection)
    }

    /// Queues a frame for the delegate and the async sequences (the drain converts it and hands
    /// it to both), with a hold of this output's on it until then.
    private func enqueue(_ sample: SampleBuffer, connection: CaptureConnection) {
        let (job, late): (Wakeup?, SampleBuffer?) = state.withLock { st in
            guard st.delegate != nil || !st.streams.isEmpty else { return (nil, nil) }
            var late: SampleBuffer?
            if st.busy, st.discardsLate, let i = st.backlog.firstIndex(where: \.isFrame) {
                // The delegate is still busy: the waiting frame is late, the new one replaces it.
                if case .frame(let old, _) = st.backlog[i] {
                    st.backlog[i] = .drop(DroppedFrames(reason: .frameWasLate, count: 1, sequenceNumber: old.sequenceNumber), connection)
                    late = old
                }
                st.dropped[.frameWasLate, default: 0] += 1
            }
            sample.hold()
            st.backlog.append(.frame(sample, connection))
            return (startDrainIfIdle(&st), late)
        }
        // Outside the lock: the last hold queues the buffer back to the driver.
        late?.release()
        job?.poke()
    }

    override func handleDrop(_ drop: DroppedFrames, connection: CaptureConnection) {
        let job: Wakeup? = state.withLock { st in
            st.dropped[drop.reason, default: 0] += drop.count
            guard st.delegate != nil else { return nil }
            st.backlog.append(.drop(drop, connection))
            return startDrainIfIdle(&st)
        }
        job?.poke()
    }

    private func startDrainIfIdle(_ st: inout State) -> Wakeup? {
        guard !st.busy, let w = st.wakeup else { return nil }
        st.busy = true
        return w
    }

    /// Runs on the queue of wake-up `id`: delivers frames and drop reports, in order, until none
    /// is left or the delegate changed. After each frame with more waiting it wakes itself again
    /// and returns, so that what else runs on the queue (an audio output's delegate, the app's
    /// own work) takes turns with a backlog instead of waiting until it runs dry.
    private func drain(_ id: UInt64) {
        // The latency of the frame just handed to the delegate, and the frame for the async
        // sequences, both dealt with under the next step's lock.
        var handed: Int64?
        var forStreams: SampleBuffer?
        var framesHanded = 0
        while true {
            var again: Wakeup?
            let next: (Pending, (any CaptureVideoDataOutputSampleBufferDelegate)?)? = state.withLock { st in
                if let handed { st.latency.record(handed) }
                if let f = forStreams { for s in st.streams.values { s.yield(f) } }
                // A newer delegate took over: its own drain carries on from here.
                guard st.wakeup?.id == id else { return nil }
                guard st.delegate != nil || !st.streams.isEmpty else {
                    // Nobody left to take them: let the frames go (their buffers with them).
                    Self.discardBacklog(&st)
                    st.busy = false
                    return nil
                }
                guard !st.backlog.isEmpty else { st.busy = false; return nil }
                if framesHanded > 0, st.backlog.first?.isFrame == true {
                    // (Still busy: the next turn carries on.)
                    again = st.wakeup
                    return nil
                }
                let item = st.backlog.removeFirst()
                if item.isFrame { st.delivered += 1 }
                return (item, st.delegate)
            }
            handed = nil
            // The delegate and the sequences have had the last frame: unless one of them kept its
            // sample, the sample ends now and gives its buffer back.
            forStreams = nil
            guard let (item, delegate) = next else {
                again?.poke()
                return
            }
            switch item {
            case .frame(let sample, let connection):
                framesHanded += 1
                // The hold `enqueue` took goes back once the frame is handed out (its face
                // holds it for the app) or converted.
                defer { sample.release() }
                do throws(CaptureError) {
                    let out = try conversion.withLock { _ throws(CaptureError) in try handOut(sample, connection: connection) }
                    forStreams = out
                    if let delegate {
                        handed = CaptureTime.now() - out.presentationTimeStamp
                        delegate.captureOutput(self, didOutput: out, from: connection)
                    }
                } catch {
                    let reason: DropReason = error.code == .corruptFrame ? .corrupt : .outOfBuffers
                    state.withLock { $0.dropped[reason, default: 0] += 1 }
                    delegate?.captureOutput(
                        self, didDrop: DroppedFrames(reason: reason, count: 1, sequenceNumber: sample.sequenceNumber), from: connection)
                }
            case .drop(let drop, let connection): delegate?.captureOutput(self, didDrop: drop, from: connection)
            }
        }
    }

    /// What the app gets for `sample`: a face of its frame lease (or of the converted frame's),
    /// or of its JPEG slot, which gives its hold back when its last holder lets go. Under
    /// `conversion`.
    private func handOut(_ sample: SampleBuffer, connection: CaptureConnection) throws(CaptureError) -> SampleBuffer {
        let converted = try converted(sample)
        let made: SampleBuffer
        do {
            made = try turned(converted, for: connection)
        } catch {
            if converted !== sample { converted.release() }
            throw error
        }
        // A converted frame's own hold: the turned one (or the face) holds what it needs now.
        if converted !== sample, converted !== made { converted.release() }
        let face = made.handOut()
        // A converted or turned frame's own hold: the face holds it now.
        if made !== sample { made.release() }
        return face
    }

    /// The frame in the format `videoSettings` asks for: as it is when it already is (or when no
    /// conversion exists), converted into an owned buffer otherwise.
    private func converted(_ sample: SampleBuffer) throws(CaptureError) -> SampleBuffer {
        guard let want = state.withLock({ $0.settings.pixelFormat }), let image = sample.videoImage,
            let meta = sample.videoMetadata, image.pixelFormat != want,
            PixelFormatConverter.canConvert(from: image.pixelFormat, to: want),
            let size = PixelFormatConverter.frameSize(want, width: image.width, height: image.height)
        else { return sample }
        let conv = converter ?? PixelFormatConverter()
        converter = conv
        let shape = OwnedFrames.Shape(
            pixelFormat: want, width: image.width, height: image.height,
            colorRange: want == .nv12 || want == .yuyv ? .limited : .full, bytesPerLine: size.bytesPerLine,
            byteCount: size.byteCount, frameInterval: sample.videoFormat?.frameInterval)
        return try conversions.make(shape, metadata: meta) { (buffer) throws(CaptureError) in
            try sample.withVideoImage { _ throws(CaptureError) in
                try conv.convert(image, to: want, into: buffer, bytesPerLine: size.bytesPerLine)
            }
        }
    }

    /// The frame turned and mirrored as `connection` asks (`videoRotationAngle`,
    /// `isVideoMirrored`), into an owned buffer; as it is when it needs neither, or is in a format
    /// or size `FrameTransform` cannot take (JPEG, MJPEG, odd sizes of subsampled formats).
    private func turned(_ sample: SampleBuffer, for connection: CaptureConnection) throws(CaptureError) -> SampleBuffer {
        guard let transform = connection.frameTransform, !transform.isIdentity, let image = sample.videoImage,
            let meta = sample.videoMetadata,
            let size = transform.output(image.pixelFormat, width: image.width, height: image.height)
        else { return sample }
        let shape = OwnedFrames.Shape(
            pixelFormat: image.pixelFormat, width: size.width, height: size.height, colorRange: image.colorRange,
            bytesPerLine: size.bytesPerLine, byteCount: size.byteCount, frameInterval: sample.videoFormat?.frameInterval)
        return try turns.make(shape, metadata: meta) { (buffer) throws(CaptureError) in
            try sample.withVideoImage { _ throws(CaptureError) in try transform.apply(image, into: buffer) }
        }
    }

    override func inputDidStop(_ connection: CaptureConnection, error: CaptureError?) {
        // (The input's JPEG stage delivered what it held before this.) Frames waiting for the delegate are still delivered; async sequences end here.
        let streams = state.withLock { st in
            defer { st.streams.removeAll() }
            return Array(st.streams.values)
        }
        for s in streams { s.finish() }
    }
}
