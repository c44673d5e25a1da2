"""Driver for compare.sh: runs every encoder on the same frames and writes BENCHMARKS.md + SVG.

Per-core figures are CPU seconds (user + system) per frame. Child processes are measured with
wait4's rusage; tools with start-up cost are run at two frame counts and charged the difference.
"""
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import cv2
import numpy as np
from PIL import Image

HERE = os.environ["HERE"]
OUT = os.environ["OUT"]
BENCH = os.environ["BENCH"]
ROOT = os.environ["ROOT"]
QUICK = os.environ.get("QUICK") == "1"
FRAMES = os.path.join(HERE, "frames")
CEILING = os.path.join(HERE, "ceiling", "ceiling")
SIZES = [(1280, 720), (1920, 1080)]
QUALITIES = [85, 90]
CONTENTS = ["testsrc2", "noisy", "detailed"]
ROUNDS = 1 if QUICK else 6   # ceiling and swift-capture, interleaved
TOOL_ROUNDS = 1 if QUICK else 2
SECONDS = "1" if QUICK else "2"
SHM = "/dev/shm/capture-bench-compare"
os.makedirs(SHM, exist_ok=True)
cv2.setNumThreads(1)


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def run(cmd, capture=True):
    """Runs cmd; returns (stdout, cpu seconds of the child and its children, wall seconds)."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE if capture else subprocess.DEVNULL, stderr=subprocess.PIPE)
    out, err = p.communicate()
    wall = time.monotonic() - t0
    # communicate() reaped the child; its rusage is in RUSAGE_CHILDREN deltas.
    if p.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed ({p.returncode}): {err.decode()[-2000:]}")
    return out.decode() if capture else "", wall


def child_cpu():
    r = os.times()
    return r.children_user + r.children_system


def timed(cmd):
    c0 = child_cpu()
    out, wall = run(cmd)
    return out, child_cpu() - c0, wall


def mix_file(w, h):
    """The three contents, 6 frames each, one after another: 18 frames of varied difficulty."""
    path = os.path.join(SHM, f"mix-{w}x{h}.yuyv422.raw")
    if not os.path.exists(path):
        with open(path, "wb") as f:
            for c in CONTENTS:
                with open(os.path.join(FRAMES, f"{c}-{w}x{h}.yuyv422.raw"), "rb") as g:
                    f.write(g.read())
    return path


def repeated(path, times):
    rep = path + f".x{times}"
    if not os.path.exists(rep):
        data = open(path, "rb").read()
        with open(rep, "wb") as f:
            for _ in range(times):
                f.write(data)
    return rep


def ceiling(path, w, h, q, route):
    out, _, _ = timed([CEILING, path, str(w), str(h), str(q), "422", route, SECONDS])
    name, fps, ms, nbytes, wall_fps, best = out.split()
    return {"fps": float(best), "median_fps": float(fps), "bytes": float(nbytes), "wall_fps": float(wall_fps)}


def ours(path, w, h, q):
    out, _, _ = timed([BENCH, "hotpath", "--input", path, "--size", f"{w}x{h}", "--format", "YUYV",
                       "--quality", str(q), "--seconds", SECONDS, "--json"])
    j = json.loads(out)
    return {"fps": j["best_fps"], "median_fps": j["fps"], "bytes": j["bytes_per_frame"], "wall_fps": j["wall_fps"], "raw": j}


def two_counts(make_cmd, frames_small, frames_big):
    """CPU per frame from the difference of two runs (start-up cost cancels); the best of a few."""
    pers, walls = [], []
    for _ in range(TOOL_ROUNDS):
        _, c_small, w_small = timed(make_cmd(False))
        _, c_big, w_big = timed(make_cmd(True))
        pers.append((c_big - c_small) / (frames_big - frames_small))
        walls.append((w_big - w_small) / (frames_big - frames_small))
    return min(pers), min(walls)


def file_frames(path, frame_bytes):
    return os.path.getsize(path) // frame_bytes


def ffmpeg_cmd(path, w, h, qscale, loops, out="-", fmt="null"):
    return ["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-threads", "1", "-filter_threads", "1",
            "-f", "rawvideo", "-pix_fmt", "yuyv422", "-s", f"{w}x{h}", "-stream_loop", str(loops), "-i", path,
            "-pix_fmt", "yuvj422p", "-c:v", "mjpeg", "-q:v", str(qscale), "-threads", "1", "-f", fmt, out]


def ffmpeg_bytes(path, w, h, qscale, n):
    out = os.path.join(SHM, "ffmpeg.mjpeg")
    run(ffmpeg_cmd(path, w, h, qscale, 0, out, "mjpeg"))
    return os.path.getsize(out) / n


def ffmpeg(path, w, h, target_bytes, n):
    # ffmpeg's mjpeg takes a quantiser scale, not libjpeg's quality: pick the one whose output
    # size is closest to the ceiling's, so the comparison is at comparable quality.
    best = min(range(1, 9), key=lambda s: abs(ffmpeg_bytes(path, w, h, s, n) - target_bytes))
    per, wall = two_counts(lambda big: ffmpeg_cmd(path, w, h, best, 4 if big else 0), n, 5 * n)
    return {"fps": 1 / per, "bytes": ffmpeg_bytes(path, w, h, best, n), "wall_fps": 1 / wall,
            "note": f"-q:v {best} (closest size)"}


def gst_cmd(path, w, h, q, sink):
    return ["gst-launch-1.0", "-q", "filesrc", f"location={path}", f"blocksize={w * h * 2}", "!",
            "rawvideoparse", f"width={w}", f"height={h}", "format=yuy2", "framerate=30/1", "!",
            "jpegenc", f"quality={q}", "!"] + sink


def gstreamer(path, w, h, q, n):
    big = repeated(path, 5)
    per, wall = two_counts(lambda b: gst_cmd(big if b else path, w, h, q, ["fakesink", "sync=false"]), n, 5 * n)
    out = os.path.join(SHM, "gst.mjpeg")
    run(gst_cmd(path, w, h, q, ["filesink", f"location={out}"]))
    return {"fps": 1 / per, "bytes": os.path.getsize(out) / n, "wall_fps": 1 / wall}


def load_frames(path, w, h):
    data = np.fromfile(path, dtype=np.uint8)
    return list(data.reshape(-1, h, w, 2))


def in_process(encode, frames):
    for f in frames:  # warm-up
        encode(f)
    per, sizes = [], []
    t_end = time.monotonic() + float(SECONDS)
    while time.monotonic() < t_end or len(per) < 3:
        c0 = time.thread_time()
        for f in frames:
            sizes.append(len(encode(f)))
        per.append((time.thread_time() - c0) / len(frames))
    return {"fps": 1 / min(per), "median_fps": 1 / statistics.median(per), "bytes": sum(sizes) / len(sizes)}


def opencv(frames, q):
    def enc(f):
        bgr = cv2.cvtColor(f, cv2.COLOR_YUV2BGR_YUYV)
        ok, buf = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, q])
        return buf
    r = in_process(enc, frames)
    r["note"] = "4:2:0 (OpenCV 4.6 has no sampling option)"
    return r


def pillow(frames, q):
    def enc(f):
        # YUYV to Pillow's YCbCr (4:4:4 interleaved), then JPEG 4:2:2 without colour conversion.
        y = f[:, :, 0]
        c = f[:, :, 1]
        u = np.repeat(c[:, 0::2], 2, axis=1)
        v = np.repeat(c[:, 1::2], 2, axis=1)
        img = Image.fromarray(np.dstack((y, u, v)), "YCbCr")
        b = io.BytesIO()
        img.save(b, "JPEG", quality=q, subsampling=1)
        return b.getbuffer()
    return in_process(enc, frames)


def med_of(runs, key):
    # "fps" is each run's fastest pass: take the fastest run too; the rest are medians.
    if key == "fps":
        return max(r[key] for r in runs)
    return statistics.median(r[key] for r in runs)


def bench_json(args):
    out, _, _ = timed([BENCH] + args + ["--json"])
    return json.loads(out)


def main():
    results = {"configs": []}
    for (w, h) in SIZES:
        path = mix_file(w, h)
        n = file_frames(path, w * h * 2)
        frames = load_frames(path, w, h)
        for q in QUALITIES:
            log(f"== {w}x{h} q{q}")
            c_raw, c_tj, mine = [], [], []
            for _ in range(ROUNDS):  # interleaved, so that load drifts hit all alike
                c_raw.append(ceiling(path, w, h, q, "raw"))
                mine.append(ours(path, w, h, q))
                c_tj.append(ceiling(path, w, h, q, "yuvplanes"))
            rows = {
                "ceiling (raw-data stripes, C)": {"fps": med_of(c_raw, "fps"), "bytes": med_of(c_raw, "bytes"),
                                                  "wall_fps": med_of(c_raw, "wall_fps")},
                "ceiling (tjCompressFromYUVPlanes, C)": {"fps": med_of(c_tj, "fps"), "bytes": med_of(c_tj, "bytes"),
                                                        "wall_fps": med_of(c_tj, "wall_fps")},
                "swift-capture hot path": {"fps": med_of(mine, "fps"), "bytes": med_of(mine, "bytes"),
                                           "wall_fps": med_of(mine, "wall_fps"),
                                           "allocations_per_frame": mine[-1]["raw"]["allocations_per_frame_encode"]},
            }
            top = max(rows["ceiling (raw-data stripes, C)"]["fps"], rows["ceiling (tjCompressFromYUVPlanes, C)"]["fps"])
            target = rows["ceiling (raw-data stripes, C)"]["bytes"]
            log("  ffmpeg"); rows["ffmpeg mjpeg"] = ffmpeg(path, w, h, target, n)
            log("  gstreamer"); rows["GStreamer jpegenc"] = gstreamer(path, w, h, q, n)
            log("  opencv"); rows["OpenCV cvtColor + imencode"] = opencv(frames, q)
            log("  pillow"); rows["Pillow (numpy deinterleave + save)"] = pillow(frames, q)
            for r in rows.values():
                r["ratio"] = r["fps"] / top
                r["bytes_vs_ceiling"] = r["bytes"] / target - 1
            results["configs"].append({"width": w, "height": h, "quality": q, "frames": n, "ceiling_fps": top,
                                       "rows": rows})
            for k, r in rows.items():
                log(f"  {k:40s} {r['fps']:8.1f} fps/core  x{r['ratio']:.3f}  {r['bytes']:.0f} B")

    # Extras: pool scaling (wall clock, 2 workers on 2 cores), allocations, passthrough.
    log("== pool scaling, allocations, passthrough")
    p720 = mix_file(1280, 720)
    results["pool"] = [bench_json(["hotpath", "--input", p720, "--size", "1280x720", "--format", "YUYV",
                                   "--quality", "85", "--threads", "2", "--seconds", SECONDS])
                       for _ in range(3)]
    for fmt, ff in [("UYVY", "uyvy422"), ("NV12", "nv12"), ("YU12", "yuv420p")]:
        src = os.path.join(SHM, f"detailed-1280x720.{ff}.raw")
        if not os.path.exists(src):
            run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-f", "rawvideo", "-pix_fmt", "yuyv422",
                 "-s", "1280x720", "-i", os.path.join(FRAMES, "detailed-1280x720.yuyv422.raw"),
                 "-pix_fmt", ff, "-f", "rawvideo", src])
        results.setdefault("formats", []).append(bench_json(
            ["hotpath", "--input", src, "--size", "1280x720", "--format", fmt, "--quality", "85", "--seconds", SECONDS]))
    results["yuyv420"] = bench_json(["hotpath", "--input", p720, "--size", "1280x720", "--format", "YUYV",
                                     "--quality", "85", "--subsampling", "420", "--seconds", SECONDS])
    mj = os.path.join(SHM, "mix-1280x720.mjpeg")
    run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-f", "rawvideo", "-pix_fmt", "yuyv422", "-s", "1280x720",
         "-i", p720, "-pix_fmt", "yuvj422p", "-c:v", "mjpeg", "-q:v", "3", "-f", "mjpeg", mj])
    results["passthrough"] = bench_json(["passthrough", "--input", mj, "--seconds", SECONDS])
    results["passthrough_dht"] = bench_json(["passthrough", "--input", mj, "--strip-dht", "--seconds", SECONDS])
    results["session"] = bench_json(["session", "--size", "1280x720", "--rate", "30", "--seconds", "3" if QUICK else "5"])
    with open(os.path.join(OUT, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    write_svg(results)
    write_markdown(results)


COLORS = {"swift-capture hot path": "#d9480f", "ceiling (raw-data stripes, C)": "#495057",
          "ceiling (tjCompressFromYUVPlanes, C)": "#868e96"}


def write_svg(results):
    bar, gap, left, width = 16, 30, 300, 520
    groups = results["configs"]
    names = list(groups[0]["rows"].keys())
    height = 40 + len(groups) * (len(names) * (bar + 4) + gap)
    top = max(r["fps"] for g in groups for r in g["rows"].values())
    s = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 140}" height="{height}" '
         f'font-family="sans-serif" font-size="12">',
         f'<rect width="100%" height="100%" fill="white"/>',
         f'<text x="10" y="20" font-size="14" font-weight="bold">YUYV to JPEG, frames per second per core '
         f'(libjpeg-turbo {libjpeg_version()}, one core)</text>']
    y = 40
    for g in groups:
        s.append(f'<text x="10" y="{y + 10}" font-weight="bold">{g["width"]}x{g["height"]} q{g["quality"]} 4:2:2</text>')
        y += 16
        for name in names:
            r = g["rows"][name]
            wpx = max(1, int(width * r["fps"] / top))
            color = COLORS.get(name, "#4c6ef5")
            s.append(f'<text x="{left - 6}" y="{y + bar - 4}" text-anchor="end">{name}</text>')
            s.append(f'<rect x="{left}" y="{y}" width="{wpx}" height="{bar}" fill="{color}"/>')
            s.append(f'<text x="{left + wpx + 4}" y="{y + bar - 4}">{r["fps"]:.0f} fps (x{r["ratio"]:.2f})</text>')
            y += bar + 4
        y += gap - 16
    s.append("</svg>")
    with open(os.path.join(ROOT, "Benchmarks", "benchmarks.svg"), "w") as f:
        f.write("\n".join(s) + "\n")


def libjpeg_version():
    try:
        return subprocess.run(["pkg-config", "--modversion", "libturbojpeg"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "?"


def cpu_model():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def write_markdown(results):
    L = []
    L.append("# Benchmarks\n")
    L.append("Generated by `Benchmarks/compare.sh` (raw figures: `Benchmarks/out/results.json`, not committed). "
             f"Machine: {os.cpu_count()} cores, {cpu_model()}, libjpeg-turbo {libjpeg_version()}, "
             f"load average at the end of the run {os.getloadavg()[0]:.1f}.\n")
    L.append("Frames: `Benchmarks/make-frames.sh` (ffmpeg `testsrc2`, the same with temporal noise, and a zooming "
             "Mandelbrot with noise), 6 frames of each, 18 in all, limited-range YUYV in page-aligned buffers. "
             "Every encoder gets the same 18 frames at the same quality. **fps per core** = 1 / (CPU seconds per "
             "frame, user + system, all threads of the tool), so other load on the machine does not skew it; "
             "each figure is the fastest of repeated passes (other load only ever adds time; the medians are in "
             "results.json), the ceiling and swift-capture interleaved in the same rounds; "
             "ratio = fps / the faster of the two C ceilings; bytes = mean JPEG size per frame, and its "
             "difference to the raw-data ceiling's.\n")
    L.append("![chart](Benchmarks/benchmarks.svg)\n")
    for g in results["configs"]:
        L.append(f"## YUYV {g['width']}x{g['height']}, quality {g['quality']}, 4:2:2\n")
        L.append("| encoder | fps per core | ms per frame | ratio to ceiling | bytes per frame | bytes vs ceiling | note |")
        L.append("|---|---:|---:|---:|---:|---:|---|")
        for name, r in g["rows"].items():
            note = r.get("note", "")
            if "allocations_per_frame" in r:
                note = f"{r['allocations_per_frame']:.0f} heap allocations per frame (encode)"
            L.append(f"| {name} | {r['fps']:.1f} | {1000 / r['fps']:.2f} | {r['ratio']:.3f} | {r['bytes']:.0f} | "
                     f"{100 * r['bytes_vs_ceiling']:+.2f} % | {note} |")
        L.append("")
    L.append("Notes: the swift-capture hot path and the raw-data ceiling write the same bytes (same libjpeg calls, "
             "same range expansion). GStreamer's jpegenc does not expand the camera's limited range to JFIF full "
             "range (washed-out output, slightly smaller files); ffmpeg and OpenCV go through a colour conversion "
             "(swscale to yuvj422p; YUV to BGR and back). OpenCV 4.6 always writes 4:2:0.\n")

    L.append("## Other formats and 4:2:0 (1280x720, q85, one core)\n")
    L.append("| input | output | fps per core | bytes per frame | heap allocations per frame (encode) |")
    L.append("|---|---|---:|---:|---:|")
    for j in results.get("formats", []) + [results["yuyv420"]]:
        L.append(f"| {j['format']} (detailed content) | {j['subsampling']} | {j['fps']:.1f} | {j['bytes_per_frame']:.0f} | "
                 f"{j['allocations_per_frame_encode']:.2f} |"
                 if j is not results["yuyv420"] else
                 f"| YUYV (mixed content) | {j['subsampling']} | {j['fps']:.1f} | {j['bytes_per_frame']:.0f} | "
                 f"{j['allocations_per_frame_encode']:.2f} |")
    L.append("")

    L.append("## Parallel encoding (`JPEGEncoderPool`, 1280x720 q85, wall clock)\n")
    L.append("| run | pool, 1 worker fps | pool, 2 workers fps | pool scaling | 2 independent threads, no pool: scaling | frames in order | CPU ms per frame (pool, 2 workers) |")
    L.append("|---|---:|---:|---:|---:|---|---:|")
    for i, p in enumerate(results["pool"]):
        L.append(f"| {i + 1} | {p['pool_1_fps']:.1f} | {p['pool_fps']:.1f} | {p['pool_scaling']:.2f}x | "
                 f"{p['independent_fps'] / p['independent_1_fps']:.2f}x ({p['independent_1_fps']:.0f} to {p['independent_fps']:.0f} fps) | "
                 f"{'yes' if p['pool_in_order'] else 'NO'} | {p['pool_cpu_ms_per_frame']:.2f} |")
    L.append("\nWall-clock scaling needs both cores free; the load average above says how far they were. "
             "The submitting thread blocks while the queue is full (`whenFull: .wait`), so no frame is dropped.\n")

    L.append("## Heap allocations per frame (counted by `CAllocCounter`, after warm-up)\n")
    h = results["pool"][0]
    s = results["session"]
    L.append("| path | allocations per frame |")
    L.append("|---|---:|")
    L.append(f"| `JPEGEncoder` encode in place (what the pool workers run) | {h['allocations_per_frame_encode']:.2f} |")
    L.append(f"| wrapping a dequeued buffer in its reused frame lease (`FrameLeasePool`) | {h['allocations_per_frame_wrap']:.2f} |")
    L.append(f"| still output encode step (`StillEncoding.still`: JPEG copied into reused `Data` storage) | {h['allocations_per_frame_still_path']:.2f} |")
    L.append(f"| `JPEGEncoderPool`, 2 workers, whole process (feeder wraps each frame as a driver would) | {h['pool_allocations_per_frame']:.2f} |")
    L.append(f"| `CaptureSession` + virtual camera 1280x720 YUYV + `CaptureVideoDataOutput` with a counting delegate, whole process | {s['allocations_per_frame_video_data_output']:.2f} |")
    L.append(f"| the same session without a delegate | {s['allocations_per_frame_without_delegate']:.2f} |")
    L.append(f"| `CaptureStillImageOutput.captureStillImageAsynchronously` (one completion handler reused), per still, whole process | {s['allocations_per_still']:.2f} |")
    L.append("")

    p, pd = results["passthrough"], results["passthrough_dht"]
    L.append("## MJPEG passthrough (1280x720 frames from ffmpeg, one core)\n")
    L.append("| frames | MB/s handed out | memcpy MB/s, same bytes | ratio | allocations per frame | still output path allocations |")
    L.append("|---|---:|---:|---:|---:|---:|")
    for name, j in [("with DHT (checked, copied)", p), ("without DHT (tables inserted)", pd)]:
        L.append(f"| {name} | {j['passthrough_mb_per_s']:.0f} | {j['memcpy_mb_per_s']:.0f} | {j['ratio_to_memcpy']:.2f} | "
                 f"{j['allocations_per_frame']:.2f} | {j['allocations_per_frame_still_path']:.0f} |")
    L.append("")
    with open(os.path.join(ROOT, "BENCHMARKS.md"), "w") as f:
        f.write("\n".join(L) + "\n")
    log("wrote BENCHMARKS.md and Benchmarks/benchmarks.svg")


main()
