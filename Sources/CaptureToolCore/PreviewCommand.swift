// `capture preview`: the camera in a window. Declared here, so that help knows it without its libraries;
// capture-full runs it (CaptureFullTool/PreviewEngine.swift).

extension Command {
    package static let preview = Command(
        name: "preview", summary: "show the camera in a window",
        usage: """
            usage: capture preview [-d|--device PATH|ID|virtual|file:MEDIA] [--preset NAME | -s|--size WxH] [-f|--format FOURCC]
                                   [--window WxH] [--gravity resizeAspect|resizeAspectFill|resize] [--fullscreen] [--mirror]
                                   [--metadata qr,ean13,face,...]
                   (--metadata outlines the codes (green) and faces (yellow) found, as `capture metadata --types`; keys: space takes a still into the album, t toggles cameras, i shows fps, drops and format,
                   q or Esc quits)
            """,
        options: Options(
            valued: ["device", "preset", "size", "format", "window", "gravity", "metadata"], boolean: ["fullscreen", "mirror"],
            exclusive: [presetOrSize]),
        run: nil)
}
