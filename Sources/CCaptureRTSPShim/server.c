// CaptureRTSP's server (see capture_rtsp.h): gst-rtsp-server on a main loop of its own, one mount
// whose media is shared by every client:
//   appsrc (H.264 access units, leaky) -> rtph264pay -> the server's per-client transports
//   appsrc (AAC packets, leaky) -> rtpmp4gpay -> ...   (with the microphone)
// A TCP client's packets go through its connection's send backlog (100 messages), which drops
// rather than blocks when the client does not read ("drop-backlog"), so it costs the other
// clients nothing; a connection that stays full for STALLED_SECONDS is closed. UDP clients are
// sent to without waiting.
// What callbacks reach (the appsrc, the owner's event function) lives in a reference-counted
// link that outlives the server while a signal handler may still run.
#include <gst/app/gstappsrc.h>
#include <gst/gst.h>
#include <gst/rtsp-server/rtsp-server.h>
#include "capture_rtsp.h"

static const char *const factories[] = {"appsrc", "rtph264pay", "rtpmp4gpay", NULL};

const char *capture_rtsp_missing_element(void) {
    if (!gst_init_check(NULL, NULL, NULL)) return "gstreamer";
    for (int i = 0; factories[i]; i++) {
        GstElementFactory *f = gst_element_factory_find(factories[i]);
        if (!f) return factories[i];
        gst_object_unref(f);
    }
    return NULL;
}

void capture_rtsp_string_free(char *string) { g_free(string); }

/// What the server's signal handlers reach; freed when the last handler let go of it.
struct link {
    GMutex lock;
    /// Guarded by `lock`: the shared media now and its appsrc (refs), and whether the owner
    /// still listens.
    GstRTSPMedia *media;
    GstElement *appsrc;
    /// The audio appsrc (AAC), when the media has one, and the caps of what comes (set on
    /// every media built).
    GstElement *audiosrc;
    GstCaps *audio_caps;
    gboolean alive;
    gint clients;
    /// Clients closed because they stopped reading.
    gint clients_dropped;
    /// Seconds a session lives without a word from its client (RTCP, a request).
    guint session_timeout;
    void (*event)(void *, int);
    int (*allows_host)(void *, const char *);
    void (*release)(void *);
    void *ctx;
};

static struct link *link_ref(struct link *l) { return g_atomic_rc_box_acquire(l); }

static void link_clear(gpointer data) {
    struct link *l = data;
    if (l->appsrc) gst_object_unref(l->appsrc);
    if (l->audiosrc) gst_object_unref(l->audiosrc);
    if (l->audio_caps) gst_caps_unref(l->audio_caps);
    if (l->media) g_object_unref(l->media);
    g_mutex_clear(&l->lock);
    l->release(l->ctx);
}

static void link_unref(gpointer data, GClosure *closure) {
    (void)closure;
    g_atomic_rc_box_release_full(data, link_clear);
}

/// Calls the owner (outside the lock) unless it stopped listening.
static void link_event(struct link *l, int kind) {
    g_mutex_lock(&l->lock);
    gboolean alive = l->alive;
    g_mutex_unlock(&l->lock);
    if (alive) l->event(l->ctx, kind);
}

struct capture_rtsp_server {
    GstRTSPServer *server;
    GstRTSPMediaFactory *factory;
    GMainContext *context;
    GMainLoop *loop;
    GThread *thread;
    GSource *source;
    /// The timer that removes silent sessions.
    GSource *cleanup;
    int port;
    struct link *link;
};

static void on_unprepared(GstRTSPMedia *media, gpointer data) {
    struct link *l = data;
    GstElement *src = NULL, *audio = NULL;
    GstRTSPMedia *old = NULL;
    g_mutex_lock(&l->lock);
    gboolean current = l->media == media;
    if (current) {
        src = l->appsrc;
        audio = l->audiosrc;
        old = l->media;
        l->appsrc = NULL;
        l->audiosrc = NULL;
        l->media = NULL;
    }
    g_mutex_unlock(&l->lock);
    if (src) gst_object_unref(src);
    if (audio) gst_object_unref(audio);
    if (old) g_object_unref(old);
    if (current) link_event(l, CAPTURE_RTSP_MEDIA_ENDED);
}

static void on_media_configure(GstRTSPMediaFactory *factory, GstRTSPMedia *media, gpointer data) {
    (void)factory;
    struct link *l = data;
    GstElement *bin = gst_rtsp_media_get_element(media);
    GstElement *src = bin ? gst_bin_get_by_name_recurse_up(GST_BIN(bin), "video") : NULL;
    GstElement *audio = bin ? gst_bin_get_by_name_recurse_up(GST_BIN(bin), "audio") : NULL;
    if (bin) gst_object_unref(bin);
    if (!src) {
        if (audio) gst_object_unref(audio);
        return;
    }
    g_signal_connect_data(media, "unprepared", G_CALLBACK(on_unprepared), link_ref(l), link_unref, 0);
    GstElement *old_src, *old_audio;
    GstRTSPMedia *old_media;
    g_mutex_lock(&l->lock);
    old_src = l->appsrc;
    old_audio = l->audiosrc;
    old_media = l->media;
    l->appsrc = src;
    l->audiosrc = audio;
    l->media = g_object_ref(media);
    if (audio && l->audio_caps) g_object_set(audio, "caps", l->audio_caps, NULL);
    g_mutex_unlock(&l->lock);
    if (old_src) gst_object_unref(old_src);
    if (old_audio) gst_object_unref(old_audio);
    if (old_media) g_object_unref(old_media);
    link_event(l, CAPTURE_RTSP_MEDIA_STARTED);
}

static void on_client_closed(GstRTSPClient *client, gpointer data) {
    (void)client;
    struct link *l = data;
    g_atomic_int_add(&l->clients, -1);
}

static void on_play_request(GstRTSPClient *client, GstRTSPContext *ctx, gpointer data) {
    (void)client;
    (void)ctx;
    link_event(data, CAPTURE_RTSP_KEY_FRAME);
}

/// Marks a client that had a session (so that one left without any is closed).
static const char *const had_session = "capture-rtsp-had-session";
/// The seconds in a row a client's connection was found full (no room to write).
static const char *const full_seconds = "capture-rtsp-full-seconds";
/// A connection found full this many times in a row, a second apart, is one whose client stopped
/// reading (a reading client, even a slow one, frees a third of its socket's buffer between looks).
#define STALLED_SECONDS 3

static void on_new_session(GstRTSPClient *client, GstRTSPSession *session, gpointer data) {
    struct link *l = data;
    gst_rtsp_session_set_timeout(session, l->session_timeout);
    g_object_set_data(G_OBJECT(client), had_session, GINT_TO_POINTER(1));
}

/// A client whose sessions all ended (timed out) is closed; one yet to make its first stays.
static GstRTSPFilterResult close_if_sessionless(GstRTSPServer *server, GstRTSPClient *client, gpointer data) {
    (void)server;
    (void)data;
    if (!g_object_get_data(G_OBJECT(client), had_session)) return GST_RTSP_FILTER_KEEP;
    GList *sessions = gst_rtsp_client_session_filter(client, NULL, NULL);
    GstRTSPFilterResult result = sessions ? GST_RTSP_FILTER_KEEP : GST_RTSP_FILTER_REMOVE;
    g_list_free_full(sessions, g_object_unref);
    return result;
}

/// Closes a client whose connection had no room to write at STALLED_SECONDS looks in a row: it
/// stopped reading (its packets were being dropped from its backlog meanwhile).
static GstRTSPFilterResult close_if_stalled(GstRTSPServer *server, GstRTSPClient *client, gpointer data) {
    (void)server;
    struct link *l = data;
    GstRTSPConnection *connection = gst_rtsp_client_get_connection(client);
    GSocket *socket = connection ? gst_rtsp_connection_get_write_socket(connection) : NULL;
    gboolean full = socket && !(g_socket_condition_check(socket, G_IO_OUT) & G_IO_OUT);
    gint seconds = full ? GPOINTER_TO_INT(g_object_get_data(G_OBJECT(client), full_seconds)) + 1 : 0;
    g_object_set_data(G_OBJECT(client), full_seconds, GINT_TO_POINTER(seconds));
    if (seconds < STALLED_SECONDS) return GST_RTSP_FILTER_KEEP;
    g_atomic_int_inc(&l->clients_dropped);
    return GST_RTSP_FILTER_REMOVE;
}

/// Removes the sessions whose client has gone silent (a vanished UDP client, a stuck TCP one),
/// closes the connections left without one and those whose client stopped reading; on the
/// server's loop, every second.
static gboolean clean_sessions(gpointer data) {
    capture_rtsp_server *s = data;
    GstRTSPSessionPool *pool = gst_rtsp_server_get_session_pool(s->server);
    guint removed = gst_rtsp_session_pool_cleanup(pool);
    g_object_unref(pool);
    if (removed > 0) gst_rtsp_server_client_filter(s->server, close_if_sessionless, NULL);
    gst_rtsp_server_client_filter(s->server, close_if_stalled, s->link);
    return G_SOURCE_CONTINUE;
}

/// Answers 403 to a request whose URL names a host the owner does not answer to (a rebound DNS
/// name), as the HTTP server does for its Host header; a request without a URL host passes.
static GstRTSPStatusCode check_host(GstRTSPClient *client, GstRTSPContext *ctx, gpointer data) {
    (void)client;
    struct link *l = data;
    const char *host = ctx && ctx->uri ? ctx->uri->host : NULL;
    if (!host || !*host) return GST_RTSP_STS_OK;
    g_mutex_lock(&l->lock);
    gboolean alive = l->alive;
    g_mutex_unlock(&l->lock);
    if (!alive) return GST_RTSP_STS_SERVICE_UNAVAILABLE;
    return l->allows_host(l->ctx, host) ? GST_RTSP_STS_OK : GST_RTSP_STS_FORBIDDEN;
}

/// The requests that reach the camera, for check_host. (OPTIONS tells only the methods; and
/// gst-rtsp-server 1.22 crashed on an invalid free when its pre-signal refused an OPTIONS.)
static const char *const request_signals[] = {"pre-describe-request", "pre-setup-request", "pre-play-request", NULL};

static void on_client_connected(GstRTSPServer *server, GstRTSPClient *client, gpointer data) {
    (void)server;
    struct link *l = data;
    g_atomic_int_inc(&l->clients);
    // A client that stops reading loses its own packets, never blocks the media's thread.
    g_object_set(client, "drop-backlog", TRUE, NULL);
    g_signal_connect_data(client, "closed", G_CALLBACK(on_client_closed), link_ref(l), link_unref, 0);
    g_signal_connect_data(client, "play-request", G_CALLBACK(on_play_request), link_ref(l), link_unref, 0);
    g_signal_connect_data(client, "new-session", G_CALLBACK(on_new_session), link_ref(l), link_unref, 0);
    for (int i = 0; request_signals[i]; i++)
        g_signal_connect_data(client, request_signals[i], G_CALLBACK(check_host), link_ref(l), link_unref, 0);
}

static gpointer run_loop(gpointer data) {
    capture_rtsp_server *s = data;
    g_main_context_push_thread_default(s->context);
    g_main_loop_run(s->loop);
    g_main_context_pop_thread_default(s->context);
    return NULL;
}

capture_rtsp_server *capture_rtsp_server_new(const char *address, int port, const char *path, const char *user,
                                             const char *password, int audio, int session_timeout,
                                             void (*event)(void *, int), int (*allows_host)(void *, const char *),
                                             void (*release)(void *), void *ctx, char **error) {
    *error = NULL;
    struct link *l = g_atomic_rc_box_new0(struct link);
    g_mutex_init(&l->lock);
    l->alive = TRUE;
    l->session_timeout = session_timeout > 0 ? (guint)session_timeout : 60;
    l->event = event;
    l->allows_host = allows_host;
    l->release = release;
    l->ctx = ctx;
    capture_rtsp_server *s = g_new0(capture_rtsp_server, 1);
    s->link = l;
    s->server = gst_rtsp_server_new();
    gst_rtsp_server_set_address(s->server, address);
    char service[16];
    g_snprintf(service, sizeof service, "%d", port);
    gst_rtsp_server_set_service(s->server, service);
    // Every client on the server's own loop (one thread): closing them at the end happens there,
    // never beside their watch (a connection closed from another thread left its watch reading
    // freed streams, in a loop).
    GstRTSPThreadPool *threads = gst_rtsp_server_get_thread_pool(s->server);
    gst_rtsp_thread_pool_set_max_threads(threads, 0);
    g_object_unref(threads);
    g_signal_connect_data(s->server, "client-connected", G_CALLBACK(on_client_connected), link_ref(l), link_unref, 0);

    s->factory = gst_rtsp_media_factory_new();
    // The launch line builds the one media every client shares (no encoder: units come encoded).
    // (AAC's caps, with its AudioSpecificConfig, come with its first packet.)
    gst_rtsp_media_factory_set_launch(
        s->factory,
        audio ? "( appsrc name=video is-live=true format=time do-timestamp=true max-buffers=64 leaky-type=downstream "
                "caps=video/x-h264,stream-format=byte-stream,alignment=au "
                "! rtph264pay name=pay0 pt=96 config-interval=-1 "
                "appsrc name=audio is-live=true format=time do-timestamp=true max-buffers=64 leaky-type=downstream "
                "! rtpmp4gpay name=pay1 pt=97 )"
              : "( appsrc name=video is-live=true format=time do-timestamp=true max-buffers=64 leaky-type=downstream "
                "caps=video/x-h264,stream-format=byte-stream,alignment=au "
                "! rtph264pay name=pay0 pt=96 config-interval=-1 )");
    gst_rtsp_media_factory_set_shared(s->factory, TRUE);
    gst_rtsp_media_factory_set_protocols(s->factory, GST_RTSP_LOWER_TRANS_TCP | GST_RTSP_LOWER_TRANS_UDP);
    g_signal_connect_data(s->factory, "media-configure", G_CALLBACK(on_media_configure), link_ref(l), link_unref, 0);
    if (user) {
        GstRTSPAuth *auth = gst_rtsp_auth_new();
        GstRTSPToken *token = gst_rtsp_token_new(GST_RTSP_TOKEN_MEDIA_FACTORY_ROLE, G_TYPE_STRING, "viewer", NULL);
        gchar *basic = gst_rtsp_auth_make_basic(user, password ? password : "");
        gst_rtsp_auth_add_basic(auth, basic, token);
        g_free(basic);
        gst_rtsp_token_unref(token);
        gst_rtsp_server_set_auth(s->server, auth);
        g_object_unref(auth);
        gst_rtsp_media_factory_add_role(s->factory, "viewer", GST_RTSP_PERM_MEDIA_FACTORY_ACCESS, G_TYPE_BOOLEAN, TRUE,
                                        GST_RTSP_PERM_MEDIA_FACTORY_CONSTRUCT, G_TYPE_BOOLEAN, TRUE, NULL);
    }
    GstRTSPMountPoints *mounts = gst_rtsp_server_get_mount_points(s->server);
    gst_rtsp_mount_points_add_factory(mounts, path, g_object_ref(s->factory));
    g_object_unref(mounts);

    s->context = g_main_context_new();
    s->loop = g_main_loop_new(s->context, FALSE);
    GError *err = NULL;
    s->source = gst_rtsp_server_create_source(s->server, NULL, &err);
    if (!s->source) {
        *error = g_strdup_printf("cannot listen on %s port %d: %s", address, port, err ? err->message : "no reason given");
        g_clear_error(&err);
        capture_rtsp_server_free(s);
        return NULL;
    }
    g_source_attach(s->source, s->context);
    s->cleanup = g_timeout_source_new_seconds(1);
    g_source_set_callback(s->cleanup, clean_sessions, s, NULL);
    g_source_attach(s->cleanup, s->context);
    s->port = gst_rtsp_server_get_bound_port(s->server);
    s->thread = g_thread_new("cap rtsp", run_loop, s);
    return s;
}

int capture_rtsp_server_port(capture_rtsp_server *s) { return s->port; }

int capture_rtsp_server_clients(capture_rtsp_server *s) { return g_atomic_int_get(&s->link->clients); }

int capture_rtsp_server_clients_dropped(capture_rtsp_server *s) { return g_atomic_int_get(&s->link->clients_dropped); }

int capture_rtsp_server_push_video(capture_rtsp_server *s, const void *bytes, size_t count, const void *prefix,
                                   size_t prefix_count, void (*release)(void *), void *release_ctx) {
    struct link *l = s->link;
    g_mutex_lock(&l->lock);
    GstElement *src = l->appsrc ? gst_object_ref(l->appsrc) : NULL;
    g_mutex_unlock(&l->lock);
    if (!src || count == 0) {
        if (src) gst_object_unref(src);
        release(release_ctx);
        return -1;
    }
    GstBuffer *buffer =
        gst_buffer_new_wrapped_full(GST_MEMORY_FLAG_READONLY, (gpointer)bytes, count, 0, count, release_ctx, release);
    if (prefix && prefix_count > 0) {
        gpointer copy = g_memdup2(prefix, prefix_count);
        gst_buffer_prepend_memory(buffer, gst_memory_new_wrapped(GST_MEMORY_FLAG_READONLY, copy, prefix_count, 0,
                                                                 prefix_count, copy, g_free));
    }
    // (The appsrc owns the buffer now; when it is done, `release` runs.)
    int status = gst_app_src_push_buffer(GST_APP_SRC(src), buffer) == GST_FLOW_OK ? 0 : -1;
    gst_object_unref(src);
    return status;
}

void capture_rtsp_server_set_audio_caps(capture_rtsp_server *s, const char *caps_text) {
    GstCaps *caps = gst_caps_from_string(caps_text);
    if (!caps) return;
    struct link *l = s->link;
    g_mutex_lock(&l->lock);
    if (l->audio_caps) gst_caps_unref(l->audio_caps);
    l->audio_caps = caps;
    if (l->audiosrc) g_object_set(l->audiosrc, "caps", caps, NULL);
    g_mutex_unlock(&l->lock);
}

int capture_rtsp_server_push_audio(capture_rtsp_server *s, const void *bytes, size_t count) {
    struct link *l = s->link;
    g_mutex_lock(&l->lock);
    GstElement *src = l->audiosrc && l->audio_caps ? gst_object_ref(l->audiosrc) : NULL;
    g_mutex_unlock(&l->lock);
    if (!src || count == 0) {
        if (src) gst_object_unref(src);
        return -1;
    }
    int status = gst_app_src_push_buffer(GST_APP_SRC(src), gst_buffer_new_memdup(bytes, count)) == GST_FLOW_OK ? 0 : -1;
    gst_object_unref(src);
    return status;
}

static GstRTSPFilterResult remove_session(GstRTSPSessionPool *pool, GstRTSPSession *session, gpointer data) {
    (void)pool;
    (void)session;
    (void)data;
    return GST_RTSP_FILTER_REMOVE;
}

/// Whether the shared media is still up (not yet unprepared).
static gboolean media_of(struct link *l) {
    g_mutex_lock(&l->lock);
    gboolean up = l->media != NULL;
    g_mutex_unlock(&l->lock);
    return up;
}

static GstRTSPFilterResult remove_client(GstRTSPServer *server, GstRTSPClient *client, gpointer data) {
    (void)server;
    (void)data;
    return GST_RTSP_FILTER_REMOVE;
}

/// The end of the server's loop's work: what capture_rtsp_server_free waits for.
struct closing {
    capture_rtsp_server *server;
    GMutex lock;
    GCond cond;
    gboolean done;
};

static gboolean close_all(gpointer data) {
    struct closing *c = data;
    capture_rtsp_server *s = c->server;
    g_source_destroy(s->source);
    g_source_destroy(s->cleanup);
    GstRTSPSessionPool *pool = gst_rtsp_server_get_session_pool(s->server);
    gst_rtsp_session_pool_filter(pool, remove_session, NULL);
    g_object_unref(pool);
    gst_rtsp_server_client_filter(s->server, remove_client, NULL);
    g_mutex_lock(&c->lock);
    c->done = TRUE;
    g_cond_signal(&c->cond);
    g_mutex_unlock(&c->lock);
    return G_SOURCE_REMOVE;
}

void capture_rtsp_server_free(capture_rtsp_server *s) {
    if (!s) return;
    struct link *l = s->link;
    g_mutex_lock(&l->lock);
    l->alive = FALSE;
    g_mutex_unlock(&l->lock);
    // No new clients, then no session and no client left, on the loop that serves them; that
    // tears the shared media down (its last user left). Only a media no session took (a DESCRIBE
    // alone) is torn down here: unpreparing it beside the clients' own teardown disposed of
    // elements still playing, and a UDP client's RTCP then reached a freed transport.
    if (s->thread) {
        struct closing c = {.server = s, .done = FALSE};
        g_mutex_init(&c.lock);
        g_cond_init(&c.cond);
        g_main_context_invoke(s->context, close_all, &c);
        g_mutex_lock(&c.lock);
        while (!c.done) g_cond_wait(&c.cond, &c.lock);
        g_mutex_unlock(&c.lock);
        g_mutex_clear(&c.lock);
        g_cond_clear(&c.cond);
    } else if (s->source) {
        g_source_destroy(s->source);
    }
    // (Seen at once here; the wait, at most 5 s, is for a media thread still on its way.)
    for (int i = 0; i < 500 && media_of(l); i++) g_usleep(10000);
    g_mutex_lock(&l->lock);
    GstRTSPMedia *media = l->media;
    GstElement *src = l->appsrc, *audio = l->audiosrc;
    l->media = NULL;
    l->appsrc = NULL;
    l->audiosrc = NULL;
    g_mutex_unlock(&l->lock);
    if (media) {
        gst_rtsp_media_unprepare(media);
        g_object_unref(media);
    }
    if (src) gst_object_unref(src);
    if (audio) gst_object_unref(audio);
    if (s->thread) {
        g_main_loop_quit(s->loop);
        g_thread_join(s->thread);
    }
    if (s->source) g_source_unref(s->source);
    if (s->cleanup) g_source_unref(s->cleanup);
    g_object_unref(s->factory);
    g_object_unref(s->server);
    g_main_loop_unref(s->loop);
    g_main_context_unref(s->context);
    // (The link goes once the last signal handler's media, client or factory is gone.)
    g_atomic_rc_box_release_full(l, link_clear);
    g_free(s);
}
