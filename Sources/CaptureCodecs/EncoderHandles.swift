internal import CFFmpeg

/// An FFmpeg encoder's context with the one frame and the one packet it is fed and drained
/// through, allocated together and freed together when their owner ends (or when its init
/// throws after making them). What the H.264 and the audio encoders share. Used by its owner's
/// thread alone.
struct EncoderHandles: ~Copyable {
    let context: UnsafeMutablePointer<AVCodecContext>
    let frame: UnsafeMutablePointer<AVFrame>
    let packet: UnsafeMutablePointer<AVPacket>

    /// Nil when FFmpeg is out of memory (nothing is left allocated then).
    init?(codec: UnsafePointer<AVCodec>) {
        var c = avcodec_alloc_context3(codec), f = av_frame_alloc(), p = av_packet_alloc()
        guard let context = c, let frame = f, let packet = p else {
            avcodec_free_context(&c)
            av_frame_free(&f)
            av_packet_free(&p)
            return nil
        }
        self.context = context
        self.frame = frame
        self.packet = packet
    }

    deinit {
        var c: UnsafeMutablePointer<AVCodecContext>? = context, f: UnsafeMutablePointer<AVFrame>? = frame
        var p: UnsafeMutablePointer<AVPacket>? = packet
        avcodec_free_context(&c)
        av_frame_free(&f)
        av_packet_free(&p)
    }

    /// Hands `body` each packet the encoder has ready, unreferencing it after; returns 0 once the
    /// encoder wants more input or has ended, else FFmpeg's error code.
    func receivePackets(_ body: (UnsafeMutablePointer<AVPacket>) -> Void) -> Int32 {
        while true {
            let r = avcodec_receive_packet(context, packet)
            if r == -EAGAIN || r == averrorEOF { return 0 }
            guard r >= 0 else { return r }
            body(packet)
            av_packet_unref(packet)
        }
    }
}
