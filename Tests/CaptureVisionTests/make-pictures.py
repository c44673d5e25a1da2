#!/usr/bin/env python3
# Pictures for CaptureVisionTests, written as JPEG into the folder given, with labels.json saying
# what each holds and where (picture pixels): EAN-13 and Code 128 barcodes made by python-barcode,
# scikit-image's astronaut (also beside a qrencode QR code in a 1280x720 frame) and its lfw_subset
# faces tiled into grids, and pictures with no face.
# Needs (scripts/test installs them): python-barcode, scikit-image, Pillow, qrencode.
import io
import json
import subprocess
import sys

import barcode
import numpy as np
import skimage.data as skd
from barcode.writer import ImageWriter
from PIL import Image

out = sys.argv[1]
labels = {}


def save(name, img, **kw):
    img.convert("RGB").save(f"{out}/{name}.jpg", quality=95)
    labels[name] = dict(width=img.width, height=img.height, **kw)


# Barcodes: bars only (no text under them), so the dark pixels' box is where the bars are.
for kind, data, module in (("ean13", "590123412345", 0.3), ("code128", "Capture-128", 0.25)):
    code = barcode.get_barcode_class(kind)(data, writer=ImageWriter())
    bars = code.render({"module_width": module, "module_height": 12, "quiet_zone": 4, "dpi": 254, "write_text": False}).convert("L")
    canvas = Image.new("L", (640, 480), 160)
    x, y = min((640 - bars.width) // 2 + 60, 640 - bars.width), (480 - bars.height) // 2 + 40
    canvas.paste(bars, (x, y))
    dark = np.argwhere(np.array(canvas) < 80)
    (y0, x0), (y1, x1) = dark.min(0), dark.max(0)
    save(kind, canvas, text=code.get_fullcode(), box=[int(x0), int(y0), int(x1 - x0 + 1), int(y1 - y0 + 1)])

# Faces: the astronaut, with her face's box measured on the picture.
save("astronaut", Image.fromarray(skd.astronaut()), faces=[[165, 45, 120, 135]])

# A 1280x720 frame with a face and a code side by side: the astronaut (face box as above) at
# (96, 104) and a qrencode QR code (modules of 8 pixels) at (760, 192).
frame = Image.new("L", (1280, 720), 128)
frame.paste(Image.fromarray(skd.astronaut()).convert("L"), (96, 104))
qr = Image.open(io.BytesIO(subprocess.run(["qrencode", "-s", "8", "-m", "2", "-o", "-", "beside capture"], check=True, capture_output=True).stdout))
frame.paste(qr.convert("RGBA").convert("L"), (760, 192))
save("astronaut_qr", frame, text="beside capture", faces=[[96 + 165, 104 + 45, 120, 135]])


def grid(images, name, faces):
    tile, margin = 96, 32
    canvas = Image.new("L", (5 * (tile + margin) + margin, 4 * (tile + margin) + margin), 128)
    boxes = []
    for i, a in enumerate(images):
        im = Image.fromarray((a * 255).astype(np.uint8)).resize((tile, tile), Image.BICUBIC)
        x, y = margin + (i % 5) * (tile + margin), margin + (i // 5) * (tile + margin)
        canvas.paste(im, (x, y))
        boxes.append([x, y, tile, tile])
    save(name, canvas, faces=boxes if faces else [])


# lfw_subset: its first 100 pictures are faces, the next 100 are not.
lfw = skd.lfw_subset()
for g in range(5):
    grid(lfw[20 * g:20 * g + 20], f"lfw{g}", True)
    grid(lfw[100 + 20 * g:120 + 20 * g], f"nonface{g}", False)
for name in ("coffee", "rocket", "hubble_deep_field", "coins", "page", "brick", "horse"):
    a = getattr(skd, name)()
    save(f"noface_{name}", Image.fromarray(a if a.dtype == np.uint8 else (a * 255).astype(np.uint8)), faces=[])

json.dump(labels, open(f"{out}/labels.json", "w"), indent=1)
