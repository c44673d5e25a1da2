import CaptureImaging
import CaptureBenchSupport
import Foundation
import Testing
@testable import Capture

/// Camera-like YUYV frames in page-aligned memory: noise over a gradient, so frames of
/// different sizes take very different times to encode.
private final class YUYVFrames: @unchecked Sendable {
    let buffers: [UnsafeMutableRawBufferPointer]
    let replay: FrameReplay
    let width: Int, height: Int

    init(width: Int, height: Int, count: Int, seed: UInt64) {
        self.width = width
        self.height = height
        var state = seed
        var bs: [UnsafeMutableRawBufferPointer] = []
        for _ in 0..<count {
            let n = width * height * 2
            let b = UnsafeMutableRawBufferPointer.allocate(byteCount: n, alignment: 4096)
            for i in 0..<n {
                state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
                let noise = Int(state >> 59)
                b[i] = UInt8(truncatingIfNeeded: 16 + (i % (width * 2)) / 12 + noise)
            }
            bs.append(b)
        }
        buffers = bs
        replay = FrameReplay(
            pixelFormat: .yuyv, width: width, height: height,
            buffers: bs.map { UnsafeRawBufferPointer($0) })
    }

    deinit { for b in buffers { b.deallocate() } }
}

/// Everything the pool delivered, in delivery order, with the JPEG sizes read back.
private final class Recorder: @unchecked Sendable {
    enum Item: Equatable {
        case encoded(UInt32, width: Int, height: Int)
        case dropped(first: UInt64?, count: Int)
        case failed(UInt32)
    }
    let lock = NSLock()
    private(set) var items: [Item] = []
    var onDeliver: (@Sendable (JPEGEncoderPool.Output) -> Void)?

    func take(_ o: JPEGEncoderPool.Output) {
        onDeliver?(o)
        let item: Item
        switch o {
        case .encoded(let sample, _):
            let markers = sample.withUnsafeBytes { try? JPEGMarkers(parsing: $0) }
            item = .encoded(
                UInt32(truncatingIfNeeded: sample.sequenceNumber),
                width: markers?.frame.width ?? -1, height: markers?.frame.height ?? -1)
        case .dropped(let d):
            item = .dropped(first: d.sequenceNumber, count: d.count)
        case .failed(let seq, _):
            item = .failed(seq)
        }
        lock.withLock { items.append(item) }
    }
    var snapshot: [Item] { lock.withLock { items } }
}

/// Runs `body` on another thread; false when it did not finish within `seconds` (a deadlock).
private func finishes(within seconds: Double, _ body: @escaping @Sendable () -> Void) -> Bool {
    let done = DispatchSemaphore(value: 0)
    Thread {
        body(); done.signal()
    }.start()
    return done.wait(timeout: .now() + seconds) == .success
}

@Suite("JPEG encoder pool")
struct EncoderPoolTests {
    @Test("frames come out in submission order, each with its own JPEG, though they finish out of order")
    func orderPreserved() throws {
        let big = YUYVFrames(width: 640, height: 480, count: 2, seed: 1)
        let small = YUYVFrames(width: 32, height: 16, count: 2, seed: 2)
        let recorder = Recorder()
        let pool = JPEGEncoderPool(workers: 3, queueDepth: 4, quality: 85) { recorder.take($0) }
        var expected: [Recorder.Item] = []
        for seq in UInt32(0)..<60 {
            // Every third frame is big: the two small ones after it finish first on other workers.
            let frames = seq % 3 == 0 ? big : small
            #expect(pool.submit(frames.replay.sample(Int(seq) % 2, sequence: seq), whenFull: .wait))
            expected.append(.encoded(seq, width: frames.width, height: frames.height))
        }
        pool.shutdown()
        #expect(recorder.snapshot == expected)
        #expect(pool.statistics == .init(submitted: 60, encoded: 60, failed: 0, dropped: 0))
        #expect(big.replay.recycledCount + small.replay.recycledCount == 60)
    }

    @Test(
        "a JPEG is written in place into a sample nobody holds: held samples keep their bytes, and when every one is held the JPEG comes in a sample of its own"
    )
    func heldSamplesAreNeverRewritten() throws {
        let frames = YUYVFrames(width: 96, height: 64, count: 3, seed: 7)
        final class Keeper: @unchecked Sendable {
            let lock = NSLock()
            var keep = true
            var kept: [(SampleBuffer, Data)] = []
            var delivered = 0, shared = 0
        }
        let keeper = Keeper()
        // 2 workers and room for 3 held samples: the ring has 2 * (1 + 2) + 3 = 9.
        let pool = JPEGEncoderPool(workers: 2, queueDepth: 2, quality: 80, heldSamples: 3) { o in
            guard case .encoded(let sample, let shared) = o else { return }
            let copy = sample.withUnsafeBytes { Data($0) }
            keeper.lock.withLock {
                keeper.delivered += 1
                if shared { keeper.shared += 1 }
                // Keep the frame (with a hold, as every keeper inside the library takes one), with a
                // copy of its bytes as they were delivered.
                if keeper.keep {
                    sample.hold()
                    keeper.kept.append((sample, copy))
                }
            }
        }
        func delivered() -> Int { keeper.lock.withLock { keeper.delivered } }
        for seq in UInt32(0)..<20 {
            #expect(pool.submit(frames.replay.sample(Int(seq) % 3, sequence: seq), whenFull: .wait))
        }
        let deadline = Date() + 30
        while delivered() < 20 && Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
        var kept = keeper.lock.withLock { keeper.kept }
        #expect(kept.count == 20)
        // Nothing later wrote into a sample that was held.
        for (sample, copy) in kept {
            #expect(sample.withUnsafeBytes { Data($0) } == copy)
            #expect(sample.withUnsafeBytes { try? JPEGMarkers(parsing: $0) }?.frame.width == 96)
        }
        // The ring gave what it had; the other frames came in samples of their own.
        #expect(keeper.lock.withLock { keeper.shared } == 9)
        // Once the consumer lets go, the ring's samples are written in place again.
        kept.removeAll()
        keeper.lock.withLock {
            keeper.keep = false
            for (sample, _) in keeper.kept { sample.release() }
            keeper.kept.removeAll()
        }
        for seq in UInt32(20)..<40 {
            #expect(pool.submit(frames.replay.sample(Int(seq) % 3, sequence: seq), whenFull: .wait))
        }
        pool.shutdown()
        #expect(delivered() == 40)
        #expect(keeper.lock.withLock { keeper.shared } == 29)
    }

    @Test("when the worker falls behind, the newest frame wins and the dropped ones are reported in order")
    func dropsReported() throws {
        let frames = YUYVFrames(width: 64, height: 32, count: 1, seed: 3)
        let recorder = Recorder()
        let entered = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        recorder.onDeliver = { o in
            // Hold the only worker inside the first delivery, as a slow consumer would.
            if case .encoded(let sample, _) = o, sample.sequenceNumber == 0 {
                entered.signal()
                release.wait()
            }
        }
        let pool = JPEGEncoderPool(workers: 1, queueDepth: 1, quality: 80) { recorder.take($0) }
        #expect(pool.submit(frames.replay.sample(0, sequence: 0)))
        #expect(entered.wait(timeout: .now() + 10) == .success)
        // The worker is busy: each new frame replaces the waiting one.
        for seq in UInt32(1)...9 { #expect(pool.submit(frames.replay.sample(0, sequence: seq))) }
        // Replaced frames went back to the driver at once, before the worker moved on.
        #expect(frames.replay.recycledCount == 9)
        release.signal()
        pool.shutdown()
        #expect(
            recorder.snapshot == [
                .encoded(0, width: 64, height: 32),
                .dropped(first: 1, count: 8),
                .encoded(9, width: 64, height: 32),
            ])
        #expect(pool.statistics.dropped == 8)
        #expect(pool.statistics.encoded == 2)
        #expect(frames.replay.recycledCount == 10)
    }

    @Test("a loss before the pool comes out in its place, and the pool's own drops never merge across it")
    func lossesPassedThroughKeepTheirPlace() throws {
        let frames = YUYVFrames(width: 64, height: 32, count: 1, seed: 5)
        let recorder = Recorder()
        let entered = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        recorder.onDeliver = { o in
            if case .encoded(let sample, _) = o, sample.sequenceNumber == 0 {
                entered.signal()
                release.wait()
            }
        }
        let pool = JPEGEncoderPool(workers: 1, queueDepth: 1, quality: 80) { recorder.take($0) }
        #expect(pool.submit(frames.replay.sample(0, sequence: 0)))
        #expect(entered.wait(timeout: .now() + 10) == .success)
        // While frame 0 is being delivered: frame 1 waits, the camera loses 2-4, frame 5 comes
        // (1 is replaced), a damaged 6, frame 7 (5 is replaced), and 8 (7 is replaced).
        #expect(pool.submit(frames.replay.sample(0, sequence: 1)))
        #expect(pool.submitDrop(DroppedFrames(reason: .discontinuity, count: 3, sequenceNumber: 2)))
        #expect(pool.submit(frames.replay.sample(0, sequence: 5)))
        #expect(pool.submitDrop(DroppedFrames(reason: .corrupt, count: 1, sequenceNumber: 6)))
        #expect(pool.submit(frames.replay.sample(0, sequence: 7)))
        #expect(pool.submit(frames.replay.sample(0, sequence: 8)))
        release.signal()
        pool.shutdown()
        #expect(
            recorder.snapshot == [
                .encoded(0, width: 64, height: 32),
                .dropped(first: 1, count: 1),
                .dropped(first: 2, count: 3),
                .dropped(first: 5, count: 1),
                .dropped(first: 6, count: 1),
                .dropped(first: 7, count: 1),
                .encoded(8, width: 64, height: 32),
            ])
        #expect(pool.statistics.dropped == 3)
        #expect(!pool.submitDrop(DroppedFrames(reason: .discontinuity, count: 1, sequenceNumber: 9)))
    }

    @Test("drops between encoded frames keep their place in the sequence")
    func dropsInterleaved() throws {
        let frames = YUYVFrames(width: 48, height: 16, count: 1, seed: 4)
        let recorder = Recorder()
        let gate = DispatchSemaphore(value: 0)
        let entered = DispatchSemaphore(value: 0)
        recorder.onDeliver = { o in
            if case .encoded(let sample, _) = o, sample.sequenceNumber == 0 || sample.sequenceNumber == 3 {
                entered.signal()
                gate.wait()
            }
        }
        let pool = JPEGEncoderPool(workers: 1, queueDepth: 1) { recorder.take($0) }
        pool.submit(frames.replay.sample(0, sequence: 0))
        #expect(entered.wait(timeout: .now() + 10) == .success)
        for seq in UInt32(1)...3 { pool.submit(frames.replay.sample(0, sequence: seq)) }
        gate.signal()
        #expect(entered.wait(timeout: .now() + 10) == .success)
        for seq in UInt32(4)...6 { pool.submit(frames.replay.sample(0, sequence: seq)) }
        gate.signal()
        pool.shutdown()
        #expect(
            recorder.snapshot == [
                .encoded(0, width: 48, height: 16), .dropped(first: 1, count: 2),
                .encoded(3, width: 48, height: 16), .dropped(first: 4, count: 2),
                .encoded(6, width: 48, height: 16),
            ])
    }

    @Test("shutdown drains the queue, refuses later frames and never deadlocks")
    func shutdownDoesNotDeadlock() throws {
        let frames = YUYVFrames(width: 320, height: 240, count: 2, seed: 5)
        let recorder = Recorder()
        let pool = JPEGEncoderPool(workers: 2, queueDepth: 8) { recorder.take($0) }
        for seq in UInt32(0)..<10 { pool.submit(frames.replay.sample(Int(seq) % 2, sequence: seq), whenFull: .wait) }
        #expect(finishes(within: 20) { pool.shutdown() })
        #expect(recorder.snapshot.count == 10)
        #expect(!pool.submit(frames.replay.sample(0, sequence: 99)))
        #expect(finishes(within: 5) { pool.shutdown() })
        #expect(frames.replay.recycledCount == 11)
    }

    @Test("shutdown from inside a delivery, and a submitter blocked on a full queue, both return")
    func shutdownFromDeliveryAndBlockedSubmitter() throws {
        let frames = YUYVFrames(width: 64, height: 64, count: 1, seed: 6)
        let recorder = Recorder()
        let box = PoolBox()
        let entered = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        recorder.onDeliver = { o in
            if case .encoded(let sample, _) = o, sample.sequenceNumber == 0 {
                entered.signal()
                release.wait()
                box.pool?.shutdown()  // must not wait for itself
            }
        }
        let pool = JPEGEncoderPool(workers: 1, queueDepth: 1) { recorder.take($0) }
        box.pool = pool
        pool.submit(frames.replay.sample(0, sequence: 0))
        #expect(entered.wait(timeout: .now() + 10) == .success)
        pool.submit(frames.replay.sample(0, sequence: 1))
        // The queue is full and the worker is held: a waiting submitter blocks until shutdown.
        let refused = Flag()
        let submitter = DispatchSemaphore(value: 0)
        Thread {
            refused.set(!pool.submit(frames.replay.sample(0, sequence: 2), whenFull: .wait))
            submitter.signal()
        }.start()
        release.signal()
        #expect(finishes(within: 20) { box.pool?.shutdown() })
        #expect(submitter.wait(timeout: .now() + 10) == .success)
        // Frame 2 either got in before shutdown or was refused; nothing is lost silently.
        let encoded = recorder.snapshot.filter { if case .encoded = $0 { true } else { false } }.count
        #expect(encoded == (refused.value ? 2 : 3))
        box.pool = nil
    }

    @Test("a shutdown that comes second (one from inside a delivery came first) still waits for the delivery")
    func secondShutdownWaits() throws {
        let frames = YUYVFrames(width: 64, height: 64, count: 1, seed: 7)
        let recorder = Recorder()
        let box = PoolBox()
        let innerReturned = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        recorder.onDeliver = { o in
            if case .encoded(let sample, _) = o, sample.sequenceNumber == 0 {
                box.pool?.shutdown()  // first: on the worker, so it returns at once
                innerReturned.signal()
                release.wait()
            }
        }
        let pool = JPEGEncoderPool(workers: 1, queueDepth: 2) { recorder.take($0) }
        box.pool = pool
        pool.submit(frames.replay.sample(0, sequence: 0))
        #expect(innerReturned.wait(timeout: .now() + 10) == .success)
        let outerReturned = Flag()
        let outer = DispatchSemaphore(value: 0)
        Thread {
            box.pool?.shutdown()
            outerReturned.set(true)
            outer.signal()
        }.start()
        // The delivery of frame 0 is still running: the second shutdown must not have returned.
        #expect(outer.wait(timeout: .now() + 0.3) == .timedOut)
        #expect(!outerReturned.value)
        release.signal()
        #expect(outer.wait(timeout: .now() + 20) == .success)
        #expect(recorder.snapshot.count == 1)
        box.pool = nil
    }

    @Test("a pool that is simply released stops its threads and gives every buffer back")
    func releasedPoolStops() throws {
        let frames = YUYVFrames(width: 128, height: 64, count: 1, seed: 7)
        let recorder = Recorder()
        weak var weakPool: JPEGEncoderPool?
        do {
            let pool = JPEGEncoderPool(workers: 2) { recorder.take($0) }
            weakPool = pool
            for seq in UInt32(0)..<6 { pool.submit(frames.replay.sample(0, sequence: seq), whenFull: .wait) }
        }
        #expect(weakPool == nil)
        #expect(frames.replay.recycledCount == 6)
        #expect(recorder.snapshot.count == 6)
    }

    @Test("a frame that cannot be encoded is reported as failed in its place")
    func failureInOrder() throws {
        let good = YUYVFrames(width: 32, height: 16, count: 1, seed: 8)
        // A buffer too short for its stated size, as a damaged driver buffer would be.
        let short = UnsafeMutableRawBufferPointer.allocate(byteCount: 100, alignment: 64)
        defer { short.deallocate() }
        short.initializeMemory(as: UInt8.self, repeating: 128)
        let bad = FrameReplay(pixelFormat: .yuyv, width: 32, height: 16, buffers: [UnsafeRawBufferPointer(short)])
        let recorder = Recorder()
        let pool = JPEGEncoderPool(workers: 2) { recorder.take($0) }
        pool.submit(good.replay.sample(0, sequence: 0), whenFull: .wait)
        pool.submit(bad.sample(0, sequence: 1), whenFull: .wait)
        pool.submit(good.replay.sample(0, sequence: 2), whenFull: .wait)
        pool.shutdown()
        #expect(recorder.snapshot == [.encoded(0, width: 32, height: 16), .failed(1), .encoded(2, width: 32, height: 16)])
        #expect(pool.statistics.failed == 1)
    }
}

private final class PoolBox: @unchecked Sendable {
    private let lock = NSLock()
    private var _pool: JPEGEncoderPool?
    var pool: JPEGEncoderPool? {
        get { lock.withLock { _pool } }
        set { lock.withLock { _pool = newValue } }
    }
}

private final class Flag: @unchecked Sendable {
    private let lock = NSLock()
    private var _value = false
    var value: Bool { lock.withLock { _value } }
    func set(_ v: Bool) { lock.withLock { _value = v } }
}
