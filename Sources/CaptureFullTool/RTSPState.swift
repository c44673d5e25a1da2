// `capture serve --rtsp`: the RTSP server's clients in the HTTP server's `/state`.
import CaptureRTSP
import CaptureServer

/// Routes with no path that only add `result.routes.rtsp` to `/state`: the RTSP URL, its clients
/// now, those dropped for not reading, and whether the microphone is served. Thread-safe (the RTSP server's properties are).
final class RTSPStateRoutes: ServerRoutes {
    let server: RTSPServer
    init(_ server: RTSPServer) { self.server = server }
    var routes: [ServerRoute] { [] }
    func respond(to request: RouteRequest, with responder: RouteResponder) {}
    func state() -> (name: String, value: [String: Any])? {
        ("rtsp", ["url": server.url, "clients": server.clientCount, "clients_dropped": server.clientsDropped, "audio": server.sendsAudio])
    }
}
