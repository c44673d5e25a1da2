import Capture
import CaptureBackend
import Foundation

/// Frames to H.264 units on the caller's thread: what a stage does with each frame (the stage
/// runs one on its thread; the recorder's benchmarks and tests use one directly). The encoder
/// opens at the first frame, for its size and layout. Not thread-safe: one thread uses it.
package final class H264FrameEncoder {
    /// Why a frame made no unit.
    package enum Failure: Error {
        /// This frame could not be read (damaged, another size): the next may be.
        case frame(CaptureError)
        /// The encoder cannot run: no frame will make a unit.
        case encoder(H264StageError)
    }

    private let settings: H264Settings
    private let interval: FrameInterval
    private var encoder: H264Encoder?
    private let units = H264UnitPool()
    private let progress: H264StageProgress
    private var index: Int64 = 0
    /// Capture time and sequence number of the frame loaded, and of the last ones encoded by
    /// index: an encoder that delays units (a hardware one) labels them with their frame.
    private var loaded: (time: CaptureTime, sequence: UInt64)?
    private var encoded = [(time: CaptureTime, sequence: UInt64)](repeating: (CaptureTime(nanoseconds: 0), 0), count: 64)

    /// `interval`: the camera's nominal frame interval (the encoder's rate). `progress`: what
    /// the units report of their stage.
    package init(_ settings: H264Settings, interval: FrameInterval, progress: H264StageProgress = H264StageProgress()) {
        self.settings = settings
        self.interval = interval
        self.progress = progress
    }

    /// Copies (NV12, I420) or converts (other formats, MJPEG decoded) `sample` into the encoder's
    /// picture: after this the caller may let go of the frame.
    package func load(_ sample: SampleBuffer) throws(Failure) {
        var opening: H264StageError?
        do throws(CaptureError) {
            try sample.withVideoImage { (image: ImageBuffer?) throws(CaptureError) in
                guard let image else { throw CaptureError(.corruptFrame, "the frame has no image") }
                if encoder == nil {
                    // A format no route leads from to the encoder's pictures fails the stage at
                    // once, rather than each frame alone.
                    let f = image.pixelFormat
                    guard f == .nv12 || f == .yuv420 || PixelFormatConverter.canConvert(from: f, to: .nv12) else {
                        opening = H264StageError(
                            code: .unsupportedCodec,
                            message: "H.264 cannot be made of \(f) frames here: choose a YUV or MJPEG format of the camera")
                        return
                    }
                    do throws(H264StageError) {
                        encoder = try H264Encoder(
                            settings, dimensions: VideoDimensions(width: image.width, height: image.height), interval: interval,
                            from: image.pixelFormat)
                    } catch {
                        opening = error
                        return
                    }
                }
                try encoder?.load(image)
            }
        } catch {
            throw .frame(error)
        }
        if let opening { throw .encoder(opening) }
        loaded = (sample.presentationTimeStamp, sample.sequenceNumber)
    }

    /// Encodes the frame `load` read (a key frame if `keyFrame`) and hands each unit that comes
    /// out to `body`; a unit is valid in `body` only unless held.
    package func encode(keyFrame: Bool, _ body: (H264AccessUnit) -> Void) throws(H264StageError) {
        guard let encoder, let frame = loaded else { return }
        loaded = nil
        // (The first frame is a key frame anyway.)
        encoded[Int(index % 64)] = frame
        let at = index
        index += 1
        try encoder.encode(index: at, key: keyFrame && at > 0) { bytes, isKey, pts in
            let f = encoded[Int((pts >= 0 && at - pts < 64 ? pts : at) % 64)]
            let unit = units.unit(
                bytes, time: f.time, sequence: f.sequence, key: isKey, dimensions: encoder.dimensions, interval: interval,
                parameterSets: encoder.parameterSets, progress: progress)
            body(unit)
            unit.letGo()
        }
    }
}
