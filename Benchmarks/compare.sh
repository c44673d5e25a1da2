#!/bin/sh
# Side by side on the same frames, same quality, same run: swift-capture's hot path
# (capture-bench hotpath) against the direct libjpeg-turbo ceiling (ceiling/ceiling.c), ffmpeg's
# mjpeg encoder, GStreamer jpegenc, OpenCV cvtColor + imencode and Pillow. Writes BENCHMARKS.md
# and benchmarks.svg (drawn here, plain SVG text).
#
#   Benchmarks/compare.sh [--quick]
#
# Every figure is per core: CPU time (user + system) per frame, so that other load on the
# machine does not inflate it; the wall-clock rate is kept in the raw results
# (Benchmarks/out/results.json). Tools that start up (ffmpeg, gst-launch) are run twice with
# different frame counts and charged only the difference.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
OUT="$HERE/out"
mkdir -p "$OUT"
PY=/usr/bin/python3   # Debian's python, where python3-opencv and python3-pil live

need_apt() { # command package...
    command -v "$1" >/dev/null 2>&1 && return 0
    shift
    DEBIAN_FRONTEND=noninteractive apt-get install -y "$@" >&2
}
need_apt ffmpeg ffmpeg
need_apt gst-launch-1.0 gstreamer1.0-tools gstreamer1.0-plugins-good gstreamer1.0-plugins-base
need_apt gcc gcc
[ -f /usr/include/turbojpeg.h ] || DEBIAN_FRONTEND=noninteractive apt-get install -y libturbojpeg0-dev libjpeg62-turbo-dev >&2
$PY -c 'import cv2' 2>/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y python3-opencv >&2 \
    || pip install opencv-python-headless >&2
$PY -c 'import PIL' 2>/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y python3-pil >&2 \
    || pip install pillow >&2

gcc -O3 -Wall -o "$HERE/ceiling/ceiling" "$HERE/ceiling/ceiling.c" -ljpeg -lturbojpeg
# CAPTURE_BENCH=path uses a capture-bench built elsewhere (it must be a release build).
if [ -n "${CAPTURE_BENCH:-}" ]; then
    BENCH=$CAPTURE_BENCH
else
    (cd "$ROOT" && swift build -c release --product capture-bench --scratch-path "$ROOT/.build-bench-rel" >&2)
    BENCH="$ROOT/.build-bench-rel/release/capture-bench"
fi

CONTENTS="testsrc2 noisy detailed" FORMATS=yuyv422 "$HERE/make-frames.sh" "$HERE/frames" 6 >&2

QUICK=0
[ "${1:-}" = "--quick" ] && QUICK=1
export HERE OUT BENCH QUICK ROOT
exec $PY "$HERE/compare.py"
