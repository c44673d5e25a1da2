import Capture
import CaptureCodecs
internal import CFFmpeg
import Foundation

// The microphone's audio: AAC (FFmpeg's native encoder), Opus or PCM, timed on the video's
// time line with gaps filled with silence.
extension MovieWriter {
    var hasAudio: Bool { audioStream != nil }
    /// `audioSamples` as nanoseconds.
    var audioSamplesNanoseconds: Int64 { audioSamples * 1_000_000_000 / max(1, audioRate) }

    /// Where the video written so far ends, in samples on the audio's time line (the last frame's
    /// time plus one frame interval; 0 before the first frame).
    private var videoReach: Int64 {
        guard let last = lastFrameNanoseconds, let interval = videoFormat?.frameInterval else { return 0 }
        let end = last - originNanoseconds + Int64(interval.numerator) * 1_000_000_000 / Int64(max(1, interval.denominator))
        return av_rescale_q(end, AVRational(num: 1, den: 1_000_000_000), AVRational(num: 1, den: Int32(audioRate)))
    }

    func openAudioEncoder(_ audio: AudioFormat, codec audioCodec: AudioCodec) throws(RecordingError) {
        // Opus: libopus where this FFmpeg has it, else FFmpeg's own (experimental) encoder.
        let candidates: [(name: String, format: AVSampleFormat)] =
            switch audioCodec {
            case .aac: [("aac", AV_SAMPLE_FMT_FLTP)]
            case .opus: [("libopus", AV_SAMPLE_FMT_FLT), ("opus", AV_SAMPLE_FMT_FLTP)]
            case .pcm: [("pcm_s16le", AV_SAMPLE_FMT_S16)]
            }
        guard
            let (codec, sampleFormat) = candidates.lazy.compactMap({ c in avcodec_find_encoder_by_name(c.name).map { ($0, c.format) } })
                .first
        else {
            throw RecordingError(.unsupportedCodec, "this FFmpeg has no \(audioCodec.rawValue) encoder: record AAC")
        }
        audioEncoderName = String(cString: codec.pointee.name)
        if audioCodec == .opus, ![48_000, 24_000, 16_000, 12_000, 8000].contains(audio.sampleRate) {
            throw RecordingError(
                .unsupportedCodec,
                "Opus takes 48, 24, 16, 12 or 8 kHz, and the microphone gives \(audio.sampleRate) Hz: choose AAC or PCM, or a 48 kHz microphone format"
            )
        }
        guard let enc = avcodec_alloc_context3(codec) else { throw RecordingError(.encoderFailed, "out of memory for the audio encoder") }
        audioEncoder = enc
        audioRate = Int64(audio.sampleRate)
        // Opus here is one stream of one or two channels.
        let channels = audioCodec == .opus ? min(2, audio.channelCount) : audio.channelCount
        audioChannels = channels
        audioSampleFormat = sampleFormat
        enc.pointee.sample_fmt = sampleFormat
        enc.pointee.sample_rate = Int32(audio.sampleRate)
        av_channel_layout_default(&enc.pointee.ch_layout, Int32(channels))
        if audioCodec != .pcm { enc.pointee.bit_rate = Int64(64_000 * channels) }
        enc.pointee.time_base = AVRational(num: 1, den: Int32(audio.sampleRate))
        if audioEncoderName == "opus" { enc.pointee.strict_std_compliance = -2 }
        if (format!.pointee.oformat.pointee.flags & AVFMT_GLOBALHEADER) != 0 {
            enc.pointee.flags |= AV_CODEC_FLAG_GLOBAL_HEADER
        }
        let r = avcodec_open2(enc, codec, nil)
        guard r >= 0 else { throw RecordingError(.encoderFailed, "the \(audioEncoderName) encoder refused \(audio): \(ffMessage(r))") }
        guard let st = avformat_new_stream(format, nil), avcodec_parameters_from_context(st.pointee.codecpar, enc) >= 0 else {
            throw RecordingError(.encoderFailed, "cannot add an audio stream")
        }
        st.pointee.time_base = enc.pointee.time_base
        st.pointee.disposition |= AV_DISPOSITION_DEFAULT
        audioStream = st
        guard let f = av_frame_alloc() else { throw RecordingError(.encoderFailed, "out of memory for an audio frame") }
        audioFrame = f
        // PCM takes any number of samples a frame: 20 ms.
        if enc.pointee.frame_size <= 0 { enc.pointee.frame_size = Int32(max(1, audio.sampleRate / 50)) }
        f.pointee.format = sampleFormat.rawValue
        f.pointee.sample_rate = enc.pointee.sample_rate
        f.pointee.nb_samples = enc.pointee.frame_size
        guard av_channel_layout_copy(&f.pointee.ch_layout, &enc.pointee.ch_layout) >= 0, av_frame_get_buffer(f, 0) >= 0 else {
            throw RecordingError(.encoderFailed, "out of memory for an audio frame")
        }
        pending = Array(repeating: [], count: channels)
        for c in pending.indices { pending[c].reserveCapacity(Int(enc.pointee.frame_size) * 4) }
    }

    /// Adds a block of audio whose first sample was captured `nanoseconds` after the first
    /// video frame (negative: before it, and that part is left out). A gap of more than 20 ms
    /// from the audio so far (lost buffers) is filled with silence, so that what follows keeps
    /// its time.
    func writeAudio(_ buffer: AudioPCMBuffer, at nanoseconds: Int64) throws(RecordingError) {
        guard audioEncoder != nil, buffer.frameCount > 0 else { return }
        var start = av_rescale_q(nanoseconds, AVRational(num: 1, den: 1_000_000_000), AVRational(num: 1, den: Int32(audioRate)))
        var skip = 0
        if !audioStarted {
            if start + Int64(buffer.frameCount) <= 0 { return }
            if start < 0 { skip = Int(-start); start = 0 }
            audioStarted = true
            pendingStart = start
        } else {
            let gap = start - (pendingStart + Int64(pending[0].count))
            if gap > audioRate / 50 {
                let silence = Int(min(gap, audioRate * 10))
                for c in pending.indices { pending[c].append(contentsOf: repeatElement(0, count: silence)) }
                audioSamples += Int64(silence)
                try encodeAudio(final: false)
            }
        }
        for c in pending.indices {
            // A mono microphone fills every channel; extra channels of the device are left out.
            let samples = buffer.floatSamples(channel: min(c, buffer.format.channelCount - 1))
            pending[c].append(contentsOf: samples[min(skip, samples.count)...])
        }
        audioSamples += Int64(max(0, buffer.frameCount - skip))
        try encodeAudio(final: false)
    }

    /// Encodes the full encoder frames waiting as far as the video reaches (and, when `final`,
    /// the rest as a short last one). Audio past the video waits, so that `finishAudio` can
    /// leave out what lies past the video's end at the stop (audio that came before the last
    /// frames did, or while they were lost), unless more than 2 s of it waits (a stalled
    /// camera: the memory held stays bounded).
    private func encodeAudio(final: Bool) throws(RecordingError) {
        guard let enc = audioEncoder, let frame = audioFrame else { return }
        let size = Int(enc.pointee.frame_size)
        let reach = final ? Int64.max : videoReach, held = Int(audioRate * 2)
        while final ? !pending[0].isEmpty : pending[0].count >= size && (pendingStart + Int64(size) <= reach || pending[0].count > held) {
            let n = min(size, pending[0].count)
            guard av_frame_make_writable(frame) >= 0 else { throw RecordingError(.encoderFailed, "out of memory for an audio frame") }
            frame.pointee.nb_samples = Int32(n)
            let planes = frame.pointee.extended_data
            let channels = pending.count
            for c in pending.indices {
                pending[c].withUnsafeBufferPointer { src in
                    switch audioSampleFormat {
                    case AV_SAMPLE_FMT_FLTP:
                        guard let plane = planes?[c] else { return }
                        UnsafeMutableRawPointer(plane).copyMemory(from: src.baseAddress!, byteCount: n * MemoryLayout<Float>.size)
                    case AV_SAMPLE_FMT_FLT:
                        // Interleaved floats (libopus).
                        guard let out = planes?[0] else { return }
                        let f = UnsafeMutableRawPointer(out).assumingMemoryBound(to: Float.self)
                        for i in 0..<n { f[i * channels + c] = src[i] }
                    default:
                        // Interleaved 16-bit (PCM).
                        guard let out = planes?[0] else { return }
                        let s = UnsafeMutableRawPointer(out).assumingMemoryBound(to: Int16.self)
                        for i in 0..<n { s[i * channels + c] = Int16(max(-32768, min(32767, (src[i] * 32768).rounded()))) }
                    }
                }
                pending[c].removeFirst(n)
            }
            frame.pointee.pts = pendingStart
            pendingStart += Int64(n)
            let r = avcodec_send_frame(enc, frame)
            guard r >= 0 else { throw RecordingError(.encoderFailed, "the \(audioEncoderName) encoder failed: \(ffMessage(r))") }
            try drainAudio()
        }
    }

    private func drainAudio() throws(RecordingError) {
        guard let enc = audioEncoder, let packet, let st = audioStream else { return }
        while true {
            let r = avcodec_receive_packet(enc, packet)
            if r == -EAGAIN || r == averrorEOF { return }
            guard r >= 0 else { throw RecordingError(.encoderFailed, "the \(audioEncoderName) encoder failed: \(ffMessage(r))") }
            packet.pointee.stream_index = st.pointee.index
            av_packet_rescale_ts(packet, enc.pointee.time_base, st.pointee.time_base)
            packetBytes += Int64(packet.pointee.size)
            let w = mux(packet)
            av_packet_unref(packet)
            guard w >= 0 else { throw failure(w, "writing audio") }
        }
    }

    /// Ends the audio where the video ends (`videoEnd` ns after the first frame): audio past it
    /// is left out, and up to 100 ms missing at the end (still on its way from the device) is
    /// silence, so both streams last as long.
    func finishAudio(videoEnd: Int64) throws(RecordingError) {
        guard let enc = audioEncoder else { return }
        let end = av_rescale_q(videoEnd, AVRational(num: 1, den: 1_000_000_000), AVRational(num: 1, den: Int32(audioRate)))
        if audioStarted {
            let have = pendingStart + Int64(pending[0].count)
            if have > end {
                let cut = pending[0].count - min(Int(max(0, end - pendingStart)), pending[0].count)
                for c in pending.indices { pending[c].removeLast(cut) }
                audioSamples -= Int64(cut)
            } else if end - have <= audioRate / 10 {
                for c in pending.indices { pending[c].append(contentsOf: repeatElement(0, count: Int(end - have))) }
                audioSamples += end - have
            }
            try encodeAudio(final: true)
        }
        if avcodec_send_frame(enc, nil) >= 0 { try drainAudio() }
    }
}
