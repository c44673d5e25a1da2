#!/usr/bin/env bash
# Checks what scripts/install puts on a machine, with the debug `capture`: the man page made from
# the tool's usage texts renders under groff -ww with no warning and names every command and flag;
# the bash completion loads and completes commands, flags, enumerations and devices, alone and under
# Debian's bash-completion (words broken at ':'); the zsh one parses, completes the same (compadd
# stubbed) and completes in a real interactive zsh (zpty, compinit); scripts/install --binary puts
# the files under a prefix, names the run-time packages, installs a unit systemd-analyze verifies,
# and the installed programs run with the toolchain hidden. One PASS/FAIL line per check.
# Usage: Tests/tools/check-install.sh BIN_DIR   (BIN_DIR holds capture and capture-full, linked with
# --static-swift-stdlib)
set -uo pipefail
bin=${1:?usage: check-install.sh BIN_DIR}
tool=$(cd "$bin" && pwd)/capture  # absolute: the zsh check links to it
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/capture-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
export HOME=$work/home XDG_CONFIG_HOME=$work/home/.config
mkdir -p "$HOME"
failed=0
check() { # name, then a command whose exit status says pass/fail
    local name=$1; shift
    if "$@"; then echo "PASS  $name"; else echo "FAIL  $name"; failed=1; fi
}
same() { [[ $1 == "$2" ]] || { echo "  got [$1], want [$2]" >&2; return 1; }; }
has_line() { grep -qxF -- "$2" <<<"$1" || { echo "  [$2] not in: $(tr '\n' ' ' <<<"$1")" >&2; return 1; }; }

# The man page: generated, 0 groff warnings, every command a section, every flag of the usage in it.
"$repo/scripts/capture-man" "$tool" >"$work/capture.1" 2>"$work/man.err"
check "install: capture.1 generated from capture help" test $? -eq 0 -a -s "$work/capture.1"
groff -man -Tutf8 -ww "$work/capture.1" >"$work/capture.txt" 2>"$work/groff.err"
check "install: groff -man -ww renders capture.1 with no warning" \
    bash -c '(($1 == 0)) && ! [[ -s $2 ]] || { cat "$2" >&2; false; }' x $? "$work/groff.err"
man_has_all() {
    local c f missing=0
    for c in $("$tool" help | sed -n 's/^usage: capture \([a-z][a-z-]*\).*/\1/p'); do
        grep -qx ".SS $c" "$work/capture.1" || { echo "  no section for $c" >&2; missing=1; }
    done
    for f in $("$tool" help | grep -oE -- '--[a-z][a-z-]*' | sort -u); do
        grep -qF -- "$f" "$work/capture.txt" || { echo "  $f not in the page" >&2; missing=1; }
    done
    return $missing
}
check "install: capture.1 has every command and flag of capture help" man_has_all

# bash: the completion function driven as bash does, with COMP_WORDS and COMP_CWORD.
complete_bash() { # words...; the last is the word being completed
    bash -c 'source "$1" || exit 1; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _capture; printf "%s\n" "${COMPREPLY[@]}"' \
        x "$repo/scripts/completions/capture.bash" "$@"
}
loaded=$(bash -c 'source "$1" && complete -p capture' x "$repo/scripts/completions/capture.bash" 2>&1)
check "install: bash completion loads without errors" same "$loaded" "complete -F _capture capture"
check "install: bash completes 'capture sn' to snap" same "$(complete_bash "$tool" sn 2>&1)" snap
check "install: bash completes 'capture snap --qu' to --quality" same "$(complete_bash "$tool" snap --qu 2>&1)" --quality
check "install: bash completes 'capture record --codec' to h264, mjpeg" \
    same "$(complete_bash "$tool" record --codec '' 2>&1 | tr '\n' ' ')" "h264 mjpeg "
check "install: bash completes 'capture help st' to stream" same "$(complete_bash "$tool" help st 2>&1)" stream
devices_ok() { # every video device path and unique ID (quoted), and virtual
    local got want wants
    got=$(complete_bash "$tool" snap --device '' 2>&1)
    has_line "$got" virtual || return 1
    mapfile -t wants < <("$tool" devices --json 2>/dev/null | python3 -c '
import json, sys
for d in json.load(sys.stdin):
    if d["media_type"] == "video":
        for v in (d["path"], d["unique_id"]): print(v.replace(" ", "\\ "))')
    ((${#wants[@]})) || { echo "  capture devices --json listed no camera" >&2; return 1; }
    for want in "${wants[@]}"; do has_line "$got" "$want" || return 1; done
}
check "install: bash completes --device with virtual and every camera's path and ID" devices_ok
check "install: bash completes -d as --device" \
    same "$(complete_bash "$tool" snap -d '' 2>&1)" "$(complete_bash "$tool" snap --device '' 2>&1)"

# As in a terminal with Debian's bash-completion loaded: the word breaks at ':' (virtual:NAME).
with_bash_completion() { # COMP_LINE, then COMP_WORDS as bash splits it
    bash -c 'source /usr/share/bash-completion/bash_completion && source "$1" || exit 1
        COMP_LINE=$2 COMP_POINT=${#2}; shift 2; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _capture
        printf "%s\n" "${COMPREPLY[@]}"' x "$repo/scripts/completions/capture.bash" "$@"
}
colon_ok() {
    local id
    id=$("$tool" devices --json 2>/dev/null | python3 -c '
import json, sys
print(next((d["unique_id"] for d in json.load(sys.stdin) if d["media_type"] == "video" and d["unique_id"].count(":") == 1), ""))')
    [[ -n $id ]] || { echo "  no camera with one ':' in its ID to complete" >&2; return 1; }
    local before=${id%%:*} after=${id#*:}
    has_line "$(with_bash_completion "$tool snap --device $before:${after:0:3}" \
        "$tool" snap --device "$before" : "${after:0:3}" 2>&1)" "$(printf %q "$after")"
}
if [[ -r /usr/share/bash-completion/bash_completion ]]; then
    check "install: with bash-completion, 'snap --qu' completes to --quality" \
        same "$(with_bash_completion "$tool snap --qu" "$tool" snap --qu 2>&1)" --quality
    check "install: with bash-completion, --device completes a camera ID past its ':'" colon_ok
else
    echo "FAIL  install: bash-completion not installed (apt-get install bash-completion)"; failed=1
fi

# zsh: parses; completes with compadd and _files stubbed to print what they are given.
if command -v zsh >/dev/null; then
    check "install: zsh -n _capture" zsh -n "$repo/scripts/completions/_capture"
    complete_zsh() {
        zsh -f -c 'compadd() { [[ $1 == -a ]] && print -rl -- ${(P)2}; }; _files() { print FILES; }
            words=("${@:2}"); CURRENT=$(($# - 1)); PREFIX=${words[-1]}
            source "$1"' x "$repo/scripts/completions/_capture" "$@"
    }
    check "install: zsh offers the commands" has_line "$(complete_zsh "$tool" sn 2>&1)" snap
    check "install: zsh completes 'capture snap --qu' with --quality" has_line "$(complete_zsh "$tool" snap --qu 2>&1)" --quality
    check "install: zsh completes 'capture preview --gravity' with resizeAspectFill" \
        has_line "$(complete_zsh "$tool" preview --gravity '' 2>&1)" resizeAspectFill
    # And in a real interactive zsh on a pseudo-terminal, with compinit: the line after TAB.
    mkdir -p "$work/zbin" "$work/zfunc" && ln -sf "$tool" "$work/zbin/capture" &&
        cp "$repo/scripts/completions/_capture" "$work/zfunc/"
    zsh_tab() { # LINE; prints the screen after LINE and TAB (waits up to 15 s for WANT=$2)
        ZBIN=$work/zbin ZFUNC=$work/zfunc zsh -f -c '
            zmodload zsh/zpty
            zpty z "PATH=\$ZBIN:\$PATH zsh -f -i"
            zpty -w z "PS1=\"> \"; fpath=(\$ZFUNC \$fpath); autoload -Uz compinit; compinit -u -D"
            zpty -w -n z "$1"$'"'"'\t'"'"'
            out= c= deadline=$((SECONDS + 15))
            while ((SECONDS < deadline)) && [[ $out != *"$2"* ]]; do
                zpty -r -t z c && out+=$c || sleep 0.2
            done
            zpty -d z
            print -r -- "$out"' x "$@"
    }
    check "install: interactive zsh with compinit completes 'capture snap --qu<TAB>' to --quality" \
        grep -qF "capture snap --quality" <<<"$(zsh_tab "capture snap --qu" "snap --quality")"
else
    echo "FAIL  install: zsh not installed (apt-get install zsh)"; failed=1
fi

# scripts/install --binary into a prefix under a staging root.
"$repo/scripts/install" --prefix /usr --destdir "$work/root" --binary "$tool" >"$work/install.log" 2>&1
status=$?
installed() {
    local p=$work/root/usr f
    for f in bin/capture libexec/capture/capture-full share/man/man1/capture.1 share/bash-completion/completions/capture \
        share/zsh/vendor-completions/_capture lib/systemd/system/capture.service ../etc/default/capture; do
        [[ -s $p/$f ]] || { echo "  missing $p/$f" >&2; cat "$work/install.log" >&2; return 1; }
    done
    [[ -x $p/bin/capture && -x $p/libexec/capture/capture-full ]] && cmp -s "$p/share/man/man1/capture.1" "$work/capture.1" &&
        grep -qx "ExecStart=/usr/bin/capture serve \$CAPTURE_SERVE_OPTIONS" "$p/lib/systemd/system/capture.service" &&
        grep -qx "EnvironmentFile=-/etc/default/capture" "$p/lib/systemd/system/capture.service"
}
check "install: scripts/install --prefix --destdir --binary installs binary, man page, completions" \
    bash -c '(($1 == 0))' x $status
check "install: installed files in Debian's folders, man page as generated, the unit naming them" installed
check "install: the service's environment file, which may hold CAPTURE_PASSWORD, is mode 600" \
    test "$(stat -c %a "$work/root/etc/default/capture" 2>&1)" = 600
check "install: scripts/install names the run-time packages (libv4l-0, libturbojpeg0, libasound2)" \
    bash -c 'grep -A1 "needs these Debian packages" "$1" | tail -1 | tr " " "\n" | grep -cxE "libv4l-0|libturbojpeg0|libasound2" | grep -qx 3' \
    x "$work/install.log"

# Installed for real under a prefix (BIN_DIR's programs linked with --static-swift-stdlib, as
# scripts/test builds them for this check): the unit passes systemd-analyze verify (which also
# finds its ExecStart and its man page), and the programs run with the toolchain out of reach
# (bwrap puts an empty folder over /opt/swift; no LD_LIBRARY_PATH), capture-full from libexec.
prefix=$work/prefix
"$repo/scripts/install" --prefix "$prefix" --sysconfdir "$prefix/etc" --binary "$tool" >"$work/install2.log" 2>&1
check "install: scripts/install into a prefix" bash -c '(($1 == 0)) || { cat "$2" >&2; false; }' x $? "$work/install2.log"
verify_unit() { # status 0 and nothing said: an unknown key is only a warning
    local out
    out=$(MANPATH=$prefix/share/man systemd-analyze verify "$prefix/lib/systemd/system/capture.service" 2>&1) &&
        [[ -z $out ]] || { echo "  $out" >&2; return 1; }
}
if command -v systemd-analyze >/dev/null; then
    check "install: systemd-analyze verify passes on capture.service" verify_unit
else
    echo "FAIL  install: systemd-analyze not installed (apt-get install systemd)"; failed=1
fi
toolchain=$(dirname "$(dirname "$(dirname "$(readlink -f "$(command -v swift || echo /opt/swift/usr/bin/swift)")")")")
hidden() { # COMMAND...: run with the toolchain's folder hidden and no LD_LIBRARY_PATH
    env -u LD_LIBRARY_PATH bwrap --dev-bind / / --tmpfs "$toolchain" -- "$@"
}
if command -v bwrap >/dev/null; then
    hidden true 2>"$work/bwrap.err" || echo "  bwrap cannot run here: $(cat "$work/bwrap.err")" >&2
    hidden "$prefix/bin/capture" devices >"$work/hidden-devices.out" 2>&1
    check "install: installed capture devices runs with $toolchain hidden" \
        bash -c '(($1 == 0)) && grep -q "video authorization" "$2" || { cat "$2" >&2; false; }' x $? "$work/hidden-devices.out"
    hidden "$prefix/bin/capture" snap --device virtual --preset low --output "$work/hidden.jpg" >"$work/hidden-snap.out" 2>&1
    check "install: installed capture snap --device virtual writes a JPEG with $toolchain hidden" \
        bash -c '(($1 == 0)) && [[ $(head -c 2 "$2" | od -An -tx1) == " ff d8" ]] || { cat "$3" >&2; false; }' \
        x $? "$work/hidden.jpg" "$work/hidden-snap.out"
    hidden "$prefix/bin/capture" record --device virtual --preset low --seconds 1 "$work/hidden.mp4" >"$work/hidden-record.out" 2>&1
    check "install: installed capture record (capture-full from libexec) runs with $toolchain hidden" \
        bash -c '(($1 == 0)) && [[ -s $2 ]] || { cat "$3" >&2; false; }' x $? "$work/hidden.mp4" "$work/hidden-record.out"
else
    echo "FAIL  install: bwrap not installed (apt-get install bubblewrap)"; failed=1
fi
exit $failed
