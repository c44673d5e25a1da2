import CaptureImaging
import CaptureBackend
import CaptureSystem
import Foundation
import Synchronization

/// Runs one input while the session runs (a video pipeline or an audio reader).
protocol InputRunner: AnyObject, Sendable {
    var input: CaptureDeviceInput { get }
    /// Starts capturing; on failure nothing stays started.
    func start() throws(CaptureError)
    /// Stops and waits until the runner's thread has ended. Idempotent.
    func stop()
    /// The connections frames go to (replaced when the session's graph changes). Returns once no
    /// call into an output left out of `connections` is running, and none will start.
    func setConnections(_ connections: [CaptureConnection])
}

/// One connection and its output, as a capture thread calls them. The strong reference keeps
/// the output alive for as long as a call into it may run (a connection holds its output weakly).
struct Route: Sendable {
    let connection: CaptureConnection
    let output: CaptureOutput

    static func of(_ connections: [CaptureConnection]) -> [Route] {
        connections.compactMap { c in c.output.map { Route(connection: c, output: $0) } }
    }
}

/// The routes of one running input. Its capture thread calls outputs only inside `withRoutes`,
/// under the table's lock, so when `replace` returns no call into a removed output is running
/// and none starts later. The calls under the lock are the outputs' own short, non-blocking hooks
/// (`handleFrame`, `handleDrop`, `handleAudio`), never app code.
final class RouteTable: Sendable {
    private let routes: Locked<[Route]>

    init(_ connections: [CaptureConnection]) { routes = Locked(Route.of(connections)) }

    /// Waits for a delivery in progress, then swaps in the new routes.
    func replace(with connections: [CaptureConnection]) {
        let new = Route.of(connections)
        let old = routes.withLock { r in
            defer { r = new }
            return r
        }
        // A removed output may be freed here, outside the lock.
        _ = consume old
    }

    /// Runs `body` with the current routes; `replace` waits until it returns.
    func withRoutes<R>(_ body: ([Route]) -> R) -> R { routes.withLock { body($0) } }
    /// A copy of the routes, for calls that must not run under the lock (`inputDidStop`).
    var snapshot: [Route] { routes.withLock { $0 } }
}

/// Coordinates the flow from inputs to outputs, as `AVCaptureSession`.
///
/// Add inputs and outputs (inside `beginConfiguration()`/`commitConfiguration()` to change
/// several at once), then `startRunning()`. Thread-safe: configuration, start and stop may be
/// called from any thread (they block while the devices change); they must not be called from
/// inside a delegate callback that the same call would wait for. One camera at a time; for
/// several at once use `CaptureMultiCamSession`.
public class CaptureSession: @unchecked Sendable {
    private let lock = NSRecursiveLock()
    // Guarded by `lock`:
    private var stagedInputs: [CaptureInput] = []
    private var stagedOutputs: [CaptureOutput] = []
    private var stagedPreset: Preset = .high
    private var appliedInputs: [CaptureInput] = []
    private var appliedOutputs: [CaptureOutput] = []
    private var appliedPreset: Preset = .high
    private var allConnections: [CaptureConnection] = []
    /// The connections of the applied graph (the capture threads' routes), for telling outputs
    /// which of theirs a commit took away.
    private var appliedConnections: [CaptureConnection] = []
    private var configurationDepth = 0
    /// The first call refused inside the current transaction (an input or preset the session
    /// cannot take); the outermost commit then rejects the whole transaction with it.
    private var refusal: CaptureError?
    /// Why the last camera `canAddInput` or `addInput` refused was refused, for `start()`'s
    /// error when the session has no camera.
    private var cameraRefusal: CaptureError?
    private var runners: [ObjectIdentifier: any InputRunner] = [:]
    /// Format and interval each video input runs (or will run) with.
    private var plans: [ObjectIdentifier: VideoPlan] = [:]

    private let running = Atomic<Bool>(false)
    /// The inputs interrupted now and why; capture threads change it (a stall) without the
    /// session's lock.
    private let interruptions = Locked<[ObjectIdentifier: (device: CaptureDevice, reason: InterruptionReason)]>([:])
    let hub = EventHub()
    /// Serialises reactions to failures reported from capture threads.
    private let controlQueue = DispatchQueue(label: "swift-capture.session-control")

    struct VideoPlan: Equatable {
        var format: CaptureDevice.Format
        var interval: FrameInterval?
    }

    /// A multi-camera session: several video inputs, connections made one by one.
    let isMultiCam: Bool
    // Multi-camera sessions only, guarded by `lock`: the connections (staged, and as last
    // applied), the outputs connected automatically, and the inputs added without connections.
    private var stagedLinks: [CaptureConnection] = []
    private var appliedLinks: [CaptureConnection] = []
    private var automaticOutputs: Set<ObjectIdentifier> = []
    private var unlinkedInputs: Set<ObjectIdentifier> = []

    /// An empty session for one camera (and one microphone).
    public init() {
        isMultiCam = false
        hub.setSession(self)
    }
    init(multiCam: Bool) {
        isMultiCam = multiCam
        hub.setSession(self)
    }

    deinit {
        for r in runners.values { r.stop() }
        for case let i as CaptureDeviceInput in appliedInputs { i.device.setOwner(nil) }
        // Outputs the app still holds are left detached: pending work ends with `.cancelled`,
        // and they can join another session.
        let cancelled = CaptureError(.cancelled, "the session was released")
        for o in appliedOutputs {
            for c in o.connections { o.inputDidStop(c, error: cancelled) }
        }
        for o in appliedOutputs + stagedOutputs {
            o.setConnections([])
            o.attach(to: nil)
        }
    }

    // MARK: Graph

    /// The inputs, including changes not yet committed.
    public var inputs: [CaptureInput] { lock.withLock { stagedInputs } }
    /// The outputs, including changes not yet committed.
    public var outputs: [CaptureOutput] { lock.withLock { stagedOutputs.filter { !$0.isFrameConsumer } } }
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
    private func checkAdd(_ input: CaptureInput) -> CaptureError? {
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

    /// Whether `output` can be added: not in a session yet, and no output of its kind present.
    public func canAddOutput(_ output: CaptureOutput) -> Bool {
        lock.withLock {
            if output.session != nil && output.session !== self { return false }
            // A multi-camera session takes an output of each kind per camera.
            if isMultiCam { return !stagedOutputs.contains { $0 === output } }
            // Frame consumers (preview, server, recorder) may be many, beside the outputs.
            return !stagedOutputs.contains {
                $0 === output || (!output.isFrameConsumer && !$0.isFrameConsumer && type(of: $0) == type(of: output))
            }
        }
    }

    /// Adds `output`; does nothing if `canAddOutput` says no.
    public func addOutput(_ output: CaptureOutput) {
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

    /// Adds a frame consumer: a video data output made with `init(frameConsumer:)`. Like an
    /// output it gets a connection per camera and its frames (raw, converted or JPEG, per its
    /// `videoSettings`; a JPEG product is encoded once for every consumer and output that wants
    /// it), on its own queue, newest first when it falls behind (`alwaysDiscardsLateVideoFrames`),
    /// with every lost frame reported; unlike one it is not in `outputs`, and any number may be
    /// added. Returns false (and changes nothing) if it is not a frame consumer or is in a session.
    @discardableResult
    package func addFrameConsumer(_ consumer: CaptureVideoDataOutput) -> Bool { addConsumer(consumer) }

    private func addConsumer(_ consumer: CaptureOutput) -> Bool {
        guard consumer.isFrameConsumer else { return false }
        var added = false
        change {
            guard canAddOutput(consumer) else { return }
            stagedOutputs.append(consumer)
            if isMultiCam { automaticOutputs.insert(ObjectIdentifier(consumer)) }
            consumer.attach(to: self)
            added = true
        }
        return added
    }

    /// Removes a frame consumer; once this returns the capture threads no longer call it.
    package func removeFrameConsumer(_ consumer: CaptureVideoDataOutput) { removeOutput(consumer) }

    /// Adds an audio consumer (an audio data output made with `init(frameConsumer:)`, the
    /// recorder's), as `addFrameConsumer` does for video: a connection per microphone, beside the
    /// app's outputs and not in `outputs`. Returns false (and changes nothing) if it is not a
    /// consumer or is in a session. Remove it with `removeOutput`.
    @discardableResult
    package func addAudioConsumer(_ consumer: CaptureAudioDataOutput) -> Bool { addConsumer(consumer) }

    /// The frame consumers, in the order they were added.
    package var frameConsumers: [CaptureVideoDataOutput] {
        lock.withLock { stagedOutputs.compactMap { $0.isFrameConsumer ? $0 as? CaptureVideoDataOutput : nil } }
    }

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

    private func change(_ body: () -> Void) {
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

    /// The first output's wish, else the first frame consumer's: the app's outputs choose the
    /// device format before the package's consumers do. Each wish is read once: another thread
    /// may change an output's settings meanwhile (a lazy `compactMap(...).first` reads twice and
    /// traps when the second read is nil).
    private func preferredPixelFormat(_ outputs: [CaptureOutput]) -> PixelFormat? {
        for o in outputs where !o.isFrameConsumer { if let f = o.preferredPixelFormat { return f } }
        for o in outputs where o.isFrameConsumer { if let f = o.preferredPixelFormat { return f } }
        return nil
    }

    /// Resolves the format each video input needs for the staged configuration.
    private func makePlans() throws(CaptureError) -> [ObjectIdentifier: VideoPlan] {
        var result: [ObjectIdentifier: VideoPlan] = [:]
        let preferred = preferredPixelFormat(stagedOutputs)
        for case let input as CaptureDeviceInput in stagedInputs where input.device.mediaType == .video {
            let device = input.device
            let formats = try device.loadFormats()
            let wanted = device.state.withLock { ($0.activeFormat, $0.minFrameDuration) }
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
    private func refuse(_ error: CaptureError) {
        if refusal == nil { refusal = error }
    }

    /// Applies staged → applied. Called with `lock` held.
    private func apply() -> ConfigurationResult {
        if let refused = refusal {
            refusal = nil
            return reject(refused)
        }
        let newPlans: [ObjectIdentifier: VideoPlan]
        do {
            newPlans = try makePlans()
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
            do {
                for i in added + changed {
                    guard let di = i as? CaptureDeviceInput,
                        let r = try startOrWait(di, plan: newPlans[ObjectIdentifier(i)], notes: &notes)
                    else { continue }
                    runners[ObjectIdentifier(i)] = r
                    started.append(i)
                }
            } catch {
                for i in started { runners.removeValue(forKey: ObjectIdentifier(i))?.stop() }
                // Bring the previous configuration back.
                for case let di as CaptureDeviceInput in toStop {
                    if let r = try? startRunner(di, plan: plans[ObjectIdentifier(di)], notes: &notes) {
                        runners[ObjectIdentifier(di)] = r
                    }
                }
                return reject(error)
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
        return notes.isEmpty ? .applied : .adjusted(notes)
    }

    /// Undoes the transaction: the running graph stays exactly as it was, with the same
    /// connection objects (the capture threads deliver on them; stills and orientation set on
    /// `output.connection(with:)` must reach them). Called with `lock` held.
    private func reject(_ error: CaptureError) -> ConfigurationResult {
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

    private func connections(of input: CaptureInput) -> [CaptureConnection] {
        allConnections.filter { $0.input === input }
    }

    private func startRunner(_ input: CaptureDeviceInput, plan: VideoPlan?, notes: inout [String]) throws(CaptureError) -> any InputRunner {
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

    /// Called by `CaptureDevice.setActiveFormat` and friends while the device is in this session.
    func deviceWantsFormat(_ device: CaptureDevice, format: CaptureDevice.Format?, interval: FrameInterval?) throws(CaptureError) {
        let previous = device.state.withLock { ($0.activeFormat, $0.minFrameDuration) }
        device.state.withLock { st in
            if let format { st.activeFormat = format }
            if let interval { st.minFrameDuration = interval }
        }
        let result: ConfigurationResult = lock.withLock {
            if format != nil { stagedPreset = .inputPriority }
            return configurationDepth == 0 ? apply() : .applied
        }
        if case .rejected(let e) = result {
            device.state.withLock { st in
                st.activeFormat = previous.0
                st.minFrameDuration = previous.1
            }
            throw e
        }
    }

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
        for di in waiting {
            hub.post(.wasInterrupted(di.device, reason: Self.inUseReason(di)))
            scheduleResume(di)
        }
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

    /// Starts `input`'s runner; when another client holds the device, marks the input
    /// interrupted instead, schedules a retry and returns nil. Called with `lock` held.
    private func startOrWait(
        _ input: CaptureDeviceInput, plan: VideoPlan?, notes: inout [String],
        announce: Bool = true
    ) throws(CaptureError) -> (any InputRunner)? {
        do {
            return try startRunner(input, plan: plan, notes: &notes)
        } catch {
            guard takenByAnotherClient(input, error) else { throw error }
            beginInterruption(input, reason: Self.inUseReason(input), announce: announce)
            if announce { scheduleResume(input) }
            return nil
        }
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

    /// Inputs with a retry pending (guarded by `lock`), so one interruption has one retry chain.
    private var resumeScheduled: Set<ObjectIdentifier> = []

    /// Called with `lock` held.
    private func scheduleResume(_ input: CaptureDeviceInput) {
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
            endInterruption(input)
        } catch {
            // Something else went wrong: a runtime error, as for a running input.
            interruptions.withLock { _ = $0.removeValue(forKey: id) }
            hub.post(.runtimeError(error))
            if runners.isEmpty, !isInterrupted, running.load(ordering: .acquiring) {
                running.store(false, ordering: .releasing)
                hub.post(.didStopRunning)
            }
        }
    }

    /// Stops the flow of data and waits until every capture thread has ended. Frames the app
    /// still holds stay valid.
    public func stopRunning() {
        lock.lock()
        defer { lock.unlock() }
        guard running.load(ordering: .acquiring) else { return }
        let all = runners
        runners = [:]
        for r in all.values { r.stop() }
        interruptions.withLock { $0 = [:] }
        // Not running before the outputs cancel their work: a still requested meanwhile sees it
        // (CaptureStillImageOutput re-checks after queueing) instead of waiting for its time-out.
        running.store(false, ordering: .releasing)
        for o in appliedOutputs { for c in o.connections { o.inputDidStop(c, error: CaptureError(.cancelled, "the session stopped")) } }
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
            if error.code == .disconnected {
                runner.input.device.markDisconnected()
                self.hub.post(.deviceDisconnected(runner.input.device))
                runner.input.device.dropSource()
            }
            self.hub.post(.runtimeError(error))
            if error.code != .disconnected {
                // AVFoundation stops the session on a runtime error; the app may start it again.
                for r in self.runners.values { r.stop() }
                self.runners = [:]
            }
            if self.runners.isEmpty, !self.isInterrupted, self.running.load(ordering: .acquiring) {
                self.running.store(false, ordering: .releasing)
                self.hub.post(.didStopRunning)
            }
        }
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

    // MARK: Multi-camera connections

    /// Multi-camera: each output's connections are the links made for it. An output added with
    /// `addOutput` (or a frame consumer) is linked, per media type, to the first input added with
    /// `addInput` that feeds no output of its kind yet (a second video data output goes to the
    /// second camera); outputs and inputs added without connections only get the links the app
    /// adds. Called with `lock` held.
    private func rebuildLinks(inputs: [CaptureInput], outputs: [CaptureOutput]) {
        stagedLinks.removeAll { l in
            !inputs.contains { $0 === l.input } || !outputs.contains { $0 === l.output }
        }
        for o in outputs where automaticOutputs.contains(ObjectIdentifier(o)) {
            for m in o.acceptedMediaTypes where !stagedLinks.contains(where: { $0.output === o && $0.mediaType == m }) {
                let free = inputs.first { i in
                    i.mediaTypes.contains(m) && !unlinkedInputs.contains(ObjectIdentifier(i))
                        && !stagedLinks.contains { l in
                            guard l.input === i, l.mediaType == m, let other = l.output else { return false }
                            return type(of: other) == type(of: o) && other.isFrameConsumer == o.isFrameConsumer
                        }
                }
                if let free { stagedLinks.append(CaptureConnection(input: free, output: o, mediaType: m)) }
            }
        }
        var list: [CaptureConnection] = []
        for o in outputs {
            let mine = stagedLinks.filter { $0.output === o }
            o.setConnections(mine)
            list += mine
        }
        allConnections = list
    }

    func addInputWithoutLinks(_ input: CaptureInput) {
        change {
            if let why = checkAdd(input) { refuse(why); return }
            stagedInputs.append(input)
            unlinkedInputs.insert(ObjectIdentifier(input))
        }
    }

    func addOutputWithoutLinks(_ output: CaptureOutput) {
        change {
            guard canAddOutput(output) else { return }
            stagedOutputs.append(output)
            automaticOutputs.remove(ObjectIdentifier(output))
            output.attach(to: self)
        }
    }

    func canAddLink(_ c: CaptureConnection) -> Bool {
        lock.withLock {
            guard isMultiCam, let o = c.output, stagedInputs.contains(where: { $0 === c.input }),
                stagedOutputs.contains(where: { $0 === o }),
                c.input.mediaTypes.contains(c.mediaType), o.acceptedMediaTypes.contains(c.mediaType)
            else { return false }
            // An output takes one connection per media type, as in AVFoundation.
            return !stagedLinks.contains { $0 === c || ($0.output === o && $0.mediaType == c.mediaType) }
        }
    }

    func addLink(_ c: CaptureConnection) {
        change {
            guard canAddLink(c) else { return }
            stagedLinks.append(c)
        }
    }

    func removeLink(_ c: CaptureConnection) {
        change {
            stagedLinks.removeAll { $0 === c }
            // Removed by hand: the output is not linked again automatically.
            if let o = c.output { automaticOutputs.remove(ObjectIdentifier(o)) }
        }
    }

    // MARK: Events

    /// A new stream of the session's events (each call gets its own stream).
    public func events() -> AsyncStream<Event> { hub.stream() }

    /// Calls `handler` (on a private serial queue) for every event; returns a token for
    /// `removeEventHandler`.
    @discardableResult
    public func addEventHandler(_ handler: @escaping @Sendable (Event) -> Void) -> UUID { hub.addHandler(handler) }
    /// Stops calling the handler `token` names.
    public func removeEventHandler(_ token: UUID) { hub.removeHandler(token) }
}
