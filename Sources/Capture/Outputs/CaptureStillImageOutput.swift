import Foundation
import Synchronization

/// Takes JPEG stills from the session's camera, as `AVCaptureStillImageOutput`. Thread-safe.
///
/// Each capture uses the newest frame (frames already queued in the driver are skipped). Raw
/// frames are encoded with libjpeg-turbo; MJPEG frames pass through unchanged, with the
/// standard Huffman tables inserted when the camera left them out. The connection's
/// `videoOrientation` and `isVideoMirrored` are written as the EXIF orientation tag.
public final class CaptureStillImageOutput: CaptureOutput, @unchecked Sendable {
    /// The still's encoding, as the output settings dictionary (`AVVideoCodecKey`, `AVVideoQualityKey`).
    public struct OutputSettings: Sendable, Hashable {
        /// The codec. Only JPEG exists.
        public enum Codec: String, Sendable, Hashable { case jpeg }
        public var codec: Codec
        /// JPEG quality from 1 to 100.
        public var quality: Int
        /// Chroma subsampling; nil keeps the camera's (4:2:2 for YUYV, 4:2:0 for NV12).
        public var subsampling: ChromaSubsampling?
        public init(codec: Codec = .jpeg, quality: Int = 90, subsampling: ChromaSubsampling? = nil) {
            self.codec = codec
            self.quality = quality
            self.subsampling = subsampling
        }
    }

    private struct Request {
        var connection: CaptureConnection
        var completion: @Sendable (SampleBuffer?, CaptureError?) -> Void
        var id: UInt64
    }
    private struct State {
        var settings = OutputSettings()
        var pending: [Request] = []
        var nextID: UInt64 = 0
    }
    private let state = Mutex(State())
    private let encodeQueue = DispatchQueue(label: "swift-capture.still-encode")
    // Touched only on `encodeQueue`.
    private var encoder: JPEGEncoder?
    private var encoderKey: (OutputSettings, PixelFormat)?

    public override init() { super.init() }

    /// The encoding of the next stills.
    public var outputSettings: OutputSettings {
        get { state.withLock { $0.settings } }
        set { state.withLock { $0.settings = newValue } }
    }

    /// Whether a capture is waiting for its frame.
    public var isCapturingStillImage: Bool { state.withLock { !$0.pending.isEmpty } }

    /// Takes a still from `connection` and calls `completionHandler` (on a private queue) with a
    /// sample buffer holding the JPEG, or with an error: `.invalidState` when the session does not
    /// run, `.disconnected` when the camera goes away, `.timedOut` when no frame comes.
    public func captureStillImageAsynchronously(from connection: CaptureConnection,
                                                completionHandler: @escaping @Sendable (SampleBuffer?, CaptureError?) -> Void) {
        guard connection.output === self, connection.mediaType == .video else {
            encodeQueue.async { completionHandler(nil, CaptureError(.invalidArgument, "the connection is not one of this output's: use connection(with: .video)")) }
            return
        }
        guard session?.isRunning == true else {
            encodeQueue.async { completionHandler(nil, CaptureError(.invalidState, "the session is not running: call startRunning() before capturing a still")) }
            return
        }
        let id: UInt64 = state.withLock { st in
            st.nextID += 1
            st.pending.append(Request(connection: connection, completion: completionHandler, id: st.nextID))
            return st.nextID
        }
        let interval = connection.device?.activeVideoMinFrameDuration?.seconds ?? (1.0 / 30)
        let timeout = max(5.0, 20 * interval)
        encodeQueue.asyncAfter(deadline: .now() + timeout) { [weak self] in
            self?.fail(where: { $0.id == id }, CaptureError(.timedOut, "no frame arrived within \(Int(timeout)) s: check that the camera delivers (a stalled device?)"))
        }
    }

    /// Takes a still from `connection`; see `captureStillImageAsynchronously(from:completionHandler:)`.
    public func captureStillImage(from connection: CaptureConnection) async throws(CaptureError) -> SampleBuffer {
        let result: Result<SampleBuffer, CaptureError> = await withCheckedContinuation { cont in
            captureStillImageAsynchronously(from: connection) { sample, error in
                if let sample { cont.resume(returning: .success(sample)) } else {
                    cont.resume(returning: .failure(error ?? CaptureError(.driverError, "the still capture failed")))
                }
            }
        }
        return try result.get()
    }

    /// The JPEG bytes of a still, as `jpegStillImageNSDataRepresentation`. Nil for a sample
    /// buffer that is not a still.
    public static func jpegStillImageDataRepresentation(_ sampleBuffer: SampleBuffer) -> Data? {
        sampleBuffer.jpegData
    }

    override var acceptedMediaTypes: Set<MediaType> { [.video] }
    override var supportsOrientation: Bool { true }
    override var wantsNewestFrame: Bool { state.withLock { !$0.pending.isEmpty } }

    override func handleFrame(_ frame: SampleBuffer, connection: CaptureConnection) {
        let requests: [Request] = state.withLock { st in
            let mine = st.pending.filter { $0.connection === connection }
            st.pending.removeAll { $0.connection === connection }
            return mine
        }
        guard !requests.isEmpty else { return }
        let orientation = EXIFOrientation(videoOrientation: connection.videoOrientation, mirrored: connection.isVideoMirrored)
        let model = connection.device?.localizedName
        encodeQueue.async { [self] in
            let result: Result<Data, CaptureError>
            do throws(CaptureError) {
                result = .success(try encode(frame, orientation: orientation, model: model))
            } catch {
                result = .failure(error)
            }
            let dims = frame.dimensions ?? VideoDimensions(width: 0, height: 0)
            let meta = FrameMetadata(sequence: UInt32(truncatingIfNeeded: frame.sequenceNumber), timestamp: frame.presentationTimeStamp, bufferIndex: -1)
            for r in requests {
                switch result {
                case .success(let data): r.completion(SampleBuffer(jpeg: data, dimensions: dims, metadata: meta), nil)
                case .failure(let e): r.completion(nil, e)
                }
            }
        }
    }

    /// Encodes on `encodeQueue` (the encoder is not shared between threads).
    private func encode(_ frame: SampleBuffer, orientation: EXIFOrientation, model: String?) throws(CaptureError) -> Data {
        let settings = state.withLock { $0.settings }
        let exif: EXIFInfo? = orientation == .up ? nil : EXIFInfo(orientation: orientation, model: model, date: Date())
        return try frame.withVideoImage { image throws(CaptureError) -> Data in
            guard let image else { throw CaptureError(.invalidArgument, "not a raw video sample") }
            if image.pixelFormat.isCompressed {
                return try StillEncoding.passThrough(image, exif: exif)
            }
            let key = (settings, image.pixelFormat)
            if encoder == nil || encoderKey.map({ $0 != key }) ?? true {
                encoder = try StillEncoding.makeEncoder(settings, for: image.pixelFormat)
                encoderKey = key
            }
            return try StillEncoding.encode(image, with: encoder!, exif: exif)
        }
    }

    private func fail(where match: (Request) -> Bool, _ error: CaptureError) {
        let failed: [Request] = state.withLock { st in
            let f = st.pending.filter(match)
            st.pending.removeAll(where: match)
            return f
        }
        for r in failed { r.completion(nil, error) }
    }

    override func inputDidStop(_ connection: CaptureConnection, error: CaptureError?) {
        let e = error ?? CaptureError(.cancelled, "the camera's input was removed from the session")
        encodeQueue.async { [self] in fail(where: { $0.connection === connection }, e) }
    }
}
