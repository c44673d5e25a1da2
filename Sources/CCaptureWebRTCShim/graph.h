// The graph's structures, shared by pipeline.c and viewer.c (not seen by Swift).
#ifndef CAPTURE_WEBRTC_GRAPH_H
#define CAPTURE_WEBRTC_GRAPH_H
#define GST_USE_UNSTABLE_API 1
#include "capture_webrtc.h"
#include <gst/gst.h>
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
};

struct capture_webrtc_viewer {
    GstElement *webrtc;
    struct branch video;
    struct branch audio;
    gulong state_handler;
    GMutex lock;
    gboolean closed;
    void (*state)(void *, int);
    void *ctx;
    capture_webrtc_pipeline *pipeline;
};

#endif
