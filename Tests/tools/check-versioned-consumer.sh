#!/usr/bin/env bash
# Tests/ConsumerPackage as a package author builds it: depending on swift-capture by version.
# Copies the checkout (tracked and untracked files, as they are on disk) into a temporary git
# repository, tags it 0.1.0 and builds the consumer against `.package(url: "file://…", from:
# "0.1.0")` with every library product, warnings as errors. SwiftPM refuses a versioned dependency
# whose products have a target with unsafe flags, which a path dependency is exempt from.
#   Tests/tools/check-versioned-consumer.sh SCRATCH   (the consumer lands in SCRATCH/debug/consumer)
# Prints one PASS or FAIL line; the build's log goes to SCRATCH/consumer-build.log.
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
scratch=${1:?usage: check-versioned-consumer.sh SCRATCH}
mkdir -p "$scratch"
scratch=$(cd "$scratch" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/capture-consumer.XXXXXX")
trap 'rm -rf "$work"' EXIT
started=$SECONDS
git -C "$repo" ls-files -z --cached --others --exclude-standard |
    (cd "$repo" && tar --null --no-recursion -T - -cf -) | tar -xf - -C "$(mkdir -p "$work/swift-capture" && echo "$work/swift-capture")"
git -C "$work/swift-capture" init -q &&
    git -C "$work/swift-capture" add -A &&
    git -C "$work/swift-capture" -c user.name=check -c user.email=check@localhost commit -q -m "the checkout" &&
    git -C "$work/swift-capture" -c user.name=check -c user.email=check@localhost tag -a 0.1.0 -m 0.1.0 ||
    { echo "FAIL  versioned consumer: could not make the tagged copy"; exit 1; }
cp -R "$repo/Tests/ConsumerPackage" "$work/consumer"
log=$scratch/consumer-build.log
if CAPTURE_CONSUMER_URL="file://$work/swift-capture" swift build --package-path "$work/consumer" \
    --scratch-path "$scratch" --disable-dependency-cache >"$log" 2>&1; then
    resolved=$(python3 -c "import json,sys; p=json.load(open(sys.argv[1]))['pins']; print(p[0]['state'].get('version'))" \
        "$work/consumer/Package.resolved" 2>/dev/null)
    if [[ $resolved == 0.1.0 ]]; then
        echo "PASS  versioned consumer: from: \"0.1.0\" resolved 0.1.0, every library product built without a warning ($((SECONDS - started)) s)"
    else
        echo "FAIL  versioned consumer: Package.resolved pins '$resolved', not 0.1.0"
        exit 1
    fi
else
    grep -E "error|warning|unsafe" "$log" | head -10
    echo "FAIL  versioned consumer: swift build failed ($((SECONDS - started)) s, see $log)"
    exit 1
fi
