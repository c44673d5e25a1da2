internal import CFFmpeg
import Capture
import CaptureSystem
import Foundation

/// Plays a video file on a virtual camera, in a loop at the file's own rate: each decoded frame
/// becomes the camera's ``VirtualCamera/picture`` (scaled to the mode the camera streams, as a
/// still picture is). FFmpeg decodes it (any format and codec Debian's libavformat and libavcodec
/// read whose frames are 8-bit 4:2:0 or 4:4:4 YUV); the core `Capture` needs no FFmpeg.
///
/// A frame change makes the camera draw its picture anew, so playback suits tests and demos
/// (a barcode scanner shown a clip), not a frame-exact feed. Thread-safe; the decoding runs on
/// its own thread from `init` until `stop()` or the player's release (keep the player while the
/// camera should play).
public final class VirtualMoviePlayer: @unchecked Sendable {
    private let stopping = Locked(false)
    private let finished = DispatchSemaphore(value: 0)
    /// The file's frame rate (frames per second) as its video stream gives it.
    public let frameRate: Double
    /// The video's size in pixels.
    public let width: Int
    public let height: Int

    /// Opens `path` and starts showing its frames on `camera`. Throws `.invalidArgument` for a file
    /// FFmpeg cannot open, with no video stream or a decoder it lacks, `.unsupportedFormat` for
    /// frames of a pixel format it does not convert.
    public init(path: String, camera: VirtualCamera) throws(CaptureError) {
        let file = try MovieFile(path: path)
        frameRate = file.frameRate
        width = file.width
        height = file.height
        // The first frame at once, so the camera shows the movie from its first frame on.
        guard let first = try file.nextPicture() else {
            throw CaptureError(.invalidArgument, "'\(path)' has no video frame to show")
        }
        camera.picture = first
        let period = 1 / max(1, min(240, frameRate))
        // The thread holds the stop flag, not the player, so that releasing the player stops it.
        NamedThread.start("cap movie") { [stopping, finished, file] in
            var next = Date().addingTimeInterval(period)
            while !stopping.withLock({ $0 }) {
                guard let picture = try? file.nextPicture() else { break }
                Thread.sleep(until: next)
                camera.picture = picture
                next = max(next.addingTimeInterval(period), Date())
            }
            finished.signal()
        }
    }

    deinit { stop() }

    /// Stops playing (the camera keeps the last frame as its picture); returns once the
    /// decoding thread has ended. Any thread but the player's own; calling it again does nothing.
    public func stop() {
        let first = stopping.withLock { s -> Bool in
            defer { s = true }
            return !s
        }
        if first { finished.wait() }
    }
}

/// One open movie: its demuxer, video decoder and the frame being decoded. Used by one thread at
/// a time (the opener, then the player's thread).
private final class MovieFile: @unchecked Sendable {
    private var format: UnsafeMutablePointer<AVFormatContext>?
    private var codec: UnsafeMutablePointer<AVCodecContext>?
    private var frame: UnsafeMutablePointer<AVFrame>?
    private var packet: UnsafeMutablePointer<AVPacket>?
    private var stream: Int32 = -1
    private(set) var frameRate: Double = 25
    private(set) var width = 0
    private(set) var height = 0
    private let path: String

    /// Every property is set before the first call that can fail: a throw runs `deinit`, which
    /// frees what was made.
    init(path: String) throws(CaptureError) {
        self.path = path
        frame = av_frame_alloc()
        packet = av_packet_alloc()
        guard frame != nil, packet != nil else {
            throw CaptureError(.invalidArgument, "FFmpeg could not allocate a frame (out of memory?)")
        }
        var rc = avformat_open_input(&format, path, nil, nil)
        guard rc >= 0, let ctx = format else {
            throw CaptureError(.invalidArgument, "FFmpeg cannot open '\(path)': \(ffMessage(rc))")
        }
        _ = avformat_find_stream_info(ctx, nil)
        stream = av_find_best_stream(ctx, AVMEDIA_TYPE_VIDEO, -1, -1, nil, 0)
        guard stream >= 0, let st = ctx.pointee.streams[Int(stream)]?.pointee,
            let decoder = avcodec_find_decoder(st.codecpar.pointee.codec_id)
        else {
            throw CaptureError(.invalidArgument, "'\(path)' has no video stream FFmpeg can decode")
        }
        codec = avcodec_alloc_context3(decoder)
        guard let c = codec else { throw CaptureError(.invalidArgument, "FFmpeg could not make a decoder (out of memory?)") }
        avcodec_parameters_to_context(c, st.codecpar)
        rc = avcodec_open2(c, decoder, nil)
        guard rc >= 0 else { throw CaptureError(.invalidArgument, "FFmpeg cannot open the decoder of '\(path)': \(ffMessage(rc))") }
        if st.avg_frame_rate.den > 0, st.avg_frame_rate.num > 0 {
            frameRate = Double(st.avg_frame_rate.num) / Double(st.avg_frame_rate.den)
        }
        width = Int(c.pointee.width)
        height = Int(c.pointee.height)
    }

    deinit {
        av_frame_free(&frame)
        av_packet_free(&packet)
        avcodec_free_context(&codec)
        avformat_close_input(&format)
    }

    /// The next frame as a picture, from the start again after the last; nil when the file has
    /// none at all or cannot be read.
    func nextPicture() throws(CaptureError) -> VirtualCamera.Picture? {
        guard let format, let codec, let frame, let packet else { return nil }
        var rewound = false
        while true {
            let got = avcodec_receive_frame(codec, frame)
            if got == 0 { return try picture(frame.pointee) }
            if got == averrorEOF {
                // End of the file: from the start again (once per call, so an empty file ends).
                guard !rewound else { return nil }
                rewound = true
                av_seek_frame(format, stream, 0, AVSEEK_FLAG_BACKWARD)
                avcodec_flush_buffers(codec)
                continue
            }
            let rc = av_read_frame(format, packet)
            if rc < 0 {
                avcodec_send_packet(codec, nil)  // drain, then EOF
                continue
            }
            if packet.pointee.stream_index == stream { avcodec_send_packet(codec, packet) }
            av_packet_unref(packet)
        }
    }

    /// The decoded frame as RGB (Rec. 601, limited range unless the frame says full).
    private func picture(_ f: AVFrame) throws(CaptureError) -> VirtualCamera.Picture {
        let w = Int(f.width), h = Int(f.height)
        let fmt = AVPixelFormat(rawValue: f.format)
        let (sx, sy): (Int, Int)
        switch fmt {
        case AV_PIX_FMT_YUV420P, AV_PIX_FMT_YUVJ420P: (sx, sy) = (1, 1)
        case AV_PIX_FMT_YUV422P, AV_PIX_FMT_YUVJ422P: (sx, sy) = (1, 0)
        case AV_PIX_FMT_YUV444P, AV_PIX_FMT_YUVJ444P: (sx, sy) = (0, 0)
        default:
            throw CaptureError(
                .unsupportedFormat, "'\(path)' decodes to FFmpeg pixel format \(f.format), not 8-bit planar YUV (4:2:0, 4:2:2 or 4:4:4)")
        }
        let full =
            fmt == AV_PIX_FMT_YUVJ420P || fmt == AV_PIX_FMT_YUVJ422P || fmt == AV_PIX_FMT_YUVJ444P || f.color_range == AVCOL_RANGE_JPEG
        var rgb = [UInt8](repeating: 0, count: w * h * 3)
        let (yp, up, vp) = (f.data.0!, f.data.1!, f.data.2!)
        let (ys, us, vs) = (Int(f.linesize.0), Int(f.linesize.1), Int(f.linesize.2))
        for y in 0..<h {
            for x in 0..<w {
                var l = Double(yp[y * ys + x]), cb = Double(up[(y >> sy) * us + (x >> sx)]) - 128
                var cr = Double(vp[(y >> sy) * vs + (x >> sx)]) - 128
                if !full {
                    l = (l - 16) * 255 / 219
                    cb *= 255 / 224
                    cr *= 255 / 224
                }
                let i = (y * w + x) * 3
                rgb[i] = UInt8(max(0, min(255, (l + 1.402 * cr).rounded())))
                rgb[i + 1] = UInt8(max(0, min(255, (l - 0.344136 * cb - 0.714136 * cr).rounded())))
                rgb[i + 2] = UInt8(max(0, min(255, (l + 1.772 * cb).rounded())))
            }
        }
        return try VirtualCamera.Picture(rgb: rgb, width: w, height: h)
    }
}
