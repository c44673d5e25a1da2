"""What the browser checks share: their PASS/FAIL reporter and Debian's chromium through
Playwright (not Playwright's own browser download)."""
import os

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


def launch(playwright, *args):
    """Headless chromium with `args` besides --no-sandbox (the checks run as root)."""
    return playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", *args])
