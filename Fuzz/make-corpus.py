#!/usr/bin/env python3
"""Regenerates the seed corpus in Fuzz/corpus/<target>/ (small files, committed).

Seeds: tiny baseline JPEGs in each chroma layout (ffmpeg's mjpeg encoder), progressive and
restart-interval variants (jpegtran, when installed), MJPEG frames with the DHT segments taken
out (as UVC cameras send them), frames with padding after EOI, truncated and empty frames, and
Exif payloads in both byte orders. Run from the repository: python3 Fuzz/make-corpus.py
"""
import os, shutil, struct, subprocess, tempfile

here = os.path.dirname(os.path.abspath(__file__))
corpus = os.path.join(here, "corpus")
tmp = tempfile.mkdtemp()


def ffmpeg_jpeg(name, size, pix, src="testsrc"):
    out = os.path.join(tmp, name)
    subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-f", "lavfi", "-i", f"{src}=size={size}",
                    "-frames:v", "1", "-pix_fmt", pix, "-q:v", "8", "-y", out], check=True)
    return open(out, "rb").read()


def jpegtran(data, *args):
    if not shutil.which("jpegtran"):
        return None
    p = subprocess.run(["jpegtran", *args], input=data, capture_output=True)
    return p.stdout if p.returncode == 0 and p.stdout else None


def segments(data):
    """(marker, start, end) of each segment before the first scan, then the rest."""
    i, out = 2, []
    while i + 4 <= len(data) and data[i] == 0xFF:
        m = data[i + 1]
        ln = struct.unpack(">H", data[i + 2:i + 4])[0]
        out.append((m, i, i + 2 + ln))
        if m == 0xDA:
            break
        i += 2 + ln
    return out


def strip_dht(data):
    keep, last = bytearray(data[:2]), 2
    for m, s, e in segments(data):
        if m == 0xC4:
            keep += data[last:s]
            last = e
    keep += data[last:]
    return bytes(keep)


def exif_payload(little, orientation=6, make=b"vivid\0", model=b"Test Camera\0"):
    e = "<" if little else ">"
    entries = [(0x010F, 2, len(make), make), (0x0110, 2, len(model), model), (0x0112, 3, 1, orientation)]
    ifd_off = 8
    data_off = ifd_off + 2 + 12 * len(entries) + 4
    ifd, extra = struct.pack(e + "H", len(entries)), b""
    for tag, typ, count, val in entries:
        if typ == 3:
            ifd += struct.pack(e + "HHIH", tag, typ, count, val) + b"\0\0"
        elif len(val) <= 4:
            ifd += struct.pack(e + "HHI", tag, typ, count) + val.ljust(4, b"\0")
        else:
            ifd += struct.pack(e + "HHII", tag, typ, count, data_off + len(extra))
            extra += val
    ifd += b"\0\0\0\0"
    tiff = (b"II" if little else b"MM") + struct.pack(e + "HI", 42, ifd_off) + ifd + extra
    return b"Exif\0\0" + tiff


def with_exif(jpeg, payload):
    seg = b"\xFF\xE1" + struct.pack(">H", len(payload) + 2) + payload
    return jpeg[:2] + seg + jpeg[2:]


def write(target, name, data):
    if data is None:
        return
    d = os.path.join(corpus, target)
    os.makedirs(d, exist_ok=True)
    open(os.path.join(d, name), "wb").write(data)


jpegs = {
    "420": ffmpeg_jpeg("a.jpg", "32x24", "yuvj420p"),
    "422": ffmpeg_jpeg("b.jpg", "32x16", "yuvj422p"),
    "444": ffmpeg_jpeg("c.jpg", "16x16", "yuvj444p"),
    "grey": ffmpeg_jpeg("d.jpg", "24x8", "gray"),
    "odd": ffmpeg_jpeg("e.jpg", "17x9", "yuvj420p", "smptebars"),
}
base = jpegs["420"]
extras = {
    "progressive": jpegtran(base, "-progressive"),
    "restart": jpegtran(base, "-restart", "1"),
    "optimized": jpegtran(jpegs["422"], "-optimize"),
}
nodht = strip_dht(jpegs["422"])
exif_le, exif_be = exif_payload(True), exif_payload(False, orientation=3)

for target in ("markers", "huffman", "decoder"):
    for k, v in {**jpegs, **extras}.items():
        write(target, f"{k}.jpg", v)
    write(target, "nodht-422.jpg", nodht)
    write(target, "nodht-420.jpg", strip_dht(base))
    write(target, "padded.jpg", base + b"\0" * 64)
    write(target, "truncated.jpg", base[: len(base) * 2 // 3])
    write(target, "exif-le.jpg", with_exif(base, exif_le))
write("markers", "empty", b"")
write("markers", "soi-eoi", b"\xFF\xD8\xFF\xD9")
write("exif", "le.bin", exif_le)
write("exif", "be.bin", exif_be)
write("exif", "jpeg-le.jpg", with_exif(base, exif_le))
write("exif", "jpeg-be.jpg", with_exif(jpegs["grey"], exif_be))
write("exif", "loop.bin", b"Exif\0\0II*\0\x08\0\0\0\x01\0\x12\x01\x03\0\x01\0\0\0\x06\0\0\0\x08\0\0\0")
shutil.rmtree(tmp)
