#!/usr/bin/env python3
"""The documentation site in a real browser: docs-site/ (written by scripts/docs) served on
127.0.0.1 as `scripts/docs --serve` serves it, Debian's chromium driven headless by Playwright.
Opens the landing page, every article and a page for public types of each product (re-exported
ones included) and checks what they show. Prints one "PASS  ..." or "FAIL  ..." line per check;
exits non-zero if any check failed or could not run.

    Tests/browser/docs_check.py SITE_DIR     (SITE_DIR: docs-site, from scripts/docs)
"""
import os
import re
import subprocess
import sys
import time

from checklib import Reporter, launch

check = Reporter("docs")

# Path under /documentation/, and the title the page must show.
ARTICLES = [
    ("capture/gettingstarted", "Getting started"),
    ("capture/portingfromavfoundation", "Porting from AVFoundation"),
    ("capture/framesbuffersandthreads", "Frames, buffers and threads"),
    ("capture/testingwiththevirtualcamera", "Testing with the virtual camera"),
    ("capture/measuringyourcamera", "Measuring your camera"),
    ("capturepreview/showingthepreview", "Showing the preview"),
    ("captureserver/servingthecamera", "Serving the camera"),
    ("capturerecording/recordingmovies", "Recording movies"),
]
# Types of each product; CaptureError, PixelFormat and VirtualCamera live in lower targets and
# are documented through Capture's re-exports.
TYPES = [
    ("capture/capturesession", "CaptureSession"),
    ("capture/capturedevice", "CaptureDevice"),
    ("capture/capturevideodataoutput", "CaptureVideoDataOutput"),
    ("capture/samplebuffer", "SampleBuffer"),
    ("capture/captureerror", "CaptureError"),
    ("capture/pixelformat", "PixelFormat"),
    ("capture/virtualcamera", "VirtualCamera"),
    ("capturepreview/capturevideopreviewlayer", "CaptureVideoPreviewLayer"),
    ("capturepreview/previewwindow", "PreviewWindow"),
    ("captureserver/capturestreamserver", "CaptureStreamServer"),
    ("capturerecording/capturemoviefileoutput", "CaptureMovieFileOutput"),
    # CaptureVision's metadata output, a CaptureOutput of Capture's (added as any output).
    ("capturevision/capturemetadataoutput", "CaptureMetadataOutput"),
    # CaptureServerMP4's extension of the server (server.addFragmentedMP4Stream()).
    ("captureservermp4/captureserver/capturestreamserver", "CaptureStreamServer"),
    ("capturewebrtc/webrtcpublisher", "WebRTCPublisher"),
    # CaptureWebRTC's extension of the server (server.serveWebRTC(publisher)).
    ("capturewebrtc/captureserver/capturestreamserver", "CaptureStreamServer"),
]
SEEDS = ["Seed 1", "Seed 2", "Seed 3", "Seed 4", "Seed 5"]
# Every AVFoundation, Core Media and UIKit-album symbol the five seeds use (read off the seeds in
# ../shared/seeds, which the repository does not carry): the porting guide's table names each.
SEED_SYMBOLS = [
    "AVCaptureDevice", "devicesWithMediaType:", "defaultDeviceWithMediaType:", "hasMediaType:", "position",
    "AVCaptureDevicePosition", "AVCaptureDevicePositionFront", "AVCaptureDevicePositionBack",
    "AVCaptureDevicePositionUnspecified", "AVMediaTypeVideo", "AVMediaTypeAudio", "AVCaptureInput",
    "AVCaptureDeviceInput", "deviceInputWithDevice:error:", "initWithDevice:error:", "device", "AVCaptureSession",
    "inputs", "canAddInput:", "addInput:", "removeInput:", "canAddOutput:", "addOutput:", "beginConfiguration",
    "commitConfiguration", "startRunning", "stopRunning", "sessionPreset", "AVCaptureSessionPreset1280x720",
    "AVCaptureOutput", "AVCaptureStillImageOutput", "setOutputSettings:", "AVVideoCodecKey", "AVVideoCodecJPEG",
    "connections", "connectionWithMediaType:", "captureStillImageAsynchronouslyFromConnection:completionHandler:",
    "jpegStillImageNSDataRepresentation:", "AVCaptureConnection", "isVideoOrientationSupported",
    "setVideoOrientation:", "AVCaptureVideoOrientationPortrait", "AVCaptureVideoDataOutput",
    "AVCaptureAudioDataOutput", "setSampleBufferDelegate:queue:", "captureOutput:didOutputSampleBuffer:fromConnection:",
    "CMSampleBufferRef", "AVCaptureVideoPreviewLayer", "layerWithSession:", "setVideoGravity:",
    "AVLayerVideoGravityResizeAspect", "AVLayerVideoGravityResizeAspectFill", "addSublayer:", "insertSublayer:atIndex:",
    "insertSublayer:below:", "setMasksToBounds:", "UIImageWriteToSavedPhotosAlbum",
]




def main():
    if len(sys.argv) != 2:
        print("usage: docs_check.py SITE_DIR", file=sys.stderr)
        return 2
    site = sys.argv[1]
    if not check("the site was built (scripts/docs)", os.path.exists(os.path.join(site, "index.html")), site):
        return 1
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as e:
        check("playwright is installed (pip install playwright)", False, str(e))
        return 1
    if not check.chromium_installed():
        return 1
    # What `scripts/docs --serve` runs, on a free port.
    server = subprocess.Popen([sys.executable, "-u", "-m", "http.server", "0", "--bind", "127.0.0.1",
                               "--directory", site], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        base = None
        deadline = time.time() + 20
        while time.time() < deadline and base is None:
            line = server.stdout.readline()
            if not line:
                break
            m = re.search(r"port (\d+)", line)
            if m:
                base = f"http://127.0.0.1:{m.group(1)}/documentation/"
        if not check("the site is served on 127.0.0.1", base is not None):
            return 1

        with sync_playwright() as p:
            browser = launch(p)
            page = browser.new_page()

            def title_of(path):
                page.goto(base + path + "/")
                page.wait_for_selector("main h1", timeout=30000)
                return page.inner_text("main h1").strip()

            page.goto(base)
            page.wait_for_selector("main h1", timeout=30000)
            text = page.inner_text("main")
            products = ["Capture", "CapturePreview", "CaptureServer", "CaptureServerMP4", "CaptureWebRTC", "CaptureRecording", "CaptureVision",
                        "CaptureVisionServer"]
            check("the site's landing page lists the eight products", all(p in text for p in products),
                  f"missing {[p for p in products if p not in text]}")

            landing = title_of("capture")
            check("the Capture landing page", landing == "Capture", landing)
            body = page.inner_text("main")
            missing = [t for _, t in ARTICLES[:5] if t not in body]
            check("the Capture landing page lists its articles", not missing, f"missing {missing}")

            for path, want in ARTICLES + TYPES:
                try:
                    got = title_of(path)
                except Exception as e:  # a page that never renders
                    got = f"no page: {e}".splitlines()[0]
                check(f"{path} shows '{want}'", got == want, got)

            # The porting guide: every seed, Objective-C beside Swift.
            page.goto(base + "capture/portingfromavfoundation/")
            page.wait_for_selector("main h1", timeout=30000)
            text = page.inner_text("main")
            check("the porting guide has the five seeds", all(s in text for s in SEEDS),
                  f"missing {[s for s in SEEDS if s not in text]}")
            rows = page.eval_on_selector_all(
                "main .row", "rows => rows.map(r => [...r.querySelectorAll('pre')].length)")
            check("the porting guide shows Objective-C beside Swift", len(rows) >= 10 and all(n == 2 for n in rows),
                  f"rows with code listings: {rows}")
            # The table of every symbol the seeds use: each in its left column, with an answer.
            cells = page.eval_on_selector_all(
                "main table", """tables => tables
                    .filter(t => (t.querySelector('th') || {}).innerText === 'In the seeds')
                    .flatMap(t => [...t.querySelectorAll('tbody tr')].map(r => [...r.cells].map(c => c.innerText)))""")
            named = {sym.strip() for row in cells if len(row) == 2 and row[1].strip()
                     for sym in re.findall(r"[A-Za-z_][A-Za-z0-9_:]*", row[0])}
            unnamed = [sym for sym in SEED_SYMBOLS if sym not in named]
            check("the porting guide's table names every symbol the seeds use", cells and not unnamed,
                  f"{len(cells)} rows; missing {unnamed}")
            check("the porting guide's listings include both languages",
                  "captureStillImageAsynchronouslyFromConnection" in text and "captureStillImageAsynchronously(from:" in text)
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=10)
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
