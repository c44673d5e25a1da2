import CaptureVirtual
import CaptureALSA
import CaptureBackend
import CaptureSystem
import Foundation

/// Receives live audio from a `CaptureAudioDataOutput`, on the queue given with the delegate, as
/// `AVCaptureAudioDataOutputSampleBufferDelegate`: a new block of audio (`sampleBuffer.audioBuffer`,
/// stamped on the clock video frames use) to `captureOutput(_:didOutput:from:)`; lost audio to
/// `captureOutput(_:didDrop:from:)` (`.discontinuity` for a device overrun, `.frameWasLate` for
/// buffers the output dropped because this delegate fell behind; `count` in audio frames). The
/// methods are those of ``CaptureDataOutputSampleBufferDelegate``, so one class can adopt this
/// protocol and ``CaptureVideoDataOutputSampleBufferDelegate`` and tell the streams apart by
/// `connection`.
public protocol CaptureAudioDataOutputSampleBufferDelegate: CaptureDataOutputSampleBufferDelegate {}

/// Delivers the session's microphone audio to a delegate on a serial queue, or as an
/// `AsyncSequence`, as `AVCaptureAudioDataOutput`. Thread-safe.
///
/// Buffers wait in order for a slow consumer up to `maximumPendingDuration`; beyond that new
/// buffers are dropped, and the next buffer that gets through carries an `AudioDiscontinuity`
/// (`.dropped`, with the frames lost), so a consumer always learns of a gap.
public final class CaptureAudioDataOutput: CaptureOutput, @unchecked Sendable {
    /// What the app asks of the audio. Nil fields take the device's nearest offer to 48 kHz,
    /// stereo, 16-bit.
    public struct AudioSettings: Sendable, Hashable {
        public var sampleRate: Int?
        public var channelCount: Int?
        public var sampleFormat: AudioFormat.SampleFormat?
        /// Frames per delivered buffer (the ALSA period); nil for 1024.
        public var framesPerBuffer: Int?
        public init(
            sampleRate: Int? = nil, channelCount: Int? = nil, sampleFormat: AudioFormat.SampleFormat? = nil,
            framesPerBuffer: Int? = nil
        ) {
            self.sampleRate = sampleRate
            self.channelCount = channelCount
            self.sampleFormat = sampleFormat
            self.framesPerBuffer = framesPerBuffer
        }
    }

    private struct Stream {
        var continuation: AsyncStream<SampleBuffer>.Continuation
        var lostFrames = 0
    }
    private struct State {
        var delegate: (any CaptureAudioDataOutputSampleBufferDelegate)?
        var queue: DispatchQueue?
        var settings = AudioSettings()
        var maxPending: Duration = .seconds(1)
        var busy = false
        var backlog: [(SampleBuffer, CaptureConnection)] = []
        var backlogFrames = 0
        /// Frames dropped since the last buffer that reached the delegate's backlog.
        var lostForDelegate = 0
        var streams: [UUID: Stream] = [:]
        var delivered = 0
        var droppedFrames = 0
        var activeFormat: AudioFormat?
    }
    private let state = Locked(State())

    public override init() { super.init() }

    /// Sets the delegate and the serial queue its methods run on (nil removes the delegate).
    public func setSampleBufferDelegate(_ delegate: (any CaptureAudioDataOutputSampleBufferDelegate)?, queue: DispatchQueue?) {
        state.withLock {
            $0.delegate = delegate
            $0.queue = delegate == nil ? nil : (queue ?? DispatchQueue(label: "swift-capture.audio-data"))
        }
    }
    /// The delegate, if set.
    public var sampleBufferDelegate: (any CaptureAudioDataOutputSampleBufferDelegate)? { state.withLock { $0.delegate } }
    /// The queue the delegate runs on.
    public var sampleBufferCallbackQueue: DispatchQueue? { state.withLock { $0.queue } }

    /// The format wanted; read when the session starts.
    public var audioSettings: AudioSettings {
        get { state.withLock { $0.settings } }
        set { state.withLock { $0.settings = newValue } }
    }

    /// The format being delivered while the session runs (what the device applied).
    public var audioFormat: AudioFormat? { state.withLock { $0.activeFormat } }

    /// How much audio may wait for a busy delegate before new buffers are dropped (default 1 s).
    public var maximumPendingDuration: Duration {
        get { state.withLock { $0.maxPending } }
        set { state.withLock { $0.maxPending = max(.zero, newValue) } }
    }

    /// Buffers delivered to the delegate so far, and audio frames dropped (by this output, or
    /// lost to device overruns).
    public var statistics: (delivered: Int, droppedFrames: Int) {
        state.withLock { ($0.delivered, $0.droppedFrames) }
    }

    /// The audio as an async sequence. Up to `limit` buffers wait for a slow consumer; later
    /// ones are dropped and the next buffer delivered carries the discontinuity.
    public func sampleBuffers(bufferingOldest limit: Int = 64) -> AsyncStream<SampleBuffer> {
        let id = UUID()
        let (stream, cont) = AsyncStream<SampleBuffer>.makeStream(bufferingPolicy: .bufferingOldest(max(1, limit)))
        state.withLock { $0.streams[id] = Stream(continuation: cont) }
        cont.onTermination = { [weak self] _ in _ = self?.state.withLock { $0.streams.removeValue(forKey: id) } }
        return stream
    }

    override var acceptedMediaTypes: Set<MediaType> { [.audio] }

    func setActiveFormat(_ format: AudioFormat?) { state.withLock { $0.activeFormat = format } }

    override func handleAudio(_ sample: SampleBuffer, connection: CaptureConnection) {
        guard let pcm = sample.audioBuffer else { return }
        // A dropped buffer takes its own frames and any the device lost before it (an overrun
        // it carried) out of the stream: the next buffer through must count both.
        let gone = pcm.frameCount + (pcm.discontinuity?.lostFrames ?? 0)
        var lateDrop: DroppedFrames?
        let job: (any CaptureAudioDataOutputSampleBufferDelegate, DispatchQueue)? = state.withLock { st in
            for id in st.streams.keys {
                let lost = st.streams[id]!.lostFrames
                let marked = lost > 0 ? Self.marking(sample, pcm, lost: lost) : sample
                switch st.streams[id]!.continuation.yield(marked) {
                case .dropped: st.streams[id]!.lostFrames += gone
                default: st.streams[id]!.lostFrames = 0
                }
            }
            guard let d = st.delegate, let q = st.queue else { return nil }
            let limitFrames = Int(Double(pcm.format.sampleRate) * Self.seconds(st.maxPending))
            if st.busy, st.backlogFrames + pcm.frameCount > max(limitFrames, pcm.frameCount) {
                // The delegate is too far behind: drop this buffer, mark the next one.
                st.lostForDelegate += gone
                // The device's part was counted (and reported) by `handleDrop`.
                st.droppedFrames += pcm.frameCount
                lateDrop = DroppedFrames(reason: .frameWasLate, count: pcm.frameCount, sequenceNumber: sample.sequenceNumber)
                return nil
            }
            let item = st.lostForDelegate > 0 ? Self.marking(sample, pcm, lost: st.lostForDelegate) : sample
            st.lostForDelegate = 0
            st.backlog.append((item, connection))
            st.backlogFrames += pcm.frameCount
            if st.busy { return nil }
            st.busy = true
            return (d, q)
        }
        if let lateDrop, let (d, q) = delegateAndQueue() {
            q.async { d.captureOutput(self, didDrop: lateDrop, from: connection) }
        }
        if let (d, q) = job { q.async { self.drain(d) } }
    }

    /// A copy of `sample` whose audio says `lost` frames are missing before it (added to any
    /// break the device itself reported).
    private static func marking(_ sample: SampleBuffer, _ pcm: AudioPCMBuffer, lost: Int) -> SampleBuffer {
        let total = lost + (pcm.discontinuity?.lostFrames ?? 0)
        let marked = pcm.withDiscontinuity(AudioDiscontinuity(reason: .dropped, lostFrames: total))
        return SampleBuffer(audio: marked, timestamp: sample.presentationTimeStamp, firstFrame: sample.sequenceNumber)
    }

    private static func seconds(_ d: Duration) -> Double {
        Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
    }

    private func delegateAndQueue() -> (any CaptureAudioDataOutputSampleBufferDelegate, DispatchQueue)? {
        state.withLock { st in st.delegate.flatMap { d in st.queue.map { (d, $0) } } }
    }

    /// Runs on the delegate's queue: delivers queued buffers in order until none is left.
    private func drain(_ delegate: any CaptureAudioDataOutputSampleBufferDelegate) {
        while true {
            let next: (SampleBuffer, CaptureConnection)? = state.withLock { st in
                guard !st.backlog.isEmpty else { st.busy = false; return nil }
                st.delivered += 1
                let item = st.backlog.removeFirst()
                st.backlogFrames -= item.0.audioBuffer?.frameCount ?? 0
                return item
            }
            guard let (sample, connection) = next else { return }
            delegate.captureOutput(self, didOutput: sample, from: connection)
        }
    }

    override func handleDrop(_ drop: DroppedFrames, connection: CaptureConnection) {
        state.withLock { $0.droppedFrames += drop.count }
        if let (d, q) = delegateAndQueue() { q.async { d.captureOutput(self, didDrop: drop, from: connection) } }
    }

    override func inputDidStop(_ connection: CaptureConnection, error: CaptureError?) {
        // Buffers waiting for the delegate are still delivered; async sequences end here.
        let streams = state.withLock { st in
            defer { st.streams.removeAll() }
            return st.streams.values.map(\.continuation)
        }
        for s in streams { s.finish() }
    }
}
