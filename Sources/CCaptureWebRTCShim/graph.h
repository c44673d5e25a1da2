// The graph's structures, shared by pipeline.c and viewer.c (not seen by Swift).
#ifndef CAPTURE_WEBRTC_GRAPH_H
#define CAPTURE_WEBRTC_GRAPH_H
#define GST_USE_UNSTABLE_API 1
#include "capture_webrtc.h"
#include <gst/gst.h>
#include <gst/sdp/sdp.h>
#include <stdatomic.h>

struct packetizer {
    char *key;
    GstElement *pay;
    GstElement *tee;
    /// The shared tee's request pad that feeds `pay`.
    GstPad *feed;
    /// The profile-level-id the viewers agreed on (video), written on the payloader's caps.
    char *profile;
    int users;
};

struct capture_webrtc_pipeline {
    GstElement *pipeline;
    GstElement *video_src;
    GstElement *video_tee;
    GstElement *audio_src;
    GstElement *opus_tee;
    GMutex lock;
    GPtrArray *packetizers;
    void (*key_frame)(void *);
    void *ctx;
    GMutex error_lock;
    char *error;
};

struct branch {
    struct packetizer *packetizer;
    GstElement *queue;
    GstPad *tee_pad;
    _Atomic uint64_t in;
    _Atomic uint64_t out;
    _Atomic uint64_t frames;
    /// The playout-delay extension's ID (video, 0 for none), and the packets that carried it.
    int playout_delay_id;
    _Atomic uint64_t delayed;
};

struct capture_webrtc_viewer {
    GstElement *webrtc;
    struct branch video;
    struct branch audio;
    gulong state_handler;
    /// The DTLS transport of the bundle (a ref) and its state handler: a closed or failed DTLS
    /// ends the viewer even while ICE still looks up.
    GObject *dtls;
    gulong dtls_handler;
    /// Packets that arrived from the peer (DTLS, SRTP, SRTCP; not ICE's own STUN).
    _Atomic uint64_t received;
    int playout_delay_id;
    GMutex lock;
    gboolean closed;
    void (*state)(void *, int);
    void *ctx;
    capture_webrtc_pipeline *pipeline;
};

/// The playout-delay extension's ID in the offer's first video m-line (for what the browser
/// receives), or 0 when it does not offer it (playout_delay.c).
int playout_delay_offered(const GstSDPMessage *sdp);
/// Adds the extension with `id` to a transceiver's codec preferences (so the answer has it).
void playout_delay_prefer(GstCaps *caps, int id);
/// Has `payloader` write the extension with `id` on every packet.
void playout_delay_add(GstElement *payloader, int id);
/// Whether the RTP packet (its first `n` bytes) carries the extension with `id` and our values.
gboolean playout_delay_carried(const guint8 *data, gsize n, int id);

#endif
