"""What the browser checks share: their PASS/FAIL reporter, Debian's chromium through
Playwright (not Playwright's own browser download), and `capture serve` started and stopped."""
import os
import re
import signal
import subprocess
import time

CHROMIUM = "/usr/bin/chromium"


class Reporter:
    """Prints one "PASS  AREA: name" or "FAIL  AREA: name  (detail)" line per check and counts
    the failures; calling it returns whether the check passed."""

    def __init__(self, area):
        self.area = area
        self.failed = 0

    def __call__(self, name, ok, detail=""):
        if ok:
            print(f"PASS  {self.area}: {name}", flush=True)
        else:
            self.failed += 1
            print(f"FAIL  {self.area}: {name}" + (f"  ({detail})" if detail else ""), flush=True)
        return ok

    def chromium_installed(self):
        return self(f"chromium is installed ({CHROMIUM})", os.access(CHROMIUM, os.X_OK))


def launch(playwright, *args, resolve=()):
    """Headless chromium with `args` besides --no-sandbox (the checks run as root). It resolves no
    name but localhost and the `resolve` pairs (name, address): the checks' pages are on loopback,
    and Chromium's own lookups (its services, WebRTC's default route) must not leave the machine."""
    rules = [f"MAP {name} {address}" for name, address in resolve] + ["MAP * ~NOTFOUND", "EXCLUDE localhost", "EXCLUDE 127.0.0.1", "EXCLUDE [::1]"]
    return playwright.chromium.launch(
        executable_path=CHROMIUM, args=["--no-sandbox", "--host-resolver-rules=" + ", ".join(rules), *args])


def start_serve(tool, env, args, stderr=subprocess.PIPE):
    """`capture serve ARGS` on a free port and the URL it prints (None if it printed none).
    A long run passes stderr=subprocess.DEVNULL: a pipe nobody reads fills and stops the server."""
    server = subprocess.Popen([tool, "serve", "--port", "0"] + args, env=env,
                              stdout=subprocess.PIPE, stderr=stderr, text=True)
    deadline = time.time() + 60
    while time.time() < deadline:
        line = server.stdout.readline()
        if not line:
            break
        m = re.search(r"at (https?://\S+/) ", line)
        if m:
            return server, m.group(1)
    return server, None


def stop_serve(server):
    """SIGTERM, then its exit status (None if it had to be killed or had ended already)."""
    if server.poll() is None:
        server.send_signal(signal.SIGTERM)
        try:
            return server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
    return None
