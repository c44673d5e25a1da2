// gst-rtsp-server 1.22 (Debian: libgstrtspserver-1.0-dev, with libgstreamer1.0-dev and
// libgstreamer-plugins-base1.0-dev for GStreamer, appsrc and RTSP's messages); pkg-config glib-2.0
// gives GLib's paths, include/gst (a link to /usr/include/gstreamer-1.0/gst) the
// headers (see Package.swift); links the server, app, base and gstreamer. CaptureRTSP's shim
// only: Swift sees none of it.
#include <gst/gst.h>
#include <gst/app/gstappsrc.h>
#include <gst/rtsp-server/rtsp-server.h>
