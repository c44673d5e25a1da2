// What Swift cannot call well in gst-rtsp-server: GObject's variadic setters and signals, the
// server's main loop and the media it builds per mount. Swift sees only an opaque handle and plain
// C types; symbols carry the capture_rtsp_ prefix.
#ifndef CAPTURE_RTSP_H
#define CAPTURE_RTSP_H
#include <stddef.h>

/// An RTSP server with one mount whose media (appsrc -> rtph264pay) all clients share.
typedef struct capture_rtsp_server capture_rtsp_server;

/// What the server tells its owner (`event(ctx, kind)`, on a GStreamer thread, never under a lock
/// of the server's).
enum capture_rtsp_event {
    /// The shared media was torn down (its last client left): no units are wanted.
    CAPTURE_RTSP_MEDIA_ENDED = 0,
    /// A shared media was built (a first client asked for it): units are wanted, from a key frame.
    CAPTURE_RTSP_MEDIA_STARTED = 1,
    /// A client starts to play: a key frame soon lets it decode at once.
    CAPTURE_RTSP_KEY_FRAME = 2,
};

/// Initialises GStreamer (once) and looks for every element factory the media uses. NULL when all
/// are there, else the name of the first one missing (a static string), or "gstreamer" when
/// GStreamer itself cannot start.
const char *capture_rtsp_missing_element(void);

/// Starts a server on `address`:`port` (0: any free port) serving `path` (e.g. "/camera") over
/// TCP (interleaved) and UDP, with Basic credentials when `user` is not NULL; `audio` (not 0)
/// adds an AAC stream (rtpmp4gpay) beside the H.264 one. A session whose client says nothing
/// (no RTCP, no request) for `session_timeout` seconds is removed, its client closed. `event(ctx, kind)`
/// reports `capture_rtsp_event`s; `allows_host(ctx, host)` says (not 0) whether a request whose URL
/// names `host` is answered (else 403), on the server's thread; `release(ctx)` is called once
/// nothing can call `event` or `allows_host` any more
/// (after capture_rtsp_server_free, possibly later). NULL on failure, with `*error` set (free it
/// with capture_rtsp_string_free); `release` is then called before it returns.
capture_rtsp_server *capture_rtsp_server_new(const char *address, int port, const char *path, const char *user,
                                             const char *password, int audio, int session_timeout,
                                             void (*event)(void *ctx, int kind),
                                             int (*allows_host)(void *ctx, const char *host),
                                             void (*release)(void *ctx), void *ctx, char **error);
/// The port the server listens on.
int capture_rtsp_server_port(capture_rtsp_server *server);
/// RTSP connections open now.
int capture_rtsp_server_clients(capture_rtsp_server *server);
/// Clients closed so far because they stopped reading (their connection stayed full for seconds).
int capture_rtsp_server_clients_dropped(capture_rtsp_server *server);
/// Pushes one H.264 access unit (Annex B) into the shared media without copying it:
/// `release(release_ctx)` is called, on any thread, once GStreamer is done with `bytes` (at once
/// when no media wants units). `prefix` (the SPS and PPS before a key frame), when not NULL, is
/// copied in front. 0 when the media took it.
int capture_rtsp_server_push_video(capture_rtsp_server *server, const void *bytes, size_t count, const void *prefix,
                                   size_t prefix_count, void (*release)(void *), void *release_ctx);
/// The caps of the AAC that comes (`audio/mpeg,mpegversion=4,stream-format=raw,codec_data=...`),
/// kept for every media built from now on.
void capture_rtsp_server_set_audio_caps(capture_rtsp_server *server, const char *caps);
/// Pushes one AAC packet (raw, copied) into the shared media; -1 when no media wants it or its
/// caps are not set yet.
int capture_rtsp_server_push_audio(capture_rtsp_server *server, const void *bytes, size_t count);
/// Closes every client, tears the media down, stops the server and frees it.
void capture_rtsp_server_free(capture_rtsp_server *server);
/// Frees a string the shim allocated.
void capture_rtsp_string_free(char *string);

#endif
