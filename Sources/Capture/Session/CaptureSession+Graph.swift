// The session's graph: which inputs and outputs (and frame consumers) it holds, and the checks
// that decide whether one can join.
import CaptureBackend
import Foundation

extension CaptureSession {
    // MARK: Graph

    /// The inputs, including changes not yet committed.
    public var inputs: [CaptureInput] { lock.withLock { stagedInputs } }
    /// The outputs, including changes not yet committed: the core's, then the movie file and
    /// metadata outputs, each in the order it was added.
    public var outputs: [CaptureOutput] { lock.withLock { stagedOutputs.filter { !$0.isConsumerPort } + hostedOutputs } }
    /// Every connection between the session's inputs and outputs.
    public var connections: [CaptureConnection] { lock.withLock { allConnections } }

    /// Whether `input` can be added: it is not in a session already, its device is not used by
    /// another session, the session has no other input of the same media type (a multi-camera session: no other microphone), and a camera can
    /// run at the session's preset (as AVFoundation, which says no to a camera that cannot).
    /// A camera refused here is remembered: `start()` names the refusal when the session then has
    /// a video output but no camera.
    public func canAddInput(_ input: CaptureInput) -> Bool {
        awaitReleaseOfStoppedHolder(input)
        return lock.withLock { checkAdd(input) == nil }
    }

    /// Why `canAddInput(_:)` says no, as a typed error, or nil when the input can be added:
    /// `.deviceBusy` for a device another session holds (running or not: remove it there, or let
    /// that session go), `.unsupportedFormat` for a camera that cannot run at the session's
    /// preset, `.invalidState` for an input already in the session or a second input of a kind.
    public func reasonCannotAddInput(_ input: CaptureInput) -> CaptureError? {
        awaitReleaseOfStoppedHolder(input)
        return lock.withLock { checkAdd(input) }
    }

    /// A stopped session its app has let go lives on while its last notifications are being
    /// delivered (each names it as `object`), and holds its camera until then. Before deciding
    /// that such a camera is busy, wait (briefly: an observer may be slow) for that delivery.
    /// Outside `lock`: an observer of the other session may call into this one.
    private func awaitReleaseOfStoppedHolder(_ input: CaptureInput) {
        guard let device = (input as? CaptureDeviceInput)?.device, let hub = stoppedHolderHub(of: device) else { return }
        hub.waitUntilDelivered(timeout: .seconds(2))
    }

    /// The event hub of the other, stopped session holding `device`, if any (without keeping
    /// that session alive past the return).
    private func stoppedHolderHub(of device: CaptureDevice) -> EventHub? {
        guard let holder = device.owner, holder !== self, !holder.isRunning else { return nil }
        return holder.hub
    }

    /// `whyNotAdd`, noting for `start()` the refusal of a camera that would have been the
    /// session's only one. Called with `lock` held.
    func checkAdd(_ input: CaptureInput) -> CaptureError? {
        let why = whyNotAdd(input)
        if let why, input.mediaTypes.contains(.video), !stagedInputs.contains(where: { $0.mediaTypes.contains(.video) }) {
            cameraRefusal = why
        }
        return why
    }

    /// Why `canAddInput` says no, or nil.
    private func whyNotAdd(_ input: CaptureInput) -> CaptureError? {
        guard let di = input as? CaptureDeviceInput else { return CaptureError(.invalidArgument, "only device inputs can be added") }
        let name = di.device.localizedName
        if stagedInputs.contains(where: { $0 === input }) {
            return CaptureError(.invalidState, "\(name)'s input is in the session already")
        }
        if let owner = di.device.owner, owner !== self {
            return CaptureError(.deviceBusy, "\(name) is used by another session; remove it there first")
        }
        if stagedInputs.contains(where: { ($0 as? CaptureDeviceInput)?.device === di.device }) {
            return CaptureError(.invalidState, "\(name) is in the session already (through another input)")
        }
        // A multi-camera session takes any number of cameras (one microphone).
        if !(isMultiCam && di.device.mediaType == .video), stagedInputs.contains(where: { $0.mediaTypes.contains(di.device.mediaType) }) {
            return CaptureError(
                .invalidState,
                "the session has a \(di.device.mediaType.rawValue) input already; remove it first (beginConfiguration, removeInput, addInput, commitConfiguration)"
            )
        }
        // A camera whose formats cannot be read is left to the commit, which reports why.
        if di.device.mediaType == .video, stagedPreset != .inputPriority, !di.device.formats.isEmpty,
            PresetResolver.format(for: stagedPreset, in: di.device.formats, preferred: preferredPixelFormat(stagedOutputs)) == nil
        {
            return CaptureError(
                .unsupportedFormat,
                "\(name) cannot run at the session's preset \(stagedPreset.rawValue) (sizes it has: \(Set(di.device.formats.map(\.dimensions.description)).sorted().joined(separator: ", "))); set a preset it can do first (canSetSessionPreset)"
            )
        }
        return nil
    }

    /// Adds `input`. When `canAddInput` says no, nothing is added and the refusal is reported:
    /// a `.configurationRejected` event, and inside `beginConfiguration()` the commit returns
    /// `.rejected` with it and leaves the whole transaction undone (the session stays as it was).
    public func addInput(_ input: CaptureInput) {
        awaitReleaseOfStoppedHolder(input)
        change {
            if let why = checkAdd(input) { refuse(why); return }
            stagedInputs.append(input)
        }
    }

    /// Removes `input`.
    public func removeInput(_ input: CaptureInput) {
        change {
            stagedInputs.removeAll { $0 === input }
            unlinkedInputs.remove(ObjectIdentifier(input))
        }
    }

    /// Whether `output` can be added: not in a session yet, and no output of its kind present
    /// (movie file and metadata outputs: in no other session; any number of them).
    public func canAddOutput(_ output: CaptureOutput) -> Bool {
        if output.isHosting { return lock.withLock { !hostedOutputs.contains { $0 === output } } && output.session == nil }
        return lock.withLock {
            if output.session != nil && output.session !== self { return false }
            // A multi-camera session takes an output of each kind per camera.
            if isMultiCam { return !stagedOutputs.contains { $0 === output } }
            // Frame consumers (preview, server, recorder) may be many, beside the outputs.
            return !stagedOutputs.contains {
                $0 === output || (!output.isConsumerPort && !$0.isConsumerPort && type(of: $0) == type(of: output))
            }
        }
    }

    /// Adds `output`; does nothing if `canAddOutput` says no.
    public func addOutput(_ output: CaptureOutput) {
        if output.isHosting { return addHosted(output) }
        change {
            guard canAddOutput(output) else { return }
            stagedOutputs.append(output)
            if isMultiCam { automaticOutputs.insert(ObjectIdentifier(output)) }
            output.attach(to: self)
        }
    }

    /// Removes `output`. Once the change is committed (at once outside `beginConfiguration()`),
    /// the session's capture threads no longer call into the output; a frame already queued for
    /// its delegate may still be delivered.
    public func removeOutput(_ output: CaptureOutput) {
        if output.isHosting { return removeHosted(output) }
        change {
            stagedOutputs.removeAll { $0 === output }
            automaticOutputs.remove(ObjectIdentifier(output))
            if !appliedOutputs.contains(where: { $0 === output }) {
                // Added and removed inside one configuration: it never ran, so let it go now.
                output.setConnections([])
                output.attach(to: nil)
            }
        }
    }

    /// A movie file or metadata output joins through its ports; then it is told.
    private func addHosted(_ output: CaptureOutput) {
        var added = false
        change {
            guard canAddOutput(output) else { return }
            var ports: [FrameConsumerPort] = []
            for port in output.hostedPorts {
                guard addFrameConsumer(port) else {
                    for p in ports { removeOutput(p) }
                    return
                }
                ports.append(port)
            }
            hostedOutputs.append(output)
            added = true
        }
        if added { output.hosting?.joined(self) }
    }

    private func removeHosted(_ output: CaptureOutput) {
        var removed = false
        change {
            guard hostedOutputs.contains(where: { $0 === output }) else { return }
            hostedOutputs.removeAll { $0 === output }
            for port in output.hostedPorts { removeOutput(port) }
            removed = true
        }
        if removed { output.hosting?.left(self) }
    }

    // MARK: Frame consumers (the extension point of the preview, server and recorder products)

    /// The seeds' camera toggle: inside one begin/commit, the session's inputs are replaced by
    /// `input`; if the commit is refused (the camera cannot do the session's preset), the old
    /// inputs come back and the refusal is thrown. For the package's tools and server.
    package func replaceInputs(with input: CaptureDeviceInput) throws(CaptureError) {
        beginConfiguration()
        for i in inputs { removeInput(i) }
        addInput(input)
        // A refusal undoes the whole transaction: the camera that worked stays.
        if case .rejected(let e) = commitConfiguration() { throw e }
    }

    /// Adds the port of a consumer the route table calls directly (see `FrameConsumer`): like an
    /// output it gets a connection per camera (or microphone, for an audio port); unlike one it is
    /// not in `outputs`, and any number may be added. Returns false if it is in a session.
    @discardableResult
    package func addFrameConsumer(_ port: FrameConsumerPort) -> Bool {
        var added = false
        change {
            guard canAddOutput(port) else { return }
            stagedOutputs.append(port)
            if isMultiCam { automaticOutputs.insert(ObjectIdentifier(port)) }
            port.attach(to: self)
            added = true
        }
        return added
    }

    /// Removes a consumer's port; when this returns the consumer is not called any more.
    package func removeFrameConsumer(_ port: FrameConsumerPort) { removeOutput(port) }

    /// The ports of the consumers the route table calls directly, in the order they were added.
    package var consumerPorts: [FrameConsumerPort] {
        lock.withLock { stagedOutputs.compactMap { $0 as? FrameConsumerPort } }
    }
}
