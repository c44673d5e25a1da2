#!/usr/bin/env python3
"""The web app's metadata boxes in a real browser: `capture serve --metadata qr` on a `file:`
camera showing a QR code made by `qrencode` at a known place, Debian's chromium driven headless
by Playwright. For each gravity (object-fit contain, cover, fill: `?fit=`), and mirrored, a
screenshot must show the box colour (#00ff00) along the edges of where the code appears in the
page (worked out here from the view's size, independently of the page's script), and not where
another gravity would put it. Prints one "PASS  ..." or "FAIL  ..." line per check; exits
non-zero if any check failed or could not run.

    Tests/browser/metadata_check.py BIN_DIR     (BIN_DIR holds the built `capture`)
"""
import io
import os
import subprocess
import sys
import tempfile
import time

from checklib import Reporter, launch, start_serve, stop_serve

check = Reporter("metadata")

FRAME = (640, 480)
# The code: 8-pixel modules, its top-left corner (without the quiet zone) at CODE_AT in the frame.
MODULE = 8
CODE_AT = (72, 112)
TEXT = "swift-capture metadata"


def code_picture(path):
    """A 640x480 PNG, grey, with the QR code of TEXT; returns the code's rect in frame pixels."""
    from PIL import Image
    ascii_code = subprocess.run(["qrencode", "-t", "ASCII", "-m", "0", "-o", "-", TEXT],
                                capture_output=True, text=True, check=True).stdout
    rows = [[line[i] == "#" for i in range(0, len(line), 2)] for line in ascii_code.splitlines() if line]
    n = len(rows)
    img = Image.new("L", FRAME, 128)
    x0, y0 = CODE_AT
    img.paste(255, (x0 - 4 * MODULE, y0 - 4 * MODULE, x0 + (n + 4) * MODULE, y0 + (n + 4) * MODULE))
    for v, row in enumerate(rows):
        for u, dark in enumerate(row):
            if dark:
                img.paste(0, (x0 + u * MODULE, y0 + v * MODULE, x0 + (u + 1) * MODULE, y0 + (v + 1) * MODULE))
    img.save(path)
    return (x0, y0, n * MODULE, n * MODULE)


def placed(rect, view, fit, mirrored):
    """Where `rect` (frame pixels) appears in the page: the frame fitted into the view's box as
    object-fit `fit` places it (centred), then flipped about the view's centre when mirrored."""
    vx, vy, vw, vh = view
    fw, fh = FRAME
    if fit == "fill":
        sx, sy, ox, oy = vw / fw, vh / fh, 0, 0
    else:
        s = min(vw / fw, vh / fh) if fit == "contain" else max(vw / fw, vh / fh)
        sx = sy = s
        ox, oy = (vw - fw * s) / 2, (vh - fh * s) / 2
    x, y, w, h = ox + rect[0] * sx, oy + rect[1] * sy, rect[2] * sx, rect[3] * sy
    if mirrored:
        x = vw - x - w
    return (vx + x, vy + y, w, h)


def is_box(px):
    r, g, b = px[:3]
    return g > 200 and r < 90 and b < 90


EDGES = ("top", "bottom", "left", "right")


def edge_lines(rect):
    x, y, w, h = rect
    return {"top": y, "bottom": y + h, "left": x, "right": x + w}


def edge_hits(shot, rect, view, slack=5, edges=EDGES):
    """The share of points along the rect's `edges` (inside the view) that have the box colour
    within `slack` pixels across the edge; None when none is in view."""
    x, y, w, h = rect
    vx, vy, vw, vh = view
    hits = total = 0
    for i in range(1, 20):
        t = i / 20
        # (point on the edge, direction across it)
        points = {"top": (x + t * w, y, 0, 1), "bottom": (x + t * w, y + h, 0, 1),
                  "left": (x, y + t * h, 1, 0), "right": (x + w, y + t * h, 1, 0)}
        for (px, py, dx, dy) in [points[e] for e in edges]:
            if not (vx + 2 <= px < vx + vw - 2 and vy + 2 <= py < vy + vh - 2):
                continue
            total += 1
            for d in range(-slack, slack + 1):
                qx, qy = int(round(px + d * dx)), int(round(py + d * dy))
                if 0 <= qx < shot.width and 0 <= qy < shot.height and is_box(shot.getpixel((qx, qy))):
                    hits += 1
                    break
    return None if total == 0 else hits / total


def main():
    if len(sys.argv) != 2:
        print("usage: metadata_check.py BIN_DIR", file=sys.stderr)
        return 2
    tool = os.path.join(sys.argv[1], "capture")
    try:
        from playwright.sync_api import sync_playwright
        from PIL import Image
    except ImportError as e:
        check("playwright and pillow are installed (pip install playwright pillow)", False, str(e))
        return 1
    if not check.chromium_installed():
        return 1
    work = tempfile.mkdtemp(prefix="metadata-check-")
    picture = os.path.join(work, "code.png")
    code = code_picture(picture)
    env = dict(os.environ, HOME=work)
    server, url = start_serve(tool, env, ["--device", "file:" + picture, "--size", "640x480", "--metadata", "qr"])
    try:
        if not check("capture serve --metadata qr prints its URL", url is not None,
                     server.stderr.read() if server.poll() is not None else ""):
            return 1
        with sync_playwright() as p:
            browser = launch(p)
            # A wide view (not 4:3): the three gravities put the code in three different places.
            page = browser.new_page(viewport={"width": 1000, "height": 560})
            failures = []
            page.on("console", lambda m: failures.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
            cases = [("contain", False, ""), ("cover", False, ""), ("fill", False, ""),
                     ("contain", True, "&path=mjpeg"), ("cover", True, "&path=mjpeg")]
            for fit, mirrored, extra in cases:
                page.goto(url + f"?fit={fit}" + ("&mirror=1" if mirrored else "") + extra)
                try:
                    page.wait_for_function("Number(document.body.dataset.metadataEvents || 0) >= 5 && "
                                           "(document.getElementById('video').videoWidth || "
                                           "document.getElementById('live').naturalWidth) > 0", timeout=45000)
                except Exception:
                    pass  # reported below
                got = page.evaluate("""() => { const r = document.getElementById('view').getBoundingClientRect();
                    return [document.body.dataset.path, Number(document.body.dataset.metadataEvents || 0),
                            getComputedStyle(document.getElementById(document.body.dataset.path === 'mjpeg' ? 'live' : 'video')).objectFit,
                            r.x, r.y, r.width, r.height]; }""")
                path, events, style = got[0], got[1], got[2]
                view = tuple(got[3:])
                name = f"{fit}{' mirrored' if mirrored else ''} ({path})"
                if not check(f"{name}: the page reads /metadata events and plays the picture", events >= 5 and style == fit,
                             f"{events} events, object-fit {style}"):
                    continue
                time.sleep(0.5)
                shot = Image.open(io.BytesIO(page.screenshot())).convert("RGB")
                expected = placed(code, view, fit, mirrored)
                hits = edge_hits(shot, expected, view)
                check(f"{name}: the box is drawn where the code is ({[round(v) for v in expected]})",
                      hits is not None and hits >= 0.8, f"{hits} of the edge points have the box colour")
                # Where another gravity (or the other mirroring) would put it: no box there.
                others = [(f, mirrored) for f in ["contain", "cover", "fill"] if f != fit] + [(fit, not mirrored)]
                wrong = []
                for f, m in others:
                    other = placed(code, view, f, m)
                    # Its edges that lie apart from this one's (cover and fill share two).
                    mine, theirs = edge_lines(expected), edge_lines(other)
                    apart = [e for e in EDGES if abs(mine[e] - theirs[e]) > 15]
                    if not apart:
                        continue
                    h = edge_hits(shot, other, view, slack=1, edges=apart)
                    if h is not None and h > 0.3:
                        wrong.append(f"{f}{' mirrored' if m else ''}: {h:.2f}")
                check(f"{name}: no box where another gravity or mirroring would draw it", not wrong, "; ".join(wrong))
                if hits is None or hits < 0.8:
                    shot.save(os.path.join(tempfile.gettempdir(), f"metadata-check-{fit}{'-mirrored' if mirrored else ''}.png"))
            check("no error in the console", not failures, "; ".join(failures))
            browser.close()
    finally:
        if server.poll() is None:
            status = stop_serve(server)
            check("capture serve stops on SIGTERM with status 0", status == 0, f"status {status}")
        subprocess.run(["rm", "-rf", work])
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
