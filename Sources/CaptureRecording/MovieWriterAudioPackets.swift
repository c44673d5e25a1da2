import Capture
import CaptureCodecs
internal import CFFmpeg
import Foundation

// The session's shared audio stage's packets (AAC, Opus, PCM), placed on the video's time line.
// An AAC or Opus packet belongs where its first sample lies: the cuts (the file's start, a
// pause, the video's end) fall on packet boundaries (1024 samples, 21 ms, for AAC at 48 kHz;
// 20 ms for Opus), and packets go back to back, each within one packet of its capture time.
// PCM's packets are samples: they are cut sample by sample, as the microphone's buffers were.
extension MovieWriter {
    var hasAudio: Bool { audioStream != nil }
    /// `audioSamples` as nanoseconds.
    var audioSamplesNanoseconds: Int64 { audioSamples * 1_000_000_000 / max(1, audioRate) }

    /// Adds the audio stream of an audio stage's packets (its codec's setup as extradata).
    func addAudioStream(_ f: AudioStreamFormat) throws(RecordingError) {
        guard let st = avformat_new_stream(format, nil), let par = st.pointee.codecpar else {
            throw RecordingError(.encoderFailed, "cannot add an audio stream")
        }
        par.pointee.codec_type = AVMEDIA_TYPE_AUDIO
        par.pointee.codec_id =
            switch f.codec {
            case .aac: AV_CODEC_ID_AAC
            case .opus: AV_CODEC_ID_OPUS
            case .pcm: AV_CODEC_ID_PCM_S16LE
            }
        par.pointee.sample_rate = Int32(f.sampleRate)
        av_channel_layout_default(&par.pointee.ch_layout, Int32(f.channels))
        par.pointee.frame_size = Int32(f.frameSize)
        if f.codec == .pcm {
            par.pointee.bits_per_coded_sample = 16
            par.pointee.block_align = Int32(2 * f.channels)
            par.pointee.bit_rate = Int64(16 * f.channels * f.sampleRate)
        } else {
            par.pointee.bit_rate = Int64(f.bitRate)
        }
        if !f.extradata.isEmpty {
            let n = f.extradata.count
            guard let extra = av_mallocz(n + Int(AV_INPUT_BUFFER_PADDING_SIZE)) else {
                throw RecordingError(.encoderFailed, "out of memory for the audio stream")
            }
            f.extradata.withUnsafeBytes { extra.copyMemory(from: $0.baseAddress!, byteCount: n) }
            par.pointee.extradata = extra.assumingMemoryBound(to: UInt8.self)
            par.pointee.extradata_size = Int32(n)
        }
        st.pointee.time_base = AVRational(num: 1, den: Int32(f.sampleRate))
        st.pointee.disposition |= AV_DISPOSITION_DEFAULT
        audioStream = st
        audioRate = Int64(f.sampleRate)
        audioChannels = f.channels
        audioEncoderName = f.encoderName
        audioPacketFormat = f
    }

    /// Where the audio queued so far ends, in ns on the file's time line.
    var audioQueuedNanoseconds: Int64 { audioStarted ? audioQueuedEnd * 1_000_000_000 / max(1, audioRate) : 0 }

    /// Where the video written so far ends, in samples (0 before the first frame).
    private var videoReachInSamples: Int64 {
        guard let last = lastFrameNanoseconds, let interval = videoFormat?.frameInterval else { return 0 }
        let end = last - originNanoseconds + Int64(interval.numerator) * 1_000_000_000 / Int64(max(1, interval.denominator))
        return av_rescale_q(end, AVRational(num: 1, den: 1_000_000_000), AVRational(num: 1, den: Int32(audioRate)))
    }

    /// Adds a packet whose first sample was captured `nanoseconds` after the first video frame
    /// (the pauses before it left out). One that ends before the file starts is left out, the
    /// one playing at its start is placed at 0, each later one right after the one before: a
    /// gap of more than 20 ms (lost audio) is filled with packets of silence, a packet a whole
    /// packet or more behind the file's audio (the first after a pause) is left out, so each
    /// stays within one packet of its capture time (late, never more than 20 ms early). Written once the video reaches it, so that `finish`
    /// can leave out what lies past the video's end (unless 2 s of it waits: a stalled camera).
    /// `samples`: the part of a PCM packet to write (`nanoseconds` is its first sample's time).
    func writeAudio(_ packet: AudioPacket, at nanoseconds: Int64, samples: Range<Int>? = nil) throws(RecordingError) {
        guard let f = audioPacketFormat, let pf = packet.format, f.isCompatible(with: pf) else { return }
        let cuttable = f.codec == .pcm
        var skip = cuttable ? samples?.lowerBound ?? 0 : 0
        var duration = (cuttable ? samples?.upperBound ?? packet.duration : packet.duration) - skip
        var start = av_rescale_q(nanoseconds, AVRational(num: 1, den: 1_000_000_000), AVRational(num: 1, den: Int32(audioRate)))
        guard duration > 0 else { return }
        if !audioStarted {
            if start < 0 {
                // The packet playing at the file's start starts its audio: PCM from that
                // sample on, a codec's packet whole at 0 (so the audio is at most one packet
                // late, never early, and begins with the video).
                guard start + Int64(duration) > 0 else { return }
                if cuttable {
                    skip += Int(-start)
                    duration -= Int(-start)
                }
                start = 0
            }
            audioStarted = true
            audioQueuedEnd = start
            audioWrittenEnd = start
        }
        let behind = audioQueuedEnd - start
        if behind >= Int64(duration) { return }
        if -behind > audioRate / 50 {
            // (At most 10 s of silence: as much as the recorder keeps waiting.)
            var silence = 0
            while audioQueuedEnd + Int64(f.frameSize) <= start, silence < audioRate * 10 {
                queuedAudio.append((nil, audioQueuedEnd, f.frameSize, 0))
                audioQueuedEnd += Int64(f.frameSize)
                silence += f.frameSize
            }
        }
        packet.hold()
        queuedAudio.append((packet, audioQueuedEnd, duration, skip))
        audioQueuedEnd += Int64(duration)
        try writeQueuedAudio(before: videoReachInSamples, orAllBut: Int(audioRate * 2))
    }

    /// Writes the packets queued that end by `reach` (samples), and beyond it those more than
    /// `held` samples from the newest.
    private func writeQueuedAudio(before reach: Int64, orAllBut held: Int) throws(RecordingError) {
        var n = 0
        defer { if n > 0 { queuedAudio.removeFirst(n) } }
        while n < queuedAudio.count {
            let q = queuedAudio[n]
            guard q.start + Int64(q.duration) <= reach || audioQueuedEnd - q.start > Int64(held) else { break }
            n += 1
            try writeQueued(q)
        }
    }

    private func writeQueued(_ q: QueuedAudio) throws(RecordingError) {
        defer { q.packet?.letGo() }
        guard let f = audioPacketFormat else { return }
        // PCM: the samples asked for (2 bytes each per channel); a codec's packet whole.
        let bytesPerSample = f.codec == .pcm ? 2 * f.channels : 0
        func part(_ b: UnsafeRawBufferPointer) -> UnsafeRawBufferPointer {
            guard bytesPerSample > 0 else { return b }
            let from = min(b.count, q.skip * bytesPerSample)
            return UnsafeRawBufferPointer(rebasing: b[from..<min(b.count, from + q.duration * bytesPerSample)])
        }
        let r: Int32 =
            if let p = q.packet {
                p.withUnsafeBytes { muxAudio(part($0), start: q.start, duration: q.duration) }
            } else {
                f.silence.withUnsafeBytes { muxAudio(part($0), start: q.start, duration: q.duration) }
            }
        guard r >= 0 else { throw failure(r, "writing audio") }
        audioWrittenEnd = q.start + Int64(q.duration)
        audioSamples += Int64(q.duration)
    }

    private func muxAudio(_ bytes: UnsafeRawBufferPointer, start: Int64, duration: Int) -> Int32 {
        guard let packet, let st = audioStream else { return -EINVAL }
        let tb = AVRational(num: 1, den: Int32(audioRate))
        packet.pointee.data = UnsafeMutablePointer(mutating: bytes.baseAddress?.assumingMemoryBound(to: UInt8.self))
        packet.pointee.size = Int32(bytes.count)
        packet.pointee.pts = av_rescale_q(start, tb, st.pointee.time_base)
        packet.pointee.dts = packet.pointee.pts
        packet.pointee.duration = av_rescale_q(Int64(duration), tb, st.pointee.time_base)
        packet.pointee.flags = AV_PKT_FLAG_KEY
        packet.pointee.stream_index = st.pointee.index
        defer {
            packet.pointee.data = nil
            packet.pointee.size = 0
        }
        packetBytes += Int64(bytes.count)
        return mux(packet)
    }

    /// Ends the audio where the video ends (`videoEnd` ns after the first frame): a packet that
    /// starts before it is written, its duration cut to that end (as an encoder's short last
    /// frame), the rest left out; up to 100 ms missing at the end (still on its way from the
    /// device) is silence, so both streams last as long.
    func finishAudioPackets(videoEnd: Int64) throws(RecordingError) {
        guard let f = audioPacketFormat, audioStarted else { return }
        let end = av_rescale_q(videoEnd, AVRational(num: 1, den: 1_000_000_000), AVRational(num: 1, den: Int32(audioRate)))
        let queued = queuedAudio
        queuedAudio = []
        var failed: RecordingError?
        for var q in queued {
            if q.start < end, failed == nil {
                // The last packet lasts to the video's end (as an encoder's short last frame:
                // its container duration is cut; PCM's bytes too).
                q.duration = min(q.duration, Int(end - q.start))
                do { try writeQueued(q) } catch { failed = error }
            } else {
                q.packet?.letGo()
            }
        }
        if let failed { throw failed }
        guard end - audioWrittenEnd <= audioRate / 10 else { return }
        while audioWrittenEnd < end {
            try writeQueued((nil, audioWrittenEnd, min(f.frameSize, Int(end - audioWrittenEnd)), 0))
        }
    }
}
