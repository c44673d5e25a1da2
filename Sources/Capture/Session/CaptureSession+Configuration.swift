// Configuration transactions: staged changes, the preset, the formats chosen for each camera,
// and applying (or rejecting) them as one.
import CaptureImaging
import CaptureBackend
import Foundation

extension CaptureSession {
    // MARK: Presets

    /// The quality preset, applied to every video input at the next commit. A preset that a
    /// camera in the session cannot do (`canSetSessionPreset` says no) is refused, as in
    /// AVFoundation: the preset stays, a `.configurationRejected` event says why, and inside
    /// `beginConfiguration()` the commit returns `.rejected` and undoes the transaction.
    public var sessionPreset: Preset {
        get { lock.withLock { stagedPreset } }
        set {
            change {
                guard canSetSessionPreset(newValue) else {
                    let cameras = stagedInputs.compactMap { ($0 as? CaptureDeviceInput)?.device }.filter { $0.mediaType == .video }
                    let sizes = Set(cameras.flatMap { $0.formats.map(\.dimensions.description) }).sorted().joined(separator: ", ")
                    refuse(
                        CaptureError(
                            .unsupportedFormat,
                            "\(cameras.map(\.localizedName).joined(separator: ", ")) cannot run at preset \(newValue.rawValue) (sizes: \(sizes)); the preset stays \(stagedPreset.rawValue)"
                        ))
                    return
                }
                stagedPreset = newValue
            }
        }
    }

    /// Whether every video input (or, with none, any camera) can run at `preset`.
    public func canSetSessionPreset(_ preset: Preset) -> Bool {
        lock.withLock {
            let devices = stagedInputs.compactMap { ($0 as? CaptureDeviceInput)?.device }.filter { $0.mediaType == .video }
            if preset == .inputPriority { return true }
            return devices.allSatisfy { d in
                PresetResolver.format(for: preset, in: d.formats, preferred: preferredPixelFormat(stagedOutputs)) != nil
            }
        }
    }

    // MARK: Configuration transactions

    /// Starts a set of changes that take effect together at the outermost `commitConfiguration()`.
    public func beginConfiguration() {
        lock.lock()
        configurationDepth += 1
        lock.unlock()
    }

    /// Applies the changes made since the outermost `beginConfiguration()`. If a call inside was
    /// refused (`addInput` of an input `canAddInput` refuses, a preset `canSetSessionPreset`
    /// refuses) or a device rejects the changes, none of them takes effect: the previous
    /// configuration stays (inputs, outputs, preset and formats), the result is `.rejected` with
    /// the reason, and a `.configurationRejected` event carries it too, so a caller that ignores
    /// the result still learns of it. A running session keeps running.
    @discardableResult
    public func commitConfiguration() -> ConfigurationResult {
        lock.withLock {
            guard configurationDepth > 0 else { return .applied }
            configurationDepth -= 1
            return configurationDepth == 0 ? apply() : .applied
        }
    }

    func change(_ body: () -> Void) {
        lock.withLock {
            configurationDepth += 1
            body()
            rebuildConnections(inputs: stagedInputs, outputs: stagedOutputs)
            configurationDepth -= 1
            if configurationDepth == 0 { _ = apply() }
        }
    }

    private func rebuildConnections(inputs: [CaptureInput], outputs: [CaptureOutput]) {
        if isMultiCam { return rebuildLinks(inputs: inputs, outputs: outputs) }
        var list: [CaptureConnection] = []
        for o in outputs {
            var mine: [CaptureConnection] = []
            for i in inputs {
                for m in i.mediaTypes where o.acceptedMediaTypes.contains(m) {
                    // Keep existing connection objects so their settings (orientation...) survive:
                    // the running graph's first (its capture threads deliver on them, even when
                    // the transaction removed and added the input again), then this transaction's.
                    let same = { (c: CaptureConnection) in c.input === i && c.output === o && c.mediaType == m }
                    if let old = appliedConnections.first(where: same) ?? o.connections.first(where: same) {
                        mine.append(old)
                    } else {
                        mine.append(CaptureConnection(input: i, output: o, mediaType: m))
                    }
                }
            }
            o.setConnections(mine)
            list += mine
        }
        allConnections = list
    }

    /// The first output's wish: the app's outputs choose the device format (the package's
    /// consumers' ports have none). Each wish is read once: another thread
    /// may change an output's settings meanwhile (a lazy `compactMap(...).first` reads twice and
    /// traps when the second read is nil).
    func preferredPixelFormat(_ outputs: [CaptureOutput]) -> PixelFormat? {
        for o in outputs { if let f = o.preferredPixelFormat { return f } }
        return nil
    }

    /// A format or frame duration asked of a device of the session, not yet in its state.
    struct FormatWish {
        var device: CaptureDevice
        var format: CaptureDevice.Format?
        var interval: FrameInterval?
    }

    /// Resolves the format each video input needs for the staged configuration (with `wish`
    /// taking the place of its device's active format and duration).
    func makePlans(wish: FormatWish? = nil) throws(CaptureError) -> [ObjectIdentifier: VideoPlan] {
        var result: [ObjectIdentifier: VideoPlan] = [:]
        let preferred = preferredPixelFormat(stagedOutputs)
        for case let input as CaptureDeviceInput in stagedInputs where input.device.mediaType == .video {
            let device = input.device
            let formats = try device.loadFormats()
            var wanted = device.state.withLock { ($0.activeFormat, $0.minFrameDuration) }
            if let wish, wish.device === device { wanted = (wish.format ?? wanted.0, wish.interval ?? wanted.1) }
            var format: CaptureDevice.Format?
            if stagedPreset == .inputPriority {
                format = wanted.0 ?? device.activeFormat ?? PresetResolver.format(for: .high, in: formats, preferred: preferred)
            } else {
                format = PresetResolver.format(for: stagedPreset, in: formats, preferred: preferred)
            }
            guard let format else {
                throw CaptureError(
                    .unsupportedFormat,
                    "\(device.localizedName) has no format for preset \(stagedPreset.rawValue); check canSetSessionPreset first (sizes it has: \(Set(formats.map(\.dimensions.description)).sorted().joined(separator: ", ")))"
                )
            }
            var interval: FrameInterval? = nil
            if let w = wanted.1, format.supports(w) { interval = w }
            if interval == nil, let fastest = format.videoSupportedFrameRateRanges.map(\.minFrameDuration).min() {
                interval = fastest
            }
            result[ObjectIdentifier(input)] = VideoPlan(format: format, interval: interval)
        }
        return result
    }

    /// Notes a refused call; the outermost commit rejects the transaction with the first one.
    func refuse(_ error: CaptureError) {
        if refusal == nil { refusal = error }
    }

    /// Applies staged → applied. Called with `lock` held.
    private func apply(wish: FormatWish? = nil) -> ConfigurationResult {
        if let refused = refusal {
            refusal = nil
            return reject(refused)
        }
        let newPlans: [ObjectIdentifier: VideoPlan]
        do {
            newPlans = try makePlans(wish: wish)
        } catch {
            return reject(error)
        }
        let oldInputs = appliedInputs
        let removed = oldInputs.filter { o in !stagedInputs.contains { $0 === o } }
        let added = stagedInputs.filter { n in !oldInputs.contains { $0 === n } }
        var changed = stagedInputs.filter { i in
            oldInputs.contains { $0 === i } && plans[ObjectIdentifier(i)] != newPlans[ObjectIdentifier(i)]
        }
        var notes: [String] = []
        var waiting: [CaptureDeviceInput] = []
        // Interrupted before (a stall) and held by another client now: retried once it holds.
        var stillWaiting: [CaptureDeviceInput] = []
        if running.load(ordering: .acquiring) {
            // A new frame rate alone is set on the running stream (S_PARM), without a restart.
            changed.removeAll { i in
                guard let di = i as? CaptureDeviceInput, let old = plans[ObjectIdentifier(i)],
                    let new = newPlans[ObjectIdentifier(i)], old.format == new.format, let want = new.interval,
                    let got = try? di.device.applyInterval(want)
                else { return false }
                if got != want { notes.append("\(di.device.localizedName): frame interval \(want) became \(got)") }
                return true
            }
            // Stop what goes away or changes; start what is new or changed; undo all on failure.
            let toStop = removed + changed
            for i in toStop { runners.removeValue(forKey: ObjectIdentifier(i))?.stop() }
            var started: [CaptureInput] = []
            // Inputs another client holds are interrupted once the transaction holds: a rejected
            // one leaves no interruption behind (nor a retry of an input the session lacks).
            let interruptedBefore = interruptions.withLock { Set($0.keys) }
            do {
                for i in added + changed {
                    guard let di = i as? CaptureDeviceInput else { continue }
                    if let r = try startOrWait(di, plan: newPlans[ObjectIdentifier(i)], notes: &notes, announce: false) {
                        runners[ObjectIdentifier(i)] = r
                        started.append(i)
                    } else if !interruptedBefore.contains(ObjectIdentifier(i)) {
                        waiting.append(di)
                    } else {
                        stillWaiting.append(di)
                    }
                }
            } catch {
                for i in started { runners.removeValue(forKey: ObjectIdentifier(i))?.stop() }
                interruptions.withLock { i in for di in waiting { i.removeValue(forKey: ObjectIdentifier(di)) } }
                // Bring the previous configuration back. An input that cannot start again is
                // interrupted (another client took it meanwhile) or a runtime error, never silent.
                var failed: [(CaptureDeviceInput, CaptureError)] = []
                for case let di as CaptureDeviceInput in toStop {
                    do {
                        if let r = try startOrWait(di, plan: plans[ObjectIdentifier(di)], notes: &notes) {
                            runners[ObjectIdentifier(di)] = r
                        }
                    } catch {
                        failed.append((di, error))
                    }
                }
                let result = reject(error)
                for (di, e) in failed { restartFailed(di, error: e) }
                return result
            }
        }
        for case let di as CaptureDeviceInput in removed {
            di.device.setOwner(nil)
            interruptions.withLock { _ = $0.removeValue(forKey: ObjectIdentifier(di)) }
        }
        for case let di as CaptureDeviceInput in stagedInputs { di.device.setOwner(self) }
        let gone = appliedOutputs.filter { o in !stagedOutputs.contains { $0 === o } }
        let before = appliedConnections
        appliedInputs = stagedInputs
        if appliedInputs.contains(where: { $0.mediaTypes.contains(.video) }) { cameraRefusal = nil }
        appliedOutputs = stagedOutputs
        appliedPreset = stagedPreset
        plans = newPlans
        rebuildConnections(inputs: appliedInputs, outputs: appliedOutputs)
        appliedConnections = allConnections
        appliedLinks = stagedLinks
        for r in runners.values { r.setConnections(connections(of: r.input)) }
        // Outputs that stay but lost a connection (its input went): pending work on it ends.
        for c in before where !allConnections.contains(where: { $0 === c }) {
            if let o = c.output, !gone.contains(where: { $0 === o }) { o.connectionRemoved(c) }
        }
        // No capture thread calls the removed outputs any more: end their work.
        for o in gone {
            for c in o.connections { o.inputDidStop(c, error: nil) }
            o.setConnections([])
            o.attach(to: nil)
        }
        for di in waiting { announceInUse(di) }
        for di in stillWaiting { scheduleResume(di) }
        formatsBeforeTransaction = [:]
        return notes.isEmpty ? .applied : .adjusted(notes)
    }

    /// Undoes the transaction: the running graph stays exactly as it was, with the same
    /// connection objects (the capture threads deliver on them; stills and orientation set on
    /// `output.connection(with:)` must reach them). Called with `lock` held.
    private func reject(_ error: CaptureError) -> ConfigurationResult {
        // Formats and durations set inside the transaction are undone with it.
        for old in formatsBeforeTransaction.values {
            old.device.state.withLock { ($0.activeFormat, $0.minFrameDuration) = (old.format, old.interval) }
        }
        formatsBeforeTransaction = [:]
        // Outputs added in the refused transaction never joined: free them for another session.
        for o in stagedOutputs where !appliedOutputs.contains(where: { $0 === o }) {
            o.setConnections([])
            o.attach(to: nil)
        }
        stagedLinks = appliedLinks
        stagedInputs = appliedInputs
        stagedOutputs = appliedOutputs
        stagedPreset = appliedPreset
        for o in stagedOutputs { o.attach(to: self) }
        // `appliedConnections` comes first in the lookup: the rebuilt graph is the applied one.
        rebuildConnections(inputs: appliedInputs, outputs: appliedOutputs)
        appliedConnections = allConnections
        // A runner restarted by a failed apply was given the staged connections.
        for r in runners.values { r.setConnections(connections(of: r.input)) }
        hub.post(.configurationRejected(error))
        return .rejected(error)
    }

    func connections(of input: CaptureInput) -> [CaptureConnection] {
        allConnections.filter { $0.input === input }
    }

    /// `output`'s subscription changed: the runners it is routed from rebuild their routes, so
    /// their next frame goes by it. Waits for a delivery in progress on those runners.
    func refreshRoutes(of output: CaptureOutput) {
        lock.withLock {
            for r in runners.values {
                // The applied graph's (an open transaction may have staged another).
                let mine = appliedConnections.filter { $0.input === r.input }
                if mine.contains(where: { $0.output === output }) { r.setConnections(mine) }
            }
        }
    }

    /// Called by `CaptureDevice.setActiveFormat` and friends while the device is in this session.
    /// The device reports the new values only once the session took them: no other thread sees
    /// a format that is not applied yet, or that the session rejects.
    func deviceWantsFormat(_ device: CaptureDevice, format: CaptureDevice.Format?, interval: FrameInterval?) throws(CaptureError) {
        lock.lock()
        defer { lock.unlock() }
        if format != nil { stagedPreset = .inputPriority }
        if configurationDepth == 0, case .rejected(let e) = apply(wish: FormatWish(device: device, format: format, interval: interval)) {
            throw e
        }
        // A running camera's restart noted what the driver took; otherwise the values are what
        // the commit or the next start uses.
        if configurationDepth > 0 || !running.load(ordering: .acquiring) {
            if configurationDepth > 0, formatsBeforeTransaction[ObjectIdentifier(device)] == nil {
                let old = device.state.withLock { ($0.activeFormat, $0.minFrameDuration) }
                formatsBeforeTransaction[ObjectIdentifier(device)] = (device, old.0, old.1)
            }
            device.state.withLock { st in
                if let format { st.activeFormat = format }
                if let interval { st.minFrameDuration = interval }
            }
        }
    }
}
