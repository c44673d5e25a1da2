// Entry points for capture-bench and the encoder tests: the library's real frame paths driven by
// recorded frames (package access, not public API). A target of its own, above the object model.
import Capture
import CaptureBackend
import CaptureImaging
import Foundation

/// Recorded frames served as a driver serves its mmap buffers: each `sample(_:sequence:)` wraps
/// one of the caller's buffers as a `FrameBuffer` (zero-copy) whose release is counted like a
/// requeue. Lets `capture-bench` run the library's real encode paths on frames from a file.
package final class FrameReplay: @unchecked Sendable {
    private final class Pool: BufferPool, @unchecked Sendable {
        let recycled = UnsafeMutablePointer<Int>.allocate(capacity: 1)
        let lock = NSLock()
        init() { recycled.initialize(to: 0) }
        deinit { recycled.deallocate() }
        func recycle(index: Int) {
            lock.lock()
            recycled.pointee += 1
            lock.unlock()
        }
    }

    private let pool = Pool()
    private let buffers: [UnsafeRawBufferPointer]
    private let format: ActiveFormat

    /// `buffers` must stay valid while any sample from this replay lives. `bytesPerLine` 0 means
    /// rows without padding.
    package init(
        pixelFormat: PixelFormat, width: Int, height: Int, bytesPerLine: Int = 0,
        colorRange: ColorRange = .limited, buffers: [UnsafeRawBufferPointer]
    ) {
        self.buffers = buffers
        format = ActiveFormat(
            pixelFormat: pixelFormat, width: width, height: height,
            planes: [PlaneFormat(bytesPerLine: bytesPerLine, sizeImage: buffers.first?.count ?? 0)],
            colorRange: colorRange)
    }

    package var count: Int { buffers.count }

    func frame(_ index: Int, sequence: UInt32) -> FrameBuffer {
        let b = buffers[index]
        let image = ImageBuffer(
            pixelFormat: format.pixelFormat, width: format.width, height: format.height,
            colorRange: format.colorRange,
            plane0: PlaneView(
                base: b.baseAddress, count: b.count,
                bytesPerLine: format.planes[0].bytesPerLine))
        return FrameBuffer(
            image: image, metadata: FrameMetadata(sequence: sequence, timestamp: .now(), bufferIndex: index),
            pool: pool)
    }

    /// Buffer `index` as the video data output hands frames out (a `FrameBuffer` in a `SampleBuffer`).
    package func sample(_ index: Int, sequence: UInt32) -> SampleBuffer {
        SampleBuffer(frame: frame(index, sequence: sequence), format: format)
    }

    /// The same, reusing the frame leases of `pool` as a capture thread does (nothing allocated
    /// once each index was seen and let go). The caller's hold goes back with `done(_:)`.
    package func sample(_ index: Int, sequence: UInt32, reusing pool: ReplaySamples) -> SampleBuffer {
        pool.pool.wrap(frame(index, sequence: sequence), format: format)
    }

    /// Frames whose buffer was given back so far.
    package var recycledCount: Int {
        pool.lock.lock()
        defer { pool.lock.unlock() }
        return pool.recycled.pointee
    }
}

/// Reusable frame leases for `FrameReplay.sample(_:sequence:reusing:)`; one thread uses it.
package final class ReplaySamples: @unchecked Sendable {
    let pool = FrameLeasePool()
    package init() {}
    /// Whether buffer `index`'s lease is still held by someone, as a driver knows whether a
    /// buffer was queued back.
    package func isHeld(_ index: Int) -> Bool { pool.isHeld(index) }
    /// Gives back the hold `FrameReplay.sample(_:sequence:reusing:)` gave the caller, as a
    /// capture thread does once it handed a frame on.
    package func done(_ sample: SampleBuffer) { sample.release() }
}

/// The reused still sample of `EncodePaths.still`, as a still output keeps one.
package final class StillSamples: @unchecked Sendable {
    let ring = JPEGSampleRing(count: 1)
    package init() {}
}

/// The library's encode paths, reachable from `capture-bench` without `@testable`.
package enum EncodePaths {
    /// What the encoder pool's workers run: the frame read in place, the bytes borrowed from
    /// `encoder` until its next encode.
    package static func encodeInPlace(_ sample: SampleBuffer, with encoder: JPEGEncoder) throws(CaptureError) -> UnsafeRawBufferPointer {
        guard let image = sample.videoImage else { throw CaptureError(.invalidArgument, "not a raw video sample") }
        return try withExtendedLifetime(sample) { () throws(CaptureError) in try encoder.encode(image) }
    }

    /// What `CaptureStillImageOutput` runs for any frame: the JPEG in `stills`' reused sample,
    /// with one hold, the caller's, to give back with `release()` (nil while the caller still
    /// holds the last one); `scratch` serves MJPEG frames.
    package static func still(
        _ sample: SampleBuffer, encoder: inout JPEGEncoder?, quality: Int,
        scratch: inout [UInt8], into stills: StillSamples
    ) throws(CaptureError) -> SampleBuffer? {
        guard let image = sample.videoImage else { throw CaptureError(.invalidArgument, "not a video sample") }
        let meta = FrameMetadata(
            sequence: UInt32(truncatingIfNeeded: sample.sequenceNumber), timestamp: sample.presentationTimeStamp,
            bufferIndex: -1)
        let dims = VideoDimensions(width: image.width, height: image.height)
        return try sample.withVideoImage { _ throws(CaptureError) in
            try StillEncoding.still(image, encoder: &encoder, settings: .init(quality: quality), exif: nil, scratch: &scratch) {
                stills.ring.sample(copying: $0, dimensions: dims, metadata: meta)
            }
        }
    }

}
