#!/bin/sh
# CI smoke of capture-bench: generates two small frames, runs hotpath (with the encoder pool)
# and passthrough for a fraction of a second each, record (one short round against ffmpeg),
# and preview (one short round, small sizes, on
# an Xvfb of its own when DISPLAY is unset), and checks that the JSON parses and says something
# sane. Exits non-zero on any failure.
#
#   Benchmarks/smoke.sh [SCRATCH_PATH]   (default: .build-bench-smoke, debug build)
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
SCRATCH=${1:-"$ROOT/.build-bench-smoke"}
TMP=$(mktemp -d)
XVFB=
trap '[ -n "$XVFB" ] && kill "$XVFB" 2>/dev/null; rm -rf "$TMP"' EXIT

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
# The recorder against ffmpeg -c:v libx264 (one short round) and MJPEG into MKV, files in $TMP.
"$BENCH" record --input "$TMP/f.yuyv" --size 320x240 --mjpeg "$TMP/f.mjpeg" --rounds 1 --short-frames 4 \
    --long-frames 12 --dir "$TMP" --json > "$TMP/record.json"

# preview draws real windows: without a display, an Xvfb that reports its display number itself.
if [ -z "${DISPLAY:-}" ]; then
    command -v Xvfb >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive apt-get install -y xvfb >&2
    Xvfb -displayfd 3 -screen 0 640x480x24 -nolisten tcp 3>"$TMP/display" 2>/dev/null &
    XVFB=$!
    i=0
    while [ ! -s "$TMP/display" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    [ -s "$TMP/display" ] || { echo "smoke: Xvfb did not start" >&2; exit 1; }
    DISPLAY=":$(head -n 1 "$TMP/display")"
    export DISPLAY
fi
"$BENCH" preview --size 320x180 --mjpeg-size 640x360 --window 160x90 --rounds 1 --seconds 0.5 --json > "$TMP/preview.json"

python3 - "$TMP/hotpath.json" "$TMP/pass.json" "$TMP/preview.json" "$TMP/record.json" <<'PY'
import json, math, sys
h = json.load(open(sys.argv[1]))
p = json.load(open(sys.argv[2]))
v = json.load(open(sys.argv[3]))
rec = json.load(open(sys.argv[4]))
problems = []
if h.get("mode") != "hotpath" or not h.get("fps", 0) > 0: problems.append("hotpath fps")
if not 100 < h.get("bytes_per_frame", 0) < 320 * 240 * 2: problems.append("hotpath bytes")
# Debug builds allocate in the measuring loop itself; the zero-allocation figure is a release one.
if not isinstance(h.get("allocations_per_frame_encode"), (int, float)): problems.append("allocation count")
if h.get("allocation_counter_active") is not True: problems.append("allocation counter inactive")
if h.get("pool_in_order") is not True or h.get("pool_dropped") != 0: problems.append("pool order/drops")
if p.get("mode") != "passthrough" or p.get("dht_inserted") is not True or not p.get("fps", 0) > 0:
    problems.append("passthrough")
def positive(k): return isinstance(v.get(k), (int, float)) and math.isfinite(v[k]) and v[k] > 0
if v.get("mode") != "preview" or not all(positive(k) for k in
        ["yuyv_frames_drawn_preview", "yuyv_frames_drawn_upload", "yuyv_cpu_ratio", "mjpeg_speed_ratio"]):
    problems.append("preview")
# 640x360 into 160x90: TurboJPEG's 1/4, on both routes (the bench fails itself when they differ).
if v.get("mjpeg_decoded_size") != "160x90": problems.append("preview scaled size")
def rfinite(k): return isinstance(rec.get(k), (int, float)) and math.isfinite(rec[k])
def rpositive(k): return rfinite(k) and rec[k] > 0
# ffmpeg's figure is a 12- minus a 4-frame run's CPU: in so short a round its start-up noise can
# exceed the 8 frames' cost (seen: -0.38 ms), so it and the ratio need only be numbers here.
if rec.get("mode") != "record" or not all(rpositive(k) for k in
        ["ours_cpu_ms_per_frame", "mjpeg_ratio_to_memcpy", "mjpeg_ratio_to_write"]) \
        or not all(rfinite(k) for k in ["h264_ratio", "ffmpeg_cpu_ms_per_frame"]):
    problems.append("record figures")
# Both sides encoded alike, and our file is about as large (a broken frame copy compresses far better).
if rec.get("same_x264_options") is not True or rec.get("default_settings") is not True: problems.append("record x264 options")
if not 0.7 < rec.get("ours_file_bytes", 0) / max(1, rec.get("ffmpeg_file_bytes", 0)) < 1.4: problems.append("record file sizes")
if not isinstance(rec.get("allocations_per_frame_ours"), (int, float)): problems.append("record allocation count")
if problems:
    print("smoke: FAILED: " + ", ".join(problems), file=sys.stderr)
    print(json.dumps(h), json.dumps(p), json.dumps(v), json.dumps(rec), file=sys.stderr)
    sys.exit(1)
print("smoke: ok: hotpath %.0f fps/core, %.0f B/frame, %.2f allocations per encode; passthrough %.0f fps; "
      "preview %.2fx the texture upload, scaled decode %.2fx TurboJPEG's" %
      (h["fps"], h["bytes_per_frame"], h["allocations_per_frame_encode"], p["fps"], v["yuyv_cpu_ratio"], v["mjpeg_speed_ratio"]))
print("smoke: ok: record H.264 %.2fx ffmpeg's CPU per frame, MJPEG into MKV %.2fx write()" %
      (rec["h264_ratio"], rec["mjpeg_ratio_to_write"]))
PY
