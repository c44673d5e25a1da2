import Capture
import CaptureBackend
import CaptureSystem
import Foundation

/// The audio encode (AAC, Opus, PCM) of one running microphone for one `AudioEncoderSettings`,
/// shared by every consumer that asks for those settings: each buffer is encoded once, on the
/// stage's own thread, and each packet goes to all of them.
///
/// The microphone's reader hands buffers in and never waits: they queue (a preallocated ring)
/// up to 10 s of audio while a consumer keeps every packet (a file), 1 s otherwise; a buffer
/// beyond that is lost, reported to the consumers once as `.frameWasLate` (in samples). The
/// stage's time line has no holes: a gap of more than 20 ms between buffers (the microphone's
/// or the stage's losses) is encoded as silence, so every packet's capture time holds. A
/// consumer that joins gets packets from its join on.
final class AudioEncodeStage: EncodedStage, @unchecked Sendable {
    /// Buffers that can wait at most (whatever their length).
    static let ringSize = 512
    private let settings: AudioEncoderSettings
    private let outlet: EncodedStageOutlet
    /// Guards the ring, `lost` and `stopping`; the stage's thread waits on it.
    private let condition = NSCondition()
    private struct Entry {
        var sample: SampleBuffer?
        /// The microphone's loss just before the sample.
        var drop: DroppedFrames?
        /// The stage's losses just before the sample (buffers it had no room for).
        var late: DroppedFrames?
    }
    private var ring = [Entry](repeating: Entry(), count: AudioEncodeStage.ringSize)
    private var head = 0
    private var count = 0
    /// Samples waiting in the ring.
    private var waitingFrames = 0
    /// Buffers lost since the last one queued, not yet reported.
    private var lost: DroppedFrames?
    private var stopping = false
    private let finished = DispatchSemaphore(value: 0)

    // The stage's thread's.
    private var encoder: AudioEncoder?
    private var failure: AudioStageError?
    /// The consumers told of `failure`.
    private var told: [ObjectIdentifier] = []
    private let pool = ReusePool<AudioPacket>()
    /// The capture time of sample 0 of the stage's time line.
    private var origin: CaptureTime?

    init(settings: AudioEncoderSettings, outlet: EncodedStageOutlet) {
        self.settings = settings
        self.outlet = outlet
        NamedThread.start("cap audio enc", qualityOfService: .userInteractive) { [self] in run() }
    }

    func submitAudio(_ sample: SampleBuffer, drop: DroppedFrames?, keepsEveryFrame: Bool) {
        guard let pcm = sample.audioBuffer else { return }
        let limit = max(pcm.frameCount, pcm.format.sampleRate * (keepsEveryFrame ? 10 : 1))
        condition.lock()
        defer { condition.unlock() }
        guard count < ring.count, waitingFrames + pcm.frameCount <= limit, !stopping else {
            // No room: lost to every consumer, reported once before the next buffer queued
            // (with a loss of the microphone's that came with it).
            let n = pcm.frameCount + (drop?.count ?? 0)
            lost = DroppedFrames(
                reason: .frameWasLate, count: (lost?.count ?? 0) + n, sequenceNumber: lost?.sequenceNumber ?? sample.sequenceNumber,
                time: lost?.time ?? sample.presentationTimeStamp)
            return
        }
        ring[(head + count) % ring.count] = Entry(sample: sample, drop: drop, late: lost)
        lost = nil
        count += 1
        waitingFrames += pcm.frameCount
        condition.signal()
    }

    func shutdown() {
        condition.withLock {
            stopping = true
            condition.signal()
        }
        finished.wait()
    }

    private func run() {
        defer { finished.signal() }
        while true {
            condition.lock()
            while count == 0, !stopping { condition.wait() }
            if count == 0 {
                // Stopping, and everything queued is encoded: the encoder's tail, then what was lost last.
                let late = lost
                lost = nil
                condition.unlock()
                finishEncoder()
                if let late { outlet.drop(late) }
                return
            }
            let entry = ring[head]
            ring[head] = Entry()
            head = (head + 1) % ring.count
            count -= 1
            waitingFrames -= entry.sample?.audioBuffer?.frameCount ?? 0
            condition.unlock()
            if let late = entry.late { outlet.drop(late) }
            if let drop = entry.drop { outlet.drop(drop) }
            if let sample = entry.sample { encode(sample) }
        }
    }

    private func encode(_ sample: SampleBuffer) {
        guard let pcm = sample.audioBuffer, pcm.frameCount > 0 else { return }
        if encoder?.input != pcm.format, failure == nil {
            // The first buffer, or the microphone's format changed: a new stream from here.
            finishEncoder()
            do throws(AudioStageError) {
                encoder = try AudioEncoder(settings, input: pcm.format)
                origin = sample.presentationTimeStamp
            } catch {
                failure = error
            }
        }
        guard let encoder, failure == nil else {
            tellFailure()
            return
        }
        let rate = Int64(pcm.format.sampleRate)
        let at = (sample.presentationTimeStamp - origin!) * rate / 1_000_000_000
        let gap = at - encoder.samplesIn
        do throws(AudioStageError) {
            if gap > rate / 50 {
                if gap <= rate * 10 {
                    try encoder.appendSilence(Int(gap), emit: deliver)
                } else {
                    // A long silence is not encoded: the time line starts again from here.
                    origin = CaptureTime(
                        nanoseconds: sample.presentationTimeStamp.nanoseconds &- UInt64(encoder.samplesIn * 1_000_000_000 / rate))
                }
            }
            try encoder.append(pcm, emit: deliver)
            outlet.countEncode()
        } catch {
            failure = error
            tellFailure()
        }
    }

    /// Hands a packet to every consumer of the product: shared, held by the stage while it
    /// delivers, reused once the last consumer let go.
    private func deliver(_ bytes: UnsafeRawBufferPointer, pts: Int64, duration: Int) {
        guard let encoder, let origin else { return }
        let rate = Int64(encoder.format.sampleRate)
        let offset = pts * 1_000_000_000 / rate
        let time = CaptureTime(nanoseconds: offset < 0 ? origin.nanoseconds &- UInt64(-offset) : origin.nanoseconds &+ UInt64(offset))
        let packet = pool.take()
        packet.fill(bytes, pts: pts, duration: duration, time: time, format: encoder.format)
        outlet.forEachConsumer { c, connection in (c as? AudioPacketConsumer)?.consumeAudioPacket(packet, from: connection) }
        packet.letGo()
    }

    private func finishEncoder() {
        guard let e = encoder else { return }
        do throws(AudioStageError) {
            try e.finish(emit: deliver)
        } catch {
            failure = error
            tellFailure()
        }
        encoder = nil
    }

    /// Tells each consumer of the failure once (one that joined since learns of it too).
    private func tellFailure() {
        guard let failure else { return }
        outlet.forEachConsumer { c, connection in
            guard let c = c as? AudioPacketConsumer, !told.contains(ObjectIdentifier(c)) else { return }
            told.append(ObjectIdentifier(c))
            c.audioStageFailed(failure, from: connection)
        }
    }
}
