// The GStreamer graph of CaptureWebRTC (see capture_webrtc.h). Shared part, built once:
//   appsrc (H.264 access units) -> tee -> [per payload type: rtph264pay -> tee]
//   appsrc (raw audio) -> audioconvert -> audioresample -> opusenc -> tee -> [per payload type: rtpopuspay -> tee]
// Per viewer: packetizer tee -> queue (leaky: drops the oldest) -> webrtcbin, for each medium.
// Graph changes (viewers coming and going, packetizers made and freed) are serialised by the
// pipeline's lock; buffers keep flowing to the other branches meanwhile.
#define GST_USE_UNSTABLE_API 1
#include "graph.h"
#include <gst/app/gstappsrc.h>
#include <gst/gst.h>
#include <gst/sdp/sdp.h>
#include <gst/webrtc/webrtc.h>
#include <stdatomic.h>
#include <string.h>

static const char *const factories[] = {
    "appsrc", "tee", "queue", "rtph264pay", "rtpopuspay", "opusenc", "audioconvert", "audioresample",
    "webrtcbin", "nicesrc", "nicesink", "dtlssrtpenc", "srtpenc", "rtpbin", NULL,
};

const char *capture_webrtc_missing_element(void) {
    if (!gst_init_check(NULL, NULL, NULL)) return "gstreamer";
    for (int i = 0; factories[i]; i++) {
        GstElementFactory *f = gst_element_factory_find(factories[i]);
        if (!f) return factories[i];
        gst_object_unref(f);
    }
    return NULL;
}

void capture_webrtc_string_free(char *string) { g_free(string); }

static GstBusSyncReply on_bus(GstBus *bus, GstMessage *message, gpointer data) {
    (void)bus;
    capture_webrtc_pipeline *p = data;
    if (GST_MESSAGE_TYPE(message) == GST_MESSAGE_ERROR) {
        GError *err = NULL;
        gchar *debug = NULL;
        gst_message_parse_error(message, &err, &debug);
        g_mutex_lock(&p->error_lock);
        if (!p->error) {
            p->error = g_strdup_printf("%s: %s", GST_OBJECT_NAME(GST_MESSAGE_SRC(message)), err ? err->message : "error");
        }
        g_mutex_unlock(&p->error_lock);
        g_clear_error(&err);
        g_free(debug);
    }
    // Nobody pops the bus: every message is dropped here, so none piles up. A sync handler that
    // drops a message owns it (each one keeps a reference to the element that posted it).
    gst_message_unref(message);
    return GST_BUS_DROP;
}

char *capture_webrtc_pipeline_error(capture_webrtc_pipeline *p) {
    g_mutex_lock(&p->error_lock);
    char *e = g_strdup(p->error);
    g_mutex_unlock(&p->error_lock);
    return e;
}

/// A viewer's PLI/FIR reaches the video appsrc as an upstream GstForceKeyUnit event.
static GstPadProbeReturn on_upstream_event(GstPad *pad, GstPadProbeInfo *info, gpointer data) {
    (void)pad;
    capture_webrtc_pipeline *p = data;
    GstEvent *event = GST_PAD_PROBE_INFO_EVENT(info);
    if (event && GST_EVENT_TYPE(event) == GST_EVENT_CUSTOM_UPSTREAM && gst_event_has_name(event, "GstForceKeyUnit")) {
        p->key_frame(p->ctx);
    }
    return GST_PAD_PROBE_OK;
}

static GstElement *make(const char *factory, char **error) {
    GstElement *e = gst_element_factory_make(factory, NULL);
    if (!e && error && !*error) *error = g_strdup_printf("GStreamer has no element %s", factory);
    return e;
}

static GstElement *live_source(const char *caps_text) {
    GstElement *src = gst_element_factory_make("appsrc", NULL);
    if (!src) return NULL;
    GstCaps *caps = caps_text ? gst_caps_from_string(caps_text) : NULL;
    g_object_set(src, "is-live", TRUE, "format", GST_FORMAT_TIME, "do-timestamp", TRUE, "caps", caps, NULL);
    // A graph that falls behind its source loses the oldest buffers rather than growing.
    gst_util_set_object_arg(G_OBJECT(src), "max-buffers", "64");
    gst_util_set_object_arg(G_OBJECT(src), "leaky-type", "downstream");
    if (caps) gst_caps_unref(caps);
    return src;
}

capture_webrtc_pipeline *capture_webrtc_pipeline_new(void (*key_frame)(void *), void *ctx, int audio, int opus_bitrate,
                                                     char **error) {
    *error = NULL;
    capture_webrtc_pipeline *p = g_new0(capture_webrtc_pipeline, 1);
    g_mutex_init(&p->lock);
    g_mutex_init(&p->error_lock);
    p->key_frame = key_frame;
    p->ctx = ctx;
    p->packetizers = g_ptr_array_new();
    p->pipeline = gst_pipeline_new("capture-webrtc");
    GstBus *bus = gst_pipeline_get_bus(GST_PIPELINE(p->pipeline));
    gst_bus_set_sync_handler(bus, on_bus, p, NULL);
    gst_object_unref(bus);

    p->video_src = live_source("video/x-h264,stream-format=byte-stream,alignment=au");
    p->video_tee = make("tee", error);
    if (!p->video_src || !p->video_tee) goto fail;
    g_object_set(p->video_tee, "allow-not-linked", TRUE, NULL);
    gst_bin_add_many(GST_BIN(p->pipeline), p->video_src, p->video_tee, NULL);
    if (!gst_element_link(p->video_src, p->video_tee)) goto fail;
    GstPad *src_pad = gst_element_get_static_pad(p->video_src, "src");
    gst_pad_add_probe(src_pad, GST_PAD_PROBE_TYPE_EVENT_UPSTREAM, on_upstream_event, p, NULL);
    gst_object_unref(src_pad);

    if (audio) {
        p->audio_src = live_source(NULL);
        GstElement *convert = make("audioconvert", error), *resample = make("audioresample", error);
        GstElement *opus = make("opusenc", error);
        p->opus_tee = make("tee", error);
        if (!p->audio_src || !convert || !resample || !opus || !p->opus_tee) goto fail;
        if (opus_bitrate > 0) g_object_set(opus, "bitrate", opus_bitrate, NULL);
        g_object_set(p->opus_tee, "allow-not-linked", TRUE, NULL);
        gst_bin_add_many(GST_BIN(p->pipeline), p->audio_src, convert, resample, opus, p->opus_tee, NULL);
        if (!gst_element_link_many(p->audio_src, convert, resample, opus, p->opus_tee, NULL)) {
            if (!*error) *error = g_strdup("the audio branch cannot be linked to the Opus encoder");
            goto fail;
        }
    }
    if (gst_element_set_state(p->pipeline, GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE) {
        if (!*error) *error = g_strdup("the GStreamer pipeline does not start");
        goto fail;
    }
    return p;
fail:
    if (!*error) *error = g_strdup("the GStreamer pipeline cannot be built");
    capture_webrtc_pipeline_free(p);
    return NULL;
}

void capture_webrtc_pipeline_free(capture_webrtc_pipeline *p) {
    if (!p) return;
    if (p->pipeline) {
        gst_element_set_state(p->pipeline, GST_STATE_NULL);
        gst_object_unref(p->pipeline);
    }
    g_ptr_array_free(p->packetizers, TRUE);
    g_free(p->error);
    g_mutex_clear(&p->lock);
    g_mutex_clear(&p->error_lock);
    g_free(p);
}

int capture_webrtc_push_video(capture_webrtc_pipeline *p, const void *bytes, size_t count, const void *prefix,
                              size_t prefix_count, void (*release)(void *), void *release_ctx) {
    if (count == 0) {
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
    return gst_app_src_push_buffer(GST_APP_SRC(p->video_src), buffer) == GST_FLOW_OK ? 0 : -1;
}

int capture_webrtc_push_audio(capture_webrtc_pipeline *p, const void *bytes, size_t count) {
    if (!p->audio_src || count == 0) return -1;
    GstBuffer *buffer = gst_buffer_new_memdup(bytes, count);
    return gst_app_src_push_buffer(GST_APP_SRC(p->audio_src), buffer) == GST_FLOW_OK ? 0 : -1;
}

void capture_webrtc_set_audio_caps(capture_webrtc_pipeline *p, const char *caps_text) {
    if (!p->audio_src) return;
    GstCaps *caps = gst_caps_from_string(caps_text);
    if (!caps) return;
    g_object_set(p->audio_src, "caps", caps, NULL);
    gst_caps_unref(caps);
}
