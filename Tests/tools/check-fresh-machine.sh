#!/usr/bin/env bash
# The README's first command on a fresh Debian 12, as a new user meets it: debootstrap a minimal
# bookworm, install only Swift's own prerequisites (scripts/packages swift), bind the host's
# toolchain (/opt/swift) in read-only, clone this repository's HEAD and run `scripts/run` as root.
# It must install what every command needs (nothing left for `scripts/packages --missing
# capture` to name), build, list the cameras, take a still and measure a stream. With --full,
# `scripts/run record` and `scripts/run metadata --types face` then build capture-full and check
# the recorder and the run-time data (OpenCV's cascades) (another release build: by hand, not CI).
# Prints PASS/FAIL lines; exits non-zero on a FAIL.
#   Tests/tools/check-fresh-machine.sh [--keep] [--full] [--ref COMMIT]
#     --keep        leave the machine's folder behind
#     --full        also the heavy commands (capture-full's release build)
#     --ref COMMIT  try that commit instead of HEAD (an older one shows what a user met then)
# Needs root, debootstrap, unshare and the network to the Debian mirror. About 1 min to
# debootstrap, then scripts/run's installs and its release build (most of the time).
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
keep=0 full=0 ref=HEAD
while (($#)); do
    case $1 in
        --keep) keep=1; shift ;;
        --full) full=1; shift ;;
        --ref) ref=${2:?--ref needs a commit}; shift 2 ;;
        *) echo "usage: check-fresh-machine.sh [--keep] [--full] [--ref COMMIT]" >&2; exit 2 ;;
    esac
done
toolchain=${CAPTURE_TOOLCHAIN:-/opt/swift}
root=$(mktemp -d /var/tmp/capture-fresh.XXXXXX)
cleanup() { ((keep)) && echo "kept $root" || rm -rf --one-file-system "$root"; }
trap cleanup EXIT
started=$SECONDS
fail() { echo "FAIL  fresh Debian 12: $1  ($((SECONDS - started)) s)"; exit 1; }
[[ -x $toolchain/usr/bin/swift ]] || fail "no toolchain at $toolchain"
command -v debootstrap >/dev/null || fail "debootstrap is not installed"
mirror=$(awk '/^URIs:/ { print $2; exit }' /etc/apt/sources.list.d/debian.sources 2>/dev/null)
mirror=${mirror:-http://deb.debian.org/debian}

debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.debootstrap.log" 2>&1 ||
    { tail -5 "$root.debootstrap.log"; rm -f "$root.debootstrap.log"; fail "debootstrap $mirror"; }
rm -f "$root.debootstrap.log"
# The host's mirror in place of the one debootstrap wrote (apt would see it twice).
if [[ -f /etc/apt/sources.list.d/debian.sources ]]; then
    cp /etc/apt/sources.list.d/debian.sources "$root/etc/apt/sources.list.d/" && rm -f "$root/etc/apt/sources.list"
fi
cp /etc/resolv.conf "$root/etc/resolv.conf"
mkdir -p "$root/opt/swift" "$root/root"
git clone -q "$repo" "$root/root/swift-capture" && git -C "$root/root/swift-capture" checkout -q "$ref" ||
    fail "git clone (and checkout $ref)"
swift_packages=$("$repo/scripts/packages" swift | tr '\n' ' ')
echo "debootstrap and clone: $((SECONDS - started)) s"

# Inside: Swift's prerequisites only, then the README's command and two more of the tool's.
inside=$(cat <<SH
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive PATH=/opt/swift/usr/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
apt-get update -qq && apt-get install -y -qq --no-install-recommends $swift_packages >/dev/null
echo "swift's prerequisites: \$((\$(date +%s) - $(date +%s))) s"
cd /root/swift-capture
s=\$(date +%s)
scripts/run >/root/run.out 2>/root/run.err
echo "scripts/run: \$((\$(date +%s) - s)) s"
scripts/packages --missing capture >/root/missing.out
if (($full)); then
    scripts/run record --device virtual --seconds 1 /root/movie.mp4 >/root/record.out 2>&1
    scripts/run metadata --device virtual --types face --frames 3 --json >/root/metadata.out 2>&1
fi
SH
)
unshare --mount --propagation private bash -c '
    set -e
    root=$1 toolchain=$2
    mount --bind "$toolchain" "$root/opt/swift" && mount -o remount,bind,ro "$root/opt/swift"
    mount -t proc proc "$root/proc"
    mount --rbind /dev "$root/dev"
    mount --rbind /sys "$root/sys"
    chroot "$root" /bin/bash -c "$3"
' fresh "$root" "$toolchain" "$inside"
status=$?
took=$((SECONDS - started))
if ((status)); then
    tail -15 "$root/root/run.err" 2>/dev/null
    tail -5 "$root/root/record.out" "$root/root/metadata.out" 2>/dev/null
    fail "scripts/run exited $status"
fi
ok=1
check() { if "${@:2}"; then echo "PASS  fresh Debian 12: $1"; else echo "FAIL  fresh Debian 12: $1"; ok=0; fi; }
check "scripts/run listed the cameras (the virtual camera)" grep -q "virtual" "$root/root/run.err" "$root/root/run.out"
check "scripts/run took a still" python3 -c "
import glob, sys
files = glob.glob('$root/root/swift-capture/snaps/*.jpg')
assert files, 'no still in snaps/'
d = open(files[0], 'rb').read()
assert d[:2] == b'\xff\xd8' and d[-2:] == b'\xff\xd9' and len(d) > 1000, 'not a JPEG'"
check "scripts/run measured a stream of 60 frames" python3 -c "
import json
text = open('$root/root/run.out').read()
s = json.loads(text[text.index('\\n{') + 1:])
assert s.get('frames') == 60, s"
check "scripts/run installed every package of every command" bash -c '[[ -f $1 && ! -s $1 ]]' _ "$root/root/missing.out"
if ((full)); then
    check "scripts/run record wrote a movie" test -s "$root/root/movie.mp4"
    check "scripts/run metadata --types face ran (OpenCV's cascades installed)" test -s "$root/root/metadata.out"
fi
echo "the whole check: $took s"
((ok))
