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
/// stage's time line has no holes (`AudioFrameEncoder`): the microphone's or the stage's losses
/// are encoded as silence, so every packet's capture time holds. A consumer that joins gets
/// packets from its join on.
final class AudioEncodeStage: EncodedStage, @unchecked Sendable {
    /// Buffers that can wait at most (whatever their length).
    static let ringSize = 512
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
    private let encoder: AudioFrameEncoder
    private var failure: AudioStageError?
    /// The consumers told of `failure`.
    private var told: [ObjectIdentifier] = []

    init(settings: AudioEncoderSettings, outlet: EncodedStageOutlet) {
        encoder = AudioFrameEncoder(settings)
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
        guard failure == nil else {
            tellFailure()
            return
        }
        do throws(AudioStageError) {
            try encoder.encode(pcm, at: sample.presentationTimeStamp) { deliver($0) }
            outlet.countEncode()
        } catch {
            failure = error
            tellFailure()
        }
    }

    /// Hands a packet to every consumer of the product (shared: one that keeps it holds it).
    private func deliver(_ packet: AudioPacket) {
        outlet.forEachConsumer { c, connection in (c as? AudioPacketConsumer)?.consumeAudioPacket(packet, from: connection) }
    }

    private func finishEncoder() {
        guard failure == nil else { return }
        do throws(AudioStageError) {
            try encoder.finish { deliver($0) }
        } catch {
            failure = error
            tellFailure()
        }
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
