import Capture
import Foundation

/// The pauses of one recording on the capture clock, from `pauseRecording()` to
/// `resumeRecording()`: what was captured within one is left out of the file, and what comes
/// after is moved earlier by the pauses before it, so that the file's time line has no hole.
/// Video and audio move by the same amount, so they stay in sync. (Package access for its tests.)
///
/// Decided by capture time, not by when the recording queue gets to a sample: frames captured
/// before the pause and still waiting for a slow encoder are written all the same.
package struct PauseTimeline: Sendable {
    package struct Span: Sendable {
        package var from: CaptureTime
        /// nil while paused.
        package var to: CaptureTime?
    }
    package private(set) var spans: [Span] = []

    package init() {}

    package var isPaused: Bool { spans.last.map { $0.to == nil } ?? false }

    /// Starts a pause at `time`; false when already paused.
    package mutating func pause(at time: CaptureTime) -> Bool {
        guard !isPaused else { return false }
        spans.append(Span(from: time, to: nil))
        return true
    }

    /// Ends the pause at `time`; false when not paused.
    package mutating func resume(at time: CaptureTime) -> Bool {
        guard isPaused else { return false }
        spans[spans.count - 1].to = time
        return true
    }

    /// Whether something captured at `time` falls in a pause.
    package func contains(_ time: CaptureTime) -> Bool {
        spans.contains { !(time < $0.from) && $0.to.map { time < $0 } ?? true }
    }

    /// The pauses that ended at or before `time`.
    package func resumes(before time: CaptureTime) -> Int {
        spans.count(where: { s in s.to.map { !(time < $0) } ?? false })
    }

    /// Nanoseconds of pause before `time`, counting the pauses that began after `origin` (the
    /// capture time of the frame that began the file: earlier ones held back nothing written).
    package func removed(before time: CaptureTime, after origin: CaptureTime) -> Int64 {
        var total: Int64 = 0
        for s in spans where origin < s.from {
            guard let to = s.to, !(time < to) else { continue }
            total += to - s.from
        }
        return total
    }

    /// The parts of `[start, start + nanoseconds)` outside every pause, as offsets from `start`.
    package func kept(from start: CaptureTime, nanoseconds: Int64) -> [Range<Int64>] {
        var parts = [0..<nanoseconds]
        for s in spans {
            let a = s.from - start
            let b = s.to.map { $0 - start } ?? .max
            guard a < nanoseconds, b > 0 else { continue }
            parts = parts.flatMap { p -> [Range<Int64>] in
                let before = p.lowerBound..<Swift.max(p.lowerBound, Swift.min(p.upperBound, a))
                let after = Swift.min(p.upperBound, Swift.max(p.lowerBound, b))..<p.upperBound
                return [before, after].filter { !$0.isEmpty }
            }
        }
        return parts
    }
}

extension AudioPCMBuffer {
    /// Frames `range` of this buffer (a copy of their bytes).
    package func frames(_ range: Range<Int>) -> AudioPCMBuffer {
        // (As `floatSamples` reads them: no more frames than the bytes hold.)
        let n = min(frameCount, data.count / max(1, format.bytesPerFrame))
        let r = range.clamped(to: 0..<n)
        let bytesPerSample = format.sampleFormat.bytesPerSample
        var out = Data()
        if format.isInterleaved {
            let bpf = format.bytesPerFrame
            out = data.subdata(in: (data.startIndex + r.lowerBound * bpf)..<(data.startIndex + r.upperBound * bpf))
        } else {
            // Planar: each channel's run of samples, one after the other.
            for c in 0..<format.channelCount {
                let base = data.startIndex + c * n * bytesPerSample
                out.append(data.subdata(in: (base + r.lowerBound * bytesPerSample)..<(base + r.upperBound * bytesPerSample)))
            }
        }
        return AudioPCMBuffer(format: format, frameCount: r.count, data: out, discontinuity: r.lowerBound == 0 ? discontinuity : nil)
    }
}
