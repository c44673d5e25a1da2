#!/usr/bin/env python3
"""Glass-to-glass latency in a real browser: `capture serve --device virtual --time-code` and
Debian's chromium (Playwright), through each path the server offers: MJPEG (`<img src=/stream>`),
fragmented MP4 (`/stream.mp4` through Media Source Extensions, as the web app plays it) and WebRTC (a WHEP client on `POST /whep`).

The virtual camera stamps each frame with its capture time (CLOCK_REALTIME in milliseconds modulo
2^32, 32 cells of 16x16 pixels in the top rows, most significant bit first). The page reads the
code of every frame it shows from a canvas and subtracts it from the time the frame is shown:
`requestVideoFrameCallback`'s expected display time for `<video>`, the animation frame's time for
the MJPEG `<img>` (which has no per-frame event: a frame counts when its code changes). Browser
and server share this machine's clock.

Rounds are interleaved (the paths in turn, the order rotating by round). Prints one JSON object:
per path p50/p95/max over every frame of every round, the median of the rounds' p50, frames shown
per second, and the CPU (percent of one core) of the server and of the browser's processes over
the measuring windows.

`webrtc-no-delay` is WebRTC with the playout-delay extension taken out of the offer, so that the
server does not send it: the same server and page beside `webrtc`. `webapp` is the web app itself
(its WebRTC receivers set `jitterBufferTarget = 0`), read on its `<video>` once its live picture shows.

With `--webapp-starts N` it opens the web app N times instead and reports, from the navigation,
when its first picture showed (the JPEG) and when its live video replaced it (medians).

With `--viewers N` it measures instead what N WebRTC viewers cost the server against one: each
round measures the server's CPU with one viewer and with N (the order alternating by round), each
viewer a page of its own showing the stream; it reports both, the median of the per-round ratios,
and the frames each viewer showed per second.

    Benchmarks/latency_bench.py --capture .build/release/capture [--size 1280x720] [--fps 30]
        [--seconds 8] [--rounds 3] [--paths mjpeg,mp4,webrtc,webrtc-no-delay,webapp] [--viewers N]
        [--webapp-starts N]

`capture-bench latency` runs this script with the `capture` beside it.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "Tests", "browser"))
from checklib import launch, start_serve  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")

# Reads the time code of the picture in `source` (an <img> or <video>) drawn at its own size.
PAGE_JS = r"""
(() => {
  const canvas = document.createElement('canvas');
  canvas.width = 512; canvas.height = 16;
  const ctx = canvas.getContext('2d', { willReadFrequently: true });
  window.__lat = { samples: [], shown: 0, errors: [] };
  window.__readCode = (source) => {
    ctx.drawImage(source, 0, 0, 512, 16, 0, 0, 512, 16);
    const d = ctx.getImageData(0, 0, 512, 16).data;
    let v = 0;
    for (let i = 0; i < 32; i++) {
      const p = (8 * 512 + i * 16 + 8) * 4;
      const luma = (d[p] * 299 + d[p + 1] * 587 + d[p + 2] * 114) / 1000;
      v = ((v << 1) | (luma > 128 ? 1 : 0)) >>> 0;
    }
    return v;
  };
  window.__note = (code, shownAt) => {
    // Both modulo 2^32 ms; a code from the future or older than a minute is not a frame.
    let lat = (Math.round(shownAt) % 4294967296) - code;
    if (lat < -2147483648) lat += 4294967296;
    if (lat > 2147483648) lat -= 4294967296;
    if (lat >= -5 && lat < 60000) window.__lat.samples.push(lat);
    window.__lat.shown++;
  };
})();
"""

MJPEG_JS = r"""
(base) => {
  const img = document.createElement('img');
  img.src = base + 'stream';
  document.body.appendChild(img);
  let last = -1;
  const tick = (t) => {
    if (img.naturalWidth >= 512) {
      const code = window.__readCode(img);
      if (code !== last) { last = code; window.__note(code, performance.timeOrigin + t); }
    }
    requestAnimationFrame(tick);
  };
  requestAnimationFrame(tick);
}
"""

VIDEO_JS = r"""
(video) => {
  const onFrame = (now, meta) => {
    if (video.videoWidth >= 512) {
      window.__note(window.__readCode(video), performance.timeOrigin + meta.expectedDisplayTime);
    }
    video.requestVideoFrameCallback(onFrame);
  };
  video.requestVideoFrameCallback(onFrame);
}
"""

# Through Media Source Extensions, as the web app plays it: Chromium's own `<video src>` reads a
# live MP4 in 32 KiB blocks and buffers seconds of it before it plays (at the virtual camera's few
# KiB per second, 12 s behind here).
MP4_JS = r"""
async (base) => {
  const video = document.createElement('video');
  video.muted = true; video.autoplay = true; video.playsInline = true;
  document.body.appendChild(video);
  const r = await fetch(base + 'stream.mp4');
  const reader = r.body.getReader();
  // The codec from the init segment's avcC.
  let head = new Uint8Array(0), codec = null;
  while (!codec) {
    const { value, done } = await reader.read();
    if (done) { window.__lat.errors.push('the stream ended before its init segment'); return; }
    const joined = new Uint8Array(head.length + value.length);
    joined.set(head); joined.set(value, head.length); head = joined;
    for (let i = 4; i + 8 < head.length; i++) {
      if (head[i] === 0x61 && head[i + 1] === 0x76 && head[i + 2] === 0x63 && head[i + 3] === 0x43) {
        codec = 'avc1.' + [head[i + 5], head[i + 6], head[i + 7]].map((b) => b.toString(16).padStart(2, '0')).join('');
        break;
      }
    }
  }
  const source = new MediaSource();
  video.src = URL.createObjectURL(source);
  await new Promise((done) => source.addEventListener('sourceopen', done, { once: true }));
  const buffer = source.addSourceBuffer('video/mp4; codecs="' + codec + '"');
  const queue = [head];
  let caughtUp = false;
  // A live stream: keep to the newest frame the player has (as the web app does).
  const feed = () => {
    if (buffer.updating) return;
    const b = buffer.buffered;
    if (b.length) {
      const behind = b.end(b.length - 1) - video.currentTime;
      if (behind > 1.5 || (!caughtUp && video.readyState >= 3 && behind > 0.2)) {
        video.currentTime = b.end(b.length - 1) - 0.05;
        caughtUp = true;
      }
      video.playbackRate = behind > 0.12 ? 1.1 : 1;
      if (video.currentTime - b.start(0) > 10) { buffer.remove(b.start(0), video.currentTime - 5); return; }
    }
    if (queue.length) buffer.appendBuffer(queue.shift());
  };
  buffer.addEventListener('updateend', feed);
  (async () => {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      queue.push(value);
      feed();
    }
  })();
  feed();
  (%s)(video);
  await video.play().catch(e => window.__lat.errors.push(String(e)));
}
""" % VIDEO_JS

WEBRTC_JS = r"""
async (base) => {
  const pc = new RTCPeerConnection();
  pc.addTransceiver('video', { direction: 'recvonly' });
  pc.addTransceiver('audio', { direction: 'recvonly' });
  const video = document.createElement('video');
  video.muted = true; video.autoplay = true; video.playsInline = true;
  document.body.appendChild(video);
  pc.ontrack = (e) => { if (e.track.kind === 'video') video.srcObject = new MediaStream([e.track]); };
  await pc.setLocalDescription(await pc.createOffer());
  await new Promise((done) => {
    if (pc.iceGatheringState === 'complete') return done();
    pc.addEventListener('icegatheringstatechange', () => { if (pc.iceGatheringState === 'complete') done(); });
    setTimeout(done, 2000);
  });
  const r = await fetch(base + 'whep', { method: 'POST', headers: { 'Content-Type': 'application/sdp' }, body: pc.localDescription.sdp%s });
  if (r.status !== 201) { window.__lat.errors.push('WHEP answered ' + r.status + ': ' + await r.text()); return; }
  window.__whep = new URL(r.headers.get('Location'), base).href;
  await pc.setRemoteDescription({ type: 'answer', sdp: await r.text() });
  (%s)(video);
  window.__pc = pc;
}
"""

# `webrtc-no-delay`: the same offer without the playout-delay extension, so the server does not
# ask the browser for no playout delay (the same server, for a side-by-side comparison).
NO_DELAY = r".replace(/a=extmap:\d+ http:\/\/www\.webrtc\.org\/experiments\/rtp-hdrext\/playout-delay\r\n/g, '')"
# `webapp`: the web app itself at `/` (its WebRTC, with jitterBufferTarget = 0), measured on its
# <video> once its live picture shows.
PATHS = {"mjpeg": MJPEG_JS, "mp4": MP4_JS, "webrtc": WEBRTC_JS % ("", VIDEO_JS),
         "webrtc-no-delay": WEBRTC_JS % (NO_DELAY, VIDEO_JS), "webapp": None}

# The web app's start: when its first picture shows (the <img> with a JPEG) and when its live
# video replaces it (body.dataset.picture turns "video"), in ms since the navigation began.
START_JS = r"""
window.addEventListener('DOMContentLoaded', () => {
  window.__start = {};
  const tick = () => {
    const live = document.getElementById('live');
    if (!('jpeg' in window.__start) && live && !live.hidden && live.naturalWidth > 0) window.__start.jpeg = performance.now();
    if (!('video' in window.__start) && document.body.dataset.picture === 'video') window.__start.video = performance.now();
    if (!('video' in window.__start)) requestAnimationFrame(tick);
  };
  tick();
});
"""


def cpu_seconds(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK
    except OSError:
        return 0.0


def descendants(root):
    """The processes under `root` (the browser's, under this script)."""
    children = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(name))
    out, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def browser_cpu():
    return sum(cpu_seconds(p) for p in descendants(os.getpid()))


def start_server(capture, size, fps):
    args = ["--device", "virtual", "--time-code", "--size", size, "--fps", str(fps)]
    server, url = start_serve(capture, None, args, stderr=subprocess.DEVNULL)
    if url is None:
        server.kill()
        sys.exit("capture serve printed no URL")
    return server, url


def percentile(values, q):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def measure(browser, base, path, seconds, server_pid):
    """One round of one path: the samples, frames shown per second, server and browser CPU %."""
    page = browser.new_page()
    if path == "webapp":
        page.goto(base, wait_until="commit")
        page.wait_for_function("document.body.dataset.picture === 'video' && document.body.dataset.path === 'webrtc'",
                               timeout=30000)
        page.evaluate(PAGE_JS)
        page.evaluate("(%s)(document.getElementById('video'))" % VIDEO_JS)
    else:
        page.goto(base + "state")
        page.evaluate("document.body.innerHTML = ''")
        page.evaluate(PAGE_JS)
        page.evaluate(PATHS[path], base)
    # Warm-up: connected and a few frames shown (a path that shows nothing in 10 s has failed).
    deadline = time.time() + 10
    while time.time() < deadline and page.evaluate("window.__lat.shown") < 10:
        time.sleep(0.2)
    page.evaluate("window.__lat.samples = []; window.__lat.shown = 0")
    s0, b0, t0 = cpu_seconds(server_pid), browser_cpu(), time.monotonic()
    time.sleep(seconds)
    lat = page.evaluate("window.__lat")
    s1, b1, t1 = cpu_seconds(server_pid), browser_cpu(), time.monotonic()
    if path.startswith("webrtc"):
        page.evaluate("window.__whep && fetch(window.__whep, { method: 'DELETE' })")
    if path == "webapp":
        page.evaluate("dispatchEvent(new Event('pagehide'))")
    page.close()
    wall = t1 - t0
    return {
        "samples": lat["samples"], "errors": lat["errors"], "fps": lat["shown"] / wall,
        "server_cpu": 100 * (s1 - s0) / wall, "browser_cpu": 100 * (b1 - b0) / wall,
    }


def viewers_round(browser, base, n, seconds, server_pid):
    """Server CPU % while `n` WebRTC viewers watch, and the frames each showed per second."""
    pages = []
    for _ in range(n):
        page = browser.new_page()
        page.goto(base + "state")
        page.evaluate("document.body.innerHTML = ''")
        page.evaluate(PAGE_JS)
        page.evaluate(PATHS["webrtc"], base)
        pages.append(page)
    deadline = time.time() + 20
    while time.time() < deadline and min(p.evaluate("window.__lat.shown") for p in pages) < 10:
        time.sleep(0.2)
    for p in pages:
        p.evaluate("window.__lat.shown = 0")
    s0, t0 = cpu_seconds(server_pid), time.monotonic()
    time.sleep(seconds)
    shown = [p.evaluate("window.__lat.shown") for p in pages]
    s1, t1 = cpu_seconds(server_pid), time.monotonic()
    errors = sorted({e for p in pages for e in p.evaluate("window.__lat.errors")})
    for p in pages:
        p.evaluate("window.__whep && fetch(window.__whep, { method: 'DELETE' })")
        p.close()
    wall = t1 - t0
    return {"server_cpu": 100 * (s1 - s0) / wall, "fps": [round(x / wall, 1) for x in shown], "errors": errors}


def viewers_report(browser, base, a, server_pid):
    """`--viewers N`: one viewer against N, interleaved rounds."""
    rounds = []
    for r in range(a.rounds):
        counts = [1, a.viewers] if r % 2 == 0 else [a.viewers, 1]
        got = {n: viewers_round(browser, base, n, a.seconds, server_pid) for n in counts}
        rounds.append(got)
    one = [r[1]["server_cpu"] for r in rounds]
    many = [r[a.viewers]["server_cpu"] for r in rounds]
    return {
        "size": a.size, "fps": a.fps, "seconds": a.seconds, "rounds": a.rounds, "viewers": a.viewers,
        "server_cpu_percent_one": [round(x, 1) for x in one],
        "server_cpu_percent_many": [round(x, 1) for x in many],
        "ratio_per_round": [round(m / o, 3) if o > 0 else None for o, m in zip(one, many)],
        "ratio_median": round(statistics.median(m / o for o, m in zip(one, many) if o > 0), 3),
        "shown_fps_per_viewer_many": [r[a.viewers]["fps"] for r in rounds],
        "errors": sorted({e for r in rounds for g in r.values() for e in g["errors"]}),
    }


def webapp_starts(browser, base, n):
    """`--webapp-starts N`: the web app opened N times, each in a new page: ms from the navigation
    to its first picture (the JPEG) and to its live video (WebRTC's first painted frame)."""
    jpeg, video, errors = [], [], []
    for _ in range(n):
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.add_init_script(START_JS)
        page.goto(base, wait_until="commit")
        try:
            page.wait_for_function("window.__start && 'video' in window.__start", timeout=30000)
        except Exception as e:  # noqa: BLE001 (reported, the next load goes on)
            errors.append(str(e).splitlines()[0])
        got = page.evaluate("window.__start || {}")
        if "jpeg" in got:
            jpeg.append(got["jpeg"])
        if "video" in got:
            video.append(got["video"])
        # The page's own end (its DELETE of the WHEP resource), then the page.
        page.evaluate("dispatchEvent(new Event('pagehide'))")
        page.close()
        time.sleep(0.5)

    def summary(values):
        return {"median_ms": round(statistics.median(values)), "min_ms": round(min(values)),
                "max_ms": round(max(values)), "loads": len(values)} if values else None
    return {"webapp_starts": n, "first_picture": summary(jpeg), "live_video": summary(video),
            "first_picture_ms": [round(x) for x in jpeg], "live_video_ms": [round(x) for x in video],
            "errors": errors}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--capture", required=True, help="the built `capture` tool")
    ap.add_argument("--size", default="1280x720")
    ap.add_argument("--fps", type=int, default=30)
    ap.add_argument("--seconds", type=float, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--paths", default="mjpeg,mp4,webrtc")
    ap.add_argument("--viewers", type=int, default=0, help="WebRTC viewers to compare with one")
    ap.add_argument("--webapp-starts", type=int, default=0, help="web app loads to time")
    a = ap.parse_args()
    paths = [p for p in a.paths.split(",") if p]
    for p in paths:
        if p not in PATHS:
            sys.exit(f"unknown path {p}: use mjpeg, mp4, webrtc, webrtc-no-delay or webapp")
    from playwright.sync_api import sync_playwright

    server, base = start_server(a.capture, a.size, a.fps)
    rounds = {p: [] for p in paths}
    try:
        with sync_playwright() as pw:
            browser = launch(pw, "--autoplay-policy=no-user-gesture-required")
            if a.webapp_starts > 0:
                print(json.dumps(webapp_starts(browser, base, a.webapp_starts), indent=2))
                browser.close()
                return
            if a.viewers > 1:
                print(json.dumps(viewers_report(browser, base, a, server.pid), indent=2))
                browser.close()
                return
            for r in range(a.rounds):
                order = paths[r % len(paths):] + paths[:r % len(paths)]
                for p in order:
                    rounds[p].append(measure(browser, base, p, a.seconds, server.pid))
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=10)
    report = {"size": a.size, "fps": a.fps, "seconds": a.seconds, "rounds": a.rounds, "paths": {}}
    for p, rs in rounds.items():
        every = [x for r in rs for x in r["samples"]]
        entry = {
            "frames": len(every),
            "shown_fps": round(statistics.median(r["fps"] for r in rs), 1),
            "server_cpu_percent": round(statistics.median(r["server_cpu"] for r in rs), 1),
            "browser_cpu_percent": round(statistics.median(r["browser_cpu"] for r in rs), 1),
        }
        if every:
            entry.update({
                "p50_ms": percentile(every, 0.5), "p95_ms": percentile(every, 0.95), "max_ms": max(every),
                "round_p50_median_ms": statistics.median(percentile(r["samples"], 0.5) for r in rs if r["samples"]),
                "round_p50_ms": [percentile(r["samples"], 0.5) if r["samples"] else None for r in rs],
            })
        errors = sorted({e for r in rs for e in r["errors"]})
        if errors:
            entry["errors"] = errors
        report["paths"][p] = entry
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
