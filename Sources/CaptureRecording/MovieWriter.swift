import Capture
import CaptureCodecs
internal import CFFmpeg
import Foundation

/// One movie file being written: FFmpeg's muxer (fragmented MP4, Matroska or RTSP), one video
/// stream of encoded frames (the session's H.264 stage's units, or JPEG), and the audio encoder.
/// Timestamps are nanoseconds since the recording's first frame (the capture clock, so dropped
/// frames leave gaps in time).
///
/// Not thread-safe: the movie output's recording queue owns it. Steady state allocates nothing
/// of its own per frame (one reused `AVPacket` pointed at the frame's bytes); the muxer
/// allocates what it keeps (`capture-bench record`). Package access for that bench.
package final class MovieWriter {
    /// The stream's shape, known at the first frame.
    package struct VideoFormat {
        /// The pixel format that stands for H.264 units (no camera delivers it).
        package static let h264 = PixelFormat(fourCC: "H264")!

        var width: Int
        var height: Int
        /// Of the frames given: `h264` for a stage's units, `.jpeg` for MJPEG.
        var pixelFormat: PixelFormat
        /// The camera's nominal frame interval.
        var frameInterval: FrameInterval

        package init(width: Int, height: Int, pixelFormat: PixelFormat, frameInterval: FrameInterval) {
            self.width = width
            self.height = height
            self.pixelFormat = pixelFormat
            self.frameInterval = frameInterval
        }
    }

    package internal(set) var path: String
    package internal(set) var encoderName = ""
    var format: UnsafeMutablePointer<AVFormatContext>?
    var stream: UnsafeMutablePointer<AVStream>?
    var packet: UnsafeMutablePointer<AVPacket>?
    var container: MovieContainer
    var fragmentMicroseconds: Int64
    var videoFormat: VideoFormat?
    /// Time bases: the one asked of the stream (a standby writer's ring keeps it), and the one
    /// the muxer chose.
    let inputTimeBase = AVRational(num: 1, den: 90_000)
    var streamTimeBase = AVRational(num: 1, den: 90_000)
    var frameDurationInStream: Int64 = 0
    var lastPTS: Int64 = .min
    private var headerWritten = false
    /// The file (nil for RTSP and before `open`).
    var destination: Destination?
    /// The last frame's time on the writer's time line (nil before the first), and the file's
    /// time 0 on it (pre-record starts the file at a kept keyframe): how far the video reaches,
    /// which audio is not encoded past (`MovieWriterAudio.swift`).
    var lastFrameNanoseconds: Int64?
    var originNanoseconds: Int64 = 0

    /// A writer for `url` (its extension or scheme chooses the container), or nil for one it does not name.
    package convenience init?(url: URL, fragmentInterval: Duration) throws(RecordingError) {
        guard let container = MovieContainer(url: url) else { return nil }
        try self.init(url: url, container: container, fragmentInterval: fragmentInterval)
    }

    /// Creates the file (nothing is written to it until `begin`).
    init(url: URL, container: MovieContainer, fragmentInterval: Duration) throws(RecordingError) {
        path = ""
        self.container = container
        fragmentMicroseconds = Self.microseconds(fragmentInterval)
        try open(url: url, container: container, fragmentInterval: fragmentInterval)
    }

    /// A writer with no file yet, for pre-record: `begin(standby:settings:)` opens the encoder,
    /// and frames written go into a ring that keeps the last `preRecord` of packets from a
    /// keyframe on (with H.264 the kept part must start at an IDR frame), until `open` and
    /// `attach` put them at the start of a file.
    init(preRecord: Duration, fragmentInterval: Duration) {
        path = ""
        container = .matroska
        fragmentMicroseconds = Self.microseconds(fragmentInterval)
        ring = PacketRing(window: Self.microseconds(preRecord) * 9 / 100)
    }

    static func microseconds(_ d: Duration) -> Int64 {
        let c = d.components
        return max(1000, c.seconds * 1_000_000 + c.attoseconds / 1_000_000_000_000)
    }

    deinit { close() }

    /// Pre-record: frames kept while no file is open; nil once attached (or never).
    var ring: PacketRing?
    /// A standby writer's stand-in muxer context (never written), holding the video stream
    /// frames are written against until `attach`.
    var placeholder: UnsafeMutablePointer<AVFormatContext>?
    /// Subtracted from video packet times (stream time base): the file starts at the first
    /// kept packet, not at the standby encoder's first frame.
    var videoOffset: Int64 = 0

    /// Sets up the stream (and encoder) for frames of `video` and writes the header. Units of the
    /// shared H.264 stage (`RecordedFrame.h264`) come with their stage's `parameterSets`.
    /// `audio`: the stream of an audio stage's packets (`writeAudio`), or nil for none.
    package func begin(
        _ video: VideoFormat, audio: AudioStreamFormat?, settings: MovieOutputSettings, parameterSets: Data? = nil
    ) throws(RecordingError) {
        guard format != nil else { throw RecordingError(.invalidState, "the file is closed") }
        try prepareVideo(video, settings: settings)
        self.parameterSets = parameterSets
        try addVideoStream()
        try writeHeader(audio: audio, settings: settings)
    }

    var fps = AVRational(num: 30, den: 1)

    /// Notes the video's shape and makes the packet frames are written with; the frames come
    /// encoded (a stage's H.264 units, or JPEG as it is).
    func prepareVideo(_ video: VideoFormat, settings: MovieOutputSettings) throws(RecordingError) {
        guard video.pixelFormat == .jpeg || video.pixelFormat == RecordedFrame.h264 else {
            throw RecordingError(.invalidState, "a movie writer takes H.264 units or JPEG, not \(video.pixelFormat) frames")
        }
        videoFormat = video
        fps = AVRational(num: Int32(video.frameInterval.denominator), den: Int32(max(1, video.frameInterval.numerator)))
        // (H.264: encoded by the session's stage with these settings.)
        encoderName = video.pixelFormat == .jpeg ? "passthrough" : settings.h264Encoder.rawValue
        if packet == nil { packet = av_packet_alloc() }
        guard packet != nil else { throw RecordingError(.encoderFailed, "out of memory for a packet") }
    }
    /// The shared stage's SPS and PPS, for a stream of its units (the stream's extradata).
    var parameterSets: Data?

    /// The video stream of `format`, described by the encoder (or as MJPEG).
    func addVideoStream() throws(RecordingError) {
        guard let format, let video = videoFormat, let st = avformat_new_stream(format, nil) else {
            throw RecordingError(.encoderFailed, "cannot add a video stream")
        }
        stream = st
        if video.pixelFormat == RecordedFrame.h264 {
            // The stage's units: its parameter sets (Annex B) are the muxer's to convert.
            let par = st.pointee.codecpar!
            par.pointee.codec_type = AVMEDIA_TYPE_VIDEO
            par.pointee.codec_id = AV_CODEC_ID_H264
            par.pointee.width = Int32(video.width)
            par.pointee.height = Int32(video.height)
            par.pointee.format = AV_PIX_FMT_YUV420P.rawValue
            if let sets = parameterSets, !sets.isEmpty {
                guard let extra = av_mallocz(sets.count + Int(AV_INPUT_BUFFER_PADDING_SIZE)) else {
                    throw RecordingError(.encoderFailed, "out of memory for the stream's parameter sets")
                }
                sets.withUnsafeBytes { extra.copyMemory(from: $0.baseAddress!, byteCount: sets.count) }
                par.pointee.extradata = extra.assumingMemoryBound(to: UInt8.self)
                par.pointee.extradata_size = Int32(sets.count)
            }
        } else {
            let par = st.pointee.codecpar!
            par.pointee.codec_type = AVMEDIA_TYPE_VIDEO
            par.pointee.codec_id = AV_CODEC_ID_MJPEG
            par.pointee.width = Int32(video.width)
            par.pointee.height = Int32(video.height)
        }
        st.pointee.time_base = inputTimeBase
        // Matroska's FlagDefault (players pick a default track of each kind); MP4 marks it anyway.
        st.pointee.disposition |= AV_DISPOSITION_DEFAULT
        st.pointee.avg_frame_rate = fps
        st.pointee.r_frame_rate = fps
    }

    /// Adds the audio stream and writes the header.
    func writeHeader(audio: AudioStreamFormat?, settings: MovieOutputSettings) throws(RecordingError) {
        guard let format, let st = stream, let video = videoFormat else { throw RecordingError(.invalidState, "the file is closed") }
        var opts: OpaquePointer?
        defer { av_dict_free(&opts) }
        if let audio { try addAudioStream(audio) }
        if container == .mp4 {
            // `isom` as the major brand (FFmpeg's default for these flags, `iso5`, is refused by
            // some readers, e.g. AtomicParsley); `iso6` stays among the compatible ones.
            av_dict_set(&opts, "brand", "isom", 0)
            // Fragmented: a moov up front, then self-contained fragments. H.264 cuts at keyframes
            // (one per interval by default) once a fragment is at least 3/4 interval long, and at
            // two intervals at the latest; JPEG (every frame a keyframe) by duration.
            // With audio the moov waits for the first fragment: written before any packet it can
            // hold no edit list, and the muxer then shifts every track by the AAC encoder's
            // priming (1024 samples) and stretches the first video frame over the shift.
            let moov = audioStream == nil ? "empty_moov" : "delay_moov"
            if video.pixelFormat == .jpeg {
                av_dict_set(&opts, "movflags", "\(moov)+default_base_moof", 0)
                av_dict_set(&opts, "frag_duration", "\(fragmentMicroseconds)", 0)
            } else {
                av_dict_set(&opts, "movflags", "frag_keyframe+\(moov)+default_base_moof", 0)
                av_dict_set(&opts, "min_frag_duration", "\(fragmentMicroseconds * 3 / 4)", 0)
                av_dict_set(&opts, "frag_duration", "\(fragmentMicroseconds * 2)", 0)
            }
        }
        if container == .matroska {
            // A cluster per fragment interval (FFmpeg's default is 5 s), so the file grows, and
            // keeps what it has, as often as an MP4's fragments.
            av_dict_set(&opts, "cluster_time_limit", "\(max(1, fragmentMicroseconds / 1000))", 0)
            // No CRC-32 element per cluster: FFmpeg's CRC over every byte cost more than the rest
            // of an MJPEG recording's muxing (capture-bench record); the elements are optional
            // and a cut cluster is told by its size anyway.
            av_dict_set(&opts, "write_crc32", "0", 0)
        }
        if container == .rtsp {
            // Interleaved in the TCP connection (no UDP ports to open); a server that stops
            // answering fails a read or write after 5 s instead of hanging.
            av_dict_set(&opts, "rtsp_transport", "tcp", 0)
            av_dict_set(&opts, "timeout", "5000000", 0)
        }
        let h = avformat_write_header(format, &opts)
        guard h >= 0 else {
            if container == .rtsp, -h != ECONNREFUSED, -h != ETIMEDOUT {
                throw RecordingError(.publishingFailed, "\(path) refused the stream: \(ffMessage(h)); check the server's path and settings")
            }
            throw failure(h, container == .rtsp ? "connecting" : "writing the header")
        }
        headerWritten = true
        streamTimeBase = st.pointee.time_base
        frameDurationInStream = max(1, av_rescale_q(1, AVRational(num: fps.den, den: fps.num), streamTimeBase))
    }

    /// Packet bytes handed to the muxer (RTSP has no file to measure).
    var packetBytes: Int64 = 0

    /// The presentation time of a frame `nanoseconds` after the first, in the stream's time base.
    private func pts(_ nanoseconds: Int64, in tb: AVRational) -> Int64 {
        av_rescale_q(nanoseconds, AVRational(num: 1, den: 1_000_000_000), tb)
    }

    /// Writes one JPEG frame, `nanoseconds` after the first, from the sample's bytes (no copy
    /// of ours). The sample is read here and not kept.
    package func write(_ sample: SampleBuffer, at nanoseconds: Int64) throws(RecordingError) {
        guard format != nil else { throw RecordingError(.invalidState, "the file is closed") }
        guard videoFormat?.pixelFormat == .jpeg else {
            throw RecordingError(.invalidState, "a writer of H.264 takes the units of an H.264 stage, not frames")
        }
        lastFrameNanoseconds = nanoseconds
        let r = sample.withUnsafeBytes { writeEncoded($0, key: true, at: nanoseconds) }
        guard r >= 0 else { throw failure(r, "writing a frame") }
    }

    /// Writes one unit of the shared H.264 stage, `nanoseconds` after the first.
    package func write(_ unit: H264AccessUnit, at nanoseconds: Int64) throws(RecordingError) {
        guard format != nil else { throw RecordingError(.invalidState, "the file is closed") }
        lastFrameNanoseconds = nanoseconds
        let r = unit.withUnsafeBytes { writeEncoded($0, key: unit.isKeyFrame, at: nanoseconds) }
        packetBytes += Int64(unit.count)
        guard r >= 0 else { throw failure(r, "writing a frame") }
    }

    /// Muxes bytes encoded already (a JPEG, a stage's unit) as the frame `nanoseconds` after the
    /// first, from where they lie (the muxer buffers what it keeps); FFmpeg's result.
    private func writeEncoded(_ bytes: UnsafeRawBufferPointer, key: Bool, at nanoseconds: Int64) -> Int32 {
        guard let packet, let stream else { return -EINVAL }
        var p = pts(nanoseconds, in: streamTimeBase)
        if p <= lastPTS { p = lastPTS + 1 }
        lastPTS = p
        packet.pointee.data = UnsafeMutablePointer(mutating: bytes.baseAddress?.assumingMemoryBound(to: UInt8.self))
        packet.pointee.size = Int32(bytes.count)
        packet.pointee.pts = p
        packet.pointee.dts = p
        packet.pointee.duration = frameDurationInStream
        packet.pointee.flags = key ? AV_PKT_FLAG_KEY : 0
        packet.pointee.stream_index = stream.pointee.index
        defer {
            packet.pointee.data = nil
            packet.pointee.size = 0
        }
        return mux(packet)
    }

    /// A packet to the muxer: in order of time across the streams when there is audio (the
    /// muxer then holds packets until every stream has reached their time), else at once.
    func mux(_ packet: UnsafeMutablePointer<AVPacket>) -> Int32 {
        if let ring {
            ring.keep(packet)
            return 0
        }
        if videoOffset != 0, packet.pointee.stream_index == stream?.pointee.index {
            packet.pointee.pts -= videoOffset
            packet.pointee.dts -= videoOffset
        }
        return audioStream != nil ? av_interleaved_write_frame(format, packet) : av_write_frame(format, packet)
    }

    // MARK: Audio (the audio stage's packets, in MovieWriterAudioPackets.swift)

    var audioStream: UnsafeMutablePointer<AVStream>?
    var audioRate: Int64 = 48_000
    var audioChannels = 0
    var audioStarted = false
    /// Samples written (silence for gaps included).
    var audioSamples: Int64 = 0

    /// The audio stage's encoder's name (`aac`, `libopus`, `opus`, `pcm_s16le`).
    var audioEncoderName = "aac"
    /// The stream of the audio stage's packets.
    var audioPacketFormat: AudioStreamFormat?
    /// Packets (nil: silence) waiting for the video to reach them, at their place in the file
    /// (samples since its time 0), held.
    var queuedAudio: [QueuedAudio] = []
    /// A packet's samples (PCM: `skip` left out at its front) at `start` in the file.
    typealias QueuedAudio = (packet: AudioPacket?, start: Int64, duration: Int, skip: Int)
    /// Where the last packet queued ends, and the last one written, in samples.
    var audioQueuedEnd: Int64 = 0
    var audioWrittenEnd: Int64 = 0

    /// Writes the audio that waits (to the video's end), the trailer (the last fragment) and closes the file. Safe to
    /// call more than once; after a failure it still closes the file.
    package func finish(videoEnd: Int64 = 0) throws(RecordingError) {
        defer { close() }
        guard let format, headerWritten else { return }
        var failure: RecordingError?
        if audioPacketFormat != nil {
            do { try finishAudioPackets(videoEnd: videoEnd) } catch { if failure == nil { failure = error } }
        }
        let t = av_write_trailer(format)
        headerWritten = false
        if failure == nil, t < 0 { failure = self.failure(t, "finishing") }
        if let failure { throw failure }
        if container == .mp4 { writeDurations(videoEnd: videoEnd) }
    }

    /// Closes the file and frees FFmpeg's objects (without a trailer).
    func close() {
        audioStream = nil
        for q in queuedAudio { q.packet?.letGo() }
        queuedAudio = []
        if packet != nil { av_packet_free(&packet) }
        if let f = format {
            if destination != nil {
                if f.pointee.pb != nil {
                    av_freep(&f.pointee.pb.pointee.buffer)
                    avio_context_free(&f.pointee.pb)
                }
            } else if f.pointee.pb != nil {
                avio_closep(&f.pointee.pb)
            }
            avformat_free_context(f)
            format = nil
        }
        destination?.close()
        if placeholder != nil { avformat_free_context(placeholder); placeholder = nil }
        ring?.free()
        ring = nil
        stream = nil
    }
}
