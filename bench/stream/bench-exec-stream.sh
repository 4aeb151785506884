#!/bin/bash
# bench-exec-stream: MiB/s of a command's output and input through `space exec`, run by
# run interleaved with a plain pipe on the host (`cat | cat`) and with `podman exec` into a
# container of the same rootfs when podman is there (else that series is reported
# skipped). Zeros and random bytes; prints one JSON line per series and the ratios.
# Timing is bash's EPOCHREALTIME around each whole pipeline (the client's start included).
set -u
usage() {
        cat <<'U'
Usage: bench-exec-stream [--mib N] [--runs N] [--template NAME] [--rootfs DIR] [--no-podman]

Creates a session (template base), then times N MiB out through
'space exec ID -- cat FILE' and in through 'cat FILE | space exec ID -- sh -c "cat >/dev/null"'
for zeros and random bytes, each run interleaved with 'cat FILE | cat >/dev/null' on the
host and, when podman is installed, the same through 'podman exec' (a container imported
from --rootfs, run with --network none). Defaults: 100 MiB, 5 runs. The daemon is
$SPACE_HOST's; the space CLI is the one beside this script, else $PATH's.
U
}
MIB=100 RUNS=5 TEMPLATE=base ROOTFS="" PODMAN=1 PODMAN_RT=""
while [ $# -gt 0 ]; do
        case $1 in
        --mib) MIB=$2; shift 2 ;;
        --runs) RUNS=$2; shift 2 ;;
        --template) TEMPLATE=$2; shift 2 ;;
        --rootfs) ROOTFS=$2; shift 2 ;;
        --no-podman) PODMAN=0; shift ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; exit 2 ;;
        esac
done
case $MIB in '' | *[!0-9]*) echo "bench-exec-stream: --mib is a number of MiB (1..4096)" >&2; exit 2 ;; esac
case $RUNS in '' | *[!0-9]*) echo "bench-exec-stream: --runs is a number (1..100)" >&2; exit 2 ;; esac
[ "$MIB" -ge 1 ] && [ "$MIB" -le 4096 ] && [ "$RUNS" -ge 1 ] && [ "$RUNS" -le 100 ] ||
        { echo "bench-exec-stream: --mib 1..4096, --runs 1..100" >&2; exit 2; }
SPACE=$(dirname "$0")/space
[ -x "$SPACE" ] || SPACE=$(command -v space) || { echo "bench-exec-stream: no space CLI" >&2; exit 1; }

TMPD=$(mktemp -d /var/tmp/bench-exec-stream.XXXXXX)
ID="" CTR=""
cleanup() {
        [ -n "$ID" ] && "$SPACE" rm "$ID" </dev/null >/dev/null 2>&1
        [ -n "$CTR" ] && podman rm -f "$CTR" >/dev/null 2>&1
        rm -rf "$TMPD"
}
trap cleanup EXIT
head -c $((MIB << 20)) /dev/zero >"$TMPD/zero"
head -c $((MIB << 20)) /dev/urandom >"$TMPD/random"
ID=$("$SPACE" create --template "$TEMPLATE" </dev/null) || { echo "bench-exec-stream: create failed" >&2; exit 1; }
for k in zero random; do
        "$SPACE" cp "$TMPD/$k" "$ID:/tmp/$k" </dev/null || { echo "bench-exec-stream: cp failed" >&2; exit 1; }
done

if [ "$PODMAN" -eq 1 ] && command -v podman >/dev/null; then
        if [ -z "$ROOTFS" ]; then
                echo "bench-exec-stream: podman needs --rootfs DIR (the rootfs the sandboxes use)" >&2
        else
                # the same rootfs as an image, no network (no packet leaves the host)
                # crun first (what the issue compared with), runc where crun cannot run (crun
                # refuses a cgroup v1 host with controllers on its cgroup2 mount: "hybrid
                # mode"); limits no higher than this shell's, which a host without
                # CAP_SYS_RESOURCE cannot raise.
                tar -C "$ROOTFS" -c . | podman import - bench-exec-stream:rootfs >/dev/null &&
                        for rt in crun runc; do
                                command -v "$rt" >/dev/null || continue
                                CTR=$(podman --runtime "$rt" run -d --network none --ulimit nofile=1024:1024 \
                                        --ulimit nproc=4096:4096 bench-exec-stream:rootfs sleep infinity 2>"$TMPD/podman.err") &&
                                        { PODMAN_RT=$rt; break; }
                                podman rm -f "$CTR" >/dev/null 2>&1
                                CTR=""
                        done
                [ -n "$CTR" ] || echo "bench-exec-stream: podman could not run a container: $(tail -n 1 "$TMPD/podman.err" 2>/dev/null)" >&2
                [ -n "$CTR" ] &&
                        for k in zero random; do podman cp "$TMPD/$k" "$CTR:/tmp/$k" || CTR=""; done
        fi
fi

# t SERIES PIPELINE: runs the pipeline (a string), appends its start and end times
t() {
        local s=$EPOCHREALTIME
        bash -c "$2" || echo "bench-exec-stream: '$2' failed" >&2
        local e=$EPOCHREALTIME
        echo "$s $e" >>"$TMPD/$1.t"
}
for r in $(seq 1 "$RUNS"); do
        for k in zero random; do
                t "host-pipe-$k" "cat '$TMPD/$k' | cat >/dev/null"
                t "space-out-$k" "'$SPACE' exec '$ID' -- cat /tmp/$k </dev/null >/dev/null"
                t "space-in-$k" "'$SPACE' exec '$ID' -- sh -c 'cat >/dev/null' <'$TMPD/$k'"
                t "space-in-pipe-$k" "cat '$TMPD/$k' | '$SPACE' exec '$ID' -- sh -c 'cat >/dev/null'"
                if [ -n "$CTR" ]; then
                        t "podman-out-$k" "podman --runtime $PODMAN_RT exec '$CTR' cat /tmp/$k >/dev/null </dev/null"
                        t "podman-in-$k" "podman --runtime $PODMAN_RT exec -i '$CTR' sh -c 'cat >/dev/null' <'$TMPD/$k'"
                fi
        done
        t "space-first-byte" "'$SPACE' exec '$ID' -- echo x </dev/null >/dev/null"
        [ -n "$CTR" ] && t "podman-first-byte" "podman --runtime $PODMAN_RT exec '$CTR' echo x </dev/null >/dev/null"
done

commit=$(git -C "$(dirname "$0")/../.." rev-parse --short HEAD 2>/dev/null || echo unknown)
# One awk over every series: the median time, MiB/s at the median, min and max MiB/s.
for f in "$TMPD"/*.t; do
        name=$(basename "$f" .t)
        awk '{ printf "%.6f\n", $2 - $1 }' "$f" | sort -n | awk -v name="$name" -v mib="$MIB" -v commit="$commit" '
                { v[NR] = $1 }
                END {
                        med = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
                        if (name ~ /first-byte/)
                                printf "{\"bench\":\"exec-stream\",\"commit\":\"%s\",\"what\":\"%s\",\"runs\":%d,\"p50_ms\":%.1f,\"min_ms\":%.1f,\"max_ms\":%.1f}\n",
                                       commit, name, NR, med * 1000, v[1] * 1000, v[NR] * 1000
                        else
                                printf "{\"bench\":\"exec-stream\",\"commit\":\"%s\",\"what\":\"%s\",\"mib\":%d,\"runs\":%d,\"p50_mib_s\":%.0f,\"min_mib_s\":%.0f,\"max_mib_s\":%.0f}\n",
                                       commit, name, mib, NR, mib / med, mib / v[NR], mib / v[1]
                }'
done | tee "$TMPD/lines"
if [ -z "$CTR" ]; then
        if [ "$PODMAN" -eq 0 ]; then why="--no-podman"
        elif ! command -v podman >/dev/null; then why="podman is not installed"
        elif [ -z "$ROOTFS" ]; then why="no --rootfs"
        else why="podman could not run a container"; fi
        echo "{\"bench\":\"exec-stream\",\"what\":\"podman\",\"skipped\":\"$why\"}"
else
        echo "{\"bench\":\"exec-stream\",\"what\":\"podman\",\"runtime\":\"$PODMAN_RT\"}"
fi
# Ratios of the medians: space against the host pipe and against podman.
awk -F'"' '{ for (i = 1; i < NF; i++) { if ($i == "what") w = $(i + 2) }
             if (match($0, /"p50_mib_s":[0-9]+/)) { v[w] = substr($0, RSTART + 12, RLENGTH - 12) } }
           END {
                   n = split("zero random", k, " ")
                   for (i = 1; i <= n; i++) {
                           h = v["host-pipe-" k[i]]
                           split("space-out space-in space-in-pipe", s, " ")
                           for (j = 1; j <= 3; j++) {
                                   x = v[s[j] "-" k[i]]
                                   if (h > 0 && x > 0)
                                           printf "{\"bench\":\"exec-stream\",\"what\":\"ratio %s-%s / host-pipe\",\"ratio\":%.2f}\n", s[j], k[i], x / h
                           }
                           if (v["podman-out-" k[i]] > 0)
                                   printf "{\"bench\":\"exec-stream\",\"what\":\"ratio space-out-%s / podman-out\",\"ratio\":%.2f}\n", k[i], v["space-out-" k[i]] / v["podman-out-" k[i]]
                           if (v["podman-in-" k[i]] > 0)
                                   printf "{\"bench\":\"exec-stream\",\"what\":\"ratio space-in-%s / podman-in\",\"ratio\":%.2f}\n", k[i], v["space-in-" k[i]] / v["podman-in-" k[i]]
                   }
           }' "$TMPD/lines"
