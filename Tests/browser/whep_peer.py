"""A WHEP-style WebRTC viewer in Debian's chromium (Playwright), for the CaptureWebRTC tests.

Opens VIEWERS pages, each with an RTCPeerConnection that receives video (and audio unless
--no-audio), and prints their offers (after ICE gathering) as one JSON line on stdout:
    {"offers": ["v=0...", ...]}
then reads lines on stdin: {"answers": ["v=0...", null, ...]} connects each page with a non-null
answer (pages may be answered in several lines: late joiners), and {"measure": true} (or the end
of input) measures every answered page for WINDOW seconds. The last stdout line is the report:
    {"viewers": [{"connectMs", "firstFrameMs", "codec", "fps", "framesDecoded", "width", "height",
                  "bars": [[r, g, b] x 8], "audioPeakHz", "audioEnergy", "latencyMs": [...]}, ...]}
The video element is left unmuted (a muted one reports no audio energy); chromium's own
--mute-audio keeps the machine silent. The latency list is filled when the picture holds the
virtual camera's time code (frames at least 512 pixels wide): Date.now() minus the code.
"""
import argparse
import json
import sys
import time

from playwright.sync_api import sync_playwright

from checklib import launch

PAGE = """<!doctype html><html><body style="margin:0;background:#000">
<video id="v" autoplay playsinline style="width:640px"></video></body></html>"""

OFFER = """async (withAudio) => {
  const pc = new RTCPeerConnection();
  window.pc = pc;
  const stream = new MediaStream();
  window.stream = stream;
  const v = document.getElementById('v');
  pc.ontrack = (e) => { stream.addTrack(e.track); v.srcObject = stream; v.play().catch(() => {}); };
  pc.addTransceiver('video', {direction: 'recvonly'});
  if (withAudio) pc.addTransceiver('audio', {direction: 'recvonly'});
  await pc.setLocalDescription(await pc.createOffer());
  await new Promise((done) => {
    if (pc.iceGatheringState === 'complete') return done();
    pc.addEventListener('icegatheringstatechange', () => { if (pc.iceGatheringState === 'complete') done(); });
    setTimeout(done, 3000);
  });
  return pc.localDescription.sdp;
}"""

# Sets the answer, then records when the connection and the first decoded frame came (ms after
# setRemoteDescription) in window.times.
CONNECT = """async (sdp) => {
  const pc = window.pc;
  const t0 = performance.now();
  window.times = {connectMs: null, firstFrameMs: null};
  pc.addEventListener('connectionstatechange', () => {
    if (pc.connectionState === 'connected' && window.times.connectMs === null) window.times.connectMs = performance.now() - t0;
  });
  await pc.setRemoteDescription({type: 'answer', sdp});
  const poll = async () => {
    const stats = await pc.getStats();
    for (const s of stats.values()) {
      if (s.type === 'inbound-rtp' && s.kind === 'video' && s.framesDecoded > 0) {
        window.times.firstFrameMs = performance.now() - t0;
        return;
      }
    }
    setTimeout(poll, 20);
  };
  poll();
}"""

# Measures for `seconds`: frames decoded, codec, the picture's bars, the audio's pitch and energy,
# and (time code) the latency of each frame shown; the result lands in window.result.
MEASURE = """(seconds) => {
  window.result = null;
  const pc = window.pc, v = document.getElementById('v');
  const videoStats = async () => {
    const stats = await pc.getStats();
    let video = null, audio = null;
    for (const s of stats.values()) {
      if (s.type === 'inbound-rtp' && s.kind === 'video') video = s;
      if (s.type === 'inbound-rtp' && s.kind === 'audio') audio = s;
    }
    const codec = video && video.codecId ? stats.get(video.codecId) : null;
    return {video, audio, codec: codec ? codec.mimeType : null};
  };
  const latencies = [];
  const canvas = document.createElement('canvas');
  const g = canvas.getContext('2d', {willReadFrequently: true});
  let measuring = true;
  const onFrame = () => {
    if (!measuring) return;
    const now = Date.now();
    if (v.videoWidth >= 512) {
      canvas.width = 512; canvas.height = 16;
      g.drawImage(v, 0, 0, 512, 16, 0, 0, 512, 16);
      const d = g.getImageData(0, 0, 512, 16).data;
      let code = 0, ok = true;
      for (let bit = 0; bit < 32; bit++) {
        const y = d[(8 * 512 + bit * 16 + 8) * 4 + 1];
        if (y > 160) code = code * 2 + 1; else if (y < 96) code = code * 2; else { ok = false; break; }
      }
      if (ok) latencies.push(((now % 4294967296) - code + 4294967296) % 4294967296);
    }
    v.requestVideoFrameCallback(onFrame);
  };
  v.requestVideoFrameCallback(onFrame);
  let ctx = null, analyser = null;
  if (window.stream.getAudioTracks().length > 0) {
    ctx = new AudioContext();
    const src = ctx.createMediaStreamSource(new MediaStream(window.stream.getAudioTracks()));
    analyser = ctx.createAnalyser();
    analyser.fftSize = 8192;
    src.connect(analyser);
  }
  (async () => {
    const a = await videoStats();
    const t0 = performance.now();
    await new Promise((r) => setTimeout(r, seconds * 1000));
    const b = await videoStats();
    const elapsed = (performance.now() - t0) / 1000;
    measuring = false;
    let peak = null;
    if (analyser) {
      const bins = new Float32Array(analyser.frequencyBinCount);
      analyser.getFloatFrequencyData(bins);
      let best = 1;
      for (let i = 1; i < bins.length; i++) if (bins[i] > bins[best]) best = i;
      if (bins[best] > -100) peak = best * ctx.sampleRate / analyser.fftSize;
      ctx.close();
    }
    const bars = [];
    if (v.videoWidth > 0) {
      canvas.width = v.videoWidth; canvas.height = v.videoHeight;
      g.drawImage(v, 0, 0);
      const w = v.videoWidth, h = v.videoHeight;
      const d = g.getImageData(0, 0, w, h).data;
      for (let i = 0; i < 8; i++) {
        const x = Math.floor((2 * i + 1) * w / 16), y = Math.floor(h * 3 / 4);
        const k = (y * w + x) * 4;
        bars.push([d[k], d[k + 1], d[k + 2]]);
      }
    }
    const fd = (s) => (s.video ? s.video.framesDecoded || 0 : 0);
    window.result = {
      codec: b.codec, framesDecoded: fd(b) - fd(a), fps: (fd(b) - fd(a)) / elapsed,
      width: v.videoWidth, height: v.videoHeight, bars,
      audioPeakHz: peak, audioEnergy: b.audio ? (b.audio.totalAudioEnergy || 0) : null,
      audioLevel: b.audio ? (b.audio.audioLevel || 0) : null,
      packetsLost: b.video ? b.video.packetsLost : null, latencyMs: latencies,
    };
  })();
}"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--viewers", type=int, default=1)
    ap.add_argument("--window", type=float, default=3.0)
    ap.add_argument("--no-audio", action="store_true")
    ap.add_argument("--connect-timeout", type=float, default=10.0)
    args = ap.parse_args()
    with sync_playwright() as p:
        browser = launch(p, "--autoplay-policy=no-user-gesture-required")
        context = browser.new_context()
        pages = []
        for _ in range(args.viewers):
            page = context.new_page()
            page.set_content(PAGE)
            pages.append(page)
        offers = [page.evaluate(OFFER, not args.no_audio) for page in pages]
        print(json.dumps({"offers": offers}), flush=True)
        live = []
        for line in sys.stdin:
            message = json.loads(line)
            for page, answer in zip(pages, message.get("answers", [])):
                if answer:
                    page.evaluate(CONNECT, answer)
                    live.append(page)
            if message.get("measure"):
                break
        deadline = time.time() + args.connect_timeout
        while time.time() < deadline:
            times = [page.evaluate("window.times") for page in live]
            if all(t["firstFrameMs"] is not None and t["connectMs"] is not None for t in times):
                break
            time.sleep(0.05)
        for page in live:
            page.evaluate(MEASURE, args.window)
        report = []
        for page in live:
            result = None
            deadline = time.time() + args.window + 5
            while result is None and time.time() < deadline:
                time.sleep(0.1)
                result = page.evaluate("window.result")
            result = result or {}
            result.update(page.evaluate("window.times"))
            report.append(result)
        print(json.dumps({"viewers": report}), flush=True)
        browser.close()


if __name__ == "__main__":
    main()
