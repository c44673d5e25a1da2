#!/usr/bin/env python3
"""Serving benchmarks: CPU per client-frame and frame-to-socket delay of HTTP MJPEG servers.

Modes (each prints one JSON object on stdout):

  vs-ustreamer  (in the VM, on one V4L2 device): `capture serve` and uStreamer take turns on the
                device, the order alternating by round; each serves CLIENTS readers of /stream.
  fanout        (on the host, virtual camera): `capture serve` with 1 reader and with MANY
                readers in alternating order; the ratio of server CPU seconds over the window.
  tls           (on the host, virtual camera): `capture serve` over HTTP and over HTTPS
                (--tls-cert/--tls-key, a self-signed certificate made here), CLIENTS readers of
                /stream each, in alternating order; the ratio of server CPU per client-frame.

CPU: the server process' user + system time from /proc/PID/stat (all its threads) over the
measuring window. Client-frames: parts whose last byte a reader received inside the window.
Delay: the reader's CLOCK_MONOTONIC when a part's last byte arrived minus the frame's capture
timestamp on the same clock: `capture serve`'s X-Timestamp (the V4L2 buffer timestamp,
CLOCK_MONOTONIC, microseconds); uStreamer 4.9's X-Timestamp is CLOCK_REALTIME at sending, not the
frame's, so its X-UStreamer-Grab-Time (the V4L2 buffer timestamp truncated to milliseconds; asked
with `?extra_headers=1`) is used; ours is truncated to milliseconds as well, so both carry the same
0-1 ms bias.
"""
import argparse
import json
import os
import selectors
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

TICK = os.sysconf("SC_CLK_TCK")

# The tls mode's self-signed certificate is not checked (the server is ours, on loopback).
INSECURE = ssl.create_default_context()
INSECURE.check_hostname = False
INSECURE.verify_mode = ssl.CERT_NONE


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is the state (field 3); utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / TICK


class Reader:
    """One client of /stream over HTTP/1.0, parsing parts as they arrive (non-blocking)."""

    def __init__(self, port, path, stamp_header, tls=False):
        self.sock = socket.create_connection(("127.0.0.1", port))
        if tls:
            self.sock = INSECURE.wrap_socket(self.sock, server_hostname="127.0.0.1")
        self.tls = tls
        self.sock.sendall(f"GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n".encode())
        self.sock.setblocking(False)
        self.buf = bytearray()
        self.head_done = False
        self.need = None  # bytes of the current part's body still missing (with its headers parsed)
        self.stamp = None
        self.stamp_header = stamp_header
        self.parts = []  # (receive time, frame timestamp, bytes)
        self.closed = False

    def on_readable(self):
        # (TLS: the records decrypted are read until none is left, as the selector does not see them.)
        while True:
            try:
                data = self.sock.recv(262144)
            except (BlockingIOError, ssl.SSLWantReadError):
                return
            self.take(data)
            if not self.tls or self.closed or not self.sock.pending():
                return

    def take(self, data):
        now = time.monotonic()
        if not data:
            self.closed = True
            return
        self.buf += data
        while True:
            if not self.head_done:
                i = self.buf.find(b"\r\n\r\n")
                if i < 0:
                    return
                del self.buf[: i + 4]
                self.head_done = True
            if self.need is None:
                start = self.buf.find(b"--")
                if start < 0:
                    return
                end = self.buf.find(b"\r\n\r\n", start)
                if end < 0:
                    return
                length, stamp = None, None
                for line in bytes(self.buf[start:end]).split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    name = name.strip().lower()
                    if name == b"content-length":
                        length = int(value)
                    elif name == self.stamp_header:
                        # Whole milliseconds for both servers: uStreamer's is truncated to them.
                        stamp = int(float(value) * 1000) / 1000
                del self.buf[: end + 4]
                self.need, self.stamp = length, stamp
            if len(self.buf) < self.need:
                return
            del self.buf[: self.need]
            self.parts.append((now, self.stamp, self.need))
            self.need = None

    def close(self):
        self.sock.close()


def frames_served(port, scheme="http"):
    """The server's count of frames taken from the camera (`capture serve` only), else None."""
    try:
        return get_json(f"{scheme}://127.0.0.1:{port}/state")["result"].get("frames")
    except Exception:
        return None


def get_json(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout, context=INSECURE if url.startswith("https") else None) as r:
        return json.loads(r.read())


def wait_online(port, proc, timeout=60, scheme="http"):
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            state = get_json(f"{scheme}://127.0.0.1:{port}/state", timeout=2)
            src = state["result"]["source"]
            if src.get("online") and src.get("captured_fps", 0) > 0:
                return state
        except Exception:
            pass
        time.sleep(0.2)
    raise SystemExit(f"server on port {port} not online in {timeout} s")


def serve_round(cmd, port, path, stamp_header, clients, warmup, seconds, quiet_clients=0, tls=False):
    """Starts a server, reads with `clients` readers; returns CPU, client-frames and delays."""
    scheme = "https" if tls else "http"
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        state = wait_online(port, proc, scheme=scheme)
        readers = [Reader(port, path, stamp_header, tls) for _ in range(clients)]
        # Connected but never reading (a stalled viewer); counted nowhere, costs the server nothing.
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(quiet_clients)]
        for s in idle:
            s.sendall(f"GET {path} HTTP/1.0\r\n\r\n".encode())
        sel = selectors.DefaultSelector()
        for r in readers:
            sel.register(r.sock, selectors.EVENT_READ, r)
        t0 = time.monotonic()
        start = t0 + warmup
        stop = start + seconds
        cpu0 = None
        while True:
            now = time.monotonic()
            if cpu0 is None and now >= start:
                cpu0, start = cpu_seconds(proc.pid), now
                frames0 = frames_served(port, scheme)
            if now >= stop:
                cpu1, stop = cpu_seconds(proc.pid), now
                frames1 = frames_served(port, scheme)
                break
            for key, _ in sel.select(timeout=min(0.05, max(stop - now, 0.001))):
                key.data.on_readable()
        fps_state = get_json(f"{scheme}://127.0.0.1:{port}/state")["result"]["source"].get("captured_fps")
        frames, delays, per_client = 0, [], []
        for r in readers:
            inside = [p for p in r.parts if start <= p[0] <= stop]
            per_client.append(len(inside))
            frames += len(inside)
            delays += [(t - ts) * 1000 for t, ts, _ in inside if ts is not None]
            r.close()
        for s in idle:
            s.close()
        delays.sort()
        return {
            "cpu_s": cpu1 - cpu0,
            "window_s": stop - start,
            "client_frames": frames,
            "per_client": per_client,
            "captured_fps": fps_state,
            "camera_frames": frames1 - frames0 if frames0 is not None and frames1 is not None else None,
            "desired_fps": state["result"]["source"].get("desired_fps"),
            "cpu_ms_per_client_frame": (cpu1 - cpu0) * 1000 / frames if frames else None,
            "delay_ms_p50": statistics.median(delays) if delays else None,
            "delay_ms_p95": delays[int(len(delays) * 0.95)] if delays else None,
            "delay_samples": len(delays),
        }
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def f(x, digits=2):
    return "n/a" if x is None else f"{x:.{digits}f}"


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def vs_ustreamer(a):
    w, h = a.size.split("x")
    ours = [a.capture, "serve", "--device", a.device, "--size", a.size, "--format", "YUYV",
            "--quality", str(a.quality), "--host", "127.0.0.1", "--port", "8081"]
    theirs = ["ustreamer", "--device", a.device, "--resolution", a.size, "--format", "YUYV",
              "--quality", str(a.quality), "--workers", "1", "--host", "127.0.0.1", "--port", "8082"]
    if a.fps:
        ours += ["--fps", str(a.fps)]
        theirs += ["--desired-fps", str(a.fps)]
    rounds = []
    for i in range(a.rounds):
        order = ["ours", "ustreamer"] if i % 2 == 0 else ["ustreamer", "ours"]
        got = {}
        for name in order:
            if name == "ours":
                got[name] = serve_round(ours, 8081, "/stream", b"x-timestamp", a.clients, a.warmup, a.seconds)
            else:
                got[name] = serve_round(theirs, 8082, "/stream?extra_headers=1", b"x-ustreamer-grab-time",
                                        a.clients, a.warmup, a.seconds)
        o, u = got["ours"], got["ustreamer"]
        got["cpu_ratio"] = (o["cpu_ms_per_client_frame"] / u["cpu_ms_per_client_frame"]
                            if o["cpu_ms_per_client_frame"] and u["cpu_ms_per_client_frame"] else None)
        # A difference, not a ratio: vivid stamps a frame with the nominal end of its period, which
        # can lie ahead of its delivery, so a delay near 0 can come out negative for both servers.
        got["delay_diff_ms"] = (o["delay_ms_p50"] - u["delay_ms_p50"]
                                if o["delay_ms_p50"] is not None and u["delay_ms_p50"] is not None else None)
        for r in (o, u):
            r["fps_per_client"] = r["client_frames"] / a.clients / r["window_s"]
        print(f"round {i + 1}: ours {f(o['cpu_ms_per_client_frame'])} ms/client-frame, {f(o['fps_per_client'], 1)} fps "
              f"per client, delay p50 {f(o['delay_ms_p50'], 1)} ms | ustreamer {f(u['cpu_ms_per_client_frame'])} "
              f"ms/client-frame, {f(u['fps_per_client'], 1)} fps per client, delay p50 {f(u['delay_ms_p50'], 1)} ms "
              f"| cpu ratio {f(got['cpu_ratio'], 3)}, delay difference {f(got['delay_diff_ms'], 1)} ms",
              file=sys.stderr, flush=True)
        rounds.append(got)
    return {
        "mode": "vs-ustreamer", "size": a.size, "fps": a.fps, "quality": a.quality, "clients": a.clients,
        "seconds": a.seconds, "rounds": rounds,
        "cpu_ratio_median": median([r["cpu_ratio"] for r in rounds]),
        "delay_diff_ms_median": median([r["delay_diff_ms"] for r in rounds]),
        "ours_cpu_ms_median": median([r["ours"]["cpu_ms_per_client_frame"] for r in rounds]),
        "ustreamer_cpu_ms_median": median([r["ustreamer"]["cpu_ms_per_client_frame"] for r in rounds]),
        "ours_delay_p50_median": median([r["ours"]["delay_ms_p50"] for r in rounds]),
        "ustreamer_delay_p50_median": median([r["ustreamer"]["delay_ms_p50"] for r in rounds]),
        "ours_delay_p95_median": median([r["ours"]["delay_ms_p95"] for r in rounds]),
        "ustreamer_delay_p95_median": median([r["ustreamer"]["delay_ms_p95"] for r in rounds]),
        "ours_fps_per_client_median": median([r["ours"]["fps_per_client"] for r in rounds]),
        "ustreamer_fps_per_client_median": median([r["ustreamer"]["fps_per_client"] for r in rounds]),
    }


def fanout(a):
    cmd = [a.capture, "serve", "--device", "virtual", "--size", a.size, "--fps", str(a.fps or 30), "--quality", str(a.quality),
           "--host", "127.0.0.1", "--port", "8083", "--max-clients", str(a.many + 1)]
    rounds = []
    for i in range(a.rounds):
        order = [1, a.many] if i % 2 == 0 else [a.many, 1]
        got = {}
        for n in order:
            got[n] = serve_round(cmd, 8083, "/stream", b"x-timestamp", n, a.warmup, a.seconds,
                                 quiet_clients=1 if n > 1 else 0)
        one, many = got[1], got[a.many]
        ratio = many["cpu_s"] / one["cpu_s"] if one["cpu_s"] else None
        served = min(many["per_client"]) / many["camera_frames"] if many["camera_frames"] else None
        print(f"round {i + 1}: 1 client {f(one['cpu_s'], 3)} s CPU, {a.many} clients {f(many['cpu_s'], 3)} s CPU, "
              f"ratio {f(ratio, 3)}; slowest of {a.many} got {min(many['per_client'])} of {many['camera_frames']} frames",
              file=sys.stderr, flush=True)
        rounds.append({"one": one, "many": many, "ratio": ratio, "slowest_share": served})
    return {
        "mode": "fanout", "size": a.size, "fps": a.fps or 30, "quality": a.quality, "many": a.many, "seconds": a.seconds,
        "rounds": rounds, "ratio_median": median([r["ratio"] for r in rounds]),
        "one_cpu_s_median": median([r["one"]["cpu_s"] for r in rounds]),
        "many_cpu_s_median": median([r["many"]["cpu_s"] for r in rounds]),
        "slowest_share_median": median([r["slowest_share"] for r in rounds]),
    }


def tls(a):
    folder = tempfile.mkdtemp(prefix="serve-tls-")
    cert, key = os.path.join(folder, "cert.pem"), os.path.join(folder, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=127.0.0.1"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = [a.capture, "serve", "--device", "virtual", "--size", a.size, "--fps", str(a.fps or 30), "--quality", str(a.quality),
            "--host", "127.0.0.1", "--port", "8084", "--max-clients", str(a.clients + 1)]
    rounds = []
    for i in range(a.rounds):
        order = ["http", "https"] if i % 2 == 0 else ["https", "http"]
        got = {}
        for scheme in order:
            cmd = base + (["--tls-cert", cert, "--tls-key", key] if scheme == "https" else [])
            got[scheme] = serve_round(cmd, 8084, "/stream", b"x-timestamp", a.clients, a.warmup, a.seconds,
                                      tls=scheme == "https")
        plain, secure = got["http"], got["https"]
        ratio = (secure["cpu_ms_per_client_frame"] / plain["cpu_ms_per_client_frame"]
                 if plain["cpu_ms_per_client_frame"] and secure["cpu_ms_per_client_frame"] else None)
        for r in (plain, secure):
            r["fps_per_client"] = r["client_frames"] / a.clients / r["window_s"]
        print(f"round {i + 1}: http {f(plain['cpu_ms_per_client_frame'], 3)} ms/client-frame, "
              f"{f(plain['fps_per_client'], 1)} fps per client, delay p50 {f(plain['delay_ms_p50'], 1)} ms | https "
              f"{f(secure['cpu_ms_per_client_frame'], 3)} ms/client-frame, {f(secure['fps_per_client'], 1)} fps per client, "
              f"delay p50 {f(secure['delay_ms_p50'], 1)} ms | ratio {f(ratio, 3)}", file=sys.stderr, flush=True)
        rounds.append({"http": plain, "https": secure, "cpu_ratio": ratio})
    return {
        "mode": "tls", "size": a.size, "fps": a.fps or 30, "quality": a.quality, "clients": a.clients, "seconds": a.seconds,
        "rounds": rounds, "cpu_ratio_median": median([r["cpu_ratio"] for r in rounds]),
        "http_cpu_ms_median": median([r["http"]["cpu_ms_per_client_frame"] for r in rounds]),
        "https_cpu_ms_median": median([r["https"]["cpu_ms_per_client_frame"] for r in rounds]),
        "http_delay_p50_median": median([r["http"]["delay_ms_p50"] for r in rounds]),
        "https_delay_p50_median": median([r["https"]["delay_ms_p50"] for r in rounds]),
        "http_fps_per_client_median": median([r["http"]["fps_per_client"] for r in rounds]),
        "https_fps_per_client_median": median([r["https"]["fps_per_client"] for r in rounds]),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["vs-ustreamer", "fanout", "tls"])
    p.add_argument("--capture", required=True, help="the capture tool (a release build)")
    p.add_argument("--device", default="/dev/video0")
    p.add_argument("--size", default="640x360")
    p.add_argument("--quality", type=int, default=80)
    p.add_argument("--fps", type=int, default=30, help="the camera's rate for both servers (0: each its default)")
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--many", type=int, default=20)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--warmup", type=float, default=3)
    p.add_argument("--seconds", type=float, default=10)
    a = p.parse_args()
    result = {"vs-ustreamer": vs_ustreamer, "fanout": fanout, "tls": tls}[a.mode](a)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
