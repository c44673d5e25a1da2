// `capture serve`: the camera over HTTP (CaptureServer) until Ctrl-C or SIGTERM, with a status
// line every few seconds.
import Capture
import CaptureCodecs
import CaptureServer
import CaptureServerMP4
import CaptureSystem
import CaptureVision
import CaptureVisionServer
import CaptureWebRTC
import Foundation

extension Command {
    static let serve = Command(
        name: "serve", summary: "serve the camera over HTTP: MJPEG, WebRTC (WHEP), fragmented MP4, snapshots, the camera web app",
        usage: """
            usage: capture serve [--device PATH|ID|virtual|file:MEDIA] [--preset NAME | --size WxH] [--format FOURCC] [--fps N] [--quality 1-100]
                                 [--host ADDR] [--port N] [--user U --password P] [--allow-origin ORIGIN] [--max-clients N]
                                 [--allow-host NAME[,NAME...]] [--audio NAME|ID|virtual] [--time-code] [--metadata qr,ean13,face,...]
                   (MJPEG at /stream and /?action=stream, WebRTC by WHEP at /whep and fragmented MP4 at /stream.mp4
                   (H.264, one encode for both), /snapshot, /state, the camera web app at /;
                   --audio: the microphone's sound with WebRTC (Opus) and in /stream.mp4 (AAC);
                   an unplugged camera is served as offline and taken back when it returns;
                   answers to localhost names, IP literals and this machine's name, --allow-host for others;
                   --time-code: the virtual camera shows each frame's capture time, for measuring latency;
                   --metadata: the codes and faces found, as `capture metadata --types`, as server-sent events at /metadata,
                   outlined over the web app's picture;
                   Ctrl-C or SIGTERM stops it)
            """,
        options: Options(
            valued: [
                "device", "preset", "size", "format", "fps", "quality", "host", "port", "user", "password", "allow-origin", "max-clients",
                "allow-host", "audio", "metadata",
            ], boolean: ["time-code"], exclusive: [presetOrSize]),
        run: serveCommand)
}

/// Serves the camera over HTTP until SIGINT or SIGTERM; prints the URL, then a status line every
/// few seconds.
func serveCommand(_ args: Arguments) throws {
    let quality = try args.int("quality", default: 80, range: 1...100)
    let port = try args.int("port", default: 8080, range: 0...65_535)
    let maxClients = try args.int("max-clients", default: 20, range: 1...10_000)
    let user = args.values["user"], password = args.values["password"]
    guard (user == nil) == (password == nil) else { throw ToolError(message: "--user and --password go together") }
    var config = CaptureStreamServer.Configuration(
        host: args.values["host"] ?? "127.0.0.1", port: port, quality: quality,
        credentials: user.map { CaptureStreamServer.Credentials(user: $0, password: password ?? "") },
        allowedOrigin: args.values["allow-origin"], maxClients: maxClients)
    config.allowedHosts = (args.values["allow-host"] ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
    // Stop on SIGINT/SIGTERM through Dispatch (the default action would skip the clean stop).
    let stopRequested = DispatchSemaphore(value: 0)
    var sources: [DispatchSourceSignal] = []
    for sig in [SIGINT, SIGTERM] {
        ProcessSignals.ignore([sig])
        let source = DispatchSource.makeSignalSource(signal: sig, queue: .global())
        source.setEventHandler { stopRequested.signal() }
        source.resume()
        sources.append(source)
    }
    ProcessSignals.unblock([SIGINT, SIGTERM])
    let device = try chooseCamera(args.values["device"])
    let still = CaptureStillImageOutput()
    still.outputSettings = .init(quality: max(quality, 90))
    // The server keeps answering while the camera is gone and takes it back when it returns
    // (`reattachesCamera`); the tool says when. Watched from before the start: an unplug at any
    // time is reported.
    let gone = CameraGone()
    let microphone = try args.values["audio"].map { try CaptureDeviceInput(device: try chooseMicrophone($0)) }
    let session = try makeSession(device, args, outputs: [still], extraInputs: microphone.map { [$0] } ?? []) { session in
        session.addEventHandler { [weak session] event in
            switch event {
            case .deviceDisconnected(let d):
                gone.set(true)
                say("offline: \(d.localizedName) (\(d.path)) went away; waiting for it to come back")
            case .didStartRunning:
                guard gone.set(false) else { return }
                let d = (session?.inputs.first as? CaptureDeviceInput)?.device
                say("online again: \(d?.localizedName ?? "the camera") (\(d?.path ?? "?")) is back")
            default:
                break
            }
        }
    }
    defer { session.stopRunning() }
    let server = try CaptureStreamServer(session: session, configuration: config)
    // H.264 by WebRTC and as fragmented MP4 beside MJPEG, both from one encode (it runs only
    // while someone watches). Without GStreamer's parts the server goes on without WebRTC.
    var settings = H264Settings()
    var webrtc = false
    do {
        let publisher = try WebRTCPublisher(session: session)
        try server.serveWebRTC(publisher)
        settings = publisher.h264Settings
        webrtc = true
    } catch let e as WebRTCError {
        say("no WebRTC: \(e.message)")
    }
    try server.addFragmentedMP4Stream(settings: settings)
    // Codes and faces as server-sent events, drawn by the web app over its picture.
    let metadata = CaptureMetadataOutput()
    if let list = args.values["metadata"] {
        session.addOutput(metadata)
        try metadata.setMetadataObjectTypes(metadataTypes(list, option: "metadata", available: metadata.availableMetadataObjectTypes))
        try server.serveMetadata(metadata)
    }
    try server.start()
    defer { server.stop() }
    let url = server.url
    say(
        "serving \(device.localizedName) at \(url)  (stream \(url)stream, \(webrtc ? "WebRTC \(url)whep, " : "")H.264 \(url)stream.mp4, \(args.values["metadata"] == nil ? "" : "metadata \(url)metadata, ")snapshot \(url)snapshot, state \(url)state)"
    )
    while stopRequested.wait(timeout: .now() + 5) == .timedOut {
        let s = server.statistics
        let size = s.dimensions.map(\.description) ?? "no frame yet"
        say(
            "\(s.isOnline ? "online" : "offline"), \(size), \(String(format: "%.1f", s.capturedFPS)) fps, \(s.framesReceived) frames, \(s.framesDropped.values.reduce(0, +)) dropped, \(s.clients.count) clients, \(s.clients.map(\.framesSkipped).reduce(0, +)) skipped by clients"
        )
    }
    say("stopping")
    _ = sources
}

/// Whether `capture serve`'s camera went away (set on the session's event queue).
final class CameraGone: @unchecked Sendable {
    private let lock = NSLock()
    private var gone = false
    /// Sets the flag; returns what it was.
    @discardableResult
    func set(_ value: Bool) -> Bool {
        lock.withLock {
            defer { gone = value }; return gone
        }
    }
}
