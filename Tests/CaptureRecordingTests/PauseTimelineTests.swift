import Capture
import CaptureRecording
import Foundation
import Testing

/// The arithmetic of a recording's pauses: what is left out, what is kept of an audio buffer
/// that straddles a pause's edge, and how far what follows moves.
@Suite struct PauseTimelineTests {
    private static func t(_ ms: Int64) -> CaptureTime { CaptureTime(nanoseconds: 10_000_000_000 + UInt64(ms * 1_000_000)) }
    private static let ms: Int64 = 1_000_000

    /// Paused from 100 to 300 ms and from 500 ms on.
    private static var timeline: PauseTimeline {
        var p = PauseTimeline()
        #expect(p.pause(at: t(100)) && !p.pause(at: t(150)), "a second pause does nothing")
        #expect(p.resume(at: t(300)) && !p.resume(at: t(350)), "a second resume does nothing")
        #expect(p.pause(at: t(500)) && p.isPaused)
        return p
    }

    @Test func whatIsLeftOutAndHowFarTheRestMoves() {
        let p = Self.timeline
        #expect(!p.contains(Self.t(99)) && p.contains(Self.t(100)) && p.contains(Self.t(299)) && !p.contains(Self.t(300)))
        #expect(p.contains(Self.t(500)) && p.contains(Self.t(100_000)))
        #expect(p.resumes(before: Self.t(299)) == 0 && p.resumes(before: Self.t(300)) == 1 && p.resumes(before: Self.t(900)) == 1)
        // Only pauses after the file's first frame move anything, and only once ended.
        #expect(p.removed(before: Self.t(400), after: Self.t(0)) == 200 * Self.ms)
        #expect(p.removed(before: Self.t(250), after: Self.t(0)) == 0)
        #expect(p.removed(before: Self.t(400), after: Self.t(350)) == 0)
    }

    @Test func theKeptPartsOfABlockOfAudio() {
        let p = Self.timeline
        // Before, across the first pause's start, inside it, across its end, after it (the
        // earlier pause behind it), and running into the open pause.
        #expect(p.kept(from: Self.t(0), nanoseconds: 50 * Self.ms) == [0..<(50 * Self.ms)])
        #expect(p.kept(from: Self.t(80), nanoseconds: 40 * Self.ms) == [0..<(20 * Self.ms)])
        #expect(p.kept(from: Self.t(150), nanoseconds: 40 * Self.ms).isEmpty)
        #expect(p.kept(from: Self.t(290), nanoseconds: 40 * Self.ms) == [(10 * Self.ms)..<(40 * Self.ms)])
        #expect(p.kept(from: Self.t(350), nanoseconds: 40 * Self.ms) == [0..<(40 * Self.ms)])
        #expect(p.kept(from: Self.t(480), nanoseconds: 40 * Self.ms) == [0..<(20 * Self.ms)])
        // A block that holds a whole pause keeps both sides.
        var q = PauseTimeline()
        _ = q.pause(at: Self.t(10))
        _ = q.resume(at: Self.t(20))
        #expect(q.kept(from: Self.t(0), nanoseconds: 30 * Self.ms) == [0..<(10 * Self.ms), (20 * Self.ms)..<(30 * Self.ms)])
    }

    /// A slice of a buffer holds the same samples, interleaved or planar.
    @Test(arguments: [true, false])
    func aSliceOfABufferHoldsTheSameSamples(_ interleaved: Bool) {
        let format = AudioFormat(sampleRate: 48_000, channelCount: 2, sampleFormat: .s16, isInterleaved: interleaved)
        let frames = 8
        // Channel c, frame i: (c + 1) * 100 + i.
        var values: [Int16] = []
        for k in 0..<(frames * 2) {
            let (c, i) = interleaved ? (k % 2, k / 2) : (k / frames, k % frames)
            values.append(Int16((c + 1) * 100 + i))
        }
        let data = values.withUnsafeBytes { Data($0) }
        let buffer = AudioPCMBuffer(format: format, frameCount: frames, data: data)
        let slice = buffer.frames(3..<6)
        #expect(slice.frameCount == 3 && slice.format == format)
        for c in 0..<2 {
            #expect(slice.floatSamples(channel: c) == Array(buffer.floatSamples(channel: c)[3..<6]), "channel \(c)")
        }
        #expect(buffer.frames(6..<20).frameCount == 2, "clamped to the buffer")
    }
}
