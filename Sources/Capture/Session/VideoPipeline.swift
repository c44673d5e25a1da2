import Foundation
import Synchronization

/// The capture thread of one running video input: waits for frames, notices gaps, stalls and
/// failures, and hands frames to the connected outputs. It never runs app code.
final class VideoPipeline: InputRunner, @unchecked Sendable {
    let input: CaptureDeviceInput
    private weak var session: CaptureSession?
    private let source: any VideoSource
    private let format: ActiveFormat
    private let connections: Locked<[CaptureConnection]>
    private let stopRequested = Atomic<Bool>(false)
    private let finished = DispatchSemaphore(value: 0)
    private let started = Atomic<Bool>(false)
    private let stopped = Atomic<Bool>(false)
    /// How long without a frame counts as a stall.
    let stallTimeout: Duration
    // The reusable sample buffers frames are handed out in; only the capture thread uses it.
    private let samples = SampleBufferPool()

    init(session: CaptureSession, input: CaptureDeviceInput, format: ActiveFormat, connections: [CaptureConnection]) {
        self.session = session
        self.input = input
        self.format = format
        self.connections = Locked(connections)
        // Force-unwrapped safely: a video input's source was opened when the input was made.
        self.source = (try? input.device.source())!
        let interval = input.device.activeVideoMinFrameDuration?.seconds ?? (1.0 / 30)
        self.stallTimeout = .milliseconds(Int64(max(2.0, 10 * interval) * 1000))
    }

    func setConnections(_ list: [CaptureConnection]) { connections.withLock { $0 = list } }

    func start() throws(CaptureError) {
        try source.startStreaming(bufferCount: 4)
        started.store(true, ordering: .releasing)
        let t = Thread { [self] in run() }
        t.name = "swift-capture video \(input.device.localizedName)"
        t.qualityOfService = .userInteractive
        t.start()
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
            // Unheld frames go back now; held ones when their holders let go.
            samples.reclaim()
            samples.abandon()
            finished.signal()
        }
        var expected: UInt32? = nil
        var starved = false
        var lastFrame = ContinuousClock.now
        var stalled = false
        var checkStarvation = false
        let device = input.device
        while !stopRequested.load(ordering: .acquiring) {
            // Here this loop's own references to the last frame are gone: frames nobody holds
            // go back to the driver, and what is still held is counted.
            let lent = samples.reclaim()
            if checkStarvation, source.bufferCount > 0, source.buffersHeldByClients >= source.bufferCount { starved = true }
            checkStarvation = false
            // Released samples are only noticed here, so while the driver is short of buffers
            // the wait is cut into slices that let them go back promptly.
            let short = lent > 0 && source.bufferCount - source.buffersHeldByClients <= 1
            let event: FrameEvent
            do {
                event = try source.nextFrame(timeout: short ? .milliseconds(5) : .milliseconds(100))
            } catch {
                let conns = connections.withLock { $0 }
                for c in conns { c.output.inputDidStop(c, error: error) }
                session?.runnerFailed(self, error: error)
                return
            }
            switch consume event {
            case .interrupted:
                continue
            case .timeout:
                if source.bufferCount > 0, source.buffersHeldByClients >= source.bufferCount {
                    // The app holds every buffer: not a stall, the device just has nowhere to write.
                    starved = true
                    lastFrame = .now
                } else if !stalled, ContinuousClock.now - lastFrame > stallTimeout {
                    stalled = true
                    session?.hub.post(.deviceStalled(device, duration: ContinuousClock.now - lastFrame))
                }
            case .corrupt(let seq, _):
                lastFrame = .now
                corrupt(seq, expected: &expected, starved: &starved)
            case .frame(let first):
                if stalled {
                    stalled = false
                    session?.hub.post(.deviceResumed(device))
                }
                let conns = connections.withLock { $0 }
                var corruptAfter: UInt32?
                var sample = samples.wrap(first, format: format)
                // A pending still wants the newest frame: skip (but still deliver) older ones.
                if conns.contains(where: { $0.output.wantsNewestFrame }) {
                    drain: while true {
                        let next: FrameEvent
                        do { next = try source.nextFrame(timeout: .zero) } catch { break drain }
                        switch consume next {
                        case .frame(let newer):
                            deliver(sample, to: conns, stillsToo: false, expected: &expected, starved: &starved)
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
                deliver(sample, to: conns, stillsToo: true, expected: &expected, starved: &starved)
                if let seq = corruptAfter { corrupt(seq, expected: &expected, starved: &starved) }
                checkStarvation = true
            }
        }
    }

    private func deliver(_ sample: SampleBuffer, to conns: [CaptureConnection], stillsToo: Bool,
                         expected: inout UInt32?, starved: inout Bool) {
        let seq = UInt32(truncatingIfNeeded: sample.sequenceNumber)
        if let e = expected, seq != e { report(gapFrom: e, to: seq, starved: starved) }
        expected = seq &+ 1
        starved = false
        for c in conns where c.isEnabled && (stillsToo || !c.output.wantsNewestFrame) {
            c.output.handleFrame(sample, connection: c)
        }
    }

    /// A damaged frame: a gap before it is reported first, then the frame itself as corrupt.
    private func corrupt(_ seq: UInt32, expected: inout UInt32?, starved: inout Bool) {
        if let e = expected, seq != e { report(gapFrom: e, to: seq, starved: starved) }
        starved = false
        expected = seq &+ 1
        report(DroppedFrames(reason: .corrupt, count: 1, sequenceNumber: UInt64(seq)))
    }

    private func report(gapFrom expected: UInt32, to seq: UInt32, starved: Bool) {
        let gap = seq &- expected
        // A backwards jump (driver restart) is a discontinuity of unknown size, not 4 billion drops.
        guard gap < 1 << 31 else {
            report(DroppedFrames(reason: .discontinuity, count: 0, sequenceNumber: UInt64(seq)))
            return
        }
        report(DroppedFrames(reason: starved ? .outOfBuffers : .discontinuity, count: Int(gap), sequenceNumber: UInt64(expected)))
    }

    private func report(_ drop: DroppedFrames) {
        for c in connections.withLock({ $0 }) where c.isEnabled { c.output.handleDrop(drop, connection: c) }
        session?.hub.post(.framesDropped(input.device, drop))
    }
}
