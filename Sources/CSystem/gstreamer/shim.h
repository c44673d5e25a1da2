// GStreamer 1.22 with webrtcbin (Debian: libgstreamer1.0-dev, libgstreamer-plugins-base1.0-dev for
// appsrc and SDP, libgstreamer-plugins-bad1.0-dev for WebRTC); pkg-config glib-2.0 gives GLib's paths,
// include/gst (a link to /usr/include/gstreamer-1.0/gst) GStreamer's (see Package.swift); links
// gstreamer, app, sdp, webrtc. CaptureWebRTC's shim only: Swift sees none of it.
#define GST_USE_UNSTABLE_API 1
#include <gst/gst.h>
#include <gst/app/gstappsrc.h>
#include <gst/sdp/sdp.h>
#include <gst/webrtc/webrtc.h>
