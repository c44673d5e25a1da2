// `capture serve`: the camera over HTTP (CaptureServer) until Ctrl-C or SIGTERM, with a status
// line every few seconds.
import Capture
import CaptureCodecs
import CaptureRTSP
import CaptureServer
import CaptureServerMP4
import CaptureSystem
import CaptureToolCore
import CaptureVision
import CaptureVisionServer
import CaptureWebRTC
import Foundation

/// Serves the camera over HTTP until SIGINT or SIGTERM; prints the URL, then a status line every
/// few seconds.
func serveCommand(_ args: Arguments) throws {
    let quality = try args.int("quality", default: 80, range: 1...100)
    let port = try args.int("port", default: 8080, range: 0...65_535)
    let maxClients = try args.int("max-clients", default: 20, range: 1...10_000)
    let maxViewers = try args.int("max-viewers", default: 16, range: 1...1_000)
    let rtspPort = try args.int("rtsp-port", default: 8554, range: 0...65_535)
    if args.values["rtsp-port"] != nil, !args.flags.contains("rtsp") { throw UsageError("--rtsp-port needs --rtsp") }
    let credentials = try serveCredentials(args, environment: ProcessInfo.processInfo.environment)
    var config = CaptureStreamServer.Configuration(
        host: args.values["host"] ?? "127.0.0.1", port: port, quality: quality, credentials: credentials,
        allowedOrigin: args.values["allow-origin"], maxClients: maxClients)
    config.allowedHosts = (args.values["allow-host"] ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
    config.accessToken = try serveAccessToken(args)
    // RTSP knows no token links: with a token alone it would serve everyone.
    if args.flags.contains("rtsp"), config.accessToken != nil, credentials == nil {
        throw UsageError("--rtsp with --token-file needs --user too: RTSP clients log in with the user and password, not the token")
    }
    config.tls = try serveTLS(args)
    // Stop on SIGINT/SIGTERM through Dispatch (the default action would skip the clean stop).
    let stopRequested = DispatchSemaphore(value: 0)
    var sources: [DispatchSourceSignal] = []
    // Held first: one already pending comes when they are unblocked.
    ProcessSignals.holdForDispatch([SIGINT, SIGTERM])
    ProcessSignals.unblock([SIGINT, SIGTERM])
    for sig in [SIGINT, SIGTERM] {
        let source = DispatchSource.makeSignalSource(signal: sig, queue: .global())
        source.setEventHandler { stopRequested.signal() }
        source.resume()
        sources.append(source)
    }
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
        let publisher = try WebRTCPublisher(session: session, configuration: .init(maxViewers: maxViewers))
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
    // RTSP from the same encode as WebRTC's (its defaults are the publisher's), with the same
    // credentials and host names.
    var rtsp: RTSPServer?
    if args.flags.contains("rtsp") {
        rtsp = try RTSPServer(
            session: session,
            configuration: .init(
                host: config.host, port: rtspPort, credentials: credentials.map { .init(user: $0.user, password: $0.password) },
                allowedHosts: config.allowedHosts))
    }
    defer { rtsp?.stop() }
    // (Its clients in /state, under result.routes.rtsp.)
    if let rtsp { try server.add(RTSPStateRoutes(rtsp)) }
    try server.start()
    defer { server.stop() }
    let url = server.url
    say(
        "serving \(device.localizedName) at \(url)  (stream \(url)stream, \(webrtc ? "WebRTC \(url)whep, " : "")H.264 \(url)stream.mp4, \(args.values["metadata"] == nil ? "" : "metadata \(url)metadata, ")snapshot \(url)snapshot, state \(url)state\(rtsp.map { ", RTSP \($0.url)" } ?? ""))"
    )
    while stopRequested.wait(timeout: .now() + 5) == .timedOut {
        let s = server.statistics
        let size = s.dimensions.map(\.description) ?? "no frame yet"
        say(
            "\(s.isOnline ? "online" : "offline"), \(size), \(String(format: "%.1f", s.capturedFPS)) fps, \(s.framesReceived) frames, \(s.framesDropped.values.reduce(0, +)) dropped, \(s.clients.count) clients, \(s.clients.map(\.framesSkipped).reduce(0, +)) skipped by clients\(rtsp.map { ", \($0.clientCount) RTSP clients" } ?? "")"
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
