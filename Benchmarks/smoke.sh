#!/bin/sh
# CI smoke of capture-bench: generates two small frames, runs hotpath (with the encoder pool)
# and passthrough for a fraction of a second each, and checks that the JSON parses and says
# something sane. Exits non-zero on any failure.
#
#   Benchmarks/smoke.sh [SCRATCH_PATH]   (default: .build-bench-smoke, debug build)
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
SCRATCH=${1:-"$ROOT/.build-bench-smoke"}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

(cd "$ROOT" && swift build --product capture-bench --scratch-path "$SCRATCH" >&2)
BENCH="$SCRATCH/debug/capture-bench"

command -v ffmpeg >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive apt-get install -y ffmpeg >&2
ffmpeg -loglevel error -nostdin -y -f lavfi -i "testsrc2=size=320x240:rate=30" -frames:v 2 \
    -vf "format=yuyv422" -f rawvideo "$TMP/f.yuyv"
ffmpeg -loglevel error -nostdin -y -f rawvideo -pix_fmt yuyv422 -s 320x240 -i "$TMP/f.yuyv" \
    -pix_fmt yuvj422p -c:v mjpeg -f mjpeg "$TMP/f.mjpeg"

"$BENCH" hotpath --input "$TMP/f.yuyv" --size 320x240 --format YUYV --quality 85 --threads 2 \
    --seconds 0.3 --json > "$TMP/hotpath.json"
"$BENCH" passthrough --input "$TMP/f.mjpeg" --strip-dht --seconds 0.2 --json > "$TMP/pass.json"

python3 - "$TMP/hotpath.json" "$TMP/pass.json" <<'PY'
import json, sys
h = json.load(open(sys.argv[1]))
p = json.load(open(sys.argv[2]))
problems = []
if h.get("mode") != "hotpath" or not h.get("fps", 0) > 0: problems.append("hotpath fps")
if not 100 < h.get("bytes_per_frame", 0) < 320 * 240 * 2: problems.append("hotpath bytes")
# Debug builds allocate in the measuring loop itself; the zero-allocation figure is a release one.
if not isinstance(h.get("allocations_per_frame_encode"), (int, float)): problems.append("allocation count")
if h.get("allocation_counter_active") is not True: problems.append("allocation counter inactive")
if h.get("pool_in_order") is not True or h.get("pool_dropped") != 0: problems.append("pool order/drops")
if p.get("mode") != "passthrough" or p.get("dht_inserted") is not True or not p.get("fps", 0) > 0:
    problems.append("passthrough")
if problems:
    print("smoke: FAILED: " + ", ".join(problems), file=sys.stderr)
    print(json.dumps(h), json.dumps(p), file=sys.stderr)
    sys.exit(1)
print("smoke: ok: hotpath %.0f fps/core, %.0f B/frame, %.2f allocations per encode; passthrough %.0f fps" %
      (h["fps"], h["bytes_per_frame"], h["allocations_per_frame_encode"], p["fps"]))
PY
