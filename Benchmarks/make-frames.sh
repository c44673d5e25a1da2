#!/bin/sh
# Generates reproducible camera-like raw test frames for capture-bench and compare.sh.
#
#   Benchmarks/make-frames.sh [OUTDIR] [FRAMES]
#
# Writes OUTDIR/<content>-<W>x<H>.<fmt>.raw: consecutive raw frames in the layout V4L2 uses
# (yuyv422 = YUYV, uyvy422 = UYVY, nv12 = NV12, yuv420p = YU12), limited range like a camera.
# Contents: testsrc2 (moving test card), noisy (testsrc2 + temporal sensor-like noise),
# detailed (a zooming Mandelbrot with fine structure and noise: hard to compress, like foliage).
# Same ffmpeg, same bytes: every source is deterministic (noise uses a fixed seed).
set -eu
OUT=${1:-"$(dirname "$0")/frames"}
FRAMES=${2:-6}
SIZES=${SIZES:-"1280x720 1920x1080"}
FORMATS=${FORMATS:-"yuyv422 uyvy422 nv12 yuv420p"}
CONTENTS=${CONTENTS:-"testsrc2 noisy detailed"}

if ! command -v ffmpeg >/dev/null 2>&1; then
    echo "make-frames: installing ffmpeg" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y ffmpeg >&2
fi
mkdir -p "$OUT"

source_for() { # content size
    case "$1" in
    testsrc2) echo "testsrc2=size=$2:rate=30" ;;
    noisy) echo "testsrc2=size=$2:rate=30,noise=alls=14:allf=t+u:all_seed=4242" ;;
    detailed) echo "mandelbrot=size=$2:rate=30:start_scale=0.05:end_scale=0.0001:maxiter=256:end_pts=400,noise=alls=8:allf=t:all_seed=7" ;;
    *) echo "make-frames: unknown content $1" >&2; exit 2 ;;
    esac
}

for size in $SIZES; do
    for content in $CONTENTS; do
        src=$(source_for "$content" "$size")
        for fmt in $FORMATS; do
            f="$OUT/$content-$size.$fmt.raw"
            [ -s "$f" ] && continue
            # Skip the first second: testsrc2 and mandelbrot are still settling at t=0.
            ffmpeg -loglevel error -nostdin -y -f lavfi -i "$src" -ss 1 -frames:v "$FRAMES" \
                -vf "scale=out_range=tv,format=$fmt" -f rawvideo "$f.part"
            mv "$f.part" "$f"
            echo "$f"
        done
    done
done
