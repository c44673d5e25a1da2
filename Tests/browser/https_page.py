"""The camera web app over HTTPS in Debian's chromium (Playwright), opened by a token link, for
the CaptureWebRTC tests. The server's certificate is the test's own (chromium runs with
--ignore-certificate-errors).

    https_page.py BASE_URL TOKEN      (BASE_URL: https://HOST:PORT/)

Opens BASE_URL?token=TOKEN: the page's own requests pass with the cookie it gets, and it plays
WebRTC (WHEP) in its <video>. Then, in a fresh context (no cookie), a page with
<img src="BASE_URL/snapshot?token=TOKEN"> and one with a wrong token. Prints one JSON line:
    {"path", "label", "time": [t0, t1], "frames": [n0, n1], "width", "img", "badImg", "failures"}
"""
import json
import sys
import time

from playwright.sync_api import sync_playwright

from checklib import launch


def main():
    base, token = sys.argv[1], sys.argv[2]
    report = {"failures": []}
    with sync_playwright() as p:
        browser = launch(p, "--ignore-certificate-errors")
        context = browser.new_context(ignore_https_errors=True)
        page = context.new_page()
        page.on("console", lambda m: report["failures"].append(f"console: {m.text}") if m.type == "error" else None)
        page.on("response", lambda r: report["failures"].append(f"{r.status} {r.url.split('?')[0]}") if r.status >= 400 else None)
        page.goto(f"{base}?token={token}")
        try:
            page.wait_for_function("document.body.dataset.path === 'webrtc' && document.getElementById('video').currentTime > 0.5",
                                   timeout=30000)
        except Exception:
            pass  # what it plays is reported
        quality = """() => { const v = document.getElementById('video');
            return [document.body.dataset.path, document.getElementById('path').textContent, v.currentTime,
                    v.getVideoPlaybackQuality().totalVideoFrames, v.videoWidth]; }"""
        first = page.evaluate(quality)
        time.sleep(1.5)
        later = page.evaluate(quality)
        report.update(path=later[0], label=later[1], time=[first[2], later[2]], frames=[first[3], later[3]], width=later[4])
        page.close()
        plain = browser.new_context(ignore_https_errors=True).new_page()
        for key, value in [("img", token), ("badImg", token + "x")]:
            plain.set_content(f'<img id="i" src="{base}snapshot?token={value}">')
            try:
                plain.wait_for_function("document.getElementById('i').complete", timeout=15000)
            except Exception:
                pass
            report[key] = plain.evaluate("document.getElementById('i').naturalWidth")
        browser.close()
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
