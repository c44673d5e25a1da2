#!/bin/sh
# `capture serve` against uStreamer on one vivid device in the QEMU/TCG VM (issue 13): same size,
# format (YUYV), JPEG quality and one worker; each serves CLIENTS readers of /stream; the two take
# turns on the device in interleaved rounds (the order alternates). Prints each round and a JSON
# summary (also in the VM's results directory): CPU per client-frame (server process CPU from
# /proc/PID/stat over the window / parts the readers received) and the delay from a frame's
# capture timestamp to its last byte at the reader; medians of the per-round CPU ratios ours/theirs
# and of the per-round delay differences ours - theirs (p50).
#
#   Benchmarks/serve-vs-ustreamer.sh [--size 640x360] [--fps 30] [--rounds 5] [--seconds 10] [--clients 4] [--quality 80]
#
# vivid under TCG makes about 5 fps at 1280x720. Pick a size and rate both servers keep up with
# (fps per client in the output near --fps): on the shared 2-core host 640x360 at 30 fps was too
# much for both; 320x180 at 15 fps was not.
# CAPTURE=path uses a capture tool built elsewhere (it must be a release build).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
command -v ustreamer >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive apt-get install -y ustreamer >&2
if [ -z "${CAPTURE:-}" ]; then
    (cd "$ROOT" && swift build -c release --product capture --scratch-path "$ROOT/.build-rel" >&2)
    CAPTURE="$ROOT/.build-rel/release/capture"
fi
"$ROOT/scripts/vm/prepare" >&2
cd "$ROOT"
exec scripts/vm/run --quiet --vivid "n_devs=1" -- \
    python3 Benchmarks/serve_bench.py vs-ustreamer --capture "$CAPTURE" --device /dev/video0 "$@"
