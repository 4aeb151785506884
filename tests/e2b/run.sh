#!/bin/bash
# E2B's real JS SDK (npm e2b 2.51.0, and 2.45.0 for the old paths) against a spaced of our
# own (docs/e2b.md, docs/e2b-wire.md): starts spaced on a temp data dir with
# --e2b-listen on a free loopback port, builds the base template into it (from the cached
# debootstrap), mints an e2b_ key for each of two tenants, runs the node:test files of
# this folder with E2B_API_URL = E2B_SANDBOX_URL = that port, and fails when a test fails
# or a sandbox is left behind. Skips (77) without root or without the SDK's node and
# node_modules (scripts/install-deps installs both).
# Usage: run.sh SPACED_BINARY [ns|gvisor] [TEST FILE...]   (default: ns, every *.test.mjs)
set -u
SPACED=${1:?usage: run.sh SPACED_BINARY [ns|gvisor] [TEST FILE...]}
RUNTIME=${2:-ns}
shift
[ $# -gt 0 ] && shift
BIN=$(cd "$(dirname "$SPACED")" && pwd)
SPACED=$BIN/$(basename "$SPACED")
E2B_DIR=$(cd "$(dirname "$0")" && pwd)
. "$E2B_DIR/node.sh"

if [ "$(id -u)" -ne 0 ]; then
        echo "SKIP: spaced's sandboxes need root"
        exit 77
fi
NODE=$(e2b_node) || {
        echo "SKIP: no node >= 20.18.1 (e2b 2.51's engines) on PATH or in $E2B_DIR/node-runtime: run scripts/install-deps"
        exit 77
}
for p in e2b e2b-245; do
        [ -f "$E2B_DIR/node_modules/$p/package.json" ] || {
                echo "SKIP: $E2B_DIR/node_modules/$p is not installed: run scripts/install-deps (npm ci in tests/e2b)"
                exit 77
        }
done
want=$(sed -n 's/.*"e2b": *"\([0-9.]*\)".*/\1/p' "$E2B_DIR/package.json")
have=$("$NODE" -p 'require(process.argv[1]).version' "$E2B_DIR/node_modules/e2b/package.json")
[ "$have" = "$want" ] || {
        echo "SKIP: node_modules has e2b $have, package.json pins $want: run scripts/install-deps"
        exit 77
}
case $RUNTIME in
ns) ;;
gvisor) command -v runsc >/dev/null || { echo "SKIP: runsc (gvisor) is not installed"; exit 77; } ;;
*) echo "FAIL: unknown runtime $RUNTIME"; exit 1 ;;
esac
[ -x "$BIN/space-init" ] && [ -x "$BIN/space" ] || { echo "FAIL: space-init or space is not built in $BIN"; exit 1; }
command -v jq >/dev/null || { echo "FAIL: jq is missing (scripts/install-deps installs it)"; exit 1; }

T=$(mktemp -d /tmp/spaced-e2b.XXXXXX)
DATA=$T/data
LOG=$T/spaced.log
PID=
export SPACE_HOST=unix:$DATA/spaced.sock
sp() { "$BIN/space" "$@" </dev/null; }
cleanup() {
        if [ -n "$PID" ] && kill -0 "$PID" 2>/dev/null; then
                for s in $(sp ls --quiet 2>/dev/null); do sp rm "$s" >/dev/null 2>&1; done
                kill -TERM "$PID"
                for _ in $(seq 200); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
                kill -9 "$PID" 2>/dev/null
        fi
        for d in "$DATA"/sandboxes/*/run/rootfs "$DATA"/vol/sandboxes/*/run/rootfs; do
                [ -d "$d" ] && umount -l "$d" 2>/dev/null
        done
        if mountpoint -q "$DATA/vol" 2>/dev/null && ! umount "$DATA/vol"; then
                echo "# $DATA/vol is still busy; left mounted"
                return
        fi
        rm -rf "$T"
}
trap cleanup EXIT
# the same free port choice as tests/integration/daemon/lib.sh
free_port() {
        local lo hi p
        read -r lo hi </proc/sys/net/ipv4/ip_local_port_range
        for _ in $(seq 20); do
                p=$(shuf -i "$lo-$hi" -n 1)
                [ -z "$(ss -Htan "sport = :$p")" ] && { echo "$p"; return 0; }
        done
        return 1
}
fail_log() {
        echo "FAIL: $*"
        echo "--- spaced log (last 60 lines)"
        tail -n 60 "$LOG"
        exit 1
}

PORT=$(free_port) || { echo "FAIL: no free port"; exit 1; }
mkdir -p "$DATA"
# Keys before the start: spaced refuses a TCP listener without a token.
KEY_A=$("$SPACED" token add --data "$DATA" --tenant e2b-a --e2b 2>>"$LOG") || fail_log "spaced token add --e2b (tenant A)"
KEY_B=$("$SPACED" token add --data "$DATA" --tenant e2b-b --e2b 2>>"$LOG") || fail_log "spaced token add --e2b (tenant B)"
case $KEY_A in e2b_*) ;; *) fail_log "token add --e2b printed '$KEY_A', not an e2b_ key" ;; esac

# --metrics-interval 1: getMetrics has samples within a second or two (default 5 s).
"$SPACED" --data "$DATA" --log-level debug --runtime "$RUNTIME" --metrics-interval 1 --e2b-listen "127.0.0.1:$PORT" </dev/null >>"$LOG" 2>&1 &
PID=$!
for _ in $(seq 300); do
        sp health >/dev/null 2>&1 && [ -n "$(ss -Htln "sport = :$PORT")" ] && break
        kill -0 "$PID" 2>/dev/null || fail_log "spaced exited at start"
        sleep 0.1
done
sp health >/dev/null 2>&1 && [ -n "$(ss -Htln "sport = :$PORT")" ] || fail_log "spaced did not answer on $SPACE_HOST and :$PORT within 30 s"
echo "# spaced $SPACED (runtime $RUNTIME) on $DATA, E2B API on 127.0.0.1:$PORT; node $NODE ($("$NODE" --version))"

t0=$(date +%s)
sp template build base --debootstrap bookworm --packages python3 >"$T/build.log" 2>&1 ||
        { tail -n 20 "$T/build.log"; fail_log "could not build the base template"; }
echo "# base template in $(( $(date +%s) - t0 )) s"

if [ $# -eq 0 ]; then
        set -- "$E2B_DIR"/*.test.mjs
fi
files=()
for f in "$@"; do files+=("$(realpath "$f")"); done
# Test files run side by side (each its own node process); the tests of a file share one
# as they ask (node:test's concurrency). Each file's tests make and kill their own sandboxes.
cd "$E2B_DIR"
E2B_API_URL=http://127.0.0.1:$PORT E2B_SANDBOX_URL=http://127.0.0.1:$PORT \
        E2B_API_KEY=$KEY_A E2B_API_KEY_B=$KEY_B SPACE_E2B_RUNTIME=$RUNTIME \
        E2B_USER_AGENT_SOURCE=space-tests \
        timeout 600 "$NODE" --test --test-concurrency=4 --test-reporter=spec "${files[@]}"
rc=$?
[ $rc -eq 124 ] && echo "FAIL: the suite ran past 600 s"

# Every test kills what it made; what is left is a leak of a test or of the server.
left=$(sp ls --json 2>/dev/null | jq -r '.sessions // [] | .[] | select(.state != "terminated") | "\(.id) \(.state)"')
if [ -n "$left" ]; then
        echo "FAIL: sessions left after the suite (a test or the E2B layer did not kill them):"
        echo "$left" | sed 's/^/#   /'
        rc=1
fi
if grep -q "ERROR: AddressSanitizer\|runtime error:\|LeakSanitizer" "$LOG"; then
        echo "FAIL: sanitizer reports in the daemon log"
        rc=1
fi
if [ $rc -ne 0 ]; then
        echo "--- spaced log (last 80 lines)"
        tail -n 80 "$LOG"
fi
echo "e2b ($RUNTIME): $([ $rc -eq 0 ] && echo passed || echo FAILED)"
exit $rc
