import Capture
import CaptureBackend
import Foundation

/// The encode an audio stage runs on its thread, without the thread: a microphone's buffers in,
/// packets out (from a pool, shared and reused as the stage's are) with the capture time of
/// their first sample. Its time line has no holes: a gap of more than 20 ms between buffers
/// (lost audio) is encoded as silence, so every packet's capture time holds. Also what tests
/// and benchmarks drive directly. One thread at a time.
package final class AudioFrameEncoder {
    private let settings: AudioEncoderSettings
    private var encoder: AudioEncoder?
    private let pool = ReusePool<AudioPacket>()
    /// The capture time of sample 0 of the time line.
    private var origin: CaptureTime?

    package init(_ settings: AudioEncoderSettings) { self.settings = settings }

    /// What the encoder makes of buffers in `input` (opened now if it is not yet, for that
    /// format): what a muxer's header takes.
    package func open(for input: AudioFormat) throws(AudioStageError) -> AudioStreamFormat {
        if let e = encoder, e.input == input { return e.format }
        let e = try AudioEncoder(settings, input: input)
        encoder = e
        return e.format
    }

    /// Encodes `pcm`, captured at `time` (its first sample), and calls `body` with each packet
    /// made (valid for the call unless held). A buffer in another format than the last one
    /// ends that stream (its tail goes to `body`) and starts a new one.
    package func encode(_ pcm: AudioPCMBuffer, at time: CaptureTime, _ body: (AudioPacket) -> Void) throws(AudioStageError) {
        guard pcm.frameCount > 0 else { return }
        if let e = encoder, e.input != pcm.format {
            try finish(body)
        }
        if encoder == nil || origin == nil {
            _ = try open(for: pcm.format)
            origin = time
        }
        guard let encoder, let origin else { return }
        // (Closures written out, not stored: passing packets on allocates nothing.)
        let rate = Int64(pcm.format.sampleRate)
        let gap = (time - origin) * rate / 1_000_000_000 - encoder.samplesIn
        if gap > rate / 50 {
            if gap <= rate * 10 {
                try encoder.appendSilence(Int(gap)) { bytes, pts, duration in deliver(bytes, pts, duration, body) }
            } else {
                // A long silence is not encoded: the time line starts again from here.
                self.origin = CaptureTime(nanoseconds: time.nanoseconds &- UInt64(encoder.samplesIn * 1_000_000_000 / rate))
            }
        }
        try encoder.append(pcm) { bytes, pts, duration in deliver(bytes, pts, duration, body) }
    }

    /// Ends the stream: what waits, as a short last frame, and the encoder's tail go to `body`.
    package func finish(_ body: (AudioPacket) -> Void) throws(AudioStageError) {
        guard let e = encoder else { return }
        defer {
            encoder = nil
            origin = nil
        }
        try e.finish { bytes, pts, duration in deliver(bytes, pts, duration, body) }
    }

    /// A packet of the encoder's, in a pooled `AudioPacket` with its capture time, to `body`;
    /// reused once every holder let go.
    private func deliver(_ bytes: UnsafeRawBufferPointer, _ pts: Int64, _ duration: Int, _ body: (AudioPacket) -> Void) {
        guard let encoder, let origin else { return }
        let rate = Int64(encoder.format.sampleRate)
        let offset = pts * 1_000_000_000 / rate
        let time = CaptureTime(nanoseconds: offset < 0 ? origin.nanoseconds &- UInt64(-offset) : origin.nanoseconds &+ UInt64(offset))
        let packet = pool.take()
        packet.fill(bytes, pts: pts, duration: duration, time: time, format: encoder.format)
        body(packet)
        packet.letGo()
    }
}
