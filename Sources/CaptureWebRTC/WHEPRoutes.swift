// WHEP signaling (RFC 9725) for a `WebRTCPublisher`, on a `CaptureStreamServer`'s port through
// its route seam: the offer in a POST, the answer and the viewer's resource in the 201, a DELETE
// of the resource to end it.
import CaptureServer
import Foundation

extension CaptureStreamServer {
    /// Serves `publisher` by WHEP (RFC 9725) on this server's port, under its credentials and
    /// its host and origin rules: `POST /whep` with an SDP offer (`Content-Type:
    /// application/sdp`, 64 KiB at most; a browser's or a player's such as GStreamer's `whepsrc`)
    /// answers `201 Created` with the SDP answer (every ICE candidate in it: no trickle) and
    /// `Location: /whep/ID`; `DELETE /whep/ID` ends that viewer (IDs are random: one viewer
    /// cannot guess another's). An offer that is not SDP, asks for no video or no H.264 gets 400,
    /// another content type 415, a full house 503; the server goes on serving. A POST or DELETE
    /// from a page of another origin is refused unless it is the allowed origin (no
    /// `X-Requested-With` is needed: browsers preflight these requests). `/state` shows the
    /// viewers under `result.routes.whep`. The server's `stop()` stops the publisher (its viewers end).
    /// ICE offers candidates only where the server listens (loopback for 127.0.0.1 and localhost,
    /// every interface for 0.0.0.0), unless the publisher's `iceAddresses` were configured.
    ///
    /// Call before `start()`. Any thread.
    public func serveWebRTC(_ publisher: WebRTCPublisher) throws(CaptureServerError) {
        // The media listens where the server does: a localhost server offers no LAN candidate.
        publisher.keepCandidates(toServerHost: configuration.host)
        try add(WHEPRoutes(publisher))
    }
}

/// The WHEP endpoint and its viewers' resources. Thread-safe: requests come on the server's
/// daemon thread; answers wait for ICE gathering on a queue of their own.
final class WHEPRoutes: ServerRoutes, @unchecked Sendable {
    static let offerLimit = 64 * 1024
    let publisher: WebRTCPublisher
    let routes = [
        ServerRoute("/whep", methods: ["POST"], bodyLimit: offerLimit, acceptsPreflightedRequests: true),
        // (PATCH, trickle ICE, gets 405: the answer carries every candidate.)
        ServerRoute("/whep/", prefix: true, methods: ["DELETE"], acceptsPreflightedRequests: true),
    ]
    /// Answers wait here for ICE gathering (a few hundred ms), never on the daemon's thread; the
    /// server bounds how many wait at once.
    private let answering = DispatchQueue(label: "swift-capture.whep", attributes: .concurrent)

    init(_ publisher: WebRTCPublisher) { self.publisher = publisher }

    func respond(to request: RouteRequest, with responder: RouteResponder) {
        if request.method == "DELETE" {
            let id = String(request.path.dropFirst("/whep/".count))
            // Off the daemon's thread: a viewer's elements stop in GStreamer's time.
            answering.async { [publisher] in
                let ended = publisher.end(id: id)
                responder.answer(ended ? RouteResponse(status: 200) : .text(404, "no viewer /whep/\(id): it ended, or never was\n"))
            }
            return
        }
        let type = request.headers["content-type"]?.split(separator: ";").first?.trimmingCharacters(in: .whitespaces).lowercased()
        guard type == "application/sdp" else {
            responder.answer(.text(415, "send the SDP offer with Content-Type: application/sdp (WHEP)\n"))
            return
        }
        guard let offer = String(bytes: request.body, encoding: .utf8) else {
            responder.answer(.text(400, "the offer is not UTF-8 text: send an SDP offer\n"))
            return
        }
        answering.async { [publisher] in
            guard responder.isWaiting else { return }
            do throws(WebRTCError) {
                let (id, answer) = try publisher.answerBlocking(offer: offer)
                // The client gave up (or the server stopped) meanwhile: nobody will use this viewer.
                guard responder.isWaiting else {
                    publisher.end(id: id)
                    return
                }
                responder.answer(
                    RouteResponse(
                        status: 201,
                        headers: [
                            ("Content-Type", "application/sdp"), ("Location", "/whep/\(id)"),
                            // A page of the allowed origin reads where its viewer is.
                            ("Access-Control-Expose-Headers", "Location"),
                        ],
                        body: .bytes(Array(answer.utf8))))
            } catch {
                responder.answer(Self.refusal(error))
            }
        }
    }

    /// The status a failure gets, with its words.
    static func refusal(_ error: WebRTCError) -> RouteResponse {
        switch error.code {
        case .invalidOffer, .noVideo, .noH264: return .text(400, error.message + "\n")
        case .unknownViewer: return .text(404, error.message + "\n")
        case .tooManyViewers, .stopped:
            var r = RouteResponse.text(503, error.message + "\n")
            r.headers.append(("Retry-After", "5"))
            return r
        case .missingElement, .negotiationFailed, .encoderFailed: return .text(500, error.message + "\n")
        }
    }

    func serverDidStop(_ server: CaptureStreamServer) { publisher.stop() }

    func state() -> (name: String, value: [String: Any])? {
        (
            "whep",
            [
                "path": "/whep", "viewers": publisher.viewerCount, "max_viewers": publisher.configuration.maxViewers,
                "audio": publisher.sendsAudio,
            ]
        )
    }
}
