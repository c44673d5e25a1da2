#!/usr/bin/env bash
# Runs the `capture` tool and the examples, and checks what they print. On the host (no camera)
# they must fall back to the virtual camera; in the VM (CAPTURE_VM=1) they run against vivid.
# Usage: Tests/tools/check-tools.sh BIN_DIR [CONSUMER]   (BIN_DIR holds capture, still-camera,
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

# capture devices --json: an array with the required keys (authorization too); vivid nodes in the VM, virtual on the host.
"$bin/capture" devices --json >"$work/devices.json" 2>"$work/devices.err"
check "devices --json exits 0" test $? -eq 0
check "devices --json fields" py "
import json,sys
d=json.load(open('$work/devices.json'))
assert isinstance(d,list) and d, d
for x in d:
    for k in ('path','name','uniqueID','position','mediaType','authorization'): assert k in x, (k,x)
vid=[x for x in d if x['mediaType']=='video']
if '$invm'=='1':
    assert sum(1 for x in vid if x['driver']=='vivid')==2, vid
else:
    assert all(x['path'].startswith('virtual:') for x in vid), vid
"
if [[ -n ${CAPTURE_VM_ALOOP:-} ]]; then
    # Audio devices are listed too: the loopback card's capture PCMs, with formats.
    check "devices --json lists the loopback's audio devices" py "
import json
d=json.load(open('$work/devices.json'))
aud=[x for x in d if x['mediaType']=='audio']
assert any('Loopback' in x['name'] or 'Loopback' in x['uniqueID'] for x in aud), aud
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
"$bin/capture" snap "${device_args[@]}" --size 640x480 --quality 80 --output "$work/snap.jpg" >"$work/snap.out" 2>&1
check "snap exits 0" test $? -eq 0
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
    check "metadata --types nope: status 1, one line naming it" \
        bash -c '(($1 == 1)) && (($(wc -l <"$2") == 1)) && grep -q "nope" "$2"' _ $? "$work/types.err"
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
fi

# The command line as typed: --name=value; --preset with --size refused in one line, nothing
# written; `capture` alone a usage error (status 2) with a short summary.
"$bin/capture" snap "${device_args[@]}" --size=$small --output="$work/eq.jpg" >/dev/null 2>"$work/eq.err"
check "snap --size=WxH --output=FILE (the = form)" test $? -eq 0 -a -s "$work/eq.jpg"
"$bin/capture" snap "${device_args[@]}" --preset low --size $small --output "$work/both.jpg" >/dev/null 2>"$work/both.err"
check "--preset with --size: status 1, one line, no file" \
    bash -c '(($1 == 1)) && (($(wc -l <"$2") == 1)) && grep -q "give --preset or --size, not both" "$2" && ! [[ -e $3 ]]' \
    x $? "$work/both.err" "$work/both.jpg"
"$bin/capture" >"$work/alone.out" 2>"$work/alone.err"
check "capture alone: status 2, a short summary on stderr" \
    bash -c '(($1 == 2)) && (($(wc -l <"$2") <= 12)) && grep -q "^  snap " "$2" && ! [[ -s $3 ]]' x $? "$work/alone.err" "$work/alone.out"

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
