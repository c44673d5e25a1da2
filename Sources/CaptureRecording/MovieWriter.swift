import Capture
internal import CFFmpeg
import Foundation

/// FFmpeg's `AVERROR_EOF` (a macro Swift cannot import): `-MKTAG('E', 'O', 'F', ' ')`.
private let averrorEOF: Int32 = -Int32(bitPattern: 0x2046_4F45)

/// FFmpeg's message for an error code.
private func ffMessage(_ code: Int32) -> String {
    var buf = [CChar](repeating: 0, count: 128)
    if av_strerror(code, &buf, buf.count) < 0 { return "FFmpeg error \(code)" }
    return String(decoding: buf.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

/// The recording error for a failed write (`code` is FFmpeg's, a negative errno for I/O).
private func writeError(_ code: Int32, _ what: String, path: String) -> RecordingError {
    switch -code {
    case ENOSPC, EDQUOT:
        return RecordingError(.diskFull, "the disk is full: \(path) ends at the last complete fragment; free some space")
    case EACCES, EPERM, EROFS:
        return RecordingError(.cannotWriteFile, "cannot write \(path) (\(ffMessage(code))): choose a writable folder")
    case EPIPE where !path.hasPrefix("rtsp://"):
        return RecordingError(.cannotWriteFile, "the program reading \(path) went away: the file ends where it stopped reading")
    case ECONNREFUSED, EHOSTUNREACH, ENETUNREACH, ETIMEDOUT, EPIPE, ECONNRESET:
        return RecordingError(
            .publishingFailed, "cannot publish to \(path): \(ffMessage(code)); is the RTSP server running and listening there?")
    case ENOENT, ENOTDIR:
        return RecordingError(.cannotWriteFile, "cannot create \(path): its folder does not exist")
    case EISDIR:
        return RecordingError(.cannotWriteFile, "cannot create \(path): it is a folder")
    default:
        let kind: RecordingError.Code =
            path.hasPrefix("rtsp://") ? .publishingFailed : (code == averrorEOF ? .encoderFailed : .cannotWriteFile)
        return RecordingError(kind, "\(what) failed for \(path): \(ffMessage(code))")
    }
}

/// FFmpeg's write callback: the bytes to the `Destination` in `opaque`.
private func destinationWrite(_ opaque: UnsafeMutableRawPointer?, _ buf: UnsafeMutablePointer<UInt8>?, _ size: Int32) -> Int32 {
    guard let opaque, let buf else { return -EINVAL }
    let dest = Unmanaged<Destination>.fromOpaque(opaque).takeUnretainedValue()
    let r = dest.write(UnsafeRawBufferPointer(start: buf, count: Int(size)))
    return r < 0 ? r : size
}

/// FFmpeg's seek callback (regular files only).
private func destinationSeek(_ opaque: UnsafeMutableRawPointer?, _ offset: Int64, _ whence: Int32) -> Int64 {
    guard let opaque else { return -Int64(EINVAL) }
    return Unmanaged<Destination>.fromOpaque(opaque).takeUnretainedValue().seek(offset, whence: whence)
}

/// One movie file being written: FFmpeg's muxer (fragmented MP4 or Matroska), one video stream,
/// and for H.264 the libx264 encoder. Timestamps are nanoseconds since the recording's first
/// frame (the capture clock, so dropped frames leave gaps in time).
///
/// Not thread-safe: the movie output's recording queue owns it. Steady state allocates nothing
/// of its own per frame (one reused `AVFrame` and `AVPacket`); FFmpeg and x264 allocate about
/// ten per H.264 frame themselves (`capture-bench record`). Package access for that bench.
package final class MovieWriter {
    /// The stream's shape, known at the first frame.
    package struct VideoFormat {
        var width: Int
        var height: Int
        /// Of the frames given: `.nv12`/`.yuv420` for H.264, `.jpeg` for MJPEG.
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

    package private(set) var path: String
    package private(set) var encoderName = ""
    private var format: UnsafeMutablePointer<AVFormatContext>?
    private var stream: UnsafeMutablePointer<AVStream>?
    private var encoder: UnsafeMutablePointer<AVCodecContext>?
    private var frame: UnsafeMutablePointer<AVFrame>?
    /// The encoder's view of a frame the recorder copied into a slot of `detached`: x264 reads
    /// it there, so that copy is the frame's only one (its buffer is borrowed, never unref'd here).
    private var direct: UnsafeMutablePointer<AVFrame>?
    /// Where the recorder's copies of frames lie (nil: frames are copied into `frame`).
    var detached: DetachedFrames?
    private var packet: UnsafeMutablePointer<AVPacket>?
    private var container: MovieContainer
    private var fragmentMicroseconds: Int64
    private var videoFormat: VideoFormat?
    /// Time bases: the encoder's (and the one asked of the stream), and the one the muxer chose.
    private let inputTimeBase = AVRational(num: 1, den: 90_000)
    private var streamTimeBase = AVRational(num: 1, den: 90_000)
    private var frameDurationInStream: Int64 = 0
    private var lastPTS: Int64 = .min
    private var headerWritten = false
    /// The file (nil for RTSP and before `open`).
    private(set) var destination: Destination?
    /// Makes the next H.264 frame a keyframe (IDR), as after a pause (JPEG frames all are).
    var nextFrameIsKey = false

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

    private static func microseconds(_ d: Duration) -> Int64 {
        let c = d.components
        return max(1000, c.seconds * 1_000_000 + c.attoseconds / 1_000_000_000_000)
    }

    /// Creates the file (or, for RTSP, the context that connects in `begin`/`attach`).
    func open(url: URL, container: MovieContainer, fragmentInterval: Duration) throws(RecordingError) {
        // FFmpeg and x264 report to stderr at `info` by default. Their errors reach the caller
        // as typed errors carrying FFmpeg's message, so the library keeps stderr quiet (an app
        // that chose another level keeps it).
        if av_log_get_level() == AV_LOG_INFO { av_log_set_level(AV_LOG_FATAL) }
        path = container == .rtsp ? url.absoluteString : url.path
        self.container = container
        // A standby writer's frames keep going to the ring (and its placeholder stream) until `attach`.
        if ring != nil, placeholder == nil {
            placeholder = format
            format = nil
        }
        var ctx: UnsafeMutablePointer<AVFormatContext>?
        let r = avformat_alloc_output_context2(&ctx, nil, container.muxer, path)
        guard r >= 0, let ctx else { throw RecordingError(.encoderFailed, "FFmpeg has no \(container.muxer) muxer: \(ffMessage(r))") }
        format = ctx
        // RTSP opens its own connection (in `begin`, once the stream is known).
        guard container != .rtsp else { return }
        // The open goes on in the background when it takes longer than this (a FIFO waiting
        // for its reader): frames then wait in the first write, which a stop can give up.
        let dest = Destination(path: path)
        destination = dest
        if let e = dest.waitForOpen(seconds: 0.1), e != 0 {
            close()
            throw failure(-e, "open")
        }
        let size: Int32 = 32768
        guard let buffer = av_malloc(Int(size)),
            let pb = avio_alloc_context(
                buffer.assumingMemoryBound(to: UInt8.self), size, 1, Unmanaged.passUnretained(dest).toOpaque(), nil,
                destinationWrite, destinationSeek)
        else {
            close()
            throw RecordingError(.encoderFailed, "out of memory for the file's buffer")
        }
        // Seekable only when known to be a regular file (Matroska then writes its index at the end).
        pb.pointee.seekable = dest.isRegularFile ? AVIO_SEEKABLE_NORMAL : 0
        ctx.pointee.pb = pb
        // Every packet reaches the file at once (a killed process keeps all complete fragments).
        ctx.pointee.flags |= AVFMT_FLAG_FLUSH_PACKETS
        ctx.pointee.flush_packets = 1
    }

    deinit { close() }

    /// Pre-record: frames kept while no file is open; nil once attached (or never).
    private var ring: PacketRing?
    /// A standby writer's stand-in muxer context (never written), holding the video stream
    /// frames are written against until `attach`.
    private var placeholder: UnsafeMutablePointer<AVFormatContext>?
    /// Subtracted from video packet times (stream time base): the file starts at the first
    /// kept packet, not at the standby encoder's first frame.
    private var videoOffset: Int64 = 0

    /// Sets up the stream (and encoder) for frames of `video` and writes the header.
    package func begin(_ video: VideoFormat, audio: AudioFormat?, settings: MovieOutputSettings) throws(RecordingError) {
        guard let format else { throw RecordingError(.invalidState, "the file is closed") }
        try prepareVideo(video, settings: settings, globalHeader: (format.pointee.oformat.pointee.flags & AVFMT_GLOBALHEADER) != 0)
        try addVideoStream()
        try writeHeader(audio: audio, settings: settings)
    }

    /// Pre-record: opens the encoder for frames of `video`, whose packets go into the ring.
    func begin(standby video: VideoFormat, settings: MovieOutputSettings) throws(RecordingError) {
        var ctx: UnsafeMutablePointer<AVFormatContext>?
        guard avformat_alloc_output_context2(&ctx, nil, "matroska", nil) >= 0, let ctx else {
            throw RecordingError(.encoderFailed, "FFmpeg has no matroska muxer")
        }
        format = ctx
        // Every container written (MP4, Matroska, RTSP's SDP) takes the H.264 headers out of band.
        try prepareVideo(video, settings: settings, globalHeader: true)
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
    func attach(audio: AudioFormat?, settings: MovieOutputSettings, from start: Int64) throws(RecordingError) -> (
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
        // JPEG packets are timed in the stream's time base, which the muxer chose now.
        if encoder == nil { lastPTS = av_rescale_q(lastPTS, inputTimeBase, streamTimeBase) }
        packetBytes = 0
        for p in kept {
            p.pointee.stream_index = stream!.pointee.index
            av_packet_rescale_ts(p, inputTimeBase, streamTimeBase)
            p.pointee.duration = frameDurationInStream
            packetBytes += Int64(p.pointee.size)
            let w = mux(p)
            guard w >= 0 else { throw failure(w, "writing a pre-recorded frame") }
        }
        return (pts(originTicks, from: inputTimeBase), kept.count)
    }

    private var fps = AVRational(num: 30, den: 1)

    /// The encoder (H.264) or nothing (JPEG passes through) for frames of `video`.
    private func prepareVideo(_ video: VideoFormat, settings: MovieOutputSettings, globalHeader: Bool) throws(RecordingError) {
        videoFormat = video
        fps = AVRational(num: Int32(video.frameInterval.denominator), den: Int32(max(1, video.frameInterval.numerator)))
        if video.pixelFormat == .jpeg {
            encoderName = "passthrough"
        } else {
            try openEncoder(video, fps: fps, settings: settings, globalHeader: globalHeader)
        }
        if packet == nil { packet = av_packet_alloc() }
        guard packet != nil else { throw RecordingError(.encoderFailed, "out of memory for a packet") }
    }

    /// The video stream of `format`, described by the encoder (or as MJPEG).
    private func addVideoStream() throws(RecordingError) {
        guard let format, let video = videoFormat, let st = avformat_new_stream(format, nil) else {
            throw RecordingError(.encoderFailed, "cannot add a video stream")
        }
        stream = st
        if let encoder {
            guard avcodec_parameters_from_context(st.pointee.codecpar, encoder) >= 0 else {
                throw RecordingError(.encoderFailed, "cannot describe the H.264 stream")
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
    private func writeHeader(audio: AudioFormat?, settings: MovieOutputSettings) throws(RecordingError) {
        guard let format, let st = stream, let video = videoFormat else { throw RecordingError(.invalidState, "the file is closed") }
        var opts: OpaquePointer?
        defer { av_dict_free(&opts) }
        if let audio { try openAudioEncoder(audio, codec: settings.audioCodec) }
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

    private func openEncoder(_ video: VideoFormat, fps: AVRational, settings: MovieOutputSettings, globalHeader: Bool)
        throws(RecordingError)
    {
        let name = settings.h264Encoder.rawValue
        let software = settings.h264Encoder == .libx264
        guard let codec = avcodec_find_encoder_by_name(name) else {
            throw RecordingError(.unsupportedCodec, "this FFmpeg has no \(name) encoder: install Debian's libavcodec, or record .mjpeg")
        }
        guard let enc = avcodec_alloc_context3(codec) else { throw RecordingError(.encoderFailed, "out of memory for the encoder") }
        encoder = enc
        encoderName = name
        enc.pointee.width = Int32(video.width)
        enc.pointee.height = Int32(video.height)
        enc.pointee.pix_fmt = video.pixelFormat == .yuv420 ? AV_PIX_FMT_YUV420P : AV_PIX_FMT_NV12
        enc.pointee.time_base = inputTimeBase
        enc.pointee.framerate = fps
        let perInterval = Int(Double(fps.num) / Double(fps.den) * Double(fragmentMicroseconds) / 1e6)
        enc.pointee.gop_size = Int32(settings.keyframeInterval ?? max(1, perInterval))
        // No B-frames: packets come in presentation order, at once (a live recording).
        enc.pointee.max_b_frames = 0
        if globalHeader { enc.pointee.flags |= AV_CODEC_FLAG_GLOBAL_HEADER }
        var opts: OpaquePointer?
        defer { av_dict_free(&opts) }
        if software {
            av_dict_set(&opts, "preset", settings.preset, 0)
            av_dict_set(&opts, "tune", "zerolatency", 0)
        }
        switch settings.rateControl {
        case .quality(let q) where software: av_dict_set(&opts, "crf", "\(q)", 0)
        case .quality:
            // A hardware encoder takes a bitrate: about 0.1 bit per pixel at the frame rate.
            enc.pointee.bit_rate = Int64(Double(video.width * video.height) * Double(fps.num) / Double(max(1, fps.den)) * 0.1)
        case .bitrate(let b):
            enc.pointee.bit_rate = Int64(b)
            enc.pointee.rc_max_rate = Int64(b)
            enc.pointee.rc_buffer_size = Int32(clamping: b)
        }
        let r = avcodec_open2(enc, codec, &opts)
        guard r >= 0 else {
            if !software {
                throw RecordingError(
                    .unsupportedCodec,
                    "no V4L2 memory-to-memory H.264 encoder could be opened here (\(ffMessage(r))): use the libx264 encoder")
            }
            throw RecordingError(.encoderFailed, "libx264 refused \(video.width)x\(video.height): \(ffMessage(r))")
        }
        guard let f = av_frame_alloc() else { throw RecordingError(.encoderFailed, "out of memory for a frame") }
        frame = f
        f.pointee.format = enc.pointee.pix_fmt.rawValue
        f.pointee.width = enc.pointee.width
        f.pointee.height = enc.pointee.height
        guard av_frame_get_buffer(f, 0) >= 0 else { throw RecordingError(.encoderFailed, "out of memory for a frame") }
        guard let d = av_frame_alloc() else { throw RecordingError(.encoderFailed, "out of memory for a frame") }
        direct = d
        d.pointee.format = f.pointee.format
        d.pointee.width = f.pointee.width
        d.pointee.height = f.pointee.height
    }

    /// The error for a failed write: the destination's own reason when it gave up, else errno's.
    private func failure(_ code: Int32, _ what: String) -> RecordingError {
        destination?.failure ?? writeError(code, what, path: path)
    }

    /// Packet bytes handed to the muxer (RTSP has no file to measure).
    private var packetBytes: Int64 = 0

    /// Bytes in the file so far (the muxer's buffered fragment not counted); for RTSP, the
    /// stream's bytes sent.
    package var fileSize: Int64 {
        guard container != .rtsp else { return packetBytes }
        guard let pb = format?.pointee.pb else { return 0 }
        return max(0, avio_tell(pb))
    }

    /// The presentation time of a frame `nanoseconds` after the first, in the stream's time base.
    private func pts(_ nanoseconds: Int64, in tb: AVRational) -> Int64 {
        av_rescale_q(nanoseconds, AVRational(num: 1, den: 1_000_000_000), tb)
    }

    /// Writes one frame, `nanoseconds` after the first. The sample is read here and not kept.
    package func write(_ sample: SampleBuffer, at nanoseconds: Int64) throws(RecordingError) {
        guard format != nil, let packet, let stream else { throw RecordingError(.invalidState, "the file is closed") }
        if let encoder, let frame {
            var p = pts(nanoseconds, in: encoder.pointee.time_base)
            if p <= lastPTS { p = lastPTS + 1 }
            lastPTS = p
            // (x264 makes a forced I frame an IDR, GOPs being closed.)
            let type = nextFrameIsKey ? AV_PICTURE_TYPE_I : AV_PICTURE_TYPE_NONE
            nextFrameIsKey = false
            let r: Int32
            if let d = direct, borrow(sample, into: d) {
                // The recorder's copy, read where it lies.
                d.pointee.pts = p
                d.pointee.pict_type = type
                r = avcodec_send_frame(encoder, d)
                unborrow(d)
            } else {
                guard av_frame_make_writable(frame) >= 0 else { throw RecordingError(.encoderFailed, "out of memory for a frame") }
                copy(sample, into: frame)
                frame.pointee.pts = p
                frame.pointee.pict_type = type
                r = avcodec_send_frame(encoder, frame)
            }
            guard r >= 0 else { throw RecordingError(.encoderFailed, "libx264 failed on a frame: \(ffMessage(r))") }
            try drainEncoder()
        } else {
            var p = pts(nanoseconds, in: streamTimeBase)
            if p <= lastPTS { p = lastPTS + 1 }
            lastPTS = p
            // The JPEG is written from the sample's bytes (no copy of ours; the muxer buffers it).
            let r: Int32 = sample.withUnsafeBytes { bytes in
                packet.pointee.data = UnsafeMutablePointer(mutating: bytes.baseAddress?.assumingMemoryBound(to: UInt8.self))
                packet.pointee.size = Int32(bytes.count)
                packet.pointee.pts = p
                packet.pointee.dts = p
                packet.pointee.duration = frameDurationInStream
                packet.pointee.flags = AV_PKT_FLAG_KEY
                packet.pointee.stream_index = stream.pointee.index
                defer {
                    packet.pointee.data = nil
                    packet.pointee.size = 0
                }
                return mux(packet)
            }
            guard r >= 0 else { throw failure(r, "writing a frame") }
        }
    }

    /// Points `d` at a frame the recorder copied into one of its slots (the planes as `copy`
    /// reads them), with the slot's buffer borrowed; false when `sample` is not such a copy or
    /// does not hold a whole frame.
    private func borrow(_ sample: SampleBuffer, into d: UnsafeMutablePointer<AVFrame>) -> Bool {
        guard let detached, let v = videoFormat, sample.pixelFormat == v.pixelFormat,
            sample.dimensions == VideoDimensions(width: v.width, height: v.height)
        else { return false }
        let h = v.height, w = v.width, chromaRows = (h + 1) / 2, cw = (w + 1) / 2
        func pitch(_ plane: Int, natural: Int) -> Int {
            let p = sample.bytesPerRow(plane: plane)
            return p > 0 ? p : natural
        }
        func start(_ plane: Int) -> (UnsafeRawPointer, Int)? {
            sample.withUnsafeBytes(plane: plane) { b in b.baseAddress.map { ($0, b.count) } }
        }
        guard let (base0, count0) = start(0), let buffer = detached.buffer(containing: base0) else { return false }
        let stride0 = pitch(0, natural: w)
        // (start, pitch) of the chroma planes, as `copy` reads them.
        let p1: (UnsafeRawPointer, Int), p2: (UnsafeRawPointer, Int)?
        var ok = count0 >= stride0 * (h - 1) + w
        if v.pixelFormat == .nv12 {
            if sample.planeCount >= 2 {
                guard let (b1, c1) = start(1) else { return false }
                let s1 = pitch(1, natural: w)
                p1 = (b1, s1)
                p2 = nil
                ok = ok && c1 >= s1 * (chromaRows - 1) + w
            } else {
                p1 = (base0 + stride0 * h, stride0)
                p2 = nil
                ok = ok && count0 >= stride0 * h + stride0 * (chromaRows - 1) + w
            }
        } else {
            if sample.planeCount >= 3 {
                guard let (b1, c1) = start(1), let (b2, c2) = start(2) else { return false }
                let s1 = pitch(1, natural: cw), s2 = pitch(2, natural: cw)
                p1 = (b1, s1)
                p2 = (b2, s2)
                ok = ok && c1 >= s1 * (chromaRows - 1) + cw && c2 >= s2 * (chromaRows - 1) + cw
            } else {
                let cs = stride0 / 2
                p1 = (base0 + stride0 * h, cs)
                p2 = (base0 + stride0 * h + cs * chromaRows, cs)
                ok = ok && count0 >= stride0 * h + cs * chromaRows + cs * (chromaRows - 1) + cw
            }
        }
        // Every plane in the one slot.
        guard ok, detached.buffer(containing: p1.0) == buffer, p2.map({ detached.buffer(containing: $0.0) == buffer }) ?? true else {
            return false
        }
        let raw = UnsafeMutableRawPointer(d)
        let data = (raw + MemoryLayout<AVFrame>.offset(of: \AVFrame.data)!).assumingMemoryBound(to: UnsafeMutablePointer<UInt8>?.self)
        let lines = (raw + MemoryLayout<AVFrame>.offset(of: \AVFrame.linesize)!).assumingMemoryBound(to: Int32.self)
        let bufs = (raw + MemoryLayout<AVFrame>.offset(of: \AVFrame.buf)!).assumingMemoryBound(to: UnsafeMutablePointer<AVBufferRef>?.self)
        func set(_ i: Int, _ plane: (UnsafeRawPointer, Int)?) {
            data[i] = plane.map { UnsafeMutablePointer(mutating: $0.0.assumingMemoryBound(to: UInt8.self)) }
            lines[i] = Int32(plane?.1 ?? 0)
        }
        set(0, (base0, stride0))
        set(1, p1)
        set(2, p2)
        bufs[0] = buffer
        return true
    }

    /// Takes back what `borrow` lent `d` (the encoder took references of its own).
    private func unborrow(_ d: UnsafeMutablePointer<AVFrame>) {
        let raw = UnsafeMutableRawPointer(d)
        let data = (raw + MemoryLayout<AVFrame>.offset(of: \AVFrame.data)!).assumingMemoryBound(to: UnsafeMutablePointer<UInt8>?.self)
        let lines = (raw + MemoryLayout<AVFrame>.offset(of: \AVFrame.linesize)!).assumingMemoryBound(to: Int32.self)
        let bufs = (raw + MemoryLayout<AVFrame>.offset(of: \AVFrame.buf)!).assumingMemoryBound(to: UnsafeMutablePointer<AVBufferRef>?.self)
        for i in 0..<3 {
            data[i] = nil
            lines[i] = 0
        }
        bufs[0] = nil
    }

    /// Copies an NV12 or I420 frame (one buffer or one per plane) into the encoder's frame.
    private func copy(_ sample: SampleBuffer, into frame: UnsafeMutablePointer<AVFrame>) {
        guard let v = videoFormat else { return }
        let h = v.height, w = v.width, chromaRows = (h + 1) / 2
        // A pitch of 0 (a source that does not report one) means rows without padding.
        func pitch(_ plane: Int, natural: Int) -> Int {
            let p = sample.bytesPerRow(plane: plane)
            return p > 0 ? p : natural
        }
        let stride0 = pitch(0, natural: w)
        // The frame's `data` and `linesize` arrays (C arrays, tuples in Swift), by their offsets.
        let raw = UnsafeMutableRawPointer(frame)
        let data = (raw + MemoryLayout<AVFrame>.offset(of: \AVFrame.data)!).assumingMemoryBound(to: UnsafeMutablePointer<UInt8>?.self)
        let lines = (raw + MemoryLayout<AVFrame>.offset(of: \AVFrame.linesize)!).assumingMemoryBound(to: Int32.self)
        // Rows of `rowBytes` from `source` plane at `offset` (stride `srcStride`) into `plane`.
        func rows(_ plane: Int, from source: Int, offset: Int, count: Int, rowBytes: Int, srcStride: Int) {
            guard let d = data[plane] else { return }
            let dstStride = Int(lines[plane])
            sample.withUnsafeBytes(plane: source) { bytes in
                guard let base = bytes.baseAddress else { return }
                for y in 0..<count {
                    let at = offset + y * srcStride
                    guard at + rowBytes <= bytes.count else { return }
                    (d + y * dstStride).update(from: (base + at).assumingMemoryBound(to: UInt8.self), count: rowBytes)
                }
            }
        }
        rows(0, from: 0, offset: 0, count: h, rowBytes: w, srcStride: stride0)
        if v.pixelFormat == .nv12 {
            // One buffer (V4L2 NV12: the interleaved chroma follows the luma) or two planes.
            if sample.planeCount >= 2 {
                rows(1, from: 1, offset: 0, count: chromaRows, rowBytes: w, srcStride: pitch(1, natural: w))
            } else {
                rows(1, from: 0, offset: stride0 * h, count: chromaRows, rowBytes: w, srcStride: stride0)
            }
        } else {
            let cw = (w + 1) / 2
            if sample.planeCount >= 3 {
                rows(1, from: 1, offset: 0, count: chromaRows, rowBytes: cw, srcStride: pitch(1, natural: cw))
                rows(2, from: 2, offset: 0, count: chromaRows, rowBytes: cw, srcStride: pitch(2, natural: cw))
            } else {
                let cs = stride0 / 2
                rows(1, from: 0, offset: stride0 * h, count: chromaRows, rowBytes: cw, srcStride: cs)
                rows(2, from: 0, offset: stride0 * h + cs * chromaRows, count: chromaRows, rowBytes: cw, srcStride: cs)
            }
        }
    }

    private func drainEncoder() throws(RecordingError) {
        guard let encoder, let packet, let stream else { return }
        while true {
            let r = avcodec_receive_packet(encoder, packet)
            if r == -EAGAIN || r == averrorEOF { return }
            guard r >= 0 else { throw RecordingError(.encoderFailed, "libx264 failed: \(ffMessage(r))") }
            packet.pointee.stream_index = stream.pointee.index
            av_packet_rescale_ts(packet, encoder.pointee.time_base, streamTimeBase)
            packet.pointee.duration = frameDurationInStream
            packetBytes += Int64(packet.pointee.size)
            let w = mux(packet)
            av_packet_unref(packet)
            guard w >= 0 else { throw failure(w, "writing a frame") }
        }
    }

    /// A packet to the muxer: in order of time across the streams when there is audio (the
    /// muxer then holds packets until every stream has reached their time), else at once.
    private func mux(_ packet: UnsafeMutablePointer<AVPacket>) -> Int32 {
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

    // MARK: Audio: AAC (FFmpeg's native encoder), Opus or PCM from the session's microphone

    private var audioEncoder: UnsafeMutablePointer<AVCodecContext>?
    private var audioStream: UnsafeMutablePointer<AVStream>?
    private var audioFrame: UnsafeMutablePointer<AVFrame>?
    private var audioRate: Int64 = 48_000
    private var audioChannels = 0
    private var audioSampleFormat = AV_SAMPLE_FMT_FLTP
    /// Samples waiting for a full encoder frame, per channel, and the time (in samples since
    /// the first video frame) of their first.
    private var pending: [[Float]] = []
    private var pendingStart: Int64 = 0
    private var audioStarted = false
    /// Samples handed to the encoder (silence for gaps included).
    private(set) var audioSamples: Int64 = 0
    var hasAudio: Bool { audioStream != nil }
    /// `audioSamples` as nanoseconds.
    var audioSamplesNanoseconds: Int64 { audioSamples * 1_000_000_000 / max(1, audioRate) }

    /// The audio encoder's name (`aac`, `libopus`, `opus`, `pcm_s16le`).
    private var audioEncoderName = "aac"

    private func openAudioEncoder(_ audio: AudioFormat, codec audioCodec: AudioCodec) throws(RecordingError) {
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

    /// Encodes the full encoder frames waiting (and, when `final`, the rest as a short last one).
    private func encodeAudio(final: Bool) throws(RecordingError) {
        guard let enc = audioEncoder, let frame = audioFrame else { return }
        let size = Int(enc.pointee.frame_size)
        while pending[0].count >= size || (final && !pending[0].isEmpty) {
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
    private func finishAudio(videoEnd: Int64) throws(RecordingError) {
        guard let enc = audioEncoder else { return }
        let end = av_rescale_q(videoEnd, AVRational(num: 1, den: 1_000_000_000), AVRational(num: 1, den: Int32(audioRate)))
        if audioStarted {
            let have = pendingStart + Int64(pending[0].count)
            if have > end {
                let keep = Int(max(0, end - pendingStart))
                for c in pending.indices { pending[c].removeLast(pending[c].count - min(keep, pending[c].count)) }
            } else if end - have <= audioRate / 10 {
                for c in pending.indices { pending[c].append(contentsOf: repeatElement(0, count: Int(end - have))) }
            }
            try encodeAudio(final: true)
        }
        if avcodec_send_frame(enc, nil) >= 0 { try drainAudio() }
    }

    /// Flushes the encoder, writes the trailer (the last fragment) and closes the file. Safe to
    /// call more than once; after a failure it still closes the file.
    package func finish(videoEnd: Int64 = 0) throws(RecordingError) {
        defer { close() }
        guard let format, headerWritten else { return }
        var failure: RecordingError?
        if let encoder {
            if avcodec_send_frame(encoder, nil) >= 0 {
                do { try drainEncoder() } catch { failure = error }
            }
        }
        if audioEncoder != nil {
            do { try finishAudio(videoEnd: videoEnd) } catch { if failure == nil { failure = error } }
        }
        let t = av_write_trailer(format)
        headerWritten = false
        if failure == nil, t < 0 { failure = self.failure(t, "finishing") }
        if let failure { throw failure }
        if container == .mp4 { writeDurations(videoEnd: videoEnd) }
    }

    /// A cleanly finished MP4: its durations into the moov (see `MP4Durations`). A file that
    /// is not a regular one (a pipe) keeps them 0; the fragments say it all the same.
    private func writeDurations(videoEnd: Int64) {
        guard let destination, destination.isRegularFile, videoEnd > 0 else { return }
        let audioSeconds = audioStarted ? Double(pendingStart) / Double(max(1, audioRate)) : nil
        let videoSeconds = Double(videoEnd) / 1e9
        // The moov is the file's second box, a few kB (more with audio's codec setup).
        let count = Int(min(fileSize, 1 << 16))
        guard let head = destination.read(count: count, at: 0),
            let patches = MP4Durations.patches(
                head: head, seconds: { handler in handler == "vide" ? videoSeconds : handler == "soun" ? audioSeconds : nil })
        else { return }
        for p in patches { _ = destination.write(p.bytes, at: Int64(p.offset)) }
    }

    /// Closes the file and frees FFmpeg's objects (without a trailer).
    func close() {
        if encoder != nil { avcodec_free_context(&encoder) }
        if audioEncoder != nil { avcodec_free_context(&audioEncoder) }
        if audioFrame != nil { av_frame_free(&audioFrame) }
        audioStream = nil
        if frame != nil { av_frame_free(&frame) }
        if direct != nil { av_frame_free(&direct) }
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

/// Pre-record's packets: the newest `window` (90 kHz ticks) and back to the keyframe before it,
/// so that what is kept can start a file. H.264 packets are kept by reference (no copy); JPEG
/// packets, which point into the camera's buffer, are copied into slots reused as the window
/// moves, so steady state allocates nothing here.
private final class PacketRing {
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
