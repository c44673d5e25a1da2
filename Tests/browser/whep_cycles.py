"""Join/leave cycles of one WHEP-style viewer in Debian's chromium (Playwright), for the
CaptureWebRTC leak tests: one browser and one page for every cycle, so a cycle costs a peer
connection, not a browser start.

Reads one JSON command per line on stdin and answers each with one JSON line on stdout:
    {"offer": true}      a new RTCPeerConnection (the previous one closed; recvonly video, audio
                         unless --no-audio), its offer after ICE gathering, as whep_peer.py
                         makes it                               -> {"offer": "v=0..."}
    {"answer": "v=0..."} sets the answer, waits until the connection is up and a frame was
                         decoded (at most --connect-timeout s)  -> {"connectMs": ..., "state": ...}
    {"close": true}      closes the peer connection             -> {"closed": true}
End of input ends the browser.
"""
import argparse
import json
import sys

from playwright.sync_api import sync_playwright

from checklib import launch
from whep_peer import OFFER, PAGE

CLOSE = "() => { if (window.pc) window.pc.close(); window.pc = null; }"

# Resolves once the connection is up and a video frame was decoded, or at the timeout.
CONNECT = """async ([sdp, timeoutMs]) => {
  const pc = window.pc;
  const t0 = performance.now();
  await pc.setRemoteDescription({type: 'answer', sdp});
  let connectMs = null;
  while (performance.now() - t0 < timeoutMs) {
    if (pc.connectionState === 'connected') {
      if (connectMs === null) connectMs = performance.now() - t0;
      const stats = await pc.getStats();
      for (const s of stats.values()) {
        if (s.type === 'inbound-rtp' && s.kind === 'video' && s.framesDecoded > 0) {
          return {connectMs, firstFrameMs: performance.now() - t0, state: pc.connectionState};
        }
      }
    }
    if (pc.connectionState === 'failed') break;
    await new Promise((r) => setTimeout(r, 10));
  }
  return {connectMs, firstFrameMs: null, state: pc.connectionState};
}"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-audio", action="store_true")
    ap.add_argument("--connect-timeout", type=float, default=5.0)
    args = ap.parse_args()
    with sync_playwright() as p:
        browser = launch(p, "--autoplay-policy=no-user-gesture-required")
        page = browser.new_page()
        page.set_content(PAGE)
        for line in sys.stdin:
            command = json.loads(line)
            if command.get("offer"):
                page.evaluate(CLOSE)
                reply = {"offer": page.evaluate(OFFER, not args.no_audio)}
            elif "answer" in command:
                reply = page.evaluate(CONNECT, [command["answer"], args.connect_timeout * 1000])
            elif command.get("close"):
                page.evaluate(CLOSE)
                reply = {"closed": True}
            else:
                reply = {"error": "unknown command"}
            print(json.dumps(reply), flush=True)
        browser.close()


if __name__ == "__main__":
    main()
