#!/bin/bash
# bench-network: a sandbox's egress against the host's own, on the same path, in one run
# (#14, docs/performance.md "Network"). Builds the test world (tests/net/world.sh: network
# namespaces with a fake internet, no packet leaves them), starts its own spaced there with
# --egress on, and times, run by run interleaved, the same static client (netbench) in the
# world's host namespace and inside a sandbox with egress on:
#   tcp_throughput  one HTTP GET of --mib MiB from a fake-internet nginx (MiB/s)
#   connects        TCP connect+close to it for --seconds s (connections/s)
# One JSON line per series (p50 of the runs) and one per ratio (sandbox / host; the
# issue's target is >= 0.9). Root only.
set -u
usage() {
        cat <<'U'
Usage: bench-network [--runs N] [--mib N] [--seconds S] [--runtime NAME]

Defaults: 5 runs, 256 MiB, 3 s, runtime ns. Needs root; builds and removes its own
network namespaces and data directory.
U
}
RUNS=5 MIB=256 SECS=3 RUNTIME=ns
while [ $# -gt 0 ]; do
        case $1 in
        --runs) RUNS=$2; shift 2 ;;
        --mib) MIB=$2; shift 2 ;;
        --seconds) SECS=$2; shift 2 ;;
        --runtime) RUNTIME=$2; shift 2 ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; exit 2 ;;
        esac
done
case "$RUNS:$MIB:$SECS" in *[!0-9:]*) usage >&2; exit 2 ;; esac
[ "$RUNS" -ge 1 ] && [ "$RUNS" -le 50 ] && [ "$MIB" -ge 1 ] && [ "$MIB" -le 4096 ] && [ "$SECS" -ge 1 ] && [ "$SECS" -le 60 ] ||
        { echo "bench-network: --runs 1..50, --mib 1..4096, --seconds 1..60" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "bench-network: needs root (network namespaces)" >&2; exit 1; }
HERE=$(cd "$(dirname "$0")" && pwd)
SPACED=$HERE/spaced SPACE=$HERE/space NETBENCH=$HERE/netbench
for b in "$SPACED" "$SPACE" "$NETBENCH"; do [ -x "$b" ] || { echo "bench-network: $b is not built" >&2; exit 1; }; done
WORLD=${SPACE_WORLD:-$HERE/../../tests/net/world.sh}
[ -f "$WORLD" ] || WORLD=$(cd "$HERE/../.." && pwd)/tests/net/world.sh
[ -f "$WORLD" ] || { echo "bench-network: tests/net/world.sh not found (set SPACE_WORLD)" >&2; exit 1; }
WORLD_BIG_MB=$MIB
. "$WORLD"

T=$(mktemp -d /var/tmp/bench-network.XXXXXX)
SPID=""
cleanup() {
        [ -n "$SPID" ] && kill "$SPID" 2>/dev/null && for _ in $(seq 100); do kill -0 "$SPID" 2>/dev/null || break; sleep 0.1; done
        world_down
        rm -rf "$T"
}
trap cleanup EXIT
world_up bn || exit 1
nsenter --net="/run/netns/$WH" "$SPACED" --data "$T/data" --egress on --dns-upstream 192.0.2.53 >"$T/spaced.log" 2>&1 &
SPID=$!
export SPACE_HOST="unix:$T/data/spaced.sock"
for _ in $(seq 200); do "$SPACE" health </dev/null >/dev/null 2>&1 && break; sleep 0.05; done
ROOT=$T/root
mkdir -p "$ROOT/bin" "$ROOT/etc" "$ROOT/tmp" "$ROOT/proc" "$ROOT/dev" "$ROOT/sys"
cp "$(command -v busybox)" "$ROOT/bin/busybox" && ln -s busybox "$ROOT/bin/sh"
cp "$NETBENCH" "$ROOT/bin/netbench"
"$SPACE" template add netbench "$ROOT" </dev/null >/dev/null 2>&1 ||
        curl -sS --unix-socket "$T/data/spaced.sock" -X POST http://x/v1/templates \
                -d "{\"name\":\"netbench\",\"from_dir\":\"$ROOT\"}" >/dev/null
ID=$("$SPACE" create --template netbench --runtime "$RUNTIME" --egress </dev/null) ||
        { echo "bench-network: create with egress failed:" >&2; tail -n 20 "$T/spaced.log" >&2; exit 1; }

# p50 of the numbers on stdin
p50() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "null"; else print v[int((NR + 1) / 2)] }'; }
field() { sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p"; }
: >"$T/h.tp" ; : >"$T/s.tp"; : >"$T/h.cn"; : >"$T/s.cn"
for i in $(seq "$RUNS"); do
        o=$(in_host "$NETBENCH" get 203.0.113.10 80 /big) && echo "$o" | awk -F'[:,}]' '{ print $2 / $4 / 1048576 }' >>"$T/h.tp"
        o=$("$SPACE" exec "$ID" -- netbench get 203.0.113.10 80 /big </dev/null) && echo "$o" | awk -F'[:,}]' '{ print $2 / $4 / 1048576 }' >>"$T/s.tp"
        o=$(in_host "$NETBENCH" conns 203.0.113.10 80 "$SECS") && echo "$o" | awk -F'[:,}]' '{ print $2 / $6 }' >>"$T/h.cn"
        o=$("$SPACE" exec "$ID" -- netbench conns 203.0.113.10 80 "$SECS" </dev/null) && echo "$o" | awk -F'[:,}]' '{ print $2 / $6 }' >>"$T/s.cn"
done
rev=$(git -C "$HERE/../.." rev-parse --short HEAD 2>/dev/null || echo unknown)
for s in tp cn; do
        h=$(p50 <"$T/h.$s") sb=$(p50 <"$T/s.$s")
        name=$([ $s = tp ] && echo tcp_throughput || echo connects)
        unit=$([ $s = tp ] && echo mib_s || echo per_s)
        echo "{\"bench\":\"network\",\"series\":\"$name\",\"where\":\"host\",\"runtime\":\"$RUNTIME\",\"${unit}_p50\":$h,\"runs\":$(wc -l <"$T/h.$s"),\"commit\":\"$rev\"}"
        echo "{\"bench\":\"network\",\"series\":\"$name\",\"where\":\"sandbox\",\"runtime\":\"$RUNTIME\",\"${unit}_p50\":$sb,\"runs\":$(wc -l <"$T/s.$s"),\"commit\":\"$rev\"}"
        echo "{\"bench\":\"network\",\"series\":\"$name\",\"ratio\":\"sandbox/host\",\"runtime\":\"$RUNTIME\",\"value\":$(awk -v a="$sb" -v b="$h" 'BEGIN { if (b > 0 && a != "null") printf "%.3f", a / b; else print "null" }'),\"target\":0.9}"
done
"$SPACE" rm "$ID" </dev/null >/dev/null 2>&1
