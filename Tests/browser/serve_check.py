#!/usr/bin/env python3
"""The camera web app in a real browser: `capture serve` on the virtual camera, Debian's chromium
driven headless by Playwright: the web app's picture, shutter, sliders and toggle (its requests
carry the header the server asks of state changes), WebRTC and fragmented MP4 (with the virtual
microphone's sound, `--audio virtual`), then another site's form and script refused,
a rebound DNS name refused, and a page of the allowed origin reading /state with credentials.
Prints one "PASS  ..." or "FAIL  ..." line per check; exits non-zero if any check failed or could
not run.

    Tests/browser/serve_check.py BIN_DIR     (BIN_DIR holds the built `capture`)
"""
import glob
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

from checklib import Reporter, launch, start_serve, stop_serve

check = Reporter("browser")




def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    if len(sys.argv) != 2:
        print("usage: serve_check.py BIN_DIR", file=sys.stderr)
        return 2
    tool = os.path.join(sys.argv[1], "capture")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as e:
        check("playwright is installed (pip install playwright)", False, str(e))
        return 1
    if not check.chromium_installed():
        return 1
    home = tempfile.mkdtemp(prefix="serve-check-home-")
    env = dict(os.environ, HOME=home, XDG_CONFIG_HOME=os.path.join(home, ".config"))
    env.pop("XDG_PICTURES_DIR", None)
    server = subprocess.Popen([tool, "serve", "--port", "0", "--size", "640x480"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = None
        deadline = time.time() + 60
        while time.time() < deadline and url is None:
            line = server.stdout.readline()
            if not line:
                break
            m = re.search(r"at (http://\S+/) ", line)
            if m:
                url = m.group(1)
        if not check("capture serve prints its URL", url is not None, server.stderr.read() if server.poll() is not None else ""):
            return 1

        def state():
            with urllib.request.urlopen(url + "state", timeout=20) as r:
                return json.load(r)["result"]

        with sync_playwright() as p:
            # rebound.test resolves to this machine, as a DNS rebinding attack makes a site's name do.
            browser = launch(p, resolve=[("rebound.test", "127.0.0.1")])
            page = browser.new_page(viewport={"width": 900, "height": 700})
            # What the browser's console would show while the page loads: errors, and failed requests
            # (a missing /favicon.ico was one).
            failures, icons = [], []
            page.on("console", lambda m: failures.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
            page.on("response", lambda r: failures.append(f"{r.status} {r.url}") if r.status >= 400 else None)
            page.on("response", lambda r: icons.append(r.status) if r.url.endswith("/favicon.ico") else None)
            # The MJPEG picture, asked for (the page plays H.264 when it can: `video_checks`).
            page.goto(url + "?path=mjpeg")
            page.wait_for_function("document.getElementById('live').naturalWidth > 0", timeout=30000)
            size = page.evaluate("[document.getElementById('live').naturalWidth, document.getElementById('live').naturalHeight]")
            check("the live picture loads at the camera size", size == [640, 480], f"{size}")
            icon = page.evaluate("""async () => {
                const r = await fetch('/favicon.ico');
                return [r.status, r.headers.get('content-type'), (await r.text()).startsWith('<svg')];
            }""")
            check("the icon the page links is served (no 404 for /favicon.ico)", icon == [200, "image/svg+xml", True],
                  f"{icon}, the browser's own requests for it: {icons}")
            check("the page loads with no error in the console and no failed request", not failures, "; ".join(failures))

            # The picture's pixels, drawn from the live <img> (same origin: not tainted).
            grab = """() => {
                const img = document.getElementById('live');
                const c = document.createElement('canvas');
                c.width = img.naturalWidth; c.height = img.naturalHeight;
                const g = c.getContext('2d');
                g.drawImage(img, 0, 0);
                return Array.from(g.getImageData(0, 0, c.width, c.height).data);
            }"""
            w, h = size

            def pixel(data, x, y):
                i = (y * w + x) * 4
                return data[i], data[i + 1], data[i + 2]

            bars = [("white", 191, 191, 191), ("yellow", 191, 191, 0), ("cyan", 0, 191, 191), ("green", 0, 191, 0),
                    ("magenta", 191, 0, 191), ("red", 191, 0, 0), ("blue", 0, 0, 191), ("black", 0, 0, 0)]
            first = page.evaluate(grab)
            wrong = []
            for i, (name, r, g, b) in enumerate(bars):
                px = pixel(first, (2 * i + 1) * w // 16, h * 3 // 4)
                if max(abs(px[0] - r), abs(px[1] - g), abs(px[2] - b)) > 32:
                    wrong.append(f"{name} {px}")
            check("the page shows the virtual camera's colour bars", not wrong, "; ".join(wrong))

            shot1 = page.locator("#live").screenshot()
            changed = False
            deadline = time.time() + 20
            while time.time() < deadline and not changed:
                time.sleep(0.5)
                changed = page.locator("#live").screenshot() != shot1
            check("the picture changes between two screenshots (the moving box)", changed)

            # Gravity: the three videoGravity modes as object-fit.
            fits = []
            for value in ["cover", "fill", "contain"]:
                page.select_option("#gravity", value)
                fits.append(page.evaluate("getComputedStyle(document.getElementById('live')).objectFit"))
            check("the gravity choice sets contain/cover/fill", fits == ["cover", "fill", "contain"], f"{fits}")

            # Shutter: a complete JPEG in the album under the temporary HOME, shown on the page.
            page.click("#shutter")
            page.wait_for_function("document.body.dataset.stills === '1'", timeout=30000)
            page.wait_for_function("document.getElementById('last').naturalWidth > 0", timeout=30000)
            stills = glob.glob(os.path.join(home, "**", "*.jpg"), recursive=True)
            ok = len(stills) == 1
            detail = f"{stills}"
            if ok:
                r = subprocess.run(["jpeginfo", "-c", stills[0]], capture_output=True, text=True)
                ok = r.returncode == 0 and "OK" in r.stdout
                detail = r.stdout + r.stderr
            check("the shutter saves a complete JPEG into the album and shows it", ok, detail)

            # A control slider changes the picture.
            def mean(data):
                return sum(data[i] for i in range(0, len(data), 4 * 97)) / (len(data) / (4 * 97))
            page.wait_for_selector("#controls input[type=range]", timeout=20000)
            control_checks(page, lambda: mean(page.evaluate(grab)))
            before = mean(page.evaluate(grab))
            page.evaluate("""() => {
                const s = [...document.querySelectorAll('#controls label')].find(l => l.textContent.startsWith('Brightness'));
                const input = s.querySelector('input');
                input.value = input.max;
                input.dispatchEvent(new Event('change'));
            }""")
            brighter = False
            deadline = time.time() + 20
            after = before
            while time.time() < deadline and not brighter:
                time.sleep(0.3)
                after = mean(page.evaluate(grab))
                brighter = after > before + 10
            check("the brightness slider changes the picture", brighter, f"mean {before:.0f} -> {after:.0f}")

            # Toggle: the server's session switches camera; the picture goes on.
            camera = state()["source"]["device"]
            page.click("#toggle")
            page.wait_for_function("document.body.dataset.camera !== undefined", timeout=30000)
            switched = False
            deadline = time.time() + 20
            while time.time() < deadline and not switched:
                time.sleep(0.3)
                switched = state()["source"]["device"] != camera
            check("the toggle switches camera", switched, f"still {camera}")
            page.wait_for_function("document.getElementById('live').naturalWidth > 0", timeout=30000)
            figures = page.text_content("#figures")
            check("the page shows fps, drops and clients", "fps" in figures and "drops" in figures and "clients" in figures, figures)
            video_checks(page, url)
            sound_checks(page, tool, env)
            cross_site_checks(page, tool, env, url, home)
            browser.close()
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
            try:
                status = server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                status = None
            check("capture serve stops on SIGTERM with status 0", status == 0, f"status {status}")
        subprocess.run(["rm", "-rf", home])
    return 1 if check.failed else 0


SCREENSHOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "webapp.png")


def control_checks(page, picture_mean):
    """Each camera control drawn as its V4L2 type says (the server's /api/controls): a boolean as a
    switch, a menu as a menu of the driver's item names, an integer as a slider showing its value;
    a menu item chosen by name and a switch flipped reach the camera. Saves the page as
    docs/webapp.png (the README's picture) while the camera shows its defaults."""
    controls = page.evaluate("async () => (await (await fetch('api/controls')).json()).result.controls")
    drawn = page.evaluate("""() => [...document.querySelectorAll('#controls label')].map(l => {
        const i = l.querySelector('input, select, button');
        return {id: Number(l.dataset.id), type: l.dataset.type, tag: i.tagName.toLowerCase(), input: i.type || '',
                role: i.getAttribute('role'), shown: l.querySelector('output')?.textContent ?? null,
                items: i.tagName === 'SELECT' ? [...i.options].map(o => o.textContent) : null,
                value: i.type === 'checkbox' ? (i.checked ? 1 : 0) : Number(i.value)};
    })""")
    by_id = {c["id"]: c for c in controls}
    for c in controls:  # (a server that gives no type or items: every control an integer without a menu)
        c.setdefault("type", None)
        c.setdefault("menu", [])
    kinds = {c["type"] for c in controls}
    check("the server gives each control's type and a menu's item names (/api/controls)",
          {"boolean", "menu", "integer"} <= kinds and all(c["menu"] for c in controls if c["type"] == "menu")
          and any(i["name"] == "Aperture Priority Mode" for c in controls for i in c["menu"]),
          f"types {sorted(kinds)}")
    wrong = []
    for d in drawn:
        c = by_id.get(d["id"])
        if c is None:
            wrong.append(f"{d['id']}: not a control of the server")
            continue
        if c["type"] == "boolean":
            ok = d["tag"] == "input" and d["input"] == "checkbox" and d["role"] == "switch"
        elif c["type"] in ("menu", "integerMenu"):
            ok = d["tag"] == "select" and d["items"] == [i["name"] for i in c["menu"]]
        elif c["type"] == "button":
            ok = d["tag"] == "button"
        else:
            ok = d["tag"] == "input" and d["input"] == "range" and d["shown"] == str(c["value"])
        if not ok or d["value"] != c["value"] and c["type"] != "button":
            wrong.append(f"{c['name']} ({c['type']}): drawn as {d}")
    missing = [c["name"] for c in controls if c["id"] not in {d["id"] for d in drawn}
               and not (c["type"] == "integer" and c["maximum"] <= c["minimum"])]
    check("every control is drawn as its type: switches, menus by name, sliders with their value",
          drawn and not wrong and not missing, "; ".join(wrong + [f"{m} not drawn" for m in missing]))
    try:
        page.screenshot(path=SCREENSHOT)
        check("the web app's screenshot is saved as docs/webapp.png", os.path.getsize(SCREENSHOT) > 10000)
    except Exception as e:  # noqa: BLE001 - a read-only checkout still runs the other checks
        check("the web app's screenshot is saved as docs/webapp.png", False, str(e))

    def select(name, item):
        """Chooses the menu item by its name; False when there is no such menu or item."""
        return page.evaluate("""([name, item]) => {
            const l = [...document.querySelectorAll('#controls label')].find(l => l.firstChild.textContent === name);
            const s = l && l.querySelector('select');
            const o = s && [...s.options].find(o => o.textContent === item);
            if (!o) return false;
            s.value = o.value;
            s.dispatchEvent(new Event('change'));
            return true;
        }""", [name, item])

    def server_value(name):
        cs = page.evaluate("async () => (await (await fetch('api/controls')).json()).result.controls")
        return next((c for c in cs if c["name"] == name), {})

    # The Test Pattern menu by its item's name: black, then the bars again.
    bars = picture_mean()
    chosen = select("Test Pattern", "Black")
    dark, darker = bars, False
    deadline = time.time() + (20 if chosen else 0)
    while time.time() < deadline and not darker:
        time.sleep(0.3)
        dark = picture_mean()
        darker = dark < bars / 3
    check("choosing Test Pattern \"Black\" by name blackens the picture", darker,
          f"mean {bars:.0f} -> {dark:.0f}" if chosen else "no Test Pattern menu with an item Black")
    select("Test Pattern", "75% Colorbar")
    # A switch: White Balance, Automatic off makes White Balance Temperature active.
    switch = """() => {
        const l = [...document.querySelectorAll('#controls label')].find(l => l.firstChild.textContent === 'White Balance, Automatic');
        const i = l && l.querySelector('input[role=switch]');
        if (i) i.click();
        return !!i;
    }"""
    flipped = False
    deadline = time.time() + (10 if page.evaluate(switch) else 0)
    while time.time() < deadline and not flipped:
        time.sleep(0.2)
        flipped = server_value("White Balance, Automatic").get("value") == 0 and page.evaluate(
            """() => document.querySelector('#controls label[data-id="%d"]')?.classList.contains('inactive') === false"""
            % server_value("White Balance Temperature").get("id", 0))
    check("the White Balance, Automatic switch turns it off and White Balance Temperature becomes active", flipped,
          f"{server_value('White Balance, Automatic')}")
    if flipped:
        page.evaluate(switch)


def video_checks(page, url):
    """The page as it opens: the server has WebRTC (WHEP), so it plays that in its <video> and
    says so; asked for `?path=mp4`, it plays /stream.mp4 (H.264) through Media Source Extensions.
    Either way its time advances with frames decoded, with no error."""
    failures = []
    page.on("console", lambda m: failures.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("response", lambda r: failures.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    quality = """() => { const v = document.getElementById('video');
        return [document.body.dataset.path, document.getElementById('path').textContent, v.currentTime,
                v.getVideoPlaybackQuality().totalVideoFrames, v.videoWidth]; }"""
    for query, path, label, name in [("", "webrtc", "WebRTC", "WebRTC (WHEP) by default"),
                                     ("?path=mp4", "mp4", "fragmented MP4", "fragmented MP4 when asked")]:
        page.goto(url + query)
        try:
            page.wait_for_function(f"document.body.dataset.path === '{path}' && document.getElementById('video').currentTime > 0.5",
                                   timeout=30000)
        except Exception:
            pass  # what it found is reported by the checks below
        first = page.evaluate(quality)
        check(f"the page plays {name}, and says so",
              first[0] == path and first[1].startswith(label) and first[4] > 0, f"{first}")
        time.sleep(1.5)
        later = page.evaluate(quality)
        check(f"its video's time advances and its frames decode ({path}: totalVideoFrames grows)",
              later[2] > first[2] + 0.5 and later[3] > first[3] + 10, f"{first} -> {later}")
    check("it plays with no error in the console and no failed request", not failures, "; ".join(failures))


def sound_checks(page, tool, env):
    """`capture serve --audio virtual`: asked for `?path=mp4`, the page plays /stream.mp4 with the
    microphone's AAC through Media Source Extensions (codecs avc1 and mp4a.40.2), says it has
    sound, and once the Sound button unmutes it, Chromium decodes the audio as it plays."""
    server, url = start_serve(tool, env, ["--size", "640x480", "--audio", "virtual"])
    try:
        if not check("capture serve --audio virtual prints its URL", url is not None):
            return
        page.goto(url + "?path=mp4")
        try:
            page.wait_for_function("document.body.dataset.path === 'mp4' && document.getElementById('video').currentTime > 0.5",
                                   timeout=30000)
        except Exception:
            pass  # what it found is reported below
        # (Hidden when the page fell back to MJPEG: the check below says what it plays.)
        if page.is_visible("#sound"):
            page.click("#sound")
        audio = """() => { const v = document.getElementById('video');
            return [document.getElementById('path').textContent, v.muted, v.currentTime, v.webkitAudioDecodedByteCount,
                    v.audioTracks ? v.audioTracks.length : -1]; }"""
        first = page.evaluate(audio)
        time.sleep(1.5)
        later = page.evaluate(audio)
        check("with a microphone, the page plays /stream.mp4 with sound, says so, and Sound unmutes it",
              first[0].startswith("fragmented MP4") and "sound available" in first[0] and not first[1], f"{first}")
        check("its audio decodes as it plays (webkitAudioDecodedByteCount grows, time advances)",
              later[3] > first[3] > 0 and later[2] > first[2] + 0.5, f"{first} -> {later}")
    finally:
        stop_serve(server)


def cross_site_checks(page, tool, env, url, home):
    """Another site's page (another origin: another port of this machine) and a rebound DNS name."""
    def stills():
        return len(glob.glob(os.path.join(home, "**", "*.jpg"), recursive=True))
    port = int(re.search(r":(\d+)/$", url).group(1))
    site = tempfile.mkdtemp(prefix="serve-check-site-")
    with open(os.path.join(site, "form.html"), "w") as f:
        f.write(f'''<form id="f" method="post" action="{url}api/still"><input name="a" value="b"></form>
<script>document.getElementById("f").submit();</script>''')
    with open(os.path.join(site, "index.html"), "w") as f:
        f.write("<p>another site</p>")
    other = free_port()
    origin = f"http://127.0.0.1:{other}"
    site_server = subprocess.Popen([sys.executable, "-m", "http.server", str(other), "--bind", "127.0.0.1",
                                    "--directory", site], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    allowed, allowed_url = None, None
    try:
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                urllib.request.urlopen(origin + "/index.html", timeout=5).close()
                break
            except OSError:
                time.sleep(0.2)
        before = stills()
        with page.expect_response(lambda r: r.url == url + "api/still", timeout=20000) as posted:
            page.goto(origin + "/form.html")
        status = posted.value.status
        check("another site's form POST to /api/still is refused (403)", status == 403, f"status {status}")
        page.goto(origin + "/index.html")
        answer = page.evaluate("""async (u) => {
            try { const r = await fetch(u + "api/still", { method: "POST", headers: { "X-Requested-With": "x" } });
                  return "answered " + r.status; }
            catch (e) { return "blocked"; } }""", url)
        check("another site's script that sets the header is held by the preflight", answer == "blocked", answer)
        time.sleep(1)
        check("neither saved a still", stills() == before, f"{before} -> {stills()}")

        rebound = page.goto(f"http://rebound.test:{port}/snapshot")
        check("a rebound DNS name gets 403, not the picture", rebound is not None and rebound.status == 403,
              f"{rebound.status if rebound else None}")

        # A page of the allowed origin reads /state with credentials (its preflight is answered).
        allowed, allowed_url = start_serve(tool, env, ["--allow-origin", origin, "--user", "u", "--password", "p:x"])
        if check("a second capture serve with --allow-origin and --user prints its URL", allowed_url is not None):
            page.goto(origin + "/index.html")
            got = page.evaluate("""async (u) => {
                try { const r = await fetch(u + "state", { headers: { "Authorization": "Basic " + btoa("u:p:x") } });
                      const j = await r.json(); return r.status + " " + j.ok; }
                catch (e) { return "failed: " + e; } }""", allowed_url)
            check("a page of the allowed origin reads /state with credentials", got == "200 true", got)
            refused = page.evaluate("""async (u) => {
                try { const r = await fetch(u + "state"); return String(r.status); }
                catch (e) { return "failed: " + e; } }""", allowed_url)
            check("without credentials it gets 401", refused == "401", refused)
    finally:
        site_server.terminate()
        site_server.wait(timeout=10)
        if allowed is not None:
            stop_serve(allowed)
        subprocess.run(["rm", "-rf", site])


if __name__ == "__main__":
    sys.exit(main())
