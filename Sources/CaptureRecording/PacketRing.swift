import Capture
import CaptureCodecs
internal import CFFmpeg
import Foundation

// Pre-record: a writer with no file keeps its packets in a ring until a recording attaches it.
extension MovieWriter {
    /// Pre-record: sets up the stream for frames of `video` (units with their stage's
    /// `parameterSets`, or JPEG), whose packets go into the ring.
    func begin(standby video: VideoFormat, settings: MovieOutputSettings, parameterSets: Data? = nil) throws(RecordingError) {
        var ctx: UnsafeMutablePointer<AVFormatContext>?
        guard avformat_alloc_output_context2(&ctx, nil, "matroska", nil) >= 0, let ctx else {
            throw RecordingError(.encoderFailed, "FFmpeg has no matroska muxer")
        }
        format = ctx
        try prepareVideo(video, settings: settings)
        self.parameterSets = parameterSets
        try addVideoStream()
        streamTimeBase = inputTimeBase
        frameDurationInStream = max(1, av_rescale_q(1, AVRational(num: fps.den, den: fps.num), streamTimeBase))
    }

    /// Whether pre-record packets are kept (a standby writer not yet attached to a file).
    var isStandby: Bool { ring != nil }

    /// Pre-record: the newest kept packet's time and the oldest kept, in ns on the writer's timeline.
    var keptRange: ClosedRange<Int64>? {
        guard let r = ring, let first = r.kept.first, let last = r.kept.last else { return nil }
        return pts(first.pointee.pts, from: inputTimeBase)...pts(last.pointee.pts, from: inputTimeBase)
    }

    private func pts(_ ticks: Int64, from tb: AVRational) -> Int64 {
        av_rescale_q(ticks, tb, AVRational(num: 1, den: 1_000_000_000))
    }

    /// Pre-record: writes the header of the file `open` created and the kept packets from the
    /// newest keyframe at or before `start` (ns on the writer's timeline; the oldest kept
    /// keyframe when none is that old), which becomes the file's time 0; frames written from
    /// here on go to the file. Returns that keyframe's time on the writer's timeline and the
    /// frames written.
    func attach(audio: AudioStreamFormat?, settings: MovieOutputSettings, from start: Int64) throws(RecordingError) -> (
        origin: Int64, frames: Int
    ) {
        guard let r = ring, format != nil,
            let first = r.startIndex(atOrBefore: av_rescale_q(start, AVRational(num: 1, den: 1_000_000_000), inputTimeBase))
        else {
            throw RecordingError(.invalidState, "no pre-recorded keyframe to start from")
        }
        ring = nil
        let kept = r.kept[first...]
        let originTicks = kept.first!.pointee.pts
        defer {
            r.free()
            if placeholder != nil { avformat_free_context(placeholder); placeholder = nil }
        }
        try addVideoStream()
        try writeHeader(audio: audio, settings: settings)
        videoOffset = av_rescale_q(originTicks, inputTimeBase, streamTimeBase)
        originNanoseconds = pts(originTicks, from: inputTimeBase)
        // Packets are timed in the stream's time base, which the muxer chose now.
        lastPTS = av_rescale_q(lastPTS, inputTimeBase, streamTimeBase)
        packetBytes = 0
        for p in kept {
            p.pointee.stream_index = stream!.pointee.index
            av_packet_rescale_ts(p, inputTimeBase, streamTimeBase)
            p.pointee.duration = frameDurationInStream
            packetBytes += Int64(p.pointee.size)
            let w = mux(p)
            guard w >= 0 else { throw failure(w, "writing a pre-recorded frame") }
        }
        return (originNanoseconds, kept.count)
    }
}

/// Pre-record's packets: the newest `window` (90 kHz ticks) and back to the keyframe before it,
/// so that what is kept can start a file. H.264 packets are kept by reference (no copy); JPEG
/// packets, which point into the camera's buffer, are copied into slots reused as the window
/// moves, so steady state allocates nothing here.
final class PacketRing {
    let window: Int64
    private(set) var kept: [UnsafeMutablePointer<AVPacket>] = []
    private var spare: [UnsafeMutablePointer<AVPacket>] = []

    init(window: Int64) {
        self.window = window
        kept.reserveCapacity(256)
        spare.reserveCapacity(256)
    }

    func keep(_ p: UnsafeMutablePointer<AVPacket>) {
        guard let slot = spare.popLast() ?? av_packet_alloc() else { return }
        if p.pointee.buf != nil {
            av_packet_unref(slot)
            av_packet_move_ref(slot, p)
        } else {
            let n = Int(p.pointee.size)
            let padding = Int(AV_INPUT_BUFFER_PADDING_SIZE)
            if slot.pointee.buf == nil || av_buffer_is_writable(slot.pointee.buf) == 0 || slot.pointee.buf.pointee.size < n + padding {
                av_packet_unref(slot)
                // A quarter more than asked, so that slightly larger frames reuse the slot.
                guard av_new_packet(slot, Int32(n + n / 4)) >= 0 else {
                    spare.append(slot)
                    return
                }
            }
            slot.pointee.data = slot.pointee.buf.pointee.data
            slot.pointee.size = Int32(n)
            if n > 0, let src = p.pointee.data { slot.pointee.data.update(from: src, count: n) }
            slot.pointee.pts = p.pointee.pts
            slot.pointee.dts = p.pointee.dts
            slot.pointee.duration = p.pointee.duration
            slot.pointee.flags = p.pointee.flags
            slot.pointee.stream_index = p.pointee.stream_index
        }
        kept.append(slot)
        // Whole keyframe groups go once the next keyframe is itself older than the window.
        let newest = slot.pointee.pts
        while let second = kept.indices.dropFirst().first(where: { kept[$0].pointee.flags & AV_PKT_FLAG_KEY != 0 }),
            kept[second].pointee.pts <= newest - window || kept[0].pointee.flags & AV_PKT_FLAG_KEY == 0
        {
            spare.append(contentsOf: kept[..<second])
            kept.removeFirst(second)
        }
    }

    /// The index of the newest keyframe at or before `ticks`, else of the oldest keyframe.
    func startIndex(atOrBefore ticks: Int64) -> Int? {
        let keys = kept.indices.filter { kept[$0].pointee.flags & AV_PKT_FLAG_KEY != 0 }
        return keys.last(where: { kept[$0].pointee.pts <= ticks }) ?? keys.first
    }

    func free() {
        for p in kept + spare {
            var q: UnsafeMutablePointer<AVPacket>? = p
            av_packet_free(&q)
        }
        kept = []
        spare = []
    }
}
