// The playout-delay RTP header extension (http://www.webrtc.org/experiments/rtp-hdrext/playout-delay),
// which GStreamer 1.22 has no element for: written by the video payloader on every packet, and
// read back from the packets leaving a viewer's queue.
#include "graph.h"
#include <gst/rtp/rtp.h>
#include <string.h>

#define PLAYOUT_DELAY_URI "http://www.webrtc.org/experiments/rtp-hdrext/playout-delay"

// Three bytes: the minimum and maximum delay, 12 bits each, in 10 ms units. A minimum of 0 and a
// maximum of at most 500 ms turn on Chromium's low-latency path (VCMTiming::UseLowLatencyRendering:
// frames decoded and rendered as soon as they are complete); a maximum above 0 keeps its pacing
// of frames that arrive in a burst.
enum { playout_delay_min = 0, playout_delay_max = 20 };

typedef struct {
    GstRTPHeaderExtension parent;
} CapturePlayoutDelay;
typedef struct {
    GstRTPHeaderExtensionClass parent_class;
} CapturePlayoutDelayClass;

G_DEFINE_TYPE(CapturePlayoutDelay, capture_playout_delay, GST_TYPE_RTP_HEADER_EXTENSION)

static GstRTPHeaderExtensionFlags supported_flags(GstRTPHeaderExtension *ext) {
    (void)ext;
    return GST_RTP_HEADER_EXTENSION_ONE_BYTE | GST_RTP_HEADER_EXTENSION_TWO_BYTE;
}

static gsize max_size(GstRTPHeaderExtension *ext, const GstBuffer *input) {
    (void)ext;
    (void)input;
    return 3;
}

static gssize write_delay(GstRTPHeaderExtension *ext, const GstBuffer *input, GstRTPHeaderExtensionFlags flags,
                          GstBuffer *output, guint8 *data, gsize size) {
    (void)ext;
    (void)input;
    (void)flags;
    (void)output;
    if (size < 3) return -1;
    data[0] = (guint8)(playout_delay_min >> 4);
    data[1] = (guint8)(((playout_delay_min & 0xf) << 4) | (playout_delay_max >> 8));
    data[2] = (guint8)(playout_delay_max & 0xff);
    return 3;
}

static gboolean read_delay(GstRTPHeaderExtension *ext, GstRTPHeaderExtensionFlags flags, const guint8 *data, gsize size,
                           GstBuffer *buffer) {
    (void)ext;
    (void)flags;
    (void)data;
    (void)size;
    (void)buffer;
    return TRUE;  // (only sent here)
}

static void capture_playout_delay_class_init(CapturePlayoutDelayClass *klass) {
    GstRTPHeaderExtensionClass *ext = GST_RTP_HEADER_EXTENSION_CLASS(klass);
    ext->get_supported_flags = supported_flags;
    ext->get_max_size = max_size;
    ext->write = write_delay;
    ext->read = read_delay;
    gst_element_class_set_static_metadata(GST_ELEMENT_CLASS(klass), "Playout delay", GST_RTP_HDREXT_ELEMENT_CLASS,
                                          "Asks the receiver for no playout delay", "swift-capture");
    gst_rtp_header_extension_class_set_uri(ext, PLAYOUT_DELAY_URI);
}

static void capture_playout_delay_init(CapturePlayoutDelay *self) { (void)self; }

int playout_delay_offered(const GstSDPMessage *sdp) {
    for (guint i = 0; i < gst_sdp_message_medias_len(sdp); i++) {
        const GstSDPMedia *m = gst_sdp_message_get_media(sdp, i);
        if (g_strcmp0(gst_sdp_media_get_media(m), "video") != 0) continue;
        for (guint k = 0; k < gst_sdp_media_attributes_len(m); k++) {
            const GstSDPAttribute *a = gst_sdp_media_get_attribute(m, k);
            if (g_strcmp0(a->key, "extmap") != 0 || !a->value) continue;
            // "ID[/direction] URI [attributes]"
            gchar **fields = g_strsplit(a->value, " ", 3);
            int id = 0;
            if (g_strv_length(fields) >= 2 && strcmp(fields[1], PLAYOUT_DELAY_URI) == 0) {
                gchar *slash = strchr(fields[0], '/');
                gboolean receives = !slash || strcmp(slash + 1, "recvonly") == 0 || strcmp(slash + 1, "sendrecv") == 0;
                gint64 n = g_ascii_strtoll(fields[0], NULL, 10);
                if (receives && n >= 1 && n <= 255) id = (int)n;
            }
            g_strfreev(fields);
            if (id) return id;
        }
        return 0;  // (the first video m-line is the one answered)
    }
    return 0;
}

void playout_delay_prefer(GstCaps *caps, int id) {
    gchar *field = g_strdup_printf("extmap-%d", id);
    gst_structure_set(gst_caps_get_structure(caps, 0), field, G_TYPE_STRING, PLAYOUT_DELAY_URI, NULL);
    g_free(field);
}

void playout_delay_add(GstElement *payloader, int id) {
    GstRTPHeaderExtension *ext = g_object_new(capture_playout_delay_get_type(), NULL);
    gst_object_ref_sink(ext);
    gst_rtp_header_extension_set_id(ext, (guint)id);
    // Only this one, whatever extmaps downstream caps name.
    g_object_set(payloader, "auto-header-extension", FALSE, NULL);
    g_signal_emit_by_name(payloader, "add-extension", ext);
    gst_object_unref(ext);
}

gboolean playout_delay_carried(const guint8 *d, gsize n, int id) {
    // RTP: version 2 with the X bit; the extension block follows the CSRCs.
    if (n < 12 || (d[0] >> 6) != 2 || !(d[0] & 0x10)) return FALSE;
    gsize at = 12 + 4 * (gsize)(d[0] & 0x0f);
    if (n < at + 4) return FALSE;
    guint profile = (guint)d[at] << 8 | d[at + 1];
    gsize end = at + 4 + 4 * ((gsize)d[at + 2] << 8 | d[at + 3]);
    gboolean one_byte = profile == 0xBEDE, two_byte = (profile & 0xFFF0) == 0x1000;
    if ((!one_byte && !two_byte) || end > n) return FALSE;
    for (gsize i = at + 4; i < end;) {
        if (d[i] == 0) {  // padding
            i++;
            continue;
        }
        guint element, length;
        if (one_byte) {
            element = d[i] >> 4;
            length = (d[i] & 0x0f) + 1u;
            if (element == 15) break;
            i += 1;
        } else {
            if (i + 1 >= end) break;
            element = d[i];
            length = d[i + 1];
            i += 2;
        }
        if (i + length > end) break;
        if ((int)element == id) {
            return length == 3 && ((guint)d[i] << 4 | d[i + 1] >> 4) == playout_delay_min &&
                   ((guint)(d[i + 1] & 0x0f) << 8 | d[i + 2]) == playout_delay_max;
        }
        i += length;
    }
    return FALSE;
}
