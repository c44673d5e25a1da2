#!/usr/bin/env python3
"""A WebRTC viewer that joins `capture serve` and leaves without a DELETE (it closes its peer
connection) every 2 s, in Debian's chromium, as issue 39's red team soaked the server (there 31
of 150 joins got in and 16 viewers stayed for good). Each join must get 201 and the viewers must
never pile up; after the last one the server must be back to no viewer, and its threads and
descriptors within 4 of what it had after its first viewer. Not in CI (it takes SECONDS plus
about 20 s); run it by hand after a change to how viewers end.

    Tests/browser/whep_soak.py BIN_DIR [SECONDS]     (BIN_DIR holds the built `capture`; 120 s)
"""
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

from playwright.sync_api import sync_playwright

from checklib import Reporter, launch, start_serve, stop_serve
from whep_peer import OFFER, PAGE

check = Reporter("whep soak")
CLOSE = "() => { if (window.pc) window.pc.close(); window.pc = null; }"


def main():
    if len(sys.argv) not in (2, 3):
        print("usage: whep_soak.py BIN_DIR [SECONDS]", file=sys.stderr)
        return 2
    seconds = float(sys.argv[2]) if len(sys.argv) == 3 else 120.0
    server, url = start_serve(os.path.join(sys.argv[1], "capture"), dict(os.environ), ["--size", "640x480"],
                              stderr=subprocess.DEVNULL)
    if not check("capture serve prints its URL", url is not None):
        stop_serve(server)
        return 1

    def resources():
        return len(os.listdir(f"/proc/{server.pid}/task")), len(os.listdir(f"/proc/{server.pid}/fd"))

    def viewers():
        with urllib.request.urlopen(url + "state", timeout=20) as r:
            return json.load(r)["result"]["routes"]["whep"]["viewers"]

    def post(offer):
        request = urllib.request.Request(url + "whep", data=offer.encode(), method="POST",
                                         headers={"Content-Type": "application/sdp"})
        try:
            with urllib.request.urlopen(request, timeout=30) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, ""

    joins, answered, most, baseline = 0, 0, 0, None
    try:
        with sync_playwright() as p:
            browser = launch(p, "--autoplay-policy=no-user-gesture-required")
            page = browser.new_page()
            page.set_content(PAGE)
            started = time.time()
            while time.time() - started < seconds:
                page.evaluate(CLOSE)
                status, answer = post(page.evaluate(OFFER, True))
                joins += 1
                if status == 201:
                    answered += 1
                    page.evaluate("async (sdp) => { await window.pc.setRemoteDescription({type: 'answer', sdp}); }", answer)
                time.sleep(2)
                most = max(most, viewers())
                if baseline is None:
                    baseline = resources()
            page.evaluate(CLOSE)
            browser.close()
        check(f"every join gets 201 ({answered} of {joins})", joins > 0 and answered == joins)
        check(f"viewers never pile up (at most {most} at once)", most <= 2)
        deadline = time.time() + 30
        while viewers() > 0 and time.time() < deadline:
            time.sleep(0.2)
        check("no viewer is left after the last one", viewers() == 0)
        # GLib's idle pool threads wind down within 15 s.
        time.sleep(16)
        now = resources()
        check(f"threads and descriptors back (after the first viewer {baseline}, now {now})",
              now[0] <= baseline[0] + 4 and now[1] <= baseline[1] + 4)
    finally:
        check("capture serve stops on SIGTERM with status 0", stop_serve(server) == 0)
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
