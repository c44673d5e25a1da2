import CaptureImaging
import CaptureBackend
import Foundation
import Synchronization

/// A JPEG that consumers of one input can share: the same quality and subsampling make the same
/// bytes, so a frame is encoded once for all of them.
struct JPEGProduct: Hashable, Sendable {
    var quality: Int
    /// nil keeps the camera's own subsampling.
    var subsampling: ChromaSubsampling?
}

/// The JPEG transform of one running video input for one `JPEGProduct`: raw frames go in once
/// (from the capture thread), each comes out once as a JPEG sample buffer the encoder wrote in
/// place, and every output that wants the product (or can take it, like a still at the same
/// quality) gets that same sample.
///
/// Results run on the encoder threads, in frame order, under the input's route lock, so a
/// removed output is never called after its removal was committed. Made and shut down only by the
/// capture thread, and never shut down while it holds the route lock.
final class JPEGStage: @unchecked Sendable {
    let product: JPEGProduct
    private let pool: JPEGEncoderPool
    /// Frames fed to it, for deciding when an idle stage may go.
    private(set) var lastFed: UInt64 = 0

    init(product: JPEGProduct, workers: Int, routes: RouteTable, encodes: EncodeCounter) {
        self.product = product
        pool = JPEGEncoderPool(workers: max(1, workers), quality: product.quality, subsampling: product.subsampling) { out in
            // Whoever wants or can take this product now gets the result.
            let sample: SampleBuffer?
            let drop: DroppedFrames?
            // Consumers that must not miss a frame (a still) take a JPEG that is not shared.
            var onlyForAccepting = false
            switch out {
            case .encoded(let s, let shared):
                encodes.count.add(1, ordering: .relaxed)
                sample = s
                onlyForAccepting = !shared
                drop = shared ? nil : DroppedFrames(reason: .outOfBuffers, count: 1, sequenceNumber: s.sequenceNumber)
            case .dropped(let d):
                sample = nil
                drop = d
            case .failed(let sequence, _):
                encodes.count.add(1, ordering: .relaxed)
                sample = nil
                drop = DroppedFrames(reason: .corrupt, count: 1, sequenceNumber: UInt64(sequence))
            }
            routes.withRoutes { routes in
                for r in routes where r.connection.isEnabled {
                    let wants = r.subscription.jpeg == product
                    let accepts = !wants && r.subscription.stills != nil && r.output.acceptsSharedJPEG == product
                    if let sample, accepts || (wants && !onlyForAccepting) {
                        r.output.handleEncodedFrame(sample, connection: r.connection)
                    } else if let drop, wants {
                        r.output.handleDrop(drop, connection: r.connection)
                    }
                }
            }
        }
    }

    /// Queues a raw frame; the newest frame wins when every encoder is busy. Capture thread.
    func submit(_ sample: SampleBuffer, frame: UInt64) {
        lastFed = frame
        pool.submit(sample, whenFull: .dropOldest)
    }

    /// Frames lost before the stage (a camera's gap, a damaged frame): its consumers get the report
    /// after the frames queued before it, in order. Capture thread.
    func submitDrop(_ drop: DroppedFrames) { pool.submitDrop(drop) }

    /// Encodes and delivers what is queued, then stops the encoder threads.
    func shutdown() { pool.shutdown() }
}

/// JPEG encodes an input's stages made (and failed), for tests and benchmarks. Any thread.
final class EncodeCounter: Sendable {
    let count = Atomic<Int>(0)
}
