#!/usr/bin/env python3
"""How fast `capture` starts and how much memory it takes (issue 38): `capture help`, `capture
devices` and `capture snap --device virtual` (to a file in /dev/shm: snap never writes over a
device node such as /dev/null; and with --preset low, a small frame), against `capture-full help`
(every library loaded, as the one program of before paid on every command) and, when v4l-utils
is installed, `v4l2-ctl --list-devices` and `v4l2-ctl --help`, the tool next to it.

Each run is one process under GNU time: wall time from the spawn to its end (time.perf_counter)
and its peak resident memory (wait4's ru_maxrss, time's %M). The cases run in turn, round after
round, so that a busy moment of the machine falls on all of them; one round first to warm the page
cache is not counted. Prints one JSON object: per case the median, the fastest and the slowest run
in milliseconds, the median peak RSS in MB, and whether it meets the issue's goal (<= 50 ms and
<= 30 MB, for capture's three commands); then each program's direct libraries (readelf -d) and
the libraries the loader maps (ldd).

    Benchmarks/startup_bench.py --capture .build-rel/release/capture [--runs 21]

`capture-bench startup` runs this script with the `capture` beside it.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

GOAL_MS, GOAL_MB = 50, 30
TIME = "/usr/bin/time"  # GNU time (Debian: time)


def run_once(argv, rss_file):
    """(milliseconds, peak RSS in MB, exit status) of one run of argv. GNU time runs it and reports
    its peak RSS (wait4's ru_maxrss): a child spawned from this Python directly would count
    Python's own memory (the kernel folds the parent's high-water mark into a vfork child's at exec), time
    is 2 MB. The wall time includes time's own start, about a millisecond."""
    start = time.perf_counter()
    pid = os.posix_spawn(TIME, [TIME, "-q", "-f", "%M %x", "-o", rss_file] + argv, os.environ, file_actions=[
        (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0),
        (os.POSIX_SPAWN_OPEN, 2, "/dev/null", os.O_WRONLY, 0),
    ])
    os.waitpid(pid, 0)
    elapsed = (time.perf_counter() - start) * 1000
    kb, status = open(rss_file).read().split()[-2:]
    return elapsed, int(kb) / 1024, int(status)


def libraries(path):
    """(direct libraries from readelf -d, libraries ldd resolves) of the program at path."""
    direct = subprocess.run(["readelf", "-d", path], capture_output=True, text=True).stdout.count("(NEEDED)")
    mapped = subprocess.run(["ldd", path], capture_output=True, text=True).stdout
    return direct, sum(1 for line in mapped.splitlines() if "=>" in line or line.strip().startswith("/"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--capture", required=True, help="the capture program (capture-full beside it)")
    ap.add_argument("--runs", type=int, default=21)
    a = ap.parse_args()
    capture = os.path.abspath(a.capture)
    full = os.path.join(os.path.dirname(capture), "capture-full")
    shm = tempfile.mkdtemp(prefix="capture-startup-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    home = os.path.join(shm, "home")
    os.makedirs(home)
    # The album and settings in a folder of its own, not the user's.
    os.environ.update(HOME=home, XDG_CONFIG_HOME=os.path.join(home, ".config"))
    cases = {
        "capture help": [capture, "help"],
        "capture devices": [capture, "devices"],
        "capture snap --device virtual": [capture, "snap", "--device", "virtual", "--output", os.path.join(shm, "snap.jpg")],
        # The same with a small frame: what the 1920x1080 frame's rendering, buffers and encode add.
        "capture snap --device virtual --preset low":
            [capture, "snap", "--device", "virtual", "--preset", "low", "--output", os.path.join(shm, "low.jpg")],
    }
    if os.access(full, os.X_OK):
        cases["capture-full help"] = [full, "help"]
    v4l2 = shutil.which("v4l2-ctl")
    if v4l2:
        cases["v4l2-ctl --list-devices"] = [v4l2, "--list-devices"]
        cases["v4l2-ctl --help"] = [v4l2, "--help"]
    runs = {name: [] for name in cases}
    try:
        for round_ in range(a.runs + 1):
            for name, argv in cases.items():
                r = run_once(argv, os.path.join(shm, "rss"))
                if round_:
                    runs[name].append(r)
    finally:
        shutil.rmtree(shm, ignore_errors=True)
    result = {"runs": a.runs, "goal": {"ms": GOAL_MS, "mb": GOAL_MB}, "cases": {}, "libraries": {}}
    for name, rs in runs.items():
        ms = [r[0] for r in rs]
        mb = [r[1] for r in rs]
        entry = {
            "median_ms": round(statistics.median(ms), 1), "min_ms": round(min(ms), 1), "max_ms": round(max(ms), 1),
            "median_peak_mb": round(statistics.median(mb), 1), "exit_statuses": sorted({r[2] for r in rs}),
        }
        if name.startswith("capture "):
            entry["meets_goal"] = entry["median_ms"] <= GOAL_MS and entry["median_peak_mb"] <= GOAL_MB
        result["cases"][name] = entry
    for path in [capture, full] + ([v4l2] if v4l2 else []):
        if os.access(path, os.X_OK):
            direct, mapped = libraries(path)
            result["libraries"][os.path.basename(path)] = {"needed": direct, "ldd": mapped}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    sys.exit(main())
