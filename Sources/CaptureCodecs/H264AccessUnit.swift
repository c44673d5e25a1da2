import Capture
import CaptureSystem
import Foundation

/// One encoded frame (Annex B NAL units, without the parameter sets) and what it was made of.
/// Shared by every consumer of its stage; reused by the stage once its last holder let go
/// (explicit holds, no copies). The bytes and properties are fixed while anyone holds it.
package final class H264AccessUnit: HeldBytes, @unchecked Sendable {
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

    /// Refills a free unit (the stage's, before it hands it out).
    fileprivate func fill(
        _ bytes: UnsafeRawBufferPointer, time: CaptureTime, sequence: UInt64, key: Bool, dimensions: VideoDimensions,
        interval: FrameInterval, parameterSets: Data, progress: H264StageProgress
    ) {
        store(bytes)
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
