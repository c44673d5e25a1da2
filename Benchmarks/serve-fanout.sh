#!/bin/sh
# `capture serve` on the virtual camera (host, release build): server CPU with MANY readers of
# /stream (plus one connected client that never reads) against CPU with one reader, over the same
# window, in interleaved rounds (the order alternates); median of the per-round ratios. Goal of
# issue 13: at most 2.5 with 20 readers. Also reports the share of the camera's frames the slowest
# reader got.
#
#   Benchmarks/serve-fanout.sh [--size 1280x720] [--many 20] [--rounds 5] [--seconds 10] [--quality 80]
#
# CAPTURE=path uses a capture tool built elsewhere (it must be a release build).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
if [ -z "${CAPTURE:-}" ]; then
    (cd "$ROOT" && swift build -c release --product capture --scratch-path "$ROOT/.build-rel" >&2)
    CAPTURE="$ROOT/.build-rel/release/capture"
fi
exec python3 "$HERE/serve_bench.py" fanout --capture "$CAPTURE" --size 1280x720 "$@"
