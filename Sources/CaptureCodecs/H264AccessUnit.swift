import Capture
import CaptureSystem
import Foundation
import Synchronization

/// One encoded frame (Annex B NAL units, without the parameter sets) and what it was made of.
/// Shared by every consumer of its stage; reused by the stage once its last holder let go
/// (explicit holds, no copies). The bytes and properties are fixed while anyone holds it.
package final class H264AccessUnit: Reusable, @unchecked Sendable {
    private var storage: UnsafeMutableRawPointer?
    private var capacity = 0
    package private(set) var count = 0
    /// The capture time of the frame it encodes.
    package private(set) var presentationTimeStamp = CaptureTime(nanoseconds: 0)
    /// The frame's sequence number (gaps are the camera's or the stage's drops, reported apart).
    package private(set) var sequenceNumber: UInt64 = 0
    /// An IDR frame: decoding can start here, with `parameterSets`.
    package private(set) var isKeyFrame = false
    package private(set) var dimensions = VideoDimensions(width: 0, height: 0)
    /// The input's nominal frame interval.
    package private(set) var frameInterval = FrameInterval(framesPerSecond: 30)
    /// SPS and PPS (Annex B) of the stage's encoder, the same for all its units: what a consumer
    /// that starts at a key frame (a late joiner, a file) puts before it or in its header.
    package private(set) var parameterSets = Data()
    /// What its stage has still to deliver (a consumer waiting at a stop reads it).
    package private(set) var stageProgress: H264StageProgress?
    private let holds = Atomic<Int>(0)

    required init() {}
    deinit { storage?.deallocate() }

    /// The unit's bytes, valid inside `body`.
    package func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try body(UnsafeRawBufferPointer(start: storage, count: count))
    }

    /// Keeps the unit past the call it came in; each hold needs its `letGo()`. Any thread.
    package func hold() { holds.wrappingAdd(1, ordering: .relaxed) }
    /// Gives a hold back; the stage reuses the unit once none is left. Any thread.
    package func letGo() { holds.wrappingSubtract(1, ordering: .releasing) }

    var isFree: Bool { holds.load(ordering: .acquiring) <= 0 }

    /// Refills a free unit (the stage's, before it hands it out).
    fileprivate func fill(
        _ bytes: UnsafeRawBufferPointer, time: CaptureTime, sequence: UInt64, key: Bool, dimensions: VideoDimensions,
        interval: FrameInterval, parameterSets: Data, progress: H264StageProgress
    ) {
        if capacity < bytes.count {
            storage?.deallocate()
            // Grows only for a unit larger than any before (key frames), doubling.
            capacity = max(bytes.count, capacity * 2)
            storage = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 16)
        }
        if let base = bytes.baseAddress, bytes.count > 0 { storage!.copyMemory(from: base, byteCount: bytes.count) }
        count = bytes.count
        presentationTimeStamp = time
        sequenceNumber = sequence
        isKeyFrame = key
        self.dimensions = dimensions
        frameInterval = interval
        self.parameterSets = parameterSets
        stageProgress = progress
    }
}

/// The units of one stage (see `ReusePool`). Used by the stage's thread alone.
final class H264UnitPool {
    private let pool = ReusePool<H264AccessUnit>()

    /// A free unit filled with `bytes`, with one hold (the stage's, while it delivers).
    func unit(
        _ bytes: UnsafeRawBufferPointer, time: CaptureTime, sequence: UInt64, key: Bool, dimensions: VideoDimensions,
        interval: FrameInterval, parameterSets: Data, progress: H264StageProgress
    ) -> H264AccessUnit {
        let u = pool.take()
        u.fill(
            bytes, time: time, sequence: sequence, key: key, dimensions: dimensions, interval: interval,
            parameterSets: parameterSets, progress: progress)
        return u
    }
}
