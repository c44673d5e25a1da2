/// One `/stream.mp4` client's time line: where its frames and audio packets go (decode times
/// from 0 at its first frame), from their capture times. Frames follow each other without gaps,
/// each lasting until the next (within 1 ms to 1 s), so the video plays on whatever frames were
/// skipped; audio goes where its capture time lies beside them, its packets one after another,
/// and where they would leave a hole (a skip forward, a microphone gone quiet) packets of silence
/// fill it: a player that waits for both tracks (MSE) never stalls on the audio. Arithmetic only;
/// guarded by the routes' lock with its client.
struct MP4Timeline {
    /// The video's ticks per second.
    static let videoScale = Int64(MP4Boxes.timescale)

    /// The decode time of the next frame (video ticks), and of the next audio sample (samples).
    private(set) var videoNext: Int64 = 0
    private(set) var audioNext: Int64 = 0
    /// The capture time of the last frame placed (ns).
    private var lastTime: Int64?
    /// The capture time at decode time 0 (ns): the first frame's, moved by what the bounds on a
    /// frame's duration took from the time line since.
    private(set) var origin: Int64?

    /// Places a frame captured at `time` (ns): its decode time and duration (the first lasts
    /// `nominal`; the others the time since the one before, 1 ms to 1 s).
    mutating func placeFrame(at time: Int64, nominal: Int64) -> (decodeTime: Int64, duration: Int64) {
        var duration = nominal
        var shift: Int64 = 0
        if let last = lastTime {
            let ns = max(0, time - last)
            duration = min(max(ns / 1000 * Self.videoScale / 1_000_000, 90), Self.videoScale)
            // What the bounds (and the ticks' rounding) took from the time line moves its origin,
            // so that the audio stays at its capture time beside the video.
            shift = ns - duration * 1_000_000_000 / Self.videoScale
        }
        let at = videoNext
        origin = (origin ?? time) + shift
        lastTime = time
        videoNext += duration
        return (at, duration)
    }

    /// Packets of silence (of `frameSize` samples at `rate`) to send before the next frame: the
    /// audio is more than half a second behind it. 0 before the first frame.
    func silenceBeforeFrame(rate: Int, frameSize: Int) -> Int {
        guard origin != nil, frameSize > 0 else { return 0 }
        let target = videoNext * Int64(rate) / Self.videoScale
        return target - audioNext > Int64(rate / 2) ? Int((target - audioNext) / Int64(frameSize)) : 0
    }

    enum AudioPlacement: Equatable {
        /// Before the first frame, or behind what was sent already: not sent.
        case drop
        /// This many packets of silence first, then ask again.
        case silenceFirst(Int)
        /// At this decode time (samples).
        case at(Int64)
    }

    /// Where an audio packet captured at `time` (ns, its first sample) goes; `.at` moves the audio
    /// on by `duration` samples. Without silence to fill with (`canFill` false), a hole is left.
    mutating func placeAudio(at time: Int64, duration: Int, rate: Int, frameSize: Int, canFill: Bool) -> AudioPlacement {
        guard let origin else { return .drop }
        let rate = Int64(rate), frame = Int64(max(1, frameSize))
        let target = (time - origin) * rate / 1_000_000_000
        let gap = target - audioNext
        if target < 0 || gap < -frame { return .drop }
        if gap > frame {
            if canFill && gap <= 10 * rate { return .silenceFirst(Int((gap + frame / 2) / frame)) }
            audioNext = target
        }
        defer { audioNext += Int64(duration) }
        return .at(audioNext)
    }

    /// Places a packet of silence of `frameSize` samples: its decode time.
    mutating func placeSilence(frameSize: Int) -> Int64 {
        defer { audioNext += Int64(frameSize) }
        return audioNext
    }
}
