import CaptureBackend
import CaptureSystem
import Foundation
import Synchronization

/// The capture thread of one running video input: waits for frames, notices gaps, stalls and
/// failures, and hands frames to the connected outputs. It never runs app code.
final class VideoPipeline: InputRunner, @unchecked Sendable {
    let input: CaptureDeviceInput
    private weak var session: CaptureSession?
    private let source: any VideoSource
    private let format: ActiveFormat
    private let routes: RouteTable
    private let stopRequested = Atomic<Bool>(false)
    private let finished = DispatchSemaphore(value: 0)
    private let started = Atomic<Bool>(false)
    private let stopped = Atomic<Bool>(false)
    /// How long without a frame counts as a stall.
    let stallTimeout: Duration
    // The frame leases frames are handed on in, one per driver buffer; only the capture thread uses it.
    private let samples = FrameLeasePool()
    // The JPEG stages of this input, one per product in use; only the capture thread touches
    // the list (their results run on their own threads).
    private var stages: [JPEGStage] = []
    // The stages of package products' encoded products (H.264), one per product in use; capture
    // thread only, as `stages`.
    private var encodedStages: [EncodedStageEntry] = []
    /// Frames handed on so far (capture thread).
    private var framesHanded: UInt64 = 0
    /// JPEG encodes this input's stages made.
    let jpegEncodes = EncodeCounter()
    /// Encodes this input's encoded-product stages made.
    let stageEncodes = EncodeCounter()
    /// What each route takes of the frame being handed on, read once per frame (capture thread;
    /// reused, so handing a frame on allocates nothing).
    private var uses: [RouteUse] = {
        var u: [RouteUse] = []; u.reserveCapacity(8); return u
    }()
    private enum RouteUse {
        /// Disabled, or a still that waits for a newer frame.
        case none
        /// The raw frame, or, while a stage makes `shared` of it anyway, that JPEG instead.
        case frame(shared: JPEGProduct?)
        /// The JPEG of a raw frame, from the stage for the product.
        case jpeg(JPEGProduct, threads: Int)
        /// The camera's JPEG (MJPEG) made complete, once per frame for every output that wants JPEG.
        case completed
        /// A package product's encoded product, from the stage for it.
        case encoded(EncodedProduct)
    }
    // MJPEG frames made complete (Huffman tables inserted) for the outputs that want JPEG, once
    // per frame, into reused samples; capture thread only.
    private let completedJPEGs = JPEGSampleRing(count: 6)
    /// MJPEG frames this input made complete.
    let mjpegCompletions = EncodeCounter()

    init(session: CaptureSession, input: CaptureDeviceInput, format: ActiveFormat, connections: [CaptureConnection]) {
        self.session = session
        self.input = input
        self.format = format
        self.routes = RouteTable(connections)
        // Force-unwrapped safely: a video input's source was opened when the input was made.
        self.source = (try? input.device.source())!
        let frameInterval = input.device.activeVideoMinFrameDuration ?? FrameInterval(framesPerSecond: 30)
        let interval = frameInterval.seconds
        self.stallTimeout = .milliseconds(Int64(max(2.0, 10 * interval) * 1000))
        self.nominalInterval = interval
        self.nominalFrameInterval = frameInterval
    }
    /// Seconds per frame the device was set to; a floor for estimating frames lost while dry.
    private let nominalInterval: Double
    /// The same as set (the encoded-product stages' rate).
    private let nominalFrameInterval: FrameInterval

    func setConnections(_ list: [CaptureConnection]) { routes.replace(with: list) }

    /// Whether the app holds every buffer of the stream, so the device has nowhere to write.
    private var sourceIsDry: Bool { source.bufferCount > 0 && source.buffersHeldByClients >= source.bufferCount }

    func start() throws(CaptureError) {
        try fromBackend { () throws(BackendError) in try source.startStreaming(bufferCount: 4) }
        started.store(true, ordering: .releasing)
        NamedThread.start("cap video", qualityOfService: .userInteractive) { [self] in run() }
    }

    func stop() {
        guard started.load(ordering: .acquiring), !stopped.exchange(true, ordering: .acquiringAndReleasing) else { return }
        stopRequested.store(true, ordering: .releasing)
        source.wakeUp()
        finished.wait()
        source.stopStreaming()
    }

    private func run() {
        defer {
            // What the encoders hold is delivered before the outputs hear of the stop.
            shutDownStages { _ in true }
            input.appHoldsEveryBuffer.store(false, ordering: .relaxed)
            // Held frames go back when their last holders let go.
            samples.abandon()
            finished.signal()
        }
        var ledger = SequenceLedger(nominalInterval: nominalInterval)
        var lastFrame = ContinuousClock.now
        // A stall of the runner this one replaced (a new format) goes on until a frame comes.
        var stalled = session?.interruptions.withLock { $0[ObjectIdentifier(input)]?.reason } == .videoDeviceStalled
        let device = input.device
        while !stopRequested.load(ordering: .acquiring) {
            // A stage no output fed for a while (its output went away or changed settings).
            if !stages.isEmpty || !encodedStages.isEmpty { shutDownStages { self.framesHanded &- $0 > 120 } }
            let dry = sourceIsDry
            input.appHoldsEveryBuffer.store(dry, ordering: .relaxed)
            if dry {
                // Dry: the app holds every buffer, the driver has nowhere to write, and it will
                // not say how many frames it lost until a buffer comes back. Report them now.
                if let drop = ledger.dry(now: .now(), deviceNext: source.nextSequenceNumber) { report(drop) }
            }
            // A buffer its last holder lets go of is queued back by that holder, which wakes this
            // wait through the driver; the timeout only paces stall and dry-spell reports.
            let event: FrameEvent
            do {
                event = try source.nextFrame(timeout: .milliseconds(100))
            } catch {
                let error = CaptureError(error)
                shutDownStages { _ in true }
                for r in routes.snapshot { r.output.inputDidStop(r.connection, error: error) }
                session?.runnerFailed(self, error: error)
                return
            }
            switch consume event {
            case .interrupted:
                continue
            case .timeout:
                if sourceIsDry {
                    // The app holds every buffer: not a stall, the device just has nowhere to write.
                    lastFrame = .now
                } else if !stalled, ContinuousClock.now - lastFrame > stallTimeout {
                    stalled = true
                    session?.hub.post(.deviceStalled(device, duration: ContinuousClock.now - lastFrame))
                    session?.beginInterruption(input, reason: .videoDeviceStalled)
                }
            case .corrupt(let seq, _):
                lastFrame = .now
                corrupt(seq, ledger: &ledger)
            case .frame(let first):
                if stalled {
                    stalled = false
                    session?.hub.post(.deviceResumed(device))
                    session?.endInterruption(input)
                }
                var corruptAfter: UInt32?
                var sample = samples.wrap(first, format: format)
                // A pending still wants the newest frame: skip (but still deliver) older ones.
                if routes.withRoutes({ $0.contains(where: \.wantsNewestFrame) }) {
                    drain: while true {
                        let next: FrameEvent
                        do { next = try source.nextFrame(timeout: .zero) } catch { break drain }
                        switch consume next {
                        case .frame(let newer):
                            deliver(sample, stillsToo: false, ledger: &ledger)
                            sample = samples.wrap(newer, format: format)
                        case .corrupt(let seq, _):
                            // Reported after `sample`, which is older, so the counts stay in order.
                            corruptAfter = seq
                            break drain
                        default:
                            break drain
                        }
                    }
                }
                lastFrame = .now
                deliver(sample, stillsToo: true, ledger: &ledger)
                if let seq = corruptAfter { corrupt(seq, ledger: &ledger) }
                if sourceIsDry { ledger.starved = true }
            }
        }
    }

    /// Hands a frame lease on to the routes, then gives back the capture thread's hold on it: an
    /// output that keeps the frame took a hold of its own.
    private func deliver(_ sample: SampleBuffer, stillsToo: Bool, ledger: inout SequenceLedger) {
        defer { sample.release() }
        let gap = ledger.arrived(UInt32(truncatingIfNeeded: sample.sequenceNumber), at: .now())
        if let gap { report(gap) }
        framesHanded &+= 1
        let frame = framesHanded
        let raw = sample.pixelFormat?.isCompressed == false
        routes.withRoutes { routes in
            // What each route takes was decided when the routes were built; only a still's
            // pending captures are read per frame (once: a capture may be asked for meanwhile,
            // and a second read could then skip the frame without a report).
            uses.removeAll(keepingCapacity: true)
            for r in routes {
                let newest = r.wantsNewestFrame
                guard r.connection.isEnabled, !r.subscription.off, stillsToo || !newest else {
                    uses.append(.none)
                    continue
                }
                if let product = r.subscription.encoded {
                    uses.append(.encoded(product))
                } else if let product = r.subscription.jpeg {
                    uses.append(raw ? .jpeg(product, threads: r.subscription.jpegThreads) : .completed)
                } else {
                    uses.append(.frame(shared: raw && newest ? r.output.acceptsSharedJPEG : nil))
                }
            }
            // Each JPEG product wanted is encoded once, whoever wants it.
            for case .jpeg(let product, let threads) in uses {
                let stage = stage(for: product, threads: threads)
                if stage.lastFed != frame { stage.submit(sample, frame: frame) }
            }
            // And each encoded product, a key frame first for consumers that joined or asked.
            for case .encoded(let product) in uses {
                let i = encodedStage(for: product)
                guard encodedStages[i].lastFed != frame else { continue }
                let joined = encodedStages[i].noteConsumers(routes, generation: self.routes.generation)
                encodedStages[i].lastFed = frame
                // (Every request is taken, so none lingers for a later frame.)
                encodedStages[i].stage.submit(
                    sample, keyFrame: anyKeyFrameRequest(for: product, routes) || joined,
                    keepsEveryFrame: encodedStages[i].keepsEveryFrame)
            }
            // The camera's JPEG, completed once for all that want it (and a still that can take it).
            var completed: (jpeg: SampleBuffer?, drop: DroppedFrames?)?
            // The ring's hold on the completed JPEG, once every output has it (or took a hold).
            defer { completed?.jpeg?.release() }
            if !raw, uses.contains(where: { if case .completed = $0 { true } else { false } }) {
                completed = complete(sample)
            }
            for (r, use) in zip(routes, uses) {
                if case .completed = use, let completed {
                    if let jpeg = completed.jpeg {
                        r.output.handleEncodedFrame(jpeg, connection: r.connection)
                    } else if let drop = completed.drop {
                        r.output.handleDrop(drop, connection: r.connection)
                    }
                    continue
                }
                guard case .frame(let shared) = use else { continue }
                if let jpeg = completed?.jpeg, r.subscription.stills != nil, r.output.acceptsSharedJPEG != nil {
                    // A still of an MJPEG camera: the completed JPEG, to which it adds its EXIF.
                    r.output.handleEncodedFrame(jpeg, connection: r.connection)
                    continue
                }
                // It takes the JPEG this frame is being made into instead. Asked again when it said
                // no: a still requested since then takes that JPEG rather than encoding its own
                // (either way it gets this frame once).
                let takes = raw && r.subscription.stills != nil ? (shared ?? r.output.acceptsSharedJPEG) : nil
                if let p = takes, stages.contains(where: { $0.product == p && $0.lastFed == frame }) { continue }
                r.output.handleFrame(sample, connection: r.connection)
            }
        }
    }

    /// The camera's JPEG with the standard Huffman tables inserted where it has none, in a reused
    /// sample; or the drop to report (a frame that does not parse, or every sample held by the app).
    /// Capture thread.
    private func complete(_ sample: SampleBuffer) -> (jpeg: SampleBuffer?, drop: DroppedFrames?) {
        let seq = sample.sequenceNumber
        guard let image = sample.videoImage, let meta = sample.videoMetadata else {
            return (nil, DroppedFrames(reason: .corrupt, count: 1, sequenceNumber: seq))
        }
        let dims = VideoDimensions(width: image.width, height: image.height)
        let jpeg: SampleBuffer?
        do throws(CaptureError) {
            // Straight from the driver's buffer into the sample handed out: the one copy.
            jpeg = try sample.withVideoImage { _ throws(CaptureError) in
                let frame = image.plane0.bytes
                return try completedJPEGs.sample(capacity: MJPEG.completedSizeBound(frame), dimensions: dims, metadata: meta) {
                    (out: UnsafeMutableRawBufferPointer) throws(CaptureError) -> Int in
                    try MJPEG.insertStandardHuffmanTables(frame, into: out)
                }
            }
        } catch {
            return (nil, DroppedFrames(reason: .corrupt, count: 1, sequenceNumber: seq))
        }
        guard let jpeg else {
            return (nil, DroppedFrames(reason: .outOfBuffers, count: 1, sequenceNumber: seq))
        }
        mjpegCompletions.count.add(1, ordering: .relaxed)
        return (jpeg, nil)
    }

    /// The stage making `product`, started on first use. Capture thread.
    private func stage(for product: JPEGProduct, threads: Int) -> JPEGStage {
        if let s = stages.first(where: { $0.product == product }) { return s }
        let s = JPEGStage(product: product, workers: threads, routes: routes, encodes: jpegEncodes)
        stages.append(s)
        return s
    }

    /// The index of the stage making `product`, started on first use. Capture thread, under the
    /// route lock (the stage is made there, it delivers later).
    private func encodedStage(for product: EncodedProduct) -> Int {
        if let i = encodedStages.firstIndex(where: { $0.product == product }) { return i }
        let outlet = EncodedStageOutlet(product: product, routes: routes, encodes: stageEncodes, frameInterval: nominalFrameInterval)
        // A generation no table has: the first frame is a key frame.
        encodedStages.append(EncodedStageEntry(product: product, stage: product.makeStage(outlet), generation: .max))
        return encodedStages.count - 1
    }

    /// Whether a consumer of `product` asked for a key frame since the last frame.
    private func anyKeyFrameRequest(for product: EncodedProduct, _ routes: [Route]) -> Bool {
        var asked = false
        for r in routes where r.subscription.encoded == product {
            if (r.output as? FrameConsumerPort)?.takeKeyFrameRequest() == true { asked = true }
        }
        return asked
    }

    /// Shuts down the stages whose last frame fed `which` picks: a JPEG stage delivers what it
    /// holds, an encoded one finishes its encode under way. Capture thread, never under the route
    /// lock: the stages' deliveries take it.
    private func shutDownStages(_ which: (_ lastFed: UInt64) -> Bool) {
        var gone: [JPEGStage] = []
        stages.removeAll { s in
            guard which(s.lastFed) else { return false }
            gone.append(s)
            return true
        }
        var goneEncoded: [any EncodedStage] = []
        encodedStages.removeAll { e in
            guard which(e.lastFed) else { return false }
            goneEncoded.append(e.stage)
            return true
        }
        for s in gone { s.shutdown() }
        for s in goneEncoded { s.shutdown() }
    }

    /// A damaged frame: a gap before it is reported first, then the frame itself as corrupt.
    private func corrupt(_ seq: UInt32, ledger: inout SequenceLedger) {
        if let gap = ledger.arrived(seq, at: .now()) { report(gap) }
        report(DroppedFrames(reason: .corrupt, count: 1, sequenceNumber: UInt64(seq)))
    }

    /// A loss, to every output that takes frames. Consumers of a running JPEG or encoded stage get
    /// it from the stage, after the frames it still encodes, so their reports stay in frame order.
    /// Capture thread.
    private func report(_ drop: DroppedFrames) {
        for s in stages { s.submitDrop(drop) }
        for e in encodedStages { e.stage.submitDrop(drop) }
        routes.withRoutes { routes in
            for r in routes where r.connection.isEnabled && !r.subscription.off {
                if let p = r.subscription.jpeg, stages.contains(where: { $0.product == p }) { continue }
                if let p = r.subscription.encoded, encodedStages.contains(where: { $0.product == p }) { continue }
                r.output.handleDrop(drop, connection: r.connection)
            }
        }
        session?.hub.post(.framesDropped(input.device, drop))
    }
}

/// Turns the driver's sequence numbers into drop reports, each lost frame exactly once, in order.
///
/// While the app holds every buffer the driver has nowhere to write, and it says how many frames
/// it lost only with the next frame it delivers, after a buffer came back. So while dry, the lost
/// frames are reported as they happen: exactly where the device tells its next sequence number
/// (the virtual camera), else estimated from the time since the last frame, erring low (a frame
/// of slack, the slower of the set and the measured rate, and only 80 % of that: a device whose
/// rate falls by more than a fifth during the hold would otherwise be over-counted). The next
/// frame's sequence number settles the rest. Only the capture thread uses it.
struct SequenceLedger {
    /// The sequence number the next frame should have; nil before the first.
    private var expected: UInt32?
    /// Whether every buffer was held since the last frame: a gap is then `.outOfBuffers`.
    var starved = false
    /// When the last frame was dequeued.
    private var lastArrival: CaptureTime?
    private var lastSequence: UInt32 = 0
    /// Seconds per sequence step, measured (exponential average) and as set.
    private var measuredInterval: Double
    private let nominalInterval: Double
    /// Lost frames already reported while dry, counted from `expected`.
    private var estimated = 0

    init(nominalInterval: Double) {
        self.nominalInterval = nominalInterval > 0 ? nominalInterval : 1.0 / 30
        measuredInterval = self.nominalInterval
    }

    /// A frame (good or damaged) with sequence number `seq` arrived; returns the drop before it,
    /// less what was already reported while dry.
    mutating func arrived(_ seq: UInt32, at now: CaptureTime) -> DroppedFrames? {
        defer {
            if let last = lastArrival, seq &- lastSequence > 0, seq &- lastSequence < 1 << 16 {
                let perStep = Double(now - last) / 1e9 / Double(seq &- lastSequence)
                if perStep > 0 { measuredInterval += (perStep - measuredInterval) / 8 }
            }
            expected = seq &+ 1
            lastArrival = now
            lastSequence = seq
            starved = false
            estimated = 0
        }
        guard let e = expected, seq != e else { return nil }
        let gap = seq &- e
        // A backwards jump (driver restart) is a discontinuity of unknown size, not 4 billion drops.
        guard gap < 1 << 31 else { return DroppedFrames(reason: .discontinuity, count: 0, sequenceNumber: UInt64(seq)) }
        let rest = Int(gap) - estimated
        guard rest > 0 else { return nil }
        return DroppedFrames(
            reason: starved || estimated > 0 ? .outOfBuffers : .discontinuity, count: rest,
            sequenceNumber: UInt64(e &+ UInt32(estimated)))
    }

    /// Every buffer is held at `now`: the frames whose time has come since the last frame were
    /// lost; returns those not yet reported.
    mutating func dry(now: CaptureTime, deviceNext: UInt32? = nil) -> DroppedFrames? {
        starved = true
        guard let e = expected, let last = lastArrival else { return nil }
        let due: Int
        if let next = deviceNext, next &- e < 1 << 31 {
            // Every sequence number the device used since the last frame found no buffer.
            due = Int(next &- e)
        } else {
            let interval = max(nominalInterval, measuredInterval)
            due = Int(((Double(now - last) / 1e9 / interval - 1) * 0.8).rounded(.down))
        }
        guard due > estimated else { return nil }
        defer { estimated = due }
        return DroppedFrames(reason: .outOfBuffers, count: due - estimated, sequenceNumber: UInt64(e &+ UInt32(estimated)))
    }
}
