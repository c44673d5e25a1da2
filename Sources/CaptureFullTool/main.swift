// capture-full: every `capture` command, with the products' libraries (FFmpeg, SDL2,
// libmicrohttpd, GStreamer, OpenCV, zxing). `capture` hands it the commands that need them; run
// alone, it is the whole tool.
import CaptureToolCore

/// The commands `capture` declares without their work, and the work, from the *Engine.swift files.
let engines: [String: @MainActor @Sendable (Arguments) throws -> Void] = [
    "record": recordCommand, "preview": previewCommand, "serve": serveCommand, "metadata": metadataCommand,
]
fileCamera = { try pictureCamera(path: $0) }
productErrorText = productErrorMessage
toolMain(
    CommandLine.arguments,
    commands: Command.all.map { command in
        var command = command
        command.run = command.run ?? engines[command.name]
        return command
    }, handsOver: false)
