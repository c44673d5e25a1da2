// Running: starting and stopping the inputs' runners, their failures, and interruptions (a
// device another client holds, a stall) with the retries that end them.
import CaptureBackend
import Foundation
import Synchronization

extension CaptureSession {
    // MARK: Running

    /// Whether the session is running.
    public var isRunning: Bool { running.load(ordering: .acquiring) }

    /// Starts the flow of data, as `startRunning`. Errors go to `.runtimeError` events; use
    /// `start()` to get them thrown. A camera another process streams from, or a microphone
    /// whose ALSA device another process holds, does not fail the start: as in AVFoundation the
    /// session runs interrupted (`wasInterrupted` with `.videoDeviceInUseByAnotherClient` or
    /// `.audioDeviceInUseByAnotherClient`, `isInterrupted`) and starts the device by itself once
    /// the other process lets go (`interruptionEnded`).
    public func startRunning() {
        do { try start(waitingForBusyDevices: true) } catch { hub.post(.runtimeError(error)) }
    }

    /// Starts the flow of data; throws if any input cannot start (then nothing runs), also
    /// `.deviceBusy` when another process streams from a camera or holds a microphone
    /// (`startRunning()` waits for it instead). Once running, a camera taken or a device stalled
    /// is an interruption, not an error.
    public func start() throws(CaptureError) { try start(waitingForBusyDevices: false) }

    private func start(waitingForBusyDevices: Bool) throws(CaptureError) {
        lock.lock()
        defer { lock.unlock() }
        if running.load(ordering: .acquiring) { return }
        if configurationDepth > 0 {
            throw CaptureError(.invalidState, "startRunning inside beginConfiguration: call commitConfiguration() first")
        }
        if let missing = missingCamera() { throw missing }
        if plans.isEmpty, !appliedInputs.isEmpty {
            do { plans = try makePlans() } catch { throw error }
        }
        var notes: [String] = []
        var waiting: [CaptureDeviceInput] = []
        do {
            for case let di as CaptureDeviceInput in appliedInputs {
                if !waitingForBusyDevices {
                    runners[ObjectIdentifier(di)] = try startRunner(di, plan: plans[ObjectIdentifier(di)], notes: &notes)
                } else if let r = try startOrWait(di, plan: plans[ObjectIdentifier(di)], notes: &notes, announce: false) {
                    runners[ObjectIdentifier(di)] = r
                } else {
                    waiting.append(di)
                }
            }
        } catch {
            for r in runners.values { r.stop() }
            runners = [:]
            interruptions.withLock { $0 = [:] }
            throw error
        }
        running.store(true, ordering: .releasing)
        hub.post(.didStartRunning)
        // As AVFoundation: the session runs, interrupted, and resumes the device on its own.
        for di in waiting { announceInUse(di) }
    }

    /// The error for a session with an output that takes video but no camera to feed it (the
    /// camera was refused, e.g. held by another session, or never added), or nil. Called with
    /// `lock` held.
    private func missingCamera() -> CaptureError? {
        guard appliedOutputs.contains(where: { $0.acceptedMediaTypes.contains(.video) }),
            !appliedInputs.contains(where: { $0.mediaTypes.contains(.video) })
        else { return nil }
        let why = cameraRefusal.map { " (the camera was refused: \($0.message))" } ?? ""
        return CaptureError(
            .invalidState,
            "the session has a video output but no camera\(why); add a camera input that canAddInput accepts (reasonCannotAddInput says why not) before starting"
        )
    }

    func startRunner(_ input: CaptureDeviceInput, plan: VideoPlan?, notes: inout [String]) throws(CaptureError) -> any InputRunner {
        let runner: any InputRunner
        if input.device.mediaType == .video {
            guard let plan else { throw CaptureError(.invalidState, "no format planned for \(input.device.localizedName)") }
            let device = input.device
            var active = try device.applyFormat(plan.format)
            var interval: FrameInterval?
            if let want = plan.interval {
                interval = try? device.applyInterval(want)
                if let got = interval, got != want {
                    notes.append("\(device.localizedName): frame interval \(want) became \(got)")
                }
            }
            // Sample buffers' duration.
            active.frameInterval = interval ?? device.activeVideoMinFrameDuration
            runner = VideoPipeline(session: self, input: input, format: active, connections: connections(of: input))
        } else {
            runner = try makeAudioRunner(for: input, connections: connections(of: input))
        }
        do {
            try runner.start()
        } catch {
            throw bandwidthError(error, starting: input, plan: plan)
        }
        return runner
    }

    /// `ENOSPC` from `STREAMON` while other cameras of a multi-camera session stream: the USB bus
    /// cannot carry them all; says so, naming them. Other errors unchanged.
    private func bandwidthError(_ error: CaptureError, starting input: CaptureDeviceInput, plan: VideoPlan?) -> CaptureError {
        guard isMultiCam, error.isInsufficientBandwidth else { return error }
        let others = stagedInputs.compactMap { ($0 as? CaptureDeviceInput)?.device }.filter {
            $0 !== input.device && $0.mediaType == .video
        }
        guard !others.isEmpty else { return error }
        let names = (others + [input.device]).map(\.localizedName).joined(separator: " and ")
        let size = plan.map { " at \($0.format.dimensions)" } ?? ""
        return CaptureError(
            .deviceBusy,
            "The USB bus cannot carry \(names) together\(size): choose a smaller session preset, a lower frame rate or a compressed format (MJPEG), or plug the cameras into different USB controllers.",
            errno: error.errno, operation: error.operation)
    }

    /// Stops the flow of data and waits until every capture thread has ended. Frames the app
    /// still holds stay valid.
    public func stopRunning() {
        lock.lock()
        defer { lock.unlock() }
        guard running.load(ordering: .acquiring) else { return }
        stopAll(CaptureError(.cancelled, "the session stopped"))
    }

    /// Stops every input, ends the interruptions and the outputs' pending work (with `error`),
    /// and posts `didStopRunning`: `stopRunning`, and a runtime error (which stops the session in
    /// AVFoundation). Called with `lock` held, while running.
    private func stopAll(_ error: CaptureError) {
        let all = runners
        runners = [:]
        for r in all.values { r.stop() }
        interruptions.withLock { $0 = [:] }
        // Not running before the outputs cancel their work: a still requested meanwhile sees it
        // (CaptureStillImageOutput re-checks after queueing) instead of waiting for its time-out.
        running.store(false, ordering: .releasing)
        for o in appliedOutputs { for c in o.connections { o.inputDidStop(c, error: error) } }
        hub.post(.didStopRunning)
    }

    /// A runner's input failed on its own capture thread (disconnect, fatal driver error).
    func runnerFailed(_ runner: any InputRunner, error: CaptureError) {
        controlQueue.async { [weak self] in
            guard let self else { return }
            self.lock.lock()
            defer { self.lock.unlock() }
            guard let current = self.runners[ObjectIdentifier(runner.input)], current === runner else { return }
            self.runners.removeValue(forKey: ObjectIdentifier(runner.input))
            runner.stop()
            // A stall the failure ended is over; the failure is what counts now.
            self.interruptions.withLock { _ = $0.removeValue(forKey: ObjectIdentifier(runner.input)) }
            if self.takenByAnotherClient(runner.input, error) {
                // The stream was taken from under us: an interruption, not an error.
                self.beginInterruption(runner.input, reason: Self.inUseReason(runner.input))
                self.scheduleResume(runner.input)
                return
            }
            self.inputFailed(runner.input, error: error)
        }
    }

    /// `input` failed at run time (its runner, if it had one, stopped and told its outputs): a
    /// runtime error. An unplug ends that input only (the session stops when nothing else runs
    /// or waits); any other error stops the session, as AVFoundation does; the app may start it
    /// again. Called with `lock` held.
    private func inputFailed(_ input: CaptureDeviceInput, error: CaptureError) {
        interruptions.withLock { _ = $0.removeValue(forKey: ObjectIdentifier(input)) }
        if error.code == .disconnected {
            input.device.markDisconnected()
            hub.post(.deviceDisconnected(input.device))
            input.device.dropSource()
        }
        hub.post(.runtimeError(error))
        guard running.load(ordering: .acquiring), error.code != .disconnected || (runners.isEmpty && !isInterrupted) else { return }
        stopAll(CaptureError(.cancelled, "the session stopped after a runtime error: \(error.message)"))
    }

    /// MJPEG frames the running inputs made complete for their JPEG consumers (once per frame).
    package var mjpegCompletions: Int {
        lock.withLock { runners.values.reduce(0) { $0 + (($1 as? VideoPipeline)?.mjpegCompletions.count.load(ordering: .relaxed) ?? 0) } }
    }

    /// JPEG encodes the running video inputs' stages made so far (tests and benchmarks count
    /// encodes per frame with it).
    package var stageJPEGEncodes: Int {
        lock.withLock { runners.values.reduce(0) { $0 + (($1 as? VideoPipeline)?.jpegEncodes.count.load(ordering: .relaxed) ?? 0) } }
    }

    /// Encodes the running video inputs' encoded-product stages (H.264) made so far: with every
    /// consumer of one product sharing its stage, one per frame however many consume it.
    package var stageEncodes: Int {
        lock.withLock { runners.values.reduce(0) { $0 + (($1 as? VideoPipeline)?.stageEncodes.count.load(ordering: .relaxed) ?? 0) } }
    }

    /// Microphone buffers the running audio inputs' encoded-product stages (AAC, Opus) encoded so
    /// far: one per buffer for each product in use, however many consume it.
    package var audioStageEncodes: Int {
        lock.withLock { runners.values.reduce(0) { $0 + (($1 as? AudioPipeline)?.stageEncodes.count.load(ordering: .relaxed) ?? 0) } }
    }

    /// Microphone buffers the running audio inputs handed on so far (the denominator of
    /// `audioStageEncodes` for tests and benchmarks).
    package var audioBuffersHanded: Int {
        lock.withLock { runners.values.reduce(0) { $0 + (($1 as? AudioPipeline)?.buffersHanded.load(ordering: .relaxed) ?? 0) } }
    }

    // MARK: Interruptions

    /// Whether a device of the running session cannot deliver for now (another process holds
    /// it, or it stalled), as `AVCaptureSession.isInterrupted`. The session stays running and
    /// resumes the device by itself; `wasInterrupted` and `interruptionEnded` events say when.
    /// False once the session stops.
    public var isInterrupted: Bool { interruptions.withLock { !$0.isEmpty } }

    /// Marks `input` interrupted and posts `wasInterrupted` (once per interruption). Any thread.
    func beginInterruption(_ input: CaptureDeviceInput, reason: InterruptionReason, announce: Bool = true) {
        let new = interruptions.withLock { i -> Bool in
            guard i[ObjectIdentifier(input)] == nil else { return false }
            i[ObjectIdentifier(input)] = (input.device, reason)
            return true
        }
        if new, announce { hub.post(.wasInterrupted(input.device, reason: reason)) }
    }

    /// Ends `input`'s interruption and posts `interruptionEnded`, if it was interrupted. Any thread.
    func endInterruption(_ input: CaptureDeviceInput) {
        let ended = interruptions.withLock { $0.removeValue(forKey: ObjectIdentifier(input)) != nil }
        if ended { hub.post(.interruptionEnded(input.device)) }
    }

    /// Starts `input`'s runner and ends its interruption by another client; when another client
    /// holds the device, marks the input interrupted instead, schedules a retry and returns nil
    /// (with `announce` false it only marks it: the caller then calls `announceInUse`, or
    /// `scheduleResume` for an input interrupted before). Called with `lock` held.
    func startOrWait(
        _ input: CaptureDeviceInput, plan: VideoPlan?, notes: inout [String],
        announce: Bool = true
    ) throws(CaptureError) -> (any InputRunner)? {
        let id = ObjectIdentifier(input), inUse = Self.inUseReason(input)
        do {
            let runner = try startRunner(input, plan: plan, notes: &notes)
            // A stall mark stays: the new runner ends it with its first frame.
            if interruptions.withLock({ $0[id]?.reason }) == inUse { endInterruption(input) }
            return runner
        } catch {
            guard takenByAnotherClient(input, error) else { throw error }
            // A stall (of the runner this restart stopped) goes on as this interruption, so the
            // retries run for it.
            interruptions.withLock { i in i[id] = i[id].map { ($0.device, inUse) } }
            beginInterruption(input, reason: inUse, announce: announce)
            if announce { scheduleResume(input) }
            return nil
        }
    }

    /// `input`, whose runner had stopped, could not start again: a runtime error, as for a
    /// running input. It has no runner to end its outputs' work (a still waiting on it) with the
    /// error. Called with `lock` held.
    func restartFailed(_ input: CaptureDeviceInput, error: CaptureError) {
        for c in appliedConnections where c.input === input { c.output?.inputDidStop(c, error: error) }
        inputFailed(input, error: error)
    }

    /// Posts the interruption of `input`, marked by `startOrWait(announce: false)` because
    /// another client holds it, and schedules its retries. Called with `lock` held.
    func announceInUse(_ input: CaptureDeviceInput) {
        hub.post(.wasInterrupted(input.device, reason: Self.inUseReason(input)))
        scheduleResume(input)
    }

    /// The reason an input another client holds is interrupted for, by its media type.
    private static func inUseReason(_ input: CaptureDeviceInput) -> InterruptionReason {
        input.device.mediaType == .audio ? .audioDeviceInUseByAnotherClient : .videoDeviceInUseByAnotherClient
    }

    /// Whether `error` means another process (or session) holds the device. A camera: `EBUSY`
    /// (not `ENOSPC`, the bus's bandwidth) and the device confirms that its stream is taken. A
    /// microphone: opening it failed busy (`snd_pcm_open`'s `EBUSY`: an ALSA `hw:` PCM has one
    /// client per subdevice; the virtual microphone's `occupy()`), not a later call.
    private func takenByAnotherClient(_ input: CaptureDeviceInput, _ error: CaptureError) -> Bool {
        guard error.code == .deviceBusy else { return false }
        if input.device.mediaType == .audio {
            return error.operation == nil || error.operation == "snd_pcm_open"
        }
        guard error.errno != ENOSPC, input.device.mediaType == .video,
            let source = try? input.device.source()
        else { return false }
        do {
            try source.checkAvailable()
            return false
        } catch {
            return true
        }
    }

    /// How often an input held by another client is tried again.
    static let resumeRetryInterval: DispatchTimeInterval = .milliseconds(250)

    /// Called with `lock` held.
    func scheduleResume(_ input: CaptureDeviceInput) {
        guard resumeScheduled.insert(ObjectIdentifier(input)).inserted else { return }
        controlQueue.asyncAfter(deadline: .now() + Self.resumeRetryInterval) { [weak self] in self?.tryResume(input) }
    }

    /// Tries to start an input another client held; ends the interruption when it runs.
    /// Called on `controlQueue`.
    private func tryResume(_ input: CaptureDeviceInput) {
        lock.lock()
        defer { lock.unlock() }
        let id = ObjectIdentifier(input)
        resumeScheduled.remove(id)
        guard running.load(ordering: .acquiring), runners[id] == nil,
            interruptions.withLock({ $0[id]?.reason }) == Self.inUseReason(input),
            appliedInputs.contains(where: { $0 === input })
        else { return }
        var notes: [String] = []
        do {
            // Still taken: `startOrWait` schedules the next try.
            guard let r = try startOrWait(input, plan: plans[id], notes: &notes) else { return }
            runners[id] = r
        } catch {
            // Something else went wrong.
            restartFailed(input, error: error)
        }
    }
}
