import Capture
import CaptureCodecs
internal import CFFmpeg
import Foundation

// The H.264 encoder: opened for the camera's frames, fed a frame where it lies (a slot of the
// recorder's) or copied, and drained into the muxer.
extension MovieWriter {
    /// The encoder (H.264) or nothing (JPEG passes through) for frames of `video`.
    func prepareVideo(_ video: VideoFormat, settings: MovieOutputSettings, globalHeader: Bool) throws(RecordingError) {
        videoFormat = video
        fps = AVRational(num: Int32(video.frameInterval.denominator), den: Int32(max(1, video.frameInterval.numerator)))
        if video.pixelFormat == .jpeg {
            encoderName = "passthrough"
        } else if video.pixelFormat == RecordedFrame.h264 {
            // Encoded by the session's shared stage with these settings.
            encoderName = settings.h264Encoder.rawValue
        } else {
            try openEncoder(video, fps: fps, settings: settings, globalHeader: globalHeader)
        }
        if packet == nil { packet = av_packet_alloc() }
        guard packet != nil else { throw RecordingError(.encoderFailed, "out of memory for a packet") }
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

    /// Points `d` at a frame the recorder copied into one of its slots (the planes as `copy`
    /// reads them), with the slot's buffer borrowed; false when `sample` is not such a copy or
    /// does not hold a whole frame.
    func borrow(_ sample: SampleBuffer, into d: UnsafeMutablePointer<AVFrame>) -> Bool {
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
    func unborrow(_ d: UnsafeMutablePointer<AVFrame>) {
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
    func copy(_ sample: SampleBuffer, into frame: UnsafeMutablePointer<AVFrame>) {
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

    func drainEncoder() throws(RecordingError) {
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
}
