// What Swift cannot call well in GStreamer: GObject's variadic property setters and signal
// emission, webrtcbin's promises, pad probes and the graph changes made while buffers flow. Swift
// sees only these opaque handles and plain C types; symbols carry the capture_webrtc_ prefix.
#ifndef CAPTURE_WEBRTC_H
#define CAPTURE_WEBRTC_H
#include <stddef.h>
#include <stdint.h>

/// The shared graph: H.264 access units and raw audio in, one packetizer per payload type, one
/// webrtcbin per viewer.
typedef struct capture_webrtc_pipeline capture_webrtc_pipeline;
/// One viewer: its webrtcbin and the leaky queues that feed it.
typedef struct capture_webrtc_viewer capture_webrtc_viewer;

/// Initialises GStreamer (once) and looks for every element factory the graph uses. NULL when all
/// are there, else the name of the first one missing (a static string), or "gstreamer" when
/// GStreamer itself cannot start.
const char *capture_webrtc_missing_element(void);

/// Makes the shared graph and sets it playing. `key_frame(ctx)` is called (on a GStreamer thread)
/// when a viewer asks for a key frame (PLI/FIR) or has just connected. `audio` adds the audio
/// branch (appsrc, Opus encoder at `opus_bitrate` bits per second), 0 for video only. NULL on
/// failure, with `*error` set (free it with capture_webrtc_string_free).
capture_webrtc_pipeline *capture_webrtc_pipeline_new(void (*key_frame)(void *ctx), void *ctx, int audio,
                                                     int opus_bitrate, char **error);
/// Stops the graph and frees it; every viewer must be freed first.
void capture_webrtc_pipeline_free(capture_webrtc_pipeline *pipeline);

/// Pushes one H.264 access unit (Annex B) without copying it: `release(release_ctx)` is called,
/// on any thread, once GStreamer is done with `bytes` (also when the push fails). `prefix` (the
/// parameter sets before a key frame) is copied. Returns 0, or -1 when the graph refused it.
int capture_webrtc_push_video(capture_webrtc_pipeline *pipeline, const void *bytes, size_t count, const void *prefix,
                              size_t prefix_count, void (*release)(void *ctx), void *release_ctx);
/// Sets the raw audio's format, before the first push and whenever it changes (e.g.
/// "audio/x-raw,format=S16LE,layout=interleaved,rate=48000,channels=2").
void capture_webrtc_set_audio_caps(capture_webrtc_pipeline *pipeline, const char *caps);
/// Pushes raw audio in the format last set (copied). Returns 0, or -1 (no audio branch).
int capture_webrtc_push_audio(capture_webrtc_pipeline *pipeline, const void *bytes, size_t count);

/// What one viewer has been sent and lost.
typedef struct {
    /// Video frames sent (RTP packets with the marker bit that left the viewer's queue).
    uint64_t video_frames_sent;
    /// Video RTP packets sent, and dropped by the viewer's leaky queue (it fell behind).
    uint64_t video_packets_sent;
    uint64_t video_packets_dropped;
    uint64_t audio_packets_sent;
    uint64_t audio_packets_dropped;
    /// GstWebRTCPeerConnectionState: 0 new, 1 connecting, 2 connected, 3 disconnected, 4 failed, 5 closed.
    int connection_state;
    /// Packets that arrived from the peer (DTLS, SRTP, SRTCP): a browser sends RTCP every
    /// second or more often while its connection lives; a count that stops says it is gone.
    uint64_t packets_received;
    /// Of the video packets sent, those with the playout-delay extension the answer agreed on.
    uint64_t video_packets_with_playout_delay;
} capture_webrtc_stats;

/// Makes a viewer for a browser's offer and answers it: links its queues to the packetizers for
/// `video_pt` (and `audio_pt` when >= 0 and the graph has audio; when the offer's video has the
/// playout-delay extension, the answer has it and every video packet carries min 0, max 200 ms),
/// then set-remote-description, create-answer, set-local-description, and waits for ICE
/// gathering to complete (at most `timeout_ms`). `stun` ("stun://host:port") may be NULL.
/// `addresses` (comma-separated IP addresses, e.g. "127.0.0.1") are the only ones ICE gathers
/// candidates on; NULL for every interface. `queue_packets` bounds each of the
/// viewer's queues (a viewer that falls behind loses the oldest). `state(ctx, state)` is called
/// on a GStreamer thread when the peer connection's state changes (and with 5, closed, when its
/// DTLS transport closes or fails). On success `*answer` is the
/// local description with its candidates (free it with capture_webrtc_string_free); on failure
/// NULL with `*error` set.
capture_webrtc_viewer *capture_webrtc_viewer_new(capture_webrtc_pipeline *pipeline, const char *offer, int video_pt,
                                                 int audio_pt, const char *stun, const char *addresses, int queue_packets,
                                                 int timeout_ms, void (*state)(void *ctx, int state), void *ctx, char **answer,
                                                 char **error);
/// Unlinks a viewer, stops its elements and frees them; `state` is not called after this returns.
void capture_webrtc_viewer_free(capture_webrtc_pipeline *pipeline, capture_webrtc_viewer *viewer);
/// The viewer's counts so far.
capture_webrtc_stats capture_webrtc_viewer_stats(capture_webrtc_viewer *viewer);

/// The first error the graph reported (its bus), or NULL; free it with capture_webrtc_string_free.
char *capture_webrtc_pipeline_error(capture_webrtc_pipeline *pipeline);
void capture_webrtc_string_free(char *string);
#endif
