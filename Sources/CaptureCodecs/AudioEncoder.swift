import Capture
import CaptureBackend
internal import CFFmpeg
import Foundation

/// One FFmpeg audio encoder for a microphone's format: takes captured samples (any of the
/// microphone's sample formats, interleaved or planar), converts them into the encoder's frame
/// as they come, and sends each full frame. Used by its stage's thread alone.
final class AudioEncoder {
    private let handles: EncoderHandles
    private var context: UnsafeMutablePointer<AVCodecContext> { handles.context }
    private var frame: UnsafeMutablePointer<AVFrame> { handles.frame }
    /// The microphone's format it was opened for.
    let input: AudioFormat
    let format: AudioStreamFormat
    private let sampleFormat: AVSampleFormat
    private let channels: Int
    private let frameSize: Int
    /// Samples in the frame being filled.
    private var filled = 0
    /// Samples sent to the encoder, or waiting in the frame: where the next one lies.
    private(set) var samplesIn: Int64 = 0

    /// Opens the encoder of `settings` for `input`; throws what to do when this FFmpeg has no
    /// such encoder or it refuses the format.
    init(_ settings: AudioEncoderSettings, input: AudioFormat, makesSilence: Bool = true) throws(AudioStageError) {
        if let rate = settings.sampleRate, rate != input.sampleRate {
            throw AudioStageError(
                code: .unsupportedCodec,
                message:
                    "the microphone gives \(input.sampleRate) Hz and the stage does not resample: ask for \(input.sampleRate) Hz (or nil)")
        }
        if settings.codec == .opus, ![48_000, 24_000, 16_000, 12_000, 8000].contains(input.sampleRate) {
            throw AudioStageError(
                code: .unsupportedCodec,
                message:
                    "Opus takes 48, 24, 16, 12 or 8 kHz, and the microphone gives \(input.sampleRate) Hz: choose AAC or PCM, or a 48 kHz microphone format"
            )
        }
        // Opus: libopus where this FFmpeg has it, else FFmpeg's own (experimental) encoder.
        let candidates: [(name: String, format: AVSampleFormat)] =
            switch settings.codec {
            case .aac: [("aac", AV_SAMPLE_FMT_FLTP)]
            case .opus: [("libopus", AV_SAMPLE_FMT_FLT), ("opus", AV_SAMPLE_FMT_FLTP)]
            case .pcm: [("pcm_s16le", AV_SAMPLE_FMT_S16)]
            }
        guard
            let (codec, sampleFormat) = candidates.lazy.compactMap({ c in avcodec_find_encoder_by_name(c.name).map { ($0, c.format) } })
                .first
        else {
            throw AudioStageError(code: .unsupportedCodec, message: "this FFmpeg has no \(settings.codec.rawValue) encoder: choose AAC")
        }
        let name = String(cString: codec.pointee.name)
        // (Made before this encoder's objects, which a throw here would leak.)
        let silence = makesSilence ? try Self.silence(settings, input: input) : Data()
        guard let handles = EncoderHandles(codec: codec) else {
            throw AudioStageError(code: .encoderFailed, message: "out of memory for the audio encoder")
        }
        let (enc, frm) = (handles.context, handles.frame)
        self.handles = handles
        self.input = input
        self.sampleFormat = sampleFormat
        // Opus here is one stream of one or two channels.
        let channels = settings.codec == .opus ? min(2, settings.channels ?? input.channelCount) : settings.channels ?? input.channelCount
        self.channels = channels
        enc.pointee.sample_fmt = sampleFormat
        enc.pointee.sample_rate = Int32(input.sampleRate)
        av_channel_layout_default(&enc.pointee.ch_layout, Int32(channels))
        if settings.codec != .pcm { enc.pointee.bit_rate = Int64(settings.bitRate ?? 64_000 * channels) }
        enc.pointee.time_base = AVRational(num: 1, den: Int32(input.sampleRate))
        if name == "opus" { enc.pointee.strict_std_compliance = -2 }
        // The codec's setup once, in `extradata`, for muxers' headers.
        enc.pointee.flags |= AV_CODEC_FLAG_GLOBAL_HEADER
        let r = avcodec_open2(enc, codec, nil)
        guard r >= 0 else {
            throw AudioStageError(code: .encoderFailed, message: "the \(name) encoder refused \(input): \(ffMessage(r))")
        }
        // PCM takes any number of samples a frame: 20 ms.
        if enc.pointee.frame_size <= 0 { enc.pointee.frame_size = Int32(max(1, input.sampleRate / 50)) }
        frameSize = Int(enc.pointee.frame_size)
        frm.pointee.format = sampleFormat.rawValue
        frm.pointee.sample_rate = enc.pointee.sample_rate
        frm.pointee.nb_samples = enc.pointee.frame_size
        guard av_channel_layout_copy(&frm.pointee.ch_layout, &enc.pointee.ch_layout) >= 0, av_frame_get_buffer(frm, 0) >= 0 else {
            throw AudioStageError(code: .encoderFailed, message: "out of memory for an audio frame")
        }
        let extra = enc.pointee.extradata.map { Data(bytes: $0, count: Int(enc.pointee.extradata_size)) } ?? Data()
        format = AudioStreamFormat(
            codec: settings.codec, encoderName: name, sampleRate: input.sampleRate, channels: channels, frameSize: frameSize,
            initialPadding: Int(enc.pointee.initial_padding), bitRate: Int(enc.pointee.bit_rate), extradata: extra,
            silence: silence)
    }

    /// A packet of silence from an encoder of these settings in steady state (a few frames of
    /// silence in, the last packet before the flush out). Once per stage.
    private static func silence(_ settings: AudioEncoderSettings, input: AudioFormat) throws(AudioStageError) -> Data {
        let e = try AudioEncoder(settings, input: input, makesSilence: false)
        var last = Data()
        try e.appendSilence(e.frameSize * 4) { bytes, _, _ in last = Data(bytes) }
        return last
    }

    /// A packet the encoder made: its bytes (valid for the call), where it lies and how long it is, in samples.
    typealias Emit = (_ bytes: UnsafeRawBufferPointer, _ pts: Int64, _ duration: Int) -> Void

    /// Encodes the samples of `pcm` (a mono microphone fills every channel; channels beyond the
    /// encoder's are left out); full frames go to the encoder, their packets to `emit`.
    func append(_ pcm: AudioPCMBuffer, emit: Emit) throws(AudioStageError) {
        let f = pcm.format
        let n = min(pcm.frameCount, pcm.data.count / max(1, f.bytesPerFrame))
        let inChannels = f.channelCount
        // (Data's closure throws untyped errors: the typed one comes out as a value.)
        let failed: AudioStageError? = pcm.data.withUnsafeBytes { (raw: UnsafeRawBufferPointer) in
            var i = 0
            do throws(AudioStageError) {
                while i < n {
                    try writableFrame()
                    let take = min(n - i, frameSize - filled)
                    for c in 0..<channels {
                        let from = min(c, inChannels - 1)
                        for k in 0..<take {
                            let at = f.isInterleaved ? (i + k) * inChannels + from : from * n + i + k
                            put(Self.sample(raw, at, f.sampleFormat), channel: c, index: filled + k)
                        }
                    }
                    filled += take
                    i += take
                    samplesIn += Int64(take)
                    if filled == frameSize { try send(emit) }
                }
            } catch {
                return error
            }
            return nil
        }
        if let failed { throw failed }
    }

    /// Encodes `count` samples of silence (what the microphone lost, so that what follows keeps its time).
    func appendSilence(_ count: Int, emit: Emit) throws(AudioStageError) {
        var left = count
        while left > 0 {
            try writableFrame()
            let take = min(left, frameSize - filled)
            for c in 0..<channels {
                for k in 0..<take { put(0, channel: c, index: filled + k) }
            }
            filled += take
            left -= take
            samplesIn += Int64(take)
            if filled == frameSize { try send(emit) }
        }
    }

    /// Sends what waits as a short last frame and drains the encoder (the end of the stream).
    func finish(emit: Emit) throws(AudioStageError) {
        if filled > 0 { try send(emit) }
        if avcodec_send_frame(context, nil) >= 0 { try drain(emit) }
    }

    private func writableFrame() throws(AudioStageError) {
        // (The encoder may still hold the last frame's buffer: a new one comes from FFmpeg's pool.)
        guard filled > 0 || av_frame_make_writable(frame) >= 0 else {
            throw AudioStageError(code: .encoderFailed, message: "out of memory for an audio frame")
        }
    }

    private static func sample(_ raw: UnsafeRawBufferPointer, _ index: Int, _ format: AudioFormat.SampleFormat) -> Float {
        switch format {
        case .s16: Float(Int16(littleEndian: raw.loadUnaligned(fromByteOffset: index * 2, as: Int16.self))) / 32768
        case .s32: Float(Double(Int32(littleEndian: raw.loadUnaligned(fromByteOffset: index * 4, as: Int32.self))) / 2_147_483_648)
        case .float32: Float(bitPattern: UInt32(littleEndian: raw.loadUnaligned(fromByteOffset: index * 4, as: UInt32.self)))
        }
    }

    /// One sample into the frame being filled, in the encoder's layout.
    private func put(_ value: Float, channel c: Int, index i: Int) {
        switch sampleFormat {
        case AV_SAMPLE_FMT_FLTP:
            frame.pointee.extended_data[c]!.withMemoryRebound(to: Float.self, capacity: frameSize) { $0[i] = value }
        case AV_SAMPLE_FMT_FLT:
            frame.pointee.extended_data[0]!.withMemoryRebound(to: Float.self, capacity: frameSize * channels) {
                $0[i * channels + c] = value
            }
        default:
            let s = Int16(max(-32768, min(32767, (value * 32768).rounded())))
            frame.pointee.extended_data[0]!.withMemoryRebound(to: Int16.self, capacity: frameSize * channels) { $0[i * channels + c] = s }
        }
    }

    private func send(_ emit: Emit) throws(AudioStageError) {
        frame.pointee.nb_samples = Int32(filled)
        frame.pointee.pts = samplesIn - Int64(filled)
        filled = 0
        let r = avcodec_send_frame(context, frame)
        guard r >= 0 else {
            throw AudioStageError(code: .encoderFailed, message: "the \(format.encoderName) encoder failed: \(ffMessage(r))")
        }
        try drain(emit)
    }

    private func drain(_ emit: Emit) throws(AudioStageError) {
        let frameSize = frameSize
        let r = handles.receivePackets { packet in
            let p = packet.pointee
            let duration = p.duration > 0 ? Int(p.duration) : frameSize
            emit(UnsafeRawBufferPointer(start: p.data, count: Int(p.size)), p.pts, duration)
        }
        guard r >= 0 else {
            throw AudioStageError(code: .encoderFailed, message: "the \(format.encoderName) encoder failed: \(ffMessage(r))")
        }
    }
}
