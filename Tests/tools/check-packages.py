#!/usr/bin/env python3
"""Holds scripts/packages.txt to Package.swift: every system library a product reaches comes
from a package on that product's list.

For each product of `swift package dump-package`, the system library targets it reaches and the
C and C++ targets it compiles are resolved to files, and each file to its Debian package with
`dpkg -S`:
  - a system library's pkg-config file (NAME.pc)         -> on the product's build list
  - each library its module map `link`s, and each one a  -> libX.so on the build list, the file
    target's linker settings name                            it points to on the run list
  - each header the package's own files include (its     -> on the build list (or Swift's own
    shim headers and C/C++ sources, clang -H)                prerequisites: the `swift` group)
  - each package a system library's `providers` names    -> on the product's list
Executables with no line of their own are held to `capture`'s list (the tool's siblings). The
Getting Started article's table of packages must be `scripts/packages --table`, line for line.
Prints one PASS or FAIL line per product and one for the article (FAIL with what is missing and where it comes from);
exits 1 if any failed.
  Tests/tools/check-packages.py [REPO]
"""
import json
import os
import re
import shutil
import subprocess
import sys

repo = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "../.."))
swift = shutil.which("swift") or "/opt/swift/usr/bin/swift"
toolchain = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(swift))))
clang = os.path.join(os.path.dirname(os.path.realpath(swift)), "clang")


def run(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, **kw)


def packages(*args):
    out = run([os.path.join(repo, "scripts/packages"), *args])
    if out.returncode:
        sys.exit(f"FAIL  package lists: scripts/packages {' '.join(args)}: {out.stderr.strip()}")
    return set(out.stdout.split())


def variants(path):
    """PATH as dpkg may have recorded it: /lib and /usr/lib are one folder on a merged /usr."""
    if path.startswith("/usr/"):
        return [path, path[4:]]
    return [path, "/usr" + path] if path.startswith(("/lib", "/bin", "/sbin")) else [path]


owners = {}


def resolve(paths):
    """Fills `owners` for PATHS with one `dpkg -S` (it prints what it finds and exits 1 for the rest)."""
    todo = sorted({v for p in paths if p and p not in owners for v in variants(p)})
    found = {}
    if todo:
        for line in run(["dpkg", "-S", *todo]).stdout.splitlines():
            pkgs, _, path = line.partition(": ")
            found[path] = pkgs.split(",")[0].split(":")[0].strip()
    for p in paths:
        if p and p not in owners:
            owners[p] = next((found[v] for v in variants(p) if v in found), None)


def in_package(path):
    real = os.path.realpath(path)
    return real == repo or real.startswith(repo + os.sep)


dump = json.loads(run([swift, "package", "dump-package"], cwd=repo).stdout)
targets = {t["name"]: t for t in dump["targets"]}
listed = packages("--products") | {"capture"}
base = packages("swift") | {"linux-libc-dev"}  # libc6-dev's own dependency: the kernel's headers


def folder(t):
    return os.path.join(repo, t.get("path") or os.path.join("Sources", t["name"]))


def deps(t):
    return [next(iter(d.values()))[0] for d in t["dependencies"] if "byName" in d or "target" in d]


def reach(names):
    seen, todo = [], list(names)
    while todo:
        n = todo.pop()
        if n in targets and n not in seen:
            seen.append(n)
            todo += deps(targets[n])
    return seen


def pkg_config(name, what):
    out = run(["pkg-config", what, name])
    return out.stdout.split() if out.returncode == 0 else None


def direct_headers(source, flags, cxx):
    """The headers the package's own files include while compiling SOURCE: (header, includer) pairs."""
    lang = ["-x", "c++"] if cxx else ["-x", "c"]
    out = run([clang, "-fsyntax-only", "-H", *lang, *flags, source])
    if out.returncode:
        errors = [l for l in out.stderr.splitlines() if "error:" in l]
        return None, errors[0] if errors else "clang failed"
    stack, found = [os.path.realpath(source)], []
    for line in out.stderr.splitlines():
        m = re.match(r"^(\.+) (\S.*)$", line)
        if not m:
            continue
        depth, header = len(m.group(1)), m.group(2)
        del stack[depth:]
        includer = stack[depth - 1] if depth - 1 < len(stack) else None
        if includer and in_package(includer):
            found.append((os.path.normpath(header), includer))
        stack.append(os.path.realpath(header))
    return found, None


def library_file(name):
    """libNAME.so as the linker finds it (normalised), or None."""
    out = run([clang, f"-print-file-name=lib{name}.so"]).stdout.strip()
    return os.path.normpath(out) if os.path.isabs(out) else None


# What each target brings, checked once per target and judged against each product's list:
# (kind, path as found, the file to resolve with dpkg -S or None, what it is for), kind "build",
# "run", "provider" (then the third is the package's name) or "error" (a file clang could not read).
needs_cache = {}


def needs(name):
    if name in needs_cache:
        return needs_cache[name]
    t, got = targets[name], []
    here = folder(t)
    if t["type"] == "system":
        if t.get("pkgConfig"):
            pcdir = pkg_config(t["pkgConfig"], "--variable=pcfiledir")
            pc = os.path.join(pcdir[0], t["pkgConfig"] + ".pc") if pcdir else None
            got.append(("build", pc or t["pkgConfig"] + ".pc", pc, f"{name}'s pkgConfig"))
        text = open(os.path.join(here, "module.modulemap"), encoding="utf-8").read()
        libs = re.findall(r'link "([^"]+)"', text)
        flags = (pkg_config(t["pkgConfig"], "--cflags") or []) if t.get("pkgConfig") else []
        if os.path.isdir(os.path.join(here, "include")):
            flags.append("-I" + os.path.join(here, "include"))
        for header in re.findall(r'header "([^"]+)"', text):
            found, error = direct_headers(os.path.join(here, header), flags, cxx=False)
            if error:
                got.append(("error", os.path.join(here, header), None, f"{name}'s {header} does not compile: {error}"))
            for h, _ in found or []:
                if not in_package(h) and not os.path.realpath(h).startswith(toolchain + os.sep):
                    got.append(("build", h, os.path.realpath(h), f"{name}'s {header} includes it"))
        for p in (t.get("providers") or []):
            for pkg in p.get("apt", [[]])[0]:
                got.append(("provider", pkg, pkg, f"{name}'s providers"))
    else:
        libs = [s["kind"]["linkedLibrary"]["_0"] for s in t.get("settings", []) if "linkedLibrary" in s["kind"]]
        sources = []
        for root, _, files in os.walk(here):
            sources += [os.path.join(root, f) for f in files if f.endswith((".c", ".cc", ".cpp"))]
        if sources:
            flags = ["-I" + os.path.join(here, "include")] if os.path.isdir(os.path.join(here, "include")) else []
            for s in t.get("settings", []):
                if "headerSearchPath" in s["kind"]:
                    flags.append("-I" + os.path.normpath(os.path.join(here, s["kind"]["headerSearchPath"]["_0"])))
                if "define" in s["kind"]:
                    flags.append("-D" + s["kind"]["define"]["_0"])
            for d in reach(deps(t)):
                dt = targets[d]
                if dt["type"] == "system" and dt.get("pkgConfig"):
                    flags += [f for f in pkg_config(dt["pkgConfig"], "--cflags") or [] if f.startswith(("-I", "-D"))]
                elif dt["type"] != "system" and os.path.isdir(os.path.join(folder(dt), "include")):
                    flags.append("-I" + os.path.join(folder(dt), "include"))
            for source in sources:
                found, error = direct_headers(source, flags, cxx=not source.endswith(".c"))
                if error:
                    got.append(("error", source, None, f"{name}'s {os.path.basename(source)} does not compile: {error}"))
                for h, _ in found or []:
                    if not in_package(h) and not os.path.realpath(h).startswith(toolchain + os.sep):
                        got.append(("build", h, os.path.realpath(h), f"{name}'s {os.path.basename(source)} includes it"))
    for lib in libs:
        so = library_file(lib)
        if not so:
            got.append(("build", f"lib{lib}.so", None, f"{name} links {lib}"))
            continue
        got.append(("build", so, so, f"{name} links {lib}"))
        got.append(("run", os.path.realpath(so), os.path.realpath(so), f"{name} links {lib}"))
    needs_cache[name] = got
    return got


# Every target's files first, then one dpkg -S for all of them.
all_needs = [n for t in targets.values() if t["type"] != "test" for n in needs(t["name"])]
resolve([f for kind, _, f, _ in all_needs if kind in ("build", "run")])
failed = 0
for product in dump["products"]:
    pname = product["name"]
    executable = "executable" in product["type"]
    if pname in listed:
        held_to = pname
    elif executable:
        held_to = "capture"
    else:
        print(f"FAIL  packages of {pname}: the library product has no line in scripts/packages.txt")
        failed += 1
        continue
    build, runtime = packages("--build", held_to), packages("--run", held_to)
    problems = []
    reached = [n for n in reach(product["targets"]) if targets[n]["type"] != "test"]
    for name in reached:
        for kind, path, file, why in needs(name):
            pkg = file if kind == "provider" else owners.get(file)
            if kind == "error":
                problems.append(why)
            elif kind == "provider":
                if pkg not in build | runtime:
                    problems.append(f"{pkg} ({why}) is not on the list")
            elif pkg is None:
                problems.append(f"{path} ({why}) belongs to no installed package")
            elif kind == "build" and pkg not in build | base:
                problems.append(f"{path} ({why}) is in {pkg}, not on the build list")
            elif kind == "run" and pkg not in runtime | base:
                problems.append(f"{path} ({why}) is in {pkg}, not on the run list")
    problems = sorted(set(problems))
    systems = sum(1 for n in reached if targets[n]["type"] == "system")
    label = f"packages of {pname}" + (f" (held to {held_to}'s list)" if held_to != pname else "")
    if problems:
        failed += 1
        print(f"FAIL  {label}: " + "; ".join(problems[:12]) + (f"; and {len(problems) - 12} more" if len(problems) > 12 else ""))
    else:
        files = len({p for n in reached for k, p, _, _ in needs(n) if k in ("build", "run")})
        print(f"PASS  {label}: {systems} system libraries, {files} files, each from a package on its list")

# The Getting Started article shows the lists as they are.
article = os.path.join(repo, "Sources/Capture/Capture.docc/GettingStarted.md")
table = run([os.path.join(repo, "scripts/packages"), "--table"]).stdout.splitlines()
lines = open(article, encoding="utf-8").read().splitlines()
at = next((i for i, l in enumerate(lines) if l == table[0]), None)
shown = lines[at : at + len(table)] if at is not None else []
if shown == table:
    print(f"PASS  packages in the Getting Started article: its table is scripts/packages --table ({len(table) - 2} products)")
else:
    differ = next((f"'{a}' where the list says '{b}'" for a, b in zip(shown, table) if a != b), "no table")
    print(f"FAIL  packages in the Getting Started article: {differ} (paste scripts/packages --table)")
    failed += 1
sys.exit(1 if failed else 0)
