# bash completion for capture (swift-capture). Commands, flags and enumerated values come from the
# tool's own usage texts (`capture help COMMAND`) at completion time, device paths and unique IDs
# from `capture devices --json` (a device's own keys are indented 4, its formats' deeper), so this
# file never lists a flag itself and cannot drift. A short option (-d) completes as its long one.

# Prints the devices of MEDIA-TYPE (video or audio) that --device/--audio accept: paths, unique IDs
# and `virtual`.
_capture_devices() {
    local tool=$1 media=$2
    echo virtual
    "$tool" devices --json 2>/dev/null | awk -v media="$media" '
        /^    "media_type" *:/ { m = $0; sub(/^[^:]*: *"/, "", m); sub(/".*/, "", m) }
        /^    "(path|unique_id)" *:/ { v = $0; sub(/^[^:]*: *"/, "", v); sub(/",? *$/, "", v); vals[++n] = v }
        /^  }/ { if (m == media) for (i = 1; i <= n; i++) print vals[i]; m = ""; n = 0 }' | sort -u
}

# Adds to COMPREPLY (so not in a pipeline's subshell) the lines of standard input that start with $cur, quoted for the command line.
_capture_add() {
    local line typed=${cur//\\/}  # as typed, less the backslashes that quote spaces
    typed=${typed#[\"\']}
    while IFS= read -r line; do
        [[ -n $line && $line == "$typed"* ]] && COMPREPLY+=("$(printf '%q' "$line")")
    done
}

_capture() {
    local cur prev words cword
    if declare -F _get_comp_words_by_ref >/dev/null; then
        _get_comp_words_by_ref -n := cur prev words cword
    else
        words=("${COMP_WORDS[@]}") cword=$COMP_CWORD
        cur=${words[cword]} prev=${words[cword - 1]}
    fi
    COMPREPLY=()
    local tool=${words[0]/#\~/$HOME}
    command -v "$tool" >/dev/null 2>&1 || tool=capture
    local commands
    commands=$("$tool" help 2>/dev/null | sed -n 's/^usage: capture \([a-z][a-z-]*\).*/\1/p')
    if ((cword == 1)); then
        _capture_add <<<"$commands"
        return
    fi
    local cmd=${words[1]} usage
    usage=$("$tool" help "$cmd" 2>/dev/null) || return
    if [[ $cmd == help ]]; then
        ((cword == 2)) && _capture_add <<<"$commands"
        return
    fi
    # A short option stands for the long one its usage pairs it with ("-d|--device").
    if [[ $prev == -[a-z] ]]; then
        local long
        long=$(grep -oE -- "$prev\|--[a-z-]+" <<<"$usage" | head -n 1)
        [[ -n $long ]] && prev=${long#*|}
    fi
    # The value of the flag before the cursor, as its usage names it ("--codec h264|mjpeg").
    if [[ $prev == --* ]]; then
        local spec
        spec=$(grep -oE -- "$prev [^] ]+" <<<"$usage" | head -n 1)
        spec=${spec#* }
        if [[ -n $spec ]]; then
            case $prev:$cmd in
                --device:audio | --audio:*) _capture_add < <(_capture_devices "$tool" audio) ;;
                --device:*) _capture_add < <(_capture_devices "$tool" video) ;;
                --output:* | --password-file:* | --token-file:* | --tls-cert:* | --tls-key:*) compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -f -- "$cur")) ;;
                *) # An enumeration: lower-case alternatives; a placeholder (N, WxH, FOURCC) has none.
                    [[ $spec == *'|'* ]] && _capture_add < <(tr '|' '\n' <<<"$spec" | grep -E '^[a-z][A-Za-z0-9_]*$') ;;
            esac
            declare -F __ltrim_colon_completions >/dev/null && __ltrim_colon_completions "$cur"
            return
        fi
    fi
    if [[ $cur == -* ]]; then
        _capture_add < <({ grep -oE -- '--[a-z][a-z-]*' <<<"$usage"; echo --help; } | sort -u)
    elif grep -qE '^ +[A-Z]+\.' <<<"$usage"; then
        # A positional OUTPUT file (record).
        compopt -o filenames 2>/dev/null
        COMPREPLY=($(compgen -f -- "$cur"))
    fi
}
complete -F _capture capture
