import CaptureBackend
import Capture
import Foundation
import Testing

/// A video data delegate that records what it gets; optionally slow or holding every buffer.
public final class FrameCollector: CaptureVideoDataOutputSampleBufferDelegate, @unchecked Sendable {
    private let lock = NSLock()
    private var _sequences: [UInt64] = []
    private var _timestamps: [CaptureTime] = []
    private var _drops: [DroppedFrames] = []
    private var _held: [SampleBuffer] = []
    private var _offQueue = 0
    private var _lastArrival = Date.distantPast
    public var delay: Double = 0
    public var holdAll = false
    public let queue: DispatchQueue
    private var _onFrame: (@Sendable (SampleBuffer) -> Void)?
    /// Called with every frame, on the delegate's queue; may be set while frames arrive.
    public var onFrame: (@Sendable (SampleBuffer) -> Void)? {
        get { lock.withLock { _onFrame } }
        set { lock.withLock { _onFrame = newValue } }
    }

    public init(queue: DispatchQueue = DispatchQueue(label: "test.frames")) { self.queue = queue }

    public func captureOutput(_ output: CaptureOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection) {
        let onQueue = DispatchQueue.getSpecific(key: FrameCollector.key) == ObjectIdentifier(self)
        onFrame?(sampleBuffer)
        lock.withLock {
            if !onQueue { _offQueue += 1 }
            _sequences.append(sampleBuffer.sequenceNumber)
            _timestamps.append(sampleBuffer.presentationTimeStamp)
            _lastArrival = Date()
            if holdAll { _held.append(sampleBuffer) }
        }
        if delay > 0 { Thread.sleep(forTimeInterval: delay) }
    }

    public func captureOutput(_ output: CaptureOutput, didDrop drop: DroppedFrames, from connection: CaptureConnection) {
        lock.withLock { _drops.append(drop) }
    }

    static let key = DispatchSpecificKey<ObjectIdentifier>()
    /// Marks `queue` so the collector can tell it runs there.
    public func markQueue() { queue.setSpecific(key: FrameCollector.key, value: ObjectIdentifier(self)) }

    public var sequences: [UInt64] { lock.withLock { _sequences } }
    public var timestamps: [CaptureTime] { lock.withLock { _timestamps } }
    public var drops: [DroppedFrames] { lock.withLock { _drops } }
    public var callsOffQueue: Int { lock.withLock { _offQueue } }
    public var count: Int { lock.withLock { _sequences.count } }
    /// When the last frame reached the delegate (`distantPast` before the first).
    public var lastArrival: Date { lock.withLock { _lastArrival } }
    public func releaseHeld() {
        lock.withLock {
            holdAll = false; _held.removeAll()
        }
    }
    /// Lets go of the oldest held frame (the rest stay held); false if none is held. The frame
    /// is released on the caller's thread, before this returns.
    @discardableResult
    public func releaseOldestHeld() -> Bool {
        let frame: SampleBuffer? = lock.withLock { _held.isEmpty ? nil : _held.removeFirst() }
        return frame != nil
    }
    /// Frames held now.
    public var heldCount: Int { lock.withLock { _held.count } }

    /// Waits until `n` frames arrived, up to `timeout` seconds.
    @discardableResult
    public func wait(for n: Int, timeout: Double) -> Bool {
        waitUntil(timeout: timeout) { count >= n }
    }
}

extension FrameCollector {
    /// Checks the drop ledger of a finished run: every sequence number from the first delivered
    /// frame to the last was delivered or reported dropped exactly once, drop reports came in
    /// sequence order, and delivered + dropped = produced. Call after the session stopped and
    /// the delegate's queue drained.
    public func expectEveryFrameOnce(sourceLocation: SourceLocation = #_sourceLocation) throws {
        try Self.expectEveryFrameOnce([self], sourceLocation: sourceLocation)
    }

    /// The same ledger over delegates that took turns (in that order): each frame went to one
    /// of them, or was reported lost to one of them, once.
    public static func expectEveryFrameOnce(_ collectors: [FrameCollector], sourceLocation: SourceLocation = #_sourceLocation) throws {
        let delivered = collectors.flatMap(\.sequences), drops = collectors.flatMap(\.drops)
        let first = try #require(delivered.first, sourceLocation: sourceLocation)
        let last = try #require(delivered.last, sourceLocation: sourceLocation)
        var seen = Set(delivered)
        #expect(seen.count == delivered.count, "a frame was delivered twice", sourceLocation: sourceLocation)
        var dropped = 0, twice: [UInt64] = [], previous: UInt64 = 0, ordered = true
        for d in drops {
            guard let s = d.sequenceNumber else { continue }
            if s < previous { ordered = false }
            previous = s
            guard s >= first, s <= last else { continue }
            for k in s..<(s + UInt64(d.count)) where !seen.insert(k).inserted { twice.append(k) }
            dropped += d.count
        }
        #expect(ordered, "drop reports out of order: \(drops)", sourceLocation: sourceLocation)
        #expect(twice.isEmpty, "frames counted twice: \(twice.prefix(20))", sourceLocation: sourceLocation)
        let produced = Int(last - first + 1)
        #expect(
            delivered.count + dropped == produced,
            "delivered \(delivered.count) + dropped \(dropped) != produced \(produced); drops: \(drops)",
            sourceLocation: sourceLocation)
    }
}
