import CaptureServer
import CaptureVision

extension CaptureStreamServer {
    /// Serves `output`'s detections at `/metadata` as server-sent events (`text/event-stream`,
    /// for `EventSource`), on this server's port under its credentials and its host and origin
    /// rules: one event per detection batch (each frame the output looked at that had objects,
    /// and one with none when they went away), each a JSON object with the frame's sequence
    /// number and capture time and its objects (type, bounds, and for codes corners and text,
    /// for faces the face ID), in the output's normalized coordinates. The web app at `/` draws
    /// them over the live picture. Each event is written once for every client; a client that
    /// falls behind skips to the newest event (counted under `result.routes.metadata` in
    /// `/state`) and slows neither detection nor other clients; more clients than the server's
    /// `maxClients` get 503; a quiet stream gets a keep-alive comment.
    ///
    /// `output` must be in the server's session, or in none (the server then adds it on `start()`
    /// and removes it on `stop()`); its `metadataObjectTypes` say what is looked for. Call
    /// before `start()`. Any thread.
    public func serveMetadata(_ output: CaptureMetadataOutput) throws(CaptureServerError) {
        try add(MetadataRoutes(output))
    }
}
