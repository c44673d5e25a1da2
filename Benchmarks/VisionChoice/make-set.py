# Test set for the detector choice: barcodes (qrencode, python-barcode) and faces (scikit-image).
import subprocess, json, io, sys
from PIL import Image, ImageOps
import numpy as np
import barcode
from barcode.writer import ImageWriter
import skimage.data as skd

out = sys.argv[1]
W, H = 640, 480
labels = []
def save(name, img, **kw):
    img.convert("L").save(f"{out}/{name}.pgm")
    labels.append(dict(name=name, **kw))

def qr(text):
    r = subprocess.run(["qrencode", "-t", "PNG", "-s", "1", "-m", "4", "-o", "-", text], capture_output=True, check=True)
    return Image.open(io.BytesIO(r.stdout)).convert("L")

texts = {"short": "HELLO", "long": "https://example.com/" + "abcdefghij" * 15, "utf8": "Grüße aus Köln — 東京 ✓"}
n = 0
for key, text in texts.items():
    base = qr(text)
    for size in (120, 240, 400):
        for angle in (0, 15, 45, 90):
            for pos in ((0.5, 0.5), (0.3, 0.35)):
                img = base.resize((size, size), Image.NEAREST).rotate(angle, expand=True, fillcolor=255, resample=Image.BILINEAR)
                canvas = Image.new("L", (W, H), 128)
                x = int(pos[0] * W - img.width / 2); y = int(pos[1] * H - img.height / 2)
                canvas.paste(img, (max(0, x), max(0, y)))
                save(f"qr{n:03d}", canvas, kind="qr", text=text); n += 1
for kind, cls, data in (("ean13", barcode.get_barcode_class("ean13"), "590123412345"), ("code128", barcode.get_barcode_class("code128"), "Capture-128 test")):
    b = cls(data, writer=ImageWriter())
    img = b.render({"module_width": 0.3, "module_height": 12, "font_size": 8, "text_distance": 4, "quiet_zone": 4, "dpi": 254}).convert("L")
    text = b.get_fullcode()
    for scale in (0.5, 0.75, 1.0):
        for angle in (0, 10, 90):
            im = img.resize((int(img.width * scale), int(img.height * scale)), Image.BILINEAR).rotate(angle, expand=True, fillcolor=255)
            if im.width > W or im.height > H: continue
            canvas = Image.new("L", (W, H), 128)
            canvas.paste(im, ((W - im.width) // 2, (H - im.height) // 2))
            save(f"{kind}{n:03d}", canvas, kind=kind, text=text); n += 1

# Faces: the astronaut (its face measured by hand on the picture), and lfw_subset's 100 faces
# tiled 5x4 per frame at 96 px with a grey margin; its 100 non-faces the same way.
ast = Image.fromarray(skd.astronaut())
save("face_astronaut", ast, kind="face", faces=[[170, 40, 120, 140]])
lfw = skd.lfw_subset()
def grid(imgs, prefix, isface):
    tile, margin = 96, 32
    for g in range(0, len(imgs), 20):
        canvas = Image.new("L", (5 * (tile + margin) + margin, 4 * (tile + margin) + margin), 128)
        faces = []
        for i, a in enumerate(imgs[g:g + 20]):
            im = Image.fromarray((a * 255).astype(np.uint8)).resize((tile, tile), Image.BICUBIC)
            x = margin + (i % 5) * (tile + margin); y = margin + (i // 5) * (tile + margin)
            canvas.paste(im, (x, y)); faces.append([x, y, tile, tile])
        save(f"{prefix}{g // 20}", canvas, kind="face" if isface else "noface", faces=faces if isface else [])
grid(lfw[:100], "lfw", True)
grid(lfw[100:], "nonface", False)
for name in ("coffee", "chelsea", "rocket", "hubble_deep_field", "coins", "moon", "page", "text", "brick", "grass", "gravel", "horse", "immunohistochemistry"):
    a = getattr(skd, name)()
    im = Image.fromarray(a if a.dtype == np.uint8 else (a * 255).astype(np.uint8))
    save(f"noface_{name}", im, kind="noface", faces=[])
json.dump(labels, open(f"{out}/labels.json", "w"), indent=0)
print(len(labels))
