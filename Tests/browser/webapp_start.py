"""How the camera web app starts, in Debian's chromium (Playwright), for the CaptureWebRTC tests.

    webapp_start.py URL [--hold-whep]

Opens the web app at URL and prints one JSON line when its picture is live:
    {"report": {"pictureFrom", "path", "picture", "liveSrc", "liveHidden", "videoWidth",
                "streamClientsAtPicture", "blankFrames", "jitterBufferTarget", "timeline"}}
With --hold-whep the page's POST /whep is held until its first picture has come (from the JPEG
path), then let through: what it shows before WebRTC is the JPEG's, whatever the machine's load.
From the first picture on, every animation frame checks that the view shows a picture (the <img>
with its JPEG, or the <video> with a frame): "blankFrames" counts those that did not.
"""
import json
import sys
import urllib.request

from playwright.sync_api import sync_playwright

from checklib import launch

# Counts animation frames with no picture shown from the first one on, and notes when each
# source showed first (ms since navigation).
WATCH = """() => {
  const live = document.getElementById('live'), video = document.getElementById('video');
  window.watch = { blankFrames: 0, frames: 0, timeline: {} };
  const note = (name) => { if (!(name in window.watch.timeline)) window.watch.timeline[name] = performance.now(); };
  const tick = () => {
    const jpeg = !live.hidden && live.naturalWidth > 0 && live.getAttribute('src');
    const frame = !video.hidden && video.videoWidth > 0 && video.readyState >= 2;
    if (jpeg) note('jpeg');
    if (frame && !jpeg) note('video');
    if (jpeg || frame) window.watch.seen = true;
    else if (window.watch.seen) window.watch.blankFrames += 1;
    window.watch.frames += 1;
    requestAnimationFrame(tick);
  };
  tick();
}"""


def stream_clients(url):
    with urllib.request.urlopen(url + "state", timeout=20) as r:
        return json.load(r)["result"]["stream"]["clients"]


def main():
    url = sys.argv[1]
    hold = "--hold-whep" in sys.argv[2:]
    held = []
    with sync_playwright() as p:
        browser = launch(p)
        page = browser.new_page(viewport={"width": 640, "height": 480})
        if hold:
            page.route("**/whep", lambda route: held.append(route))
        page.add_init_script("window.addEventListener('DOMContentLoaded', " + WATCH + ")")
        # (Not its load event: the page need not wait for one.)
        page.goto(url, wait_until="commit")
        page.wait_for_function("document.getElementById('live').naturalWidth > 0 && !document.getElementById('live').hidden",
                               timeout=30000)
        picture_from = page.evaluate("document.body.dataset.picture")
        clients = stream_clients(url)
        if hold:
            # (The page may not have asked yet: then it asks once the route is gone.)
            for route in held:
                route.continue_()
            page.unroute("**/whep")
            page.wait_for_function("document.body.dataset.picture === 'video' && document.getElementById('video').currentTime > 0",
                                   timeout=30000)
        else:
            page.wait_for_function("document.body.dataset.path && !document.getElementById('path').textContent.includes('connecting')",
                                   timeout=30000)
        report = page.evaluate("""() => {
            const live = document.getElementById('live'), video = document.getElementById('video');
            return { path: document.body.dataset.path, picture: document.body.dataset.picture,
                     liveSrc: live.getAttribute('src'), liveHidden: live.hidden, videoWidth: video.videoWidth,
                     jitterBufferTarget: document.body.dataset.jitterBufferTarget || null,
                     blankFrames: window.watch.blankFrames, frames: window.watch.frames, timeline: window.watch.timeline };
        }""")
        report.update(pictureFrom=picture_from, streamClientsAtPicture=clients, whepHeld=len(held))
        print(json.dumps({"report": report}), flush=True)
        # Kept open until told (a line on stdin, or its end): the server is asked meanwhile.
        sys.stdin.readline()
        browser.close()


if __name__ == "__main__":
    main()
