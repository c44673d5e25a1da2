import Capture
import CaptureBackend
import CaptureImaging
internal import CFFmpeg
import Foundation

/// FFmpeg's H.264 encoder for one stage: opened for the input's size and rate, fed frames copied
/// (or converted) into its one reused picture, drained packet by packet. No B-frames, so units
/// come out in capture order; a forced I frame is an IDR. Used by the stage's thread alone.
final class H264Encoder {
    private let handles: EncoderHandles
    private var context: UnsafeMutablePointer<AVCodecContext> { handles.context }
    private var picture: UnsafeMutablePointer<AVFrame> { handles.frame }
    let dimensions: VideoDimensions
    /// Of the encoder's pictures: `.yuv420` for I420 cameras, `.nv12` for every other format.
    let pixelFormat: PixelFormat
    /// SPS and PPS, Annex B (the encoder's global header).
    let parameterSets: Data
    let name: String
    private let pitch: Int
    private let converter = PixelFormatConverter()

    init(_ settings: H264Settings, dimensions: VideoDimensions, interval: FrameInterval, from source: PixelFormat)
        throws(H264StageError)
    {
        let name = settings.encoder
        let software = name == "libx264"
        guard let codec = avcodec_find_encoder_by_name(name) else {
            throw H264StageError(
                code: .unsupportedCodec, message: "this FFmpeg has no \(name) encoder: install Debian's libavcodec, or record .mjpeg")
        }
        guard let handles = EncoderHandles(codec: codec) else {
            throw H264StageError(code: .encoderFailed, message: "out of memory for the encoder")
        }
        let (enc, pic) = (handles.context, handles.frame)
        self.handles = handles
        self.name = name
        self.dimensions = dimensions
        pixelFormat = source == .yuv420 ? .yuv420 : .nv12
        pitch = (dimensions.width + 63) & ~63
        enc.pointee.width = Int32(dimensions.width)
        enc.pointee.height = Int32(dimensions.height)
        enc.pointee.pix_fmt = pixelFormat == .yuv420 ? AV_PIX_FMT_YUV420P : AV_PIX_FMT_NV12
        // One tick per frame at the nominal rate: the rate control sees the camera's rate.
        let num = Int32(clamping: max(1, interval.numerator)), den = Int32(clamping: max(1, interval.denominator))
        enc.pointee.time_base = AVRational(num: num, den: den)
        enc.pointee.framerate = AVRational(num: den, den: num)
        enc.pointee.gop_size = Int32(settings.keyFrameInterval)
        // No B-frames: units come in capture order, at once (live consumers).
        enc.pointee.max_b_frames = 0
        // SPS/PPS once, in `parameterSets`, not before every key frame: consumers put them where
        // their container wants them.
        enc.pointee.flags |= AV_CODEC_FLAG_GLOBAL_HEADER
        var opts: OpaquePointer?
        defer { av_dict_free(&opts) }
        if software {
            av_dict_set(&opts, "preset", settings.preset, 0)
            av_dict_set(&opts, "tune", "zerolatency", 0)
            // A key frame asked for (a consumer joined) is an IDR, where decoding can start.
            av_dict_set(&opts, "forced-idr", "1", 0)
        }
        switch settings.rateControl {
        case .quality(let q) where software: av_dict_set(&opts, "crf", "\(q)", 0)
        case .quality:
            // A hardware encoder takes a bitrate: about 0.1 bit per pixel at the frame rate.
            enc.pointee.bit_rate = Int64(Double(dimensions.width * dimensions.height) * Double(den) / Double(num) * 0.1)
        case .bitrate(let b):
            enc.pointee.bit_rate = Int64(b)
            enc.pointee.rc_max_rate = Int64(b)
            enc.pointee.rc_buffer_size = Int32(clamping: b)
        }
        let r = avcodec_open2(enc, codec, &opts)
        guard r >= 0 else {
            if !software {
                throw H264StageError(
                    code: .unsupportedCodec,
                    message: "no V4L2 memory-to-memory H.264 encoder could be opened here (\(ffMessage(r))): use the libx264 encoder")
            }
            throw H264StageError(
                code: .encoderFailed, message: "libx264 refused \(dimensions.width)x\(dimensions.height): \(ffMessage(r))")
        }
        if let extra = enc.pointee.extradata, enc.pointee.extradata_size > 0 {
            parameterSets = Data(bytes: extra, count: Int(enc.pointee.extradata_size))
        } else {
            parameterSets = Data()
        }
        pic.pointee.format = enc.pointee.pix_fmt.rawValue
        pic.pointee.width = enc.pointee.width
        pic.pointee.height = enc.pointee.height
    }

    /// The picture's planes in one buffer of ours, the chroma right after the luma (as the
    /// converter writes NV12): allocated once, and again only if the encoder kept the last one.
    private func writablePicture() -> Bool {
        if let b = picture.pointee.buf.0, av_buffer_is_writable(b) != 0 { return true }
        av_buffer_unref(&picture.pointee.buf.0)
        let h = dimensions.height, chromaRows = (h + 1) / 2
        guard let b = av_buffer_alloc(pitch * h + pitch * chromaRows) else { return false }
        picture.pointee.buf.0 = b
        let base = b.pointee.data!
        picture.pointee.data.0 = base
        picture.pointee.linesize.0 = Int32(pitch)
        if pixelFormat == .nv12 {
            picture.pointee.data.1 = base + pitch * h
            picture.pointee.linesize.1 = Int32(pitch)
        } else {
            picture.pointee.data.1 = base + pitch * h
            picture.pointee.data.2 = base + pitch * h + pitch / 2 * chromaRows
            picture.pointee.linesize.1 = Int32(pitch / 2)
            picture.pointee.linesize.2 = Int32(pitch / 2)
        }
        return true
    }

    /// Copies (NV12, I420) or converts (any other format the converter reads) a frame into the
    /// encoder's picture: the frame's one copy.
    func load(_ image: ImageBuffer) throws(CaptureError) {
        guard image.width == dimensions.width, image.height == dimensions.height else {
            throw CaptureError(.corruptFrame, "the frame is \(image.width)x\(image.height), the encoder's \(dimensions)")
        }
        guard writablePicture(), let base = picture.pointee.data.0 else {
            throw CaptureError(.ioError, "out of memory for the encoder's picture")
        }
        let w = image.width, h = image.height, chromaRows = (h + 1) / 2, cw = (w + 1) / 2
        switch (image.pixelFormat, pixelFormat) {
        case (.nv12, .nv12):
            let p0 = image.plane0
            let s0 = p0.bytesPerLine > 0 ? p0.bytesPerLine : w
            try rows(p0, offset: 0, pitch: s0, count: h, width: w, into: base, pitch: pitch)
            if image.planeCount >= 2 {
                let p1 = image.plane1
                try rows(
                    p1, offset: 0, pitch: p1.bytesPerLine > 0 ? p1.bytesPerLine : w, count: chromaRows, width: w, into: base + pitch * h,
                    pitch: pitch)
            } else {
                try rows(p0, offset: s0 * h, pitch: s0, count: chromaRows, width: w, into: base + pitch * h, pitch: pitch)
            }
        case (.yuv420, .yuv420):
            let p0 = image.plane0
            let s0 = p0.bytesPerLine > 0 ? p0.bytesPerLine : w
            let u = base + pitch * h, v = u + pitch / 2 * chromaRows
            try rows(p0, offset: 0, pitch: s0, count: h, width: w, into: base, pitch: pitch)
            if image.planeCount >= 3 {
                let p1 = image.plane1, p2 = image.plane2
                try rows(
                    p1, offset: 0, pitch: p1.bytesPerLine > 0 ? p1.bytesPerLine : cw, count: chromaRows, width: cw, into: u,
                    pitch: pitch / 2)
                try rows(
                    p2, offset: 0, pitch: p2.bytesPerLine > 0 ? p2.bytesPerLine : cw, count: chromaRows, width: cw, into: v,
                    pitch: pitch / 2)
            } else {
                let cs = s0 / 2
                try rows(p0, offset: s0 * h, pitch: cs, count: chromaRows, width: cw, into: u, pitch: pitch / 2)
                try rows(p0, offset: s0 * h + cs * chromaRows, pitch: cs, count: chromaRows, width: cw, into: v, pitch: pitch / 2)
            }
        default:
            let size = pitch * h + pitch * chromaRows
            try converter.convert(image, to: .nv12, into: UnsafeMutableRawBufferPointer(start: base, count: size), bytesPerLine: pitch)
        }
    }

    /// `count` rows of `width` bytes from `plane` (from `offset`, `pitch` apart) into `out`.
    private func rows(
        _ plane: PlaneView, offset: Int, pitch: Int, count: Int, width: Int, into out: UnsafeMutablePointer<UInt8>, pitch outPitch: Int
    ) throws(CaptureError) {
        guard let src = plane.base, count > 0, offset + pitch * (count - 1) + width <= plane.count else {
            throw CaptureError(.corruptFrame, "a plane holds \(plane.count) bytes, fewer than the frame needs")
        }
        for y in 0..<count {
            (out + y * outPitch).update(from: (src + offset + y * pitch).assumingMemoryBound(to: UInt8.self), count: width)
        }
    }

    /// Encodes the loaded picture as frame `index` (a key frame if `key`), then hands each unit
    /// that comes out to `body` with whether it is a key frame and the index of its frame.
    func encode(index: Int64, key: Bool, _ body: (UnsafeRawBufferPointer, Bool, Int64) -> Void) throws(H264StageError) {
        picture.pointee.pts = index
        picture.pointee.pict_type = key ? AV_PICTURE_TYPE_I : AV_PICTURE_TYPE_NONE
        let r = avcodec_send_frame(context, picture)
        guard r >= 0 else { throw H264StageError(code: .encoderFailed, message: "\(name) failed on a frame: \(ffMessage(r))") }
        let g = handles.receivePackets { packet in
            body(
                UnsafeRawBufferPointer(start: packet.pointee.data, count: Int(packet.pointee.size)),
                packet.pointee.flags & AV_PKT_FLAG_KEY != 0, packet.pointee.pts)
        }
        guard g >= 0 else { throw H264StageError(code: .encoderFailed, message: "\(name) failed: \(ffMessage(g))") }
    }
}
