// `capture record`: the camera into a movie file or over RTSP. Declared here, so that help knows it without its libraries;
// capture-full runs it (CaptureFullTool/RecordEngine.swift).

extension Command {
    package static let record = Command(
        name: "record", summary: "record the camera into an MP4 or Matroska file, or publish it over RTSP",
        usage: """
            usage: capture record [-d|--device PATH|ID|virtual|file:MEDIA] [-a|--audio ID|ALSA-NAME|virtual] [--preset NAME | -s|--size WxH]
                                  [-f|--format FOURCC] [--codec h264|mjpeg] [-q|--quality Q | --bitrate B] [--keyframe-interval N]
                                  [--encoder libx264|h264_v4l2m2m] [--audio-codec aac|opus|pcm] [-t|--seconds S]
                                  [--pre-record S] [--json]
                                  OUTPUT.mp4|OUTPUT.mkv|rtsp://HOST:PORT/PATH
                   (OUTPUT may be given as -o|--output OUTPUT; Ctrl-C or SIGTERM finishes the file; with --pre-record it keeps the last S seconds
                   and records from S seconds back when it gets SIGUSR1)
            """,
        options: Options(
            valued: [
                "device", "audio", "encoder", "preset", "size", "format", "codec", "seconds", "quality", "bitrate",
                "keyframe-interval", "output", "pre-record", "audio-codec",
            ], boolean: ["json"],
            exclusive: [presetOrSize, ["quality", "bitrate"]], takesWords: true),
        run: nil)
}
