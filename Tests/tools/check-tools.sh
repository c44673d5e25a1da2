#!/usr/bin/env bash
# Runs the `capture` tool and the examples, and checks what they print. On the host (no camera)
# they must fall back to the virtual camera; in the VM (CAPTURE_VM=1) they run against vivid.
# Usage: Tests/tools/check-tools.sh BIN_DIR [CONSUMER]   (BIN_DIR holds capture, capture-full, still-camera,
# camera-check, live-capture; CONSUMER is Tests/ConsumerPackage's executable, run when given)
set -uo pipefail
bin=${1:?usage: check-tools.sh BIN_DIR}
work=$(mktemp -d "${TMPDIR:-/tmp}/capture-tools.XXXXXX")
trap 'rm -rf "$work"' EXIT
export HOME=$work/home XDG_CONFIG_HOME=$work/home/.config
mkdir -p "$HOME"
passed=0 failed=0
# Each line says the seconds since the previous check (where a slow run spends its time).
last=$SECONDS
check() { # name, then a command whose exit status says pass/fail
    local name=$1 took=$((SECONDS - last)); shift
    if "$@"; then echo "PASS  $name  (${took} s)"; passed=$((passed + 1)); else echo "FAIL  $name  (${took} s)"; failed=$((failed + 1)); fi
    last=$SECONDS
}
py() { python3 -c "$@"; }
invm=${CAPTURE_VM:-0}
device_args=() small=320x240

# capture devices --json: an array with the documented keys, all snake_case (as every JSON the tool
# prints), each camera's formats as objects of numbers; vivid nodes in the VM, virtual on the host.
"$bin/capture" devices --json >"$work/devices.json" 2>"$work/devices.err"
check "devices --json exits 0" test $? -eq 0
check "devices --json fields" py "
import json,re,sys
d=json.load(open('$work/devices.json'))
assert isinstance(d,list) and d, d
def keys(v):
    if isinstance(v,dict):
        for k,x in v.items(): yield k; yield from keys(x)
    elif isinstance(v,list):
        for x in v: yield from keys(x)
bad=[k for k in keys(d) if not re.fullmatch('[a-z0-9_]+',k)]
assert not bad, ('keys not snake_case', sorted(set(bad)))
for x in d:
    for k in ('path','name','unique_id','position','media_type','driver','bus_info','formats','authorization'): assert k in x, (k,x)
    assert (x['authorization']=='authorized')==('authorization_advice' not in x), x
vid=[x for x in d if x['media_type']=='video']
assert vid, d
num=lambda v: isinstance(v,(int,float)) and not isinstance(v,bool)
for x in vid:
    assert x['formats'], x
    for f in x['formats']:
        # (Four characters, and -BE after them for a big-endian format, as v4l2-ctl writes it: vivid's 'Y16 -BE'.)
        assert isinstance(f['fourcc'],str) and re.fullmatch('.{1,4}(-BE)?',f['fourcc']), f
        assert isinstance(f['width'],int) and isinstance(f['height'],int) and f['width']>0 and f['height']>0, f
        assert isinstance(f['description'],str) and isinstance(f['compressed'],bool) and isinstance(f['emulated'],bool), f
        r=f['frame_rates']
        assert r and all(num(q['min']) and num(q['max']) and 0<q['min']<=q['max'] for q in r), f
        assert f['max_frame_rate']==max(q['max'] for q in r), f
if '$invm'=='1':
    assert sum(1 for x in vid if x['driver']=='vivid')==2, vid
else:
    assert all(x['path'].startswith('virtual:') for x in vid), vid
    # The virtual camera's 640x480 YUYV: 60, 30, 15 and 5 fps, as numbers.
    f=[f for x in vid for f in x['formats'] if f['fourcc']=='YUYV' and (f['width'],f['height'])==(640,480)]
    assert f and all(g['max_frame_rate']==60 and [(q['min'],q['max']) for q in g['frame_rates']]==[(60,60),(30,30),(15,15),(5,5)] for g in f), f
"
if [[ -n ${CAPTURE_VM_ALOOP:-} ]]; then
    # Audio devices are listed too: the loopback card's capture PCMs, with formats.
    check "devices --json lists the loopback's audio devices" py "
import json
d=json.load(open('$work/devices.json'))
aud=[x for x in d if x['media_type']=='audio']
assert any('Loopback' in x['name'] or 'Loopback' in x['unique_id'] for x in aud), aud
"
fi
if [[ $invm != 1 ]]; then
    check "says it uses the virtual camera" grep -q "virtual camera" "$work/devices.err"
else
    # vivid's first capture node; vivid has no 320x240, its smallest size is 320x180.
    vivid=$(python3 -c "import json; print([x['path'] for x in json.load(open('$work/devices.json')) if x.get('driver')=='vivid'][0])")
    device_args=(--device "$vivid") small=320x180
fi

# capture snap: a decodable JPEG of the asked size.
snap_started=$(date +%s%N)
"$bin/capture" snap "${device_args[@]}" --size 640x480 --quality 80 --output "$work/snap.jpg" >"$work/snap.out" 2>&1
snap_status=$? snap_ms=$((($(date +%s%N) - snap_started) / 1000000))
check "snap exits 0" test $snap_status -eq 0
# A user waits for a still no longer than this, in the VM under emulation too (the tool took
# minutes to start there when it loaded every product's libraries).
check "snap wrote its still within 20 s of the command (${snap_ms} ms)" test "$snap_ms" -lt 20000
check "snap writes a 640x480 JPEG" py "
d=open('$work/snap.jpg','rb').read()
assert d[:2]==b'\xff\xd8' and d[-2:]==b'\xff\xd9', 'not a JPEG'
i=2
while i<len(d):
    m=d[i+1]; l=d[i+2]<<8|d[i+3]
    if m in (0xC0,0xC1,0xC2):
        h=d[i+5]<<8|d[i+6]; w=d[i+7]<<8|d[i+8]; assert (w,h)==(640,480),(w,h); break
    i+=2+l
else: raise SystemExit('no SOF')
"
"$bin/capture" snap "${device_args[@]}" --count 2 --preset low --output "$work/album/" >/dev/null 2>&1
check "snap --count 2 into a folder" test "$(ls "$work/album" | wc -l)" -eq 2
"$bin/capture" snap "${device_args[@]}" --preset low >"$work/album.out" 2>&1
check "snap without --output saves to ~/Pictures" test "$(ls "$HOME/Pictures"/*.jpg 2>/dev/null | wc -l)" -eq 1

# Usage text reaches no driver: checked on the host run only (each launch costs seconds under TCG).
if [[ $invm != 1 ]]; then
    for c in devices snap stream record audio preview serve metadata; do
        "$bin/capture" $c --help >"$work/help.out" 2>&1
        check "$c --help exits 0 with its usage" grep -q "^usage: capture $c" "$work/help.out"
        "$bin/capture" help $c >"$work/help.out" 2>&1
        check "help $c prints its usage" grep -q "^usage: capture $c" "$work/help.out"
    done
fi

# capture links the core library alone, so it starts at once (issue 38: 0.4-0.8 s with 410
# libraries); capture-full links the products, and of OpenCV only the modules the vision shim calls.
# (Host only: the same files in the VM.)
if [[ $invm != 1 ]]; then
    needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]$/\1/p'; }
    # None of these in `capture` (capture-full has each): OpenCV, GStreamer, GLib, FFmpeg, x264, SDL2,
    # libpng, zxing, libmicrohttpd.
    links_light() {
        local all bad
        all=$(needed "$1") && [[ -n $all ]] || { echo "  readelf -d $1 listed no library" >&2; return 1; }
        bad=$(grep -E '^lib(opencv_|gst|glib|gobject|av(codec|format|util|filter|device)|sw(scale|resample)|x264|SDL2|png|ZXing|microhttpd)' <<<"$all")
        [[ -z $bad ]] || { echo "  $1 needs $(tr '\n' ' ' <<<"$bad")" >&2; return 1; }
    }
    check "capture needs no OpenCV, GStreamer, FFmpeg, SDL2, libpng, zxing or libmicrohttpd library (readelf -d)" \
        links_light "$bin/capture"
    opencv_of_shim() {
        local cv bad
        cv=$(needed "$1" | grep '^libopencv_')
        [[ -n $cv ]] || { echo "  $1 needs no OpenCV library: is it capture-full?" >&2; return 1; }
        bad=$(grep -vE '^libopencv_(core|imgproc|objdetect)\.so' <<<"$cv")
        [[ -z $bad ]] || { echo "  $1 needs $(wc -l <<<"$bad") OpenCV modules the shim does not call: $(tr '\n' ' ' <<<"$bad")" >&2; return 1; }
    }
    check "capture-full needs of OpenCV only core, imgproc and objdetect (readelf -d)" opencv_of_shim "$bin/capture-full"

    # Without capture-full beside it (nor in ../libexec/capture): the commands of the core run, help
    # knows every command, and the others say in one line what to install (status 1).
    mkdir -p "$work/alone/bin" && cp "$bin/capture" "$work/alone/bin/"
    alone=$work/alone/bin/capture
    "$alone" snap --device virtual --preset low --output "$work/alone.jpg" >/dev/null 2>"$work/alone-snap.err"
    check "capture without capture-full: snap runs" test $? -eq 0 -a -s "$work/alone.jpg"
    check "capture without capture-full: help lists all 8 commands" \
        test "$("$alone" help | grep -cE '^usage: capture (devices|snap|stream|record|audio|preview|serve|metadata) ')" -eq 8
    one_line_naming() { # status, stderr file: status 1 and one line that names capture-full and how to get it
        (($1 == 1)) || { echo "  status $1" >&2; return 1; }
        [[ $(wc -l <"$2") -eq 1 ]] && grep -q "needs capture-full.*scripts/install" "$2" || { cat "$2" >&2; return 1; }
    }
    "$alone" record --device virtual --seconds 1 "$work/alone.mp4" >/dev/null 2>"$work/alone-record.err"
    check "capture without capture-full: record exits 1 with one line naming capture-full" one_line_naming $? "$work/alone-record.err"
    "$alone" snap --device "file:$work/alone.jpg" --output "$work/alone2.jpg" >/dev/null 2>"$work/alone-file.err"
    check "capture without capture-full: a file: camera exits 1 with one line naming capture-full" \
        one_line_naming $? "$work/alone-file.err"
fi

# Bad input: non-zero exit and a one-line reason.
"$bin/capture" snap "${device_args[@]}" --output /nonexistent/dir/x.jpg >/dev/null 2>"$work/nofolder.err"
check "snap into a missing folder exits non-zero" test $? -ne 0
check "snap into a missing folder: one typed line" py "
e=open('$work/nofolder.err').read()
assert e.count(chr(10))==1 and 'no such folder' in e and 'Error Domain' not in e, e
"
check "snap into a missing folder leaves no file" test ! -e /nonexistent/dir/x.jpg
"$bin/capture" snap --device /dev/nonexistent >/dev/null 2>"$work/bad.err"
check "missing device exits non-zero" test $? -ne 0
check "missing device gives one line" test "$(wc -l <"$work/bad.err")" -eq 1
"$bin/capture" snap "${device_args[@]}" --size 123x45 >/dev/null 2>"$work/bad2.err"
check "impossible size exits non-zero" test $? -ne 0
"$bin/capture" stream "${device_args[@]}" --frames abc >/dev/null 2>&1
check "bad --frames exits non-zero" test $? -ne 0

# A file: camera is no driver: checked on the host run only (the VM under TCG plays the clip too slowly).
if [[ $invm != 1 ]]; then
    # A picture camera (--device file:MEDIA) and `capture metadata` reading the QR code it shows
    # (PNG through the preview's libpng reader), as JSON; a bad --types refused in one line.
    qrencode -s 8 -o "$work/qr.png" "capture metadata check" 2>/dev/null
    "$bin/capture" metadata --device "file:$work/qr.png" --types qr --frames 3 --json >"$work/meta.json" 2>"$work/meta.err"
    check "metadata --device file:QR.png exits 0" test $? -eq 0
    check "metadata --json reads the QR code with its corners" py "
import json
lines=[json.loads(l) for l in open('$work/meta.json') if l.strip()]
assert lines, open('$work/meta.err').read()
for o in lines:
    assert o['type']=='qr' and o['text']=='capture metadata check', o
    assert len(o['corners'])==4 and all(0<=v<=1 for p in o['corners'] for v in p), o
"
    "$bin/capture" metadata --device "file:$work/qr.png" --types qr,nope --frames 1 >/dev/null 2>"$work/types.err"
    check "metadata --types nope: status 2, one line naming it" \
        bash -c '(($1 == 2)) && (($(wc -l <"$2") == 1)) && grep -q "nope" "$2"' _ $? "$work/types.err"
    # A video file on a file: camera, played in a loop (FFmpeg): a clip of two QR codes, both read.
    # Each code shows for 2 s of a 4 s loop, and the tool watches two loops: a loaded machine starts
    # the session and detects slowly, and must still see each code for a while.
    qrencode -s 8 -o "$work/qa.png" "MOVIE A" 2>/dev/null
    qrencode -s 8 -o "$work/qb.png" "MOVIE B" 2>/dev/null
    ffmpeg -v error -y -loop 1 -t 2 -framerate 10 -i "$work/qa.png" -loop 1 -t 2 -framerate 10 -i "$work/qb.png" \
        -filter_complex "[0:v]scale=320:320,format=yuv420p[a];[1:v]scale=320:320,format=yuv420p[b];[a][b]concat=n=2:v=1[v]" \
        -map "[v]" -c:v libx264 "$work/qrclip.mp4" 2>/dev/null
    "$bin/capture" metadata --device "file:$work/qrclip.mp4" --size 640x480 --types qr --seconds 8 >"$work/movie.out" 2>"$work/movie.err"
    check "metadata --device file:CLIP.mp4 reads both codes of the playing clip" \
        bash -c 'grep -q "MOVIE A" "$1" && grep -q "MOVIE B" "$1"' _ "$work/movie.out"
    printf 'not a picture' >"$work/not-media.txt"
    "$bin/capture" snap --device "file:$work/not-media.txt" --output "$work/not-media.jpg" >/dev/null 2>"$work/not-media.err"
    check "snap --device file:TEXT: non-zero, one line" bash -c '(($1 != 0)) && (($(wc -l <"$2") == 1))' _ $? "$work/not-media.err"
    "$bin/capture" snap --device "file:$work/missing.png" --output "$work/missing.jpg" >/dev/null 2>"$work/missing.err"
    check "snap --device file:MISSING: non-zero, one line" bash -c '(($1 != 0)) && (($(wc -l <"$2") == 1))' _ $? "$work/missing.err"
    mkdir -p "$work/a-folder"
    "$bin/capture" snap --device "file:$work/a-folder" --output "$work/folder.jpg" >/dev/null 2>"$work/folder.err"
    check "snap --device file:FOLDER: an error, not a crash, one line naming the folder" \
        bash -c '(($1 != 0 && $1 < 128)) && (($(wc -l <"$2") == 1)) && grep -q "folder" "$2"' _ $? "$work/folder.err"
    # A code's text cannot forge an output line or reach the terminal: newlines and ESC escaped.
    qrencode -s 8 -o "$work/hostile.png" "$(printf 'real\n1 face 0.1,0.1,0.1,0.1 id 666\033[2J')" 2>/dev/null
    "$bin/capture" metadata --device "file:$work/hostile.png" --types qr --frames 2 >"$work/hostile.out" 2>"$work/hostile.err"
    check "metadata escapes a code's newline and ESC: one line per code, no control byte" py "
d=open('$work/hostile.out','rb').read()
lines=[l for l in d.split(b'\\n') if l]
assert lines, open('$work/hostile.err').read()
assert not any(b < 0x20 and b != 0x0a for b in d), d
assert all(l.split(b' ')[1] == b'qr' and l.endswith(b'real\\\\n1 face 0.1,0.1,0.1,0.1 id 666\\\\x1b[2J') for l in lines), lines
"
    for empty in , ''; do
        "$bin/capture" metadata --device "file:$work/qr.png" --types "$empty" --frames 1 >/dev/null 2>"$work/empty.err"
        check "metadata --types '$empty': a usage error (status 2), one line" bash -c '(($1 == 2)) && (($(wc -l <"$2") == 1))' _ $? "$work/empty.err"
    done
fi

# The command line as typed: --name=value; --preset with --size refused in one line, nothing
# written; `capture` alone a usage error (status 2) with a short summary.
"$bin/capture" snap "${device_args[@]}" --size=$small --output="$work/eq.jpg" >/dev/null 2>"$work/eq.err"
check "snap --size=WxH --output=FILE (the = form)" test $? -eq 0 -a -s "$work/eq.jpg"
"$bin/capture" snap "${device_args[@]}" --preset low --size $small --output "$work/both.jpg" >/dev/null 2>"$work/both.err"
check "--preset with --size: status 2, one line, no file" \
    bash -c '(($1 == 2)) && (($(wc -l <"$2") == 1)) && grep -q "give --preset or --size, not both" "$2" && ! [[ -e $3 ]]' \
    x $? "$work/both.err" "$work/both.jpg"
"$bin/capture" >"$work/alone.out" 2>"$work/alone.err"
check "capture alone: status 2, a short summary on stderr" \
    bash -c '(($1 == 2)) && (($(wc -l <"$2") <= 12)) && grep -q "^  snap " "$2" && ! [[ -s $3 ]]' x $? "$work/alone.err" "$work/alone.out"

# The conventions of the Linux tools beside it (issue 38). Usage errors: status 2, one line on
# stderr, nothing on stdout, before any device is touched (so no "using the virtual camera" line).
# Checked on the host run only, as the help above (each launch costs seconds under TCG).
if [[ $invm != 1 ]]; then
    usage_errors=(
        "nonsense"                                      # an unknown command
        "-x"                                            # an unknown option where the command goes
        "help nonsense"                                 # help about an unknown command
        "snap --bogus"                                  # an unknown option
        "snap -x"                                       # an unknown short option
        "snap --quality"                                # an option without its value
        "snap -q"                                       # a short option without its value
        "snap --quality 500"                            # a value out of range
        "stream --frames abc"                           # not a number
        "snap --size foo"                               # a size of the wrong form
        "snap --format toolong"                         # a FourCC of the wrong form
        "serve --fps fast"                              # a rate that is no number
        "snap --preset huge"                            # an unknown preset
        "devices --json=yes"                            # a flag given a value
        "devices extra"                                 # a word a command does not take
        "snap --output $work/x.png"                     # an extension that names another format
        "record --codec vp9 $work/x.mp4"                # an unknown value of an enumeration
        "record -d virtual"                             # a missing OUTPUT
        "serve --user u"                                # a user without a password
        "serve --password-file $work/pw --password p"   # options that exclude each other
        "serve --tls-cert $work/pw"                     # a certificate without its key
        "serve --tls-cert $work/pw --tls-key $work/pw"  # files that are not PEM
    )
    for args in "${usage_errors[@]}"; do
        # shellcheck disable=SC2086 # each entry is the words of one command line
        "$bin/capture" $args >"$work/usage.out" 2>"$work/usage.err"
        check "usage error 'capture $args': status 2, one line, no output" \
            bash -c '(($1 == 2)) && (($(wc -l <"$2") == 1)) && grep -q "^capture: " "$2" && ! [[ -s $3 ]]' \
            x $? "$work/usage.err" "$work/usage.out"
    done
    # A run-time failure is 1: a device that is not there.
    "$bin/capture" snap --device /dev/nonexistent >/dev/null 2>&1
    check "a missing device: status 1" test $? -eq 1
fi

# --version: "capture (swift-capture) VERSION", the same from `capture version`; VERSION agrees with
# CHANGELOG.md: the newest release's X.Y.Z at a release, a later X.Y.Z-dev between releases.
"$bin/capture" --version >"$work/version.out" 2>"$work/version.err"
check "--version exits 0, stderr empty" bash -c '(($1 == 0)) && ! [[ -s $2 ]]' x $? "$work/version.err"
"$bin/capture" version >"$work/version2.out" 2>&1
check "capture version prints what --version does" cmp -s "$work/version.out" "$work/version2.out"
changelog=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/CHANGELOG.md
check "--version prints the version CHANGELOG.md leads to" py "
import re
out=open('$work/version.out').read()
m=re.fullmatch(r'capture \(swift-capture\) (\d+)\.(\d+)\.(\d+)(-dev)?\n', out)
assert m, repr(out)
v=tuple(int(x) for x in m.group(1,2,3))
rel=re.search(r'^## \[(\d+)\.(\d+)\.(\d+)\]', open('$changelog').read(), re.M)
last=tuple(int(x) for x in rel.group(1,2,3))
assert (v>last) if m.group(4) else (v==last), (out, 'newest release', last)
"
version=$(sed -n 's/^capture (swift-capture) //p' "$work/version.out")

# Short options: each '-x|--name' a usage shows stands for --name in that command (a missing value
# is named by both; host run only), and a still taken with them is the one asked for.
pairs=0
[[ $invm != 1 ]] && for c in devices snap stream record audio preview serve metadata; do
    "$bin/capture" help $c >"$work/help.out" 2>&1
    while read -r letter long; do
        pairs=$((pairs + 1))
        "$bin/capture" $c "-$letter" >/dev/null 2>"$work/short.err"
        check "$c -$letter is --$long" bash -c '(($1 == 2)) && grep -qF -- "-$3 (--$4) needs a value" "$2"' \
            x $? "$work/short.err" "$letter" "$long"
    done < <(grep -oE -- '-[a-z]\|--[a-z-]+' "$work/help.out" | sed 's/^-\(.\)|--/\1 /' | sort -u)
done
# (Each camera command shows at least -d, -s and -f: the loop above checked that many pairs.)
[[ $invm != 1 ]] && check "the usages pair $pairs short options with long ones" test $pairs -ge 30
"$bin/capture" snap "${device_args[@]/--device/-d}" -s $small -q 50 -n 1 -o "$work/short.jpg" >/dev/null 2>"$work/short.err"
check "snap -d -s -q -n -o: a $small JPEG" py "
d=open('$work/short.jpg','rb').read()
i=2
while i<len(d):
    m=d[i+1]; l=d[i+2]<<8|d[i+3]
    if m in (0xC0,0xC1,0xC2): assert '%dx%d'%(d[i+7]<<8|d[i+8], d[i+5]<<8|d[i+6])=='$small'; break
    i+=2+l
else: raise SystemExit('no SOF')
"

# snap --json: what was written, as documented (device, format, quality, photos with path, width,
# height, bytes, sequence), one entry a photo; nothing else on stdout.
"$bin/capture" snap "${device_args[@]}" --size $small --count 2 --quality 70 --output "$work/js.jpg" --json >"$work/snap.json" 2>"$work/snap-json.err"
check "snap --json exits 0" test $? -eq 0
check "snap --json describes the photos written" py "
import json,os
j=json.load(open('$work/snap.json'))
assert set(j)=={'device','format','quality','photos'} and j['format']=='jpeg' and j['quality']==70, j
assert [p['path'] for p in j['photos']]==['$work/js-0001.jpg','$work/js-0002.jpg'], j
for p in j['photos']:
    assert set(p)=={'path','width','height','bytes','sequence'}, p
    assert '%dx%d'%(p['width'],p['height'])=='$small' and p['bytes']==os.path.getsize(p['path']), p
assert j['photos'][0]['sequence']<j['photos'][1]['sequence'], j
"

# capture serve's credentials kept off the command line: --password-file and CAPTURE_PASSWORD
# (curl without them gets 401, with them /state with the version), --password with a warning on
# stderr; CAPTURE_PASSWORD without --user refused. On loopback, port chosen by the system; host run
# only (three servers starting under TCG would take minutes).
if [[ $invm != 1 ]]; then
    printf 's3cret:pw\n' >"$work/pw"
    chmod 600 "$work/pw"
    serve_auth() { # NAME, then env assignments and serve options; checks 401 / 200 and the version
        local name=$1 pid port=
        shift
        env "$@" >"$work/serve.out" 2>"$work/serve.err" &
        pid=$!
        for _ in $(seq 600); do
            port=$(sed -n 's|^serving .* at http://127.0.0.1:\([0-9]*\)/ .*|\1|p' "$work/serve.out")
            [[ -n $port ]] && break
            kill -0 $pid 2>/dev/null || break
            sleep 0.1
        done
        local without with
        without=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "http://127.0.0.1:$port/state")
        with=$(curl -s -u 'u:s3cret:pw' --max-time 10 "http://127.0.0.1:$port/state")
        kill -TERM $pid 2>/dev/null
        wait $pid
        check "serve $name: 401 without the password" test "$without" = 401
        check "serve $name: /state with it, reporting version $version" py "
import json,sys
assert json.loads(sys.argv[1])['result']['version']=='$version', sys.argv[1][:300]
" "$with"
    }
    serve_auth "--password-file" "$bin/capture" serve "${device_args[@]}" --port 0 --user u --password-file "$work/pw"
    check "serve --password-file: no warning" bash -c '! grep -q "warning" "$1"' x "$work/serve.err"
    serve_auth "CAPTURE_PASSWORD" CAPTURE_PASSWORD='s3cret:pw' "$bin/capture" serve "${device_args[@]}" --port 0 --user u
    check "serve CAPTURE_PASSWORD: no warning" bash -c '! grep -q "warning" "$1"' x "$work/serve.err"
    serve_auth "--password" "$bin/capture" serve "${device_args[@]}" --port 0 --user u --password 's3cret:pw'
    check "serve --password: a warning that every user can read it" \
        grep -q "^capture: warning: --password is visible to every user of this machine" "$work/serve.err"
    # HTTPS with a token link: a self-signed certificate as its own CA (curl --cacert); the token
    # is never printed.
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$work/tls-key.pem" \
        -out "$work/tls-cert.pem" -days 2 -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 >/dev/null 2>&1
    printf 'tok3n-link\n' >"$work/token"
    "$bin/capture" serve "${device_args[@]}" --port 0 --tls-cert "$work/tls-cert.pem" --tls-key "$work/tls-key.pem" \
        --token-file "$work/token" >"$work/serve-tls.out" 2>"$work/serve-tls.err" &
    tls_pid=$!
    tls_port=
    for _ in $(seq 600); do
        tls_port=$(sed -n 's|^serving .* at https://127.0.0.1:\([0-9]*\)/ .*|\1|p' "$work/serve-tls.out")
        [[ -n $tls_port ]] && break
        kill -0 $tls_pid 2>/dev/null || break
        sleep 0.1
    done
    tls_without=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$work/tls-cert.pem" --max-time 10 "https://127.0.0.1:$tls_port/snapshot")
    tls_with=$(curl -s -o "$work/tls.jpg" -w '%{http_code}' --cacert "$work/tls-cert.pem" --max-time 10 \
        "https://127.0.0.1:$tls_port/snapshot?token=tok3n-link")
    kill -TERM $tls_pid 2>/dev/null
    wait $tls_pid
    check "serve --tls-cert --tls-key --token-file: https, 401 without the token, a JPEG with it" \
        bash -c '[[ $1 == 401 && $2 == 200 ]] && jpeginfo -c "$3" >/dev/null' x "$tls_without" "$tls_with" "$work/tls.jpg"
    check "serve --token-file: the token is never printed" bash -c '! grep -q tok3n "$1" "$2"' x "$work/serve-tls.out" "$work/serve-tls.err"
    # (Under a time limit: a tool that took it would serve, open, until killed.)
    CAPTURE_PASSWORD=x timeout 60 "$bin/capture" serve "${device_args[@]}" --port 0 >/dev/null 2>"$work/serve-nouser.err"
    check "serve with CAPTURE_PASSWORD but no --user: status 2, refused" \
        bash -c '(($1 == 2)) && grep -q "CAPTURE_PASSWORD is set but --user is not" "$2"' x $? "$work/serve-nouser.err"
fi

# capture stream --json: frames delivered, sequence range, fps, capture-to-delegate latency.
"$bin/capture" stream "${device_args[@]}" --size $small --frames 30 --json >"$work/stream.json" 2>"$work/stream.err"
check "stream exits 0" test $? -eq 0
check "stream --json fields" py "
import json
s=json.load(open('$work/stream.json'))
for k in ('frames','dropped','drop_reasons','first_sequence','last_sequence','fps','width','height','format'): assert k in s,(k,s)
assert s['frames']==30 and '%dx%d'%(s['width'],s['height'])=='$small', s
assert s['last_sequence']-s['first_sequence']+1==s['frames']+s['dropped'], s
assert s['fps']>0, s
l=s['latency_ms']
assert 0<=l['p50']<=l['p99']<=l['max'] and l['max']>0, l
"

# capture audio: a WAV file through the library (virtual microphone on the host, the
# snd-aloop capture side in the VM), rate/channels/frames in the JSON matching the file.
# In the VM a tone is played into the loopback's other side first (its format then holds for both
# sides): a recording of pure digital silence is an error the tool reports (nothing was playing).
audio_args=() stream_audio=(--audio virtual) player=
if [[ -n ${CAPTURE_VM_ALOOP:-} ]]; then
    audio_args=(--device hw:Loopback,1,0) stream_audio=(--audio hw:Loopback,1,0)
    py "
import math, struct, wave
w=wave.open('$work/tone.wav','wb'); w.setnchannels(2); w.setsampwidth(2); w.setframerate(48000)
period=b''.join(struct.pack('<hh',v,v) for v in (int(11000*math.sin(2*math.pi*i/100)) for i in range(100)))
w.writeframes(period*480*30)  # 480 Hz (100 samples a period), 30 s
"
    aplay -q -D hw:Loopback,0,0 "$work/tone.wav" 2>"$work/aplay.err" &
    player=$!
    # Playing once its hardware parameters are set (ALSA's proc file), not after a delay.
    for _ in $(seq 100); do
        grep -q '^rate' /proc/asound/Loopback/pcm0p/sub0/hw_params 2>/dev/null && break
        sleep 0.1
    done
fi
"$bin/capture" audio "${audio_args[@]}" --seconds 1 --output "$work/a.wav" --json >"$work/audio.json" 2>"$work/audio.err"
check "audio exits 0" test $? -eq 0
[[ -s $work/audio.err ]] && sed 's/^/  audio: /' "$work/audio.err"
check "audio writes a WAV the JSON describes" py "
import json, wave
j=json.load(open('$work/audio.json'))
w=wave.open('$work/a.wav')
assert w.getframerate()==j['sample_rate'] and w.getnchannels()==j['channels'], (j, w.getparams())
assert w.getnframes()==j['frames']==j['sample_rate'], ('--seconds 1 must give one second of frames', j, w.getnframes())
"
"$bin/capture" stream "${device_args[@]}" --size $small --frames 10 "${stream_audio[@]}" --json >"$work/stream-audio.json" 2>"$work/stream-audio.err"
check "stream --audio reports both" py "
import json
s=json.load(open('$work/stream-audio.json'))
assert s['frames']==10 and s['audio']['frames']>0, s
"
[[ -n $player ]] && { kill "$player" 2>/dev/null; wait "$player" 2>/dev/null; }

# The examples.
"$bin/camera-check" >"$work/check.out" 2>&1
check "camera-check runs" test $? -eq 0
check "camera-check reports cameras" grep -q "camera available: true" "$work/check.out"
"$bin/still-camera" --album "$work/stills" >"$work/still.out" 2>&1
check "still-camera runs" test $? -eq 0
check "still-camera saves two photos" test "$(grep -c '^saved' "$work/still.out")" -eq 2
check "still-camera toggles" grep -q "^toggled to" "$work/still.out"
"$bin/live-capture" --seconds 4 >"$work/live.out" 2>&1
check "live-capture runs" test $? -eq 0
check "live-capture toggles mid-stream" grep -q "^toggle: now" "$work/live.out"
check "live-capture counts frames" grep -qE "^done: [1-9][0-9]* video frames" "$work/live.out"

# The AVFoundation-style consumer package: NV12 turned to 720x1280 and I420 planes, settings in
# the lock, notifications, the photo delegate's five callbacks (its own PASS/FAIL lines).
if [[ -n ${2:-} ]]; then
    "$2" "${device_args[@]}" >"$work/consumer.out" 2>&1
    check "the AVFoundation-style consumer package passes" test $? -eq 0
    check "the consumer printed its checks" grep -q "^consumer: all passed" "$work/consumer.out"
fi

for f in "$work"/*.out "$work"/*.err; do echo "--- $(basename "$f")"; head -20 "$f"; done
echo "$passed passed, $failed failed"
((failed == 0))
