// Where the session meets the audio layer: the input check and the reader thread of a running
// audio input.
import CaptureBackend
import CaptureSystem
import Foundation
import Synchronization

extension CaptureSession {
    /// Makes the runner that reads an audio input while the session runs.
    func makeAudioRunner(for input: CaptureDeviceInput, connections: [CaptureConnection]) throws(CaptureError) -> any InputRunner {
        guard input.device.mediaType == .audio else {
            throw CaptureError(.notACaptureDevice, "\(input.device.localizedName) is not an audio device")
        }
        return AudioPipeline(session: self, input: input, connections: connections)
    }
}

extension CaptureDeviceInput {
    /// Checks that an audio device can be opened (throws .noSuchDevice, .deviceBusy, .permissionDenied).
    static func checkAudioDevice(_ device: CaptureDevice) throws(CaptureError) {
        // Opened and closed again: the session opens it for real when it starts.
        _ = try device.openAudioSource()
    }
}

/// The reader thread of one running audio input: waits for periods, stamps and measures them,
/// reports overruns and hands buffers to the connected outputs, and to one stage per encoded
/// product (AAC, Opus) that its consumers share. It never runs app code.
final class AudioPipeline: InputRunner, @unchecked Sendable {
    let input: CaptureDeviceInput
    private weak var session: CaptureSession?
    private let routes: RouteTable
    private let stopRequested = Atomic<Bool>(false)
    private let finished = DispatchSemaphore(value: 0)
    private let started = Atomic<Bool>(false)
    private let stopped = Atomic<Bool>(false)
    private var source: (any AudioSource)?
    /// How long without audio counts as a stall.
    let stallTimeout: Duration = .seconds(2)
    // The stages of encoded audio products, one per product in use; only the reader thread
    // touches the list (their results run on their own threads).
    private var stages: [EncodedStageEntry] = []
    /// Buffers handed on so far (written by the reader thread).
    let buffersHanded = Atomic<Int>(0)
    /// Buffers this input's stages encoded.
    let stageEncodes = EncodeCounter()

    init(session: CaptureSession, input: CaptureDeviceInput, connections: [CaptureConnection]) {
        self.session = session
        self.input = input
        self.routes = RouteTable(connections)
    }

    func setConnections(_ list: [CaptureConnection]) { routes.replace(with: list) }

    /// The configuration asked for by the first connected audio data output's settings.
    static func request(for settings: CaptureAudioDataOutput.AudioSettings?, range: AudioFormatRange) -> AudioConfiguration {
        let std = AudioConfiguration.standard
        let wanted = AudioFormat(
            sampleRate: settings?.sampleRate ?? std.format.sampleRate,
            channelCount: settings?.channelCount ?? std.format.channelCount,
            sampleFormat: settings?.sampleFormat ?? std.format.sampleFormat)
        let format = range.closestFormat(to: wanted) ?? wanted
        let period = max(32, settings?.framesPerBuffer ?? std.periodFrames)
        // About a second of ring (at least 4 periods), so a descheduled reader does not overrun.
        let ring = max(period * 4, std.bufferFrames * format.sampleRate / max(1, std.format.sampleRate))
        return AudioConfiguration(format: format, periodFrames: period, bufferFrames: ring)
    }

    func start() throws(CaptureError) {
        let src = try input.device.openAudioSource()
        let outputs = routes.snapshot.compactMap { $0.output as? CaptureAudioDataOutput }
        // The app's output chooses the format; a consumer's port (the recorder's) takes what it gets.
        let chooser = outputs.first
        let applied = try fromBackend { () throws(BackendError) in
            try src.configure(Self.request(for: chooser?.audioSettings, range: try src.formats()))
        }
        try fromBackend { () throws(BackendError) in try src.start() }
        for o in outputs { o.setActiveFormat(applied.format) }
        source = src
        started.store(true, ordering: .releasing)
        NamedThread.start("cap audio", qualityOfService: .userInteractive) { [self] in run(src) }
    }

    func stop() {
        guard started.load(ordering: .acquiring), !stopped.exchange(true, ordering: .acquiringAndReleasing) else { return }
        stopRequested.store(true, ordering: .releasing)
        source?.wakeUp()
        finished.wait()
        source?.stop()
        for o in routes.snapshot.compactMap({ $0.output as? CaptureAudioDataOutput }) { o.setActiveFormat(nil) }
        // Closing the PCM now lets another session or process open it at once.
        source = nil
    }

    private func run(_ source: any AudioSource) {
        defer {
            // What the encoders hold is delivered before the outputs hear of the stop.
            shutDownStages { _ in true }
            finished.signal()
        }
        let device = input.device
        var lastBuffer = ContinuousClock.now
        var stalled = false
        while !stopRequested.load(ordering: .acquiring) {
            let event: AudioEvent
            do {
                event = try source.nextBuffer(timeout: .milliseconds(500))
            } catch {
                let error = CaptureError(error)
                for r in routes.snapshot { r.output.inputDidStop(r.connection, error: error) }
                session?.runnerFailed(self, error: error)
                return
            }
            switch event {
            case .interrupted:
                continue
            case .timeout:
                if !stalled, ContinuousClock.now - lastBuffer > stallTimeout {
                    stalled = true
                    session?.hub.post(.deviceStalled(device, duration: ContinuousClock.now - lastBuffer))
                    session?.beginInterruption(input, reason: .audioDeviceStalled)
                }
            case .buffer(let captured):
                lastBuffer = .now
                if stalled {
                    stalled = false
                    session?.hub.post(.deviceResumed(device))
                    session?.endInterruption(input)
                }
                deliver(captured, device: device)
            }
        }
    }

    private func deliver(_ captured: CapturedAudio, device: CaptureDevice) {
        let pcm = captured.buffer
        var drop: DroppedFrames?
        if let d = pcm.discontinuity {
            let lost = d.lostFrames ?? 0
            drop = DroppedFrames(reason: .discontinuity, count: lost, sequenceNumber: captured.firstFrame &- UInt64(lost))
        }
        let buffer = UInt64(buffersHanded.add(1, ordering: .relaxed).newValue)
        let delivered = routes.withRoutes { routes -> Bool in
            guard routes.contains(where: \.connection.isEnabled) else { return false }
            let levels = pcm.channelLevels
            let sample = SampleBuffer(audio: pcm, timestamp: captured.timestamp, firstFrame: captured.firstFrame)
            for r in routes where r.connection.isEnabled {
                r.connection.setAudioLevels(levels)
                guard !r.subscription.off else { continue }
                guard let product = r.subscription.encoded else {
                    if let drop { r.output.handleDrop(drop, connection: r.connection) }
                    r.output.handleAudio(sample, connection: r.connection)
                    continue
                }
                // Each product is encoded once, whoever wants it; its stage reports the drop.
                let i = stage(for: product)
                guard stages[i].lastFed != buffer else { continue }
                _ = stages[i].noteConsumers(routes, generation: self.routes.generation)
                stages[i].lastFed = buffer
                stages[i].stage.submitAudio(sample, drop: drop, keepsEveryFrame: stages[i].keepsEveryFrame)
            }
            return true
        }
        // A stage no route wanted this buffer for has no consumer left.
        if stages.contains(where: { $0.lastFed != buffer }) { shutDownStages { $0 != buffer } }
        if delivered, let drop { session?.hub.post(.framesDropped(device, drop)) }
    }

    /// The index of the stage making `product`, started on first use. Reader thread, under the
    /// route lock (the stage is made there, it delivers later).
    private func stage(for product: EncodedProduct) -> Int {
        if let i = stages.firstIndex(where: { $0.product == product }) { return i }
        let outlet = EncodedStageOutlet(
            product: product, routes: routes, encodes: stageEncodes, frameInterval: FrameInterval(framesPerSecond: 30))
        stages.append(EncodedStageEntry(product: product, stage: product.makeStage(outlet), generation: .max))
        return stages.count - 1
    }

    /// Shuts down the stages whose last buffer fed `which` picks: each encodes what waits and its
    /// encoder's tail. Reader thread, never under the route lock: the stages' deliveries take it.
    private func shutDownStages(_ which: (_ lastFed: UInt64) -> Bool) {
        var gone: [any EncodedStage] = []
        stages.removeAll { e in
            guard which(e.lastFed) else { return false }
            gone.append(e.stage)
            return true
        }
        for s in gone { s.shutdown() }
    }
}
