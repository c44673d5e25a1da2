// Viewers: a webrtcbin each, answering a browser's offer, fed by leaky queues from the shared
// packetizers (one per payload type, made for the first viewer that needs it, freed after the last).
#include "graph.h"
#include <gst/sdp/sdp.h>
#include <dlfcn.h>
#include <gst/webrtc/webrtc.h>
#include <string.h>

/// The offer's caps for payload type `pt` of its first `kind` ("video", "audio") m-line, as
/// webrtcbin wants codec preferences (application/x-rtp with the fmtp and rtcp-fb fields).
static GstCaps *offer_caps(const GstSDPMessage *sdp, const char *kind, int pt) {
    for (guint i = 0; i < gst_sdp_message_medias_len(sdp); i++) {
        const GstSDPMedia *m = gst_sdp_message_get_media(sdp, i);
        if (g_strcmp0(gst_sdp_media_get_media(m), kind) != 0) continue;
        GstCaps *caps = gst_sdp_media_get_caps_from_media(m, pt);
        if (!caps) continue;
        caps = gst_caps_make_writable(caps);
        gst_structure_set_name(gst_caps_get_structure(caps, 0), "application/x-rtp");
        return caps;
    }
    return NULL;
}

/// Whether an SDP line is a candidate with an mDNS host name ("<uuid>.local") for its address
/// (the fifth field: foundation, component, transport, priority, address, port, "typ", type).
static gboolean is_mdns_candidate(const char *line) {
    if (!g_str_has_prefix(line, "a=candidate:")) return FALSE;
    gchar **fields = g_strsplit(line, " ", 6);
    gboolean mdns = g_strv_length(fields) > 5 && g_str_has_suffix(fields[4], ".local");
    g_strfreev(fields);
    return mdns;
}

/// The offer without the browser's mDNS host candidates. GStreamer 1.22's ICE agent (webrtcnice)
/// resolves each with a GTask begun on its own thread without making that thread's main context
/// the thread default, so the result is dispatched on GLib's global default main context, which
/// nothing in this process runs: the task, holding a reference on the agent, never ends, and the
/// agent outlives its webrtcbin with its thread and UDP sockets (GStreamer 1.24 delivers it on
/// the agent's thread). Nothing is lost: the browser offers, so it controls ICE and runs the
/// checks, and webrtcbin learns its address from them (a peer-reflexive candidate); libnice could
/// not resolve such a name here anyway without an mDNS resolver (nss-mdns) on the machine.
static gchar *without_mdns_candidates(const char *offer) {
    gchar **lines = g_strsplit(offer, "\n", -1);
    GString *kept = g_string_sized_new(strlen(offer));
    for (gchar **line = lines; *line; line++) {
        if (is_mdns_candidate(*line)) continue;
        g_string_append(kept, *line);
        if (line[1]) g_string_append_c(kept, '\n');
    }
    g_strfreev(lines);
    return g_string_free(kept, FALSE);
}

/// The payloader's caps carry the profile the viewers agreed on (not the one it read from the
/// SPS), so that webrtcbin finds them equal to its codec preferences.
static GstPadProbeReturn on_payloader_caps(GstPad *pad, GstPadProbeInfo *info, gpointer data) {
    (void)pad;
    struct packetizer *z = data;
    GstEvent *event = GST_PAD_PROBE_INFO_EVENT(info);
    if (!z->profile || GST_EVENT_TYPE(event) != GST_EVENT_CAPS) return GST_PAD_PROBE_OK;
    GstCaps *caps = NULL;
    gst_event_parse_caps(event, &caps);
    GstCaps *changed = gst_caps_copy(caps);
    gst_caps_set_simple(changed, "profile-level-id", G_TYPE_STRING, z->profile, NULL);
    GST_PAD_PROBE_INFO_DATA(info) = gst_event_new_caps(changed);
    gst_caps_unref(changed);
    gst_event_unref(event);
    return GST_PAD_PROBE_OK;
}

/// The packetizer's tee takes any caps: what the payloader makes does not depend on the viewers
/// below (rtph264pay would narrow its input to the profile a viewer offered, and refuse the
/// stream's caps, which name none); each viewer's caps come from its own offer.
static GstPadProbeReturn on_tee_query(GstPad *pad, GstPadProbeInfo *info, gpointer data) {
    (void)pad;
    (void)data;
    GstQuery *query = GST_PAD_PROBE_INFO_QUERY(info);
    if (GST_QUERY_TYPE(query) == GST_QUERY_CAPS) {
        GstCaps *filter = NULL;
        gst_query_parse_caps(query, &filter);
        GstCaps *any = filter ? gst_caps_ref(filter) : gst_caps_new_any();
        gst_query_set_caps_result(query, any);
        gst_caps_unref(any);
        return GST_PAD_PROBE_HANDLED;
    }
    if (GST_QUERY_TYPE(query) == GST_QUERY_ACCEPT_CAPS) {
        gst_query_set_accept_caps_result(query, TRUE);
        return GST_PAD_PROBE_HANDLED;
    }
    return GST_PAD_PROBE_OK;
}

/// The packetizer for `key`, made on first use. Under the pipeline's lock.
static struct packetizer *packetizer(capture_webrtc_pipeline *p, gboolean video, int pt, const char *profile,
                                     int playout_delay_id, char **error) {
    char *key = g_strdup_printf("%s %d %s %d", video ? "video" : "audio", pt, profile ? profile : "", playout_delay_id);
    for (guint i = 0; i < p->packetizers->len; i++) {
        struct packetizer *z = g_ptr_array_index(p->packetizers, i);
        if (strcmp(z->key, key) == 0) {
            g_free(key);
            z->users++;
            return z;
        }
    }
    GstElement *pay = gst_element_factory_make(video ? "rtph264pay" : "rtpopuspay", NULL);
    GstElement *tee = gst_element_factory_make("tee", NULL);
    if (!pay || !tee) {
        *error = g_strdup_printf("GStreamer has no element %s", !pay ? (video ? "rtph264pay" : "rtpopuspay") : "tee");
        if (pay) gst_object_unref(pay);
        if (tee) gst_object_unref(tee);
        g_free(key);
        return NULL;
    }
    struct packetizer *z = g_new0(struct packetizer, 1);
    z->key = key;
    z->pay = pay;
    z->tee = tee;
    z->users = 1;
    g_object_set(pay, "pt", (guint)pt, NULL);
    if (video) {
        // SPS/PPS before every IDR (a late joiner starts there), each unit sent at once.
        g_object_set(pay, "config-interval", -1, NULL);
        gst_util_set_object_arg(G_OBJECT(pay), "aggregate-mode", "zero-latency");
        z->profile = g_strdup(profile);
        if (playout_delay_id) playout_delay_add(pay, playout_delay_id);
        GstPad *out = gst_element_get_static_pad(pay, "src");
        gst_pad_add_probe(out, GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM, on_payloader_caps, z, NULL);
        gst_object_unref(out);
    }
    g_object_set(tee, "allow-not-linked", TRUE, NULL);
    GstPad *tee_in = gst_element_get_static_pad(tee, "sink");
    gst_pad_add_probe(tee_in, GST_PAD_PROBE_TYPE_QUERY_DOWNSTREAM, on_tee_query, NULL, NULL);
    gst_object_unref(tee_in);
    gst_bin_add_many(GST_BIN(p->pipeline), pay, tee, NULL);
    gst_element_link(pay, tee);
    // Playing before the shared tee pushes into it (a flushing pad would stop the source).
    gst_element_sync_state_with_parent(tee);
    gst_element_sync_state_with_parent(pay);
    GstElement *source = video ? p->video_tee : p->opus_tee;
    z->feed = gst_element_request_pad_simple(source, "src_%u");
    GstPad *in = gst_element_get_static_pad(pay, "sink");
    gst_pad_link(z->feed, in);
    gst_object_unref(in);
    g_ptr_array_add(p->packetizers, z);
    return z;
}

/// Frees a packetizer no viewer uses. Under the pipeline's lock.
static void packetizer_release(capture_webrtc_pipeline *p, struct packetizer *z) {
    if (--z->users > 0) return;
    GstElement *source = z->profile || strncmp(z->key, "video", 5) == 0 ? p->video_tee : p->opus_tee;
    GstPad *in = gst_element_get_static_pad(z->pay, "sink");
    gst_pad_unlink(z->feed, in);
    gst_object_unref(in);
    gst_element_release_request_pad(source, z->feed);
    gst_object_unref(z->feed);
    gst_element_set_state(z->pay, GST_STATE_NULL);
    gst_element_set_state(z->tee, GST_STATE_NULL);
    gst_bin_remove_many(GST_BIN(p->pipeline), z->pay, z->tee, NULL);
    g_ptr_array_remove(p->packetizers, z);
    g_free(z->key);
    g_free(z->profile);
    g_free(z);
}

static GstPadProbeReturn count_in(GstPad *pad, GstPadProbeInfo *info, gpointer data) {
    (void)pad;
    (void)info;
    atomic_fetch_add_explicit(&((struct branch *)data)->in, 1, memory_order_relaxed);
    return GST_PAD_PROBE_OK;
}

static GstPadProbeReturn count_out(GstPad *pad, GstPadProbeInfo *info, gpointer data) {
    (void)pad;
    struct branch *b = data;
    atomic_fetch_add_explicit(&b->out, 1, memory_order_relaxed);
    GstBuffer *buffer = GST_PAD_PROBE_INFO_BUFFER(info);
    guint8 header[2];
    // The RTP marker bit ends a video frame.
    if (buffer && gst_buffer_extract(buffer, 0, header, 2) == 2 && (header[1] & 0x80)) {
        atomic_fetch_add_explicit(&b->frames, 1, memory_order_relaxed);
    }
    if (buffer && b->playout_delay_id) {
        guint8 head[128];
        gsize got = gst_buffer_extract(buffer, 0, head, sizeof head);
        if (playout_delay_carried(head, got, b->playout_delay_id)) {
            atomic_fetch_add_explicit(&b->delayed, 1, memory_order_relaxed);
        }
    }
    return GST_PAD_PROBE_OK;
}

/// Adds a branch: packetizer tee -> leaky queue -> a webrtcbin sink pad whose transceiver sends
/// `caps` only. Under the pipeline's lock.
static gboolean branch_add(capture_webrtc_pipeline *p, capture_webrtc_viewer *v, struct branch *b, GstCaps *caps,
                           gboolean video, int pt, int queue_packets, char **error) {
    const gchar *profile = NULL;
    if (video) profile = gst_structure_get_string(gst_caps_get_structure(caps, 0), "profile-level-id");
    b->playout_delay_id = video ? v->playout_delay_id : 0;
    b->packetizer = packetizer(p, video, pt, profile, b->playout_delay_id, error);
    if (!b->packetizer) return FALSE;
    b->queue = gst_element_factory_make("queue", NULL);
    if (!b->queue) {
        *error = g_strdup("GStreamer has no element queue");
        return FALSE;
    }
    g_object_set(b->queue, "max-size-buffers", (guint)queue_packets, "max-size-bytes", 0u, "max-size-time",
                 (guint64)0, NULL);
    gst_util_set_object_arg(G_OBJECT(b->queue), "leaky", "downstream");
    gst_bin_add(GST_BIN(p->pipeline), b->queue);
    GstPad *sink = gst_element_request_pad_simple(v->webrtc, "sink_%u");
    GstWebRTCRTPTransceiver *transceiver = NULL;
    g_object_get(sink, "transceiver", &transceiver, NULL);
    if (transceiver) {
        g_object_set(transceiver, "codec-preferences", caps, "direction",
                     GST_WEBRTC_RTP_TRANSCEIVER_DIRECTION_SENDONLY, NULL);
        gst_object_unref(transceiver);
    }
    GstPad *queue_out = gst_element_get_static_pad(b->queue, "src");
    GstPadLinkReturn linked = gst_pad_link(queue_out, sink);
    gst_pad_add_probe(queue_out, GST_PAD_PROBE_TYPE_BUFFER, count_out, b, NULL);
    gst_object_unref(queue_out);
    gst_object_unref(sink);
    if (linked != GST_PAD_LINK_OK) {
        *error = g_strdup_printf("webrtcbin refuses the %s branch (%s)", video ? "video" : "audio",
                                 gst_pad_link_get_name(linked));
        return FALSE;
    }
    gst_element_sync_state_with_parent(b->queue);
    return TRUE;
}

/// Starts the branch's flow: the packetizer's tee pushes into the queue (webrtcbin is playing).
static void branch_start(struct branch *b) {
    GstPad *queue_in = gst_element_get_static_pad(b->queue, "sink");
    gst_pad_add_probe(queue_in, GST_PAD_PROBE_TYPE_BUFFER, count_in, b, NULL);
    b->tee_pad = gst_element_request_pad_simple(b->packetizer->tee, "src_%u");
    gst_pad_link(b->tee_pad, queue_in);
    gst_object_unref(queue_in);
}

/// Stops the flow into a branch: the packetizer's tee lets go of the queue. Under the pipeline's lock.
static void branch_stop(struct branch *b) {
    if (!b->tee_pad) return;
    GstPad *queue_in = gst_element_get_static_pad(b->queue, "sink");
    gst_pad_unlink(b->tee_pad, queue_in);
    gst_object_unref(queue_in);
    gst_element_release_request_pad(b->packetizer->tee, b->tee_pad);
    gst_object_unref(b->tee_pad);
    b->tee_pad = NULL;
}

/// Frees a stopped branch, once its webrtcbin is stopped (until it connects, webrtcbin blocks
/// the queue's thread in its pad: the queue stops only after that push is flushed). Under the
/// pipeline's lock.
static void branch_remove(capture_webrtc_pipeline *p, struct branch *b) {
    if (b->queue) {
        gst_element_set_state(b->queue, GST_STATE_NULL);
        gst_bin_remove(GST_BIN(p->pipeline), b->queue);
        b->queue = NULL;
    }
    if (b->packetizer) packetizer_release(p, b->packetizer);
    b->packetizer = NULL;
}

static void on_connection_state(GObject *object, GParamSpec *spec, gpointer data) {
    (void)spec;
    capture_webrtc_viewer *v = data;
    GstWebRTCPeerConnectionState state = GST_WEBRTC_PEER_CONNECTION_STATE_NEW;
    g_object_get(object, "connection-state", &state, NULL);
    g_mutex_lock(&v->lock);
    if (!v->closed) v->state(v->ctx, (int)state);
    g_mutex_unlock(&v->lock);
    // A viewer that just connected starts with a key frame.
    if (state == GST_WEBRTC_PEER_CONNECTION_STATE_CONNECTED) v->pipeline->key_frame(v->pipeline->ctx);
}

/// Turns off the ICE agent's UPnP: libnice would otherwise ask the LAN's router to forward ports
/// to this machine for every viewer, from a thread of its own, and hold ICE gathering (and so the
/// answer) until its 200 ms timeout when no router answers.
static void no_upnp(GstElement *webrtc) {
    GObject *ice = NULL;
    g_object_get(webrtc, "ice-agent", &ice, NULL);
    if (!ice) return;
    // The libnice agent of GstWebRTCNice (webrtcbin's only ICE implementation in 1.22).
    if (g_object_class_find_property(G_OBJECT_GET_CLASS(ice), "agent")) {
        GObject *agent = NULL;
        g_object_get(ice, "agent", &agent, NULL);
        if (agent && g_object_class_find_property(G_OBJECT_GET_CLASS(agent), "upnp")) {
            g_object_set(agent, "upnp", FALSE, NULL);
        }
        if (agent) g_object_unref(agent);
    }
    g_object_unref(ice);
}

// libnice's calls for the addresses it gathers on (its headers are not needed: the library is
// in the process already, loaded by webrtcbin's ICE agent, and these two calls are stable ABI).
// NiceAddress is a sockaddr union of at most a sockaddr_in6; the buffer below is larger.
typedef gboolean (*nice_address_set_from_string_fn)(void *address, const gchar *text);
typedef gboolean (*nice_agent_add_local_address_fn)(GObject *agent, const void *address);

/// ICE gathers on `addresses` (comma-separated) only, not on every interface: a server on
/// 127.0.0.1 offers loopback candidates and nothing on the network. FALSE with `*error` when the
/// agent cannot be restricted (the viewer is refused rather than offered on every interface).
static gboolean restrict_addresses(GstElement *webrtc, const char *addresses, char **error) {
    static nice_address_set_from_string_fn set_from_string;
    static nice_agent_add_local_address_fn add_local;
    static gsize looked_up;
    if (g_once_init_enter(&looked_up)) {
        void *nice = dlopen("libnice.so.10", RTLD_NOW | RTLD_NOLOAD);
        if (nice) {
            set_from_string = (nice_address_set_from_string_fn)dlsym(nice, "nice_address_set_from_string");
            add_local = (nice_agent_add_local_address_fn)dlsym(nice, "nice_agent_add_local_address");
            dlclose(nice);
        }
        g_once_init_leave(&looked_up, 1);
    }
    GObject *ice = NULL, *agent = NULL;
    g_object_get(webrtc, "ice-agent", &ice, NULL);
    if (ice && g_object_class_find_property(G_OBJECT_GET_CLASS(ice), "agent")) g_object_get(ice, "agent", &agent, NULL);
    gboolean ok = agent && set_from_string && add_local;
    if (!ok) {
        *error = g_strdup_printf("cannot keep ICE to %s: webrtcbin's ICE agent is not libnice 0.1 (gstreamer1.0-nice)",
                                 addresses);
    }
    gchar **list = g_strsplit(addresses, ",", -1);
    for (gchar **a = list; ok && *a; a++) {
        union {
            guint8 bytes[128];
            gint64 align;
        } address;
        memset(&address, 0, sizeof address);
        ok = set_from_string(&address, g_strstrip(*a)) && add_local(agent, &address);
        if (!ok) *error = g_strdup_printf("ICE cannot gather on the address %s", *a);
    }
    g_strfreev(list);
    if (agent) g_object_unref(agent);
    if (ice) g_object_unref(ice);
    return ok;
}

static GstPadProbeReturn count_received(GstPad *pad, GstPadProbeInfo *info, gpointer data) {
    (void)pad;
    guint n = 1;
    if (GST_PAD_PROBE_INFO_TYPE(info) & GST_PAD_PROBE_TYPE_BUFFER_LIST) {
        n = gst_buffer_list_length(GST_PAD_PROBE_INFO_BUFFER_LIST(info));
    }
    atomic_fetch_add_explicit(&((capture_webrtc_viewer *)data)->received, n, memory_order_relaxed);
    return GST_PAD_PROBE_OK;
}

/// Counts what the peer sends: a probe on the output of each of the viewer's ICE sources
/// (nicesrc, inside webrtcbin's transport bins, made by the descriptions).
static void watch_received(capture_webrtc_viewer *v) {
    GstIterator *it = gst_bin_iterate_recurse(GST_BIN(v->webrtc));
    GValue item = G_VALUE_INIT;
    while (gst_iterator_next(it, &item) == GST_ITERATOR_OK) {
        GstElement *e = g_value_get_object(&item);
        GstElementFactory *f = gst_element_get_factory(e);
        if (f && g_strcmp0(GST_OBJECT_NAME(f), "nicesrc") == 0) {
            GstPad *out = gst_element_get_static_pad(e, "src");
            if (out) {
                gst_pad_add_probe(out, GST_PAD_PROBE_TYPE_BUFFER | GST_PAD_PROBE_TYPE_BUFFER_LIST, count_received, v, NULL);
                gst_object_unref(out);
            }
        }
        g_value_reset(&item);
    }
    g_value_unset(&item);
    gst_iterator_free(it);
}

static void on_dtls_state(GObject *object, GParamSpec *spec, gpointer data) {
    (void)spec;
    capture_webrtc_viewer *v = data;
    GstWebRTCDTLSTransportState state = GST_WEBRTC_DTLS_TRANSPORT_STATE_NEW;
    g_object_get(object, "state", &state, NULL);
    if (state != GST_WEBRTC_DTLS_TRANSPORT_STATE_CLOSED && state != GST_WEBRTC_DTLS_TRANSPORT_STATE_FAILED) return;
    g_mutex_lock(&v->lock);
    if (!v->closed) v->state(v->ctx, GST_WEBRTC_PEER_CONNECTION_STATE_CLOSED);
    g_mutex_unlock(&v->lock);
}

/// Watches the bundle's DTLS transport (the first transceiver's): the peer's close_notify
/// closes it, which webrtcbin 1.22 does not carry into its connection state.
static void watch_dtls(capture_webrtc_viewer *v) {
    GstWebRTCRTPTransceiver *transceiver = NULL;
    g_signal_emit_by_name(v->webrtc, "get-transceiver", 0, &transceiver);
    if (!transceiver) return;
    GObject *receiver = NULL;
    g_object_get(transceiver, "receiver", &receiver, NULL);
    if (receiver && g_object_class_find_property(G_OBJECT_GET_CLASS(receiver), "transport")) {
        g_object_get(receiver, "transport", &v->dtls, NULL);
    }
    if (v->dtls) v->dtls_handler = g_signal_connect(v->dtls, "notify::state", G_CALLBACK(on_dtls_state), v);
    if (receiver) g_object_unref(receiver);
    gst_object_unref(transceiver);
}

/// Emits `signal` with `argument` and waits for webrtcbin's reply; FALSE with `*error` when it
/// reports one. `*reply` (when asked for) is a copy the caller frees.
static gboolean call(GstElement *webrtc, const char *signal, gpointer argument, GstStructure **reply, char **error) {
    GstPromise *promise = gst_promise_new();
    g_signal_emit_by_name(webrtc, signal, argument, promise);
    GstPromiseResult result = gst_promise_wait(promise);
    const GstStructure *r = result == GST_PROMISE_RESULT_REPLIED ? gst_promise_get_reply(promise) : NULL;
    GError *err = NULL;
    if (r && gst_structure_has_field(r, "error")) gst_structure_get(r, "error", G_TYPE_ERROR, &err, NULL);
    gboolean ok = result == GST_PROMISE_RESULT_REPLIED && !err;
    if (!ok) {
        *error = g_strdup_printf("webrtcbin's %s failed: %s", signal, err ? err->message : "no reply");
    } else if (reply) {
        *reply = r ? gst_structure_copy(r) : NULL;
    }
    g_clear_error(&err);
    gst_promise_unref(promise);
    return ok;
}

capture_webrtc_viewer *capture_webrtc_viewer_new(capture_webrtc_pipeline *p, const char *offer, int video_pt,
                                                 int audio_pt, const char *stun, const char *addresses, int queue_packets,
                                                 int timeout_ms, void (*state)(void *, int), void *ctx, char **answer,
                                                 char **error) {
    *answer = NULL;
    *error = NULL;
    GstSDPMessage *sdp = NULL;
    gchar *kept = without_mdns_candidates(offer);
    GstSDPResult parsed = gst_sdp_message_new_from_text(kept, &sdp);
    g_free(kept);
    if (parsed != GST_SDP_OK || !sdp) {
        *error = g_strdup("the offer is not SDP");
        return NULL;
    }
    GstCaps *video_caps = offer_caps(sdp, "video", video_pt);
    int playout_delay_id = playout_delay_offered(sdp);
    if (video_caps && playout_delay_id) playout_delay_prefer(video_caps, playout_delay_id);
    GstCaps *audio_caps = audio_pt >= 0 && p->opus_tee ? offer_caps(sdp, "audio", audio_pt) : NULL;
    if (!video_caps) {
        *error = g_strdup_printf("the offer has no video payload type %d", video_pt);
        gst_sdp_message_free(sdp);
        return NULL;
    }
    capture_webrtc_viewer *v = g_new0(capture_webrtc_viewer, 1);
    g_mutex_init(&v->lock);
    v->state = state;
    v->ctx = ctx;
    v->pipeline = p;
    v->playout_delay_id = playout_delay_id;
    v->webrtc = gst_element_factory_make("webrtcbin", NULL);
    gboolean ok = v->webrtc != NULL;
    if (!ok) *error = g_strdup("GStreamer has no element webrtcbin");

    g_mutex_lock(&p->lock);
    if (ok) {
        gst_util_set_object_arg(G_OBJECT(v->webrtc), "bundle-policy", "max-bundle");
        if (stun) g_object_set(v->webrtc, "stun-server", stun, NULL);
        no_upnp(v->webrtc);
        if (addresses) ok = restrict_addresses(v->webrtc, addresses, error);
    }
    if (ok) {
        gst_bin_add(GST_BIN(p->pipeline), v->webrtc);
        ok = branch_add(p, v, &v->video, video_caps, TRUE, video_pt, queue_packets, error) &&
             (!audio_caps || branch_add(p, v, &v->audio, audio_caps, FALSE, audio_pt, queue_packets, error));
    }
    // The answering side: playing first, then the offer, the answer, the local description.
    if (ok) {
        ok = gst_element_sync_state_with_parent(v->webrtc);
        if (!ok) *error = g_strdup("webrtcbin does not start (is gstreamer1.0-nice installed?)");
    }
    if (ok) {
        branch_start(&v->video);
        if (audio_caps) branch_start(&v->audio);
    }
    g_mutex_unlock(&p->lock);
    gst_caps_unref(video_caps);
    if (audio_caps) gst_caps_unref(audio_caps);
    if (ok) v->state_handler = g_signal_connect(v->webrtc, "notify::connection-state", G_CALLBACK(on_connection_state), v);

    GstWebRTCSessionDescription *remote = gst_webrtc_session_description_new(GST_WEBRTC_SDP_TYPE_OFFER, sdp);
    GstStructure *reply = NULL;
    GstWebRTCSessionDescription *local = NULL;
    if (ok) ok = call(v->webrtc, "set-remote-description", remote, NULL, error);
    gst_webrtc_session_description_free(remote);
    if (ok) ok = call(v->webrtc, "create-answer", NULL, &reply, error);
    if (ok) {
        if (reply) gst_structure_get(reply, "answer", GST_TYPE_WEBRTC_SESSION_DESCRIPTION, &local, NULL);
        if (!local) {
            ok = FALSE;
            *error = g_strdup("webrtcbin made no answer to the offer");
        }
    }
    if (reply) gst_structure_free(reply);
    if (ok) ok = call(v->webrtc, "set-local-description", local, NULL, error);
    if (local) gst_webrtc_session_description_free(local);
    if (ok) {
        watch_received(v);
        watch_dtls(v);
    }
    if (ok) {
        // The answer goes out once, with every candidate (WHEP has no trickle here).
        gint64 deadline = g_get_monotonic_time() + (gint64)timeout_ms * 1000;
        GstWebRTCICEGatheringState gathering = GST_WEBRTC_ICE_GATHERING_STATE_NEW;
        for (;;) {
            g_object_get(v->webrtc, "ice-gathering-state", &gathering, NULL);
            if (gathering == GST_WEBRTC_ICE_GATHERING_STATE_COMPLETE || g_get_monotonic_time() > deadline) break;
            g_usleep(5000);
        }
        GstWebRTCSessionDescription *described = NULL;
        g_object_get(v->webrtc, "local-description", &described, NULL);
        if (described) {
            *answer = gst_sdp_message_as_text(described->sdp);
            gst_webrtc_session_description_free(described);
        } else {
            ok = FALSE;
            *error = g_strdup("webrtcbin has no local description after the answer");
        }
    }
    if (!ok) {
        capture_webrtc_viewer_free(p, v);
        return NULL;
    }
    return v;
}

void capture_webrtc_viewer_free(capture_webrtc_pipeline *p, capture_webrtc_viewer *v) {
    if (!v) return;
    g_mutex_lock(&v->lock);
    v->closed = TRUE;
    g_mutex_unlock(&v->lock);
    g_mutex_lock(&p->lock);
    branch_stop(&v->video);
    branch_stop(&v->audio);
    if (v->dtls) {
        g_signal_handler_disconnect(v->dtls, v->dtls_handler);
        g_object_unref(v->dtls);
        v->dtls = NULL;
    }
    if (v->webrtc) {
        if (v->state_handler) g_signal_handler_disconnect(v->webrtc, v->state_handler);
        // Stopped, and out of the pipeline, before its queues (their threads may wait in its pads
        // until it stops); one never added to the pipeline is still floating.
        gst_object_ref_sink(v->webrtc);
        gst_element_set_state(v->webrtc, GST_STATE_NULL);
        if (GST_OBJECT_PARENT(v->webrtc)) gst_bin_remove(GST_BIN(p->pipeline), v->webrtc);
        gst_object_unref(v->webrtc);
        v->webrtc = NULL;
    }
    branch_remove(p, &v->video);
    branch_remove(p, &v->audio);
    g_mutex_unlock(&p->lock);
    g_mutex_clear(&v->lock);
    g_free(v);
}

capture_webrtc_stats capture_webrtc_viewer_stats(capture_webrtc_viewer *v) {
    capture_webrtc_stats s = {0};
    s.video_frames_sent = atomic_load_explicit(&v->video.frames, memory_order_relaxed);
    s.video_packets_sent = atomic_load_explicit(&v->video.out, memory_order_relaxed);
    s.audio_packets_sent = atomic_load_explicit(&v->audio.out, memory_order_relaxed);
    guint level = 0;
    uint64_t in = atomic_load_explicit(&v->video.in, memory_order_relaxed);
    if (v->video.queue) g_object_get(v->video.queue, "current-level-buffers", &level, NULL);
    s.video_packets_dropped = in > s.video_packets_sent + level ? in - s.video_packets_sent - level : 0;
    in = atomic_load_explicit(&v->audio.in, memory_order_relaxed);
    level = 0;
    if (v->audio.queue) g_object_get(v->audio.queue, "current-level-buffers", &level, NULL);
    s.audio_packets_dropped = in > s.audio_packets_sent + level ? in - s.audio_packets_sent - level : 0;
    GstWebRTCPeerConnectionState state = GST_WEBRTC_PEER_CONNECTION_STATE_NEW;
    if (v->webrtc) g_object_get(v->webrtc, "connection-state", &state, NULL);
    s.connection_state = (int)state;
    s.packets_received = atomic_load_explicit(&v->received, memory_order_relaxed);
    s.video_packets_with_playout_delay = atomic_load_explicit(&v->video.delayed, memory_order_relaxed);
    return s;
}
