#!/usr/bin/env python3
"""A recorded MP4 in a real browser: `capture record` on the virtual camera, then Debian's
chromium (headless, Playwright) loads the file from a server that sends it whole (no byte
ranges, as many do), so the browser cannot read the fragments at the file's end first. Its
<video> duration at `loadedmetadata` must be within 0.1 s of ffprobe's (it was the first
fragment's, 1 s). Prints one "PASS  ..." or "FAIL  ..." line per check; exits non-zero if any
check failed or could not run.

    Tests/browser/movie_check.py BIN_DIR     (BIN_DIR holds the built `capture`)
"""
import functools
import http.server
import os
import shutil
import subprocess
import sys
import tempfile
import threading

from checklib import Reporter, launch

check = Reporter("movie")




class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def main():
    if len(sys.argv) != 2:
        print("usage: movie_check.py BIN_DIR", file=sys.stderr)
        return 2
    tool = os.path.join(sys.argv[1], "capture")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as e:
        check("playwright is installed (pip install playwright)", False, str(e))
        return 1
    folder = tempfile.mkdtemp(prefix="movie-check-")
    try:
        movie = os.path.join(folder, "clip.mp4")
        r = subprocess.run([tool, "record", "--device", "virtual", "--size", "320x240", "--seconds", "2.5", movie],
                           capture_output=True, text=True, timeout=120)
        if not check("capture record writes an MP4", r.returncode == 0 and os.path.exists(movie), r.stderr):
            return 1
        p = subprocess.run(["ffprobe", "-v", "error", "-show_entries", "format=duration", "-of", "csv=p=0", movie],
                           capture_output=True, text=True, timeout=60)
        try:
            reference = float(p.stdout.strip())
        except ValueError:
            check("ffprobe reads the MP4", False, p.stderr)
            return 1
        # SimpleHTTPRequestHandler answers every request with the whole file (no Range support).
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=folder))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{server.server_address[1]}/"
        try:
            with sync_playwright() as pw:
                browser = launch(pw)
                page = browser.new_page()
                page.goto(base)
                duration = page.evaluate("""(src) => new Promise((done) => {
                    const v = document.createElement('video');
                    v.muted = true;
                    v.onloadedmetadata = () => done(v.duration);
                    v.onerror = () => done('error: ' + (v.error && v.error.message));
                    setTimeout(() => done('no loadedmetadata in 30 s'), 30000);
                    v.src = src;
                    document.body.appendChild(v);
                })""", base + "clip.mp4")
                browser.close()
        finally:
            server.shutdown()
        ok = isinstance(duration, (int, float)) and abs(duration - reference) < 0.1
        check("chromium's duration at loadedmetadata is ffprobe's", ok, f"chromium {duration}, ffprobe {reference}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
