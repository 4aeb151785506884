# Shared by test_daemon.sh, test_durable.sh, test_auth.sh and
# ../microvm/test_daemon_microvm.sh: skip checks, a temporary data directory torn down on
# exit, tap-like checks, curl/JSON helpers, session helpers, starting spaced, and a tiny
# template root (static busybox, or host binaries with their libraries).
# Usage: . lib.sh NAME SPACED_BINARY   (sets SPACED BIN T DATA S LOG PID PASS FAIL SKIP L);
# a script ends with `finish LABEL`.
set -u
SPACED=${2:?usage: $1 SPACED}
BIN=$(dirname "$SPACED")
PASS=0
FAIL=0
SKIP=77

if [ "$(id -u)" -ne 0 ]; then
        echo "SKIP: spaced's ns runtime needs root"
        exit $SKIP
fi
# Not skips: the build makes space-init and scripts/install-deps installs curl and jq, so
# a missing one is a failure of ours, not a capability the machine lacks.
[ -x "$BIN/space-init" ] || { echo "FAIL: $BIN/space-init is not built"; exit 1; }
for t in curl jq; do
        command -v $t >/dev/null || { echo "FAIL: $t is missing (scripts/install-deps installs it)"; exit 1; }
done

T=$(mktemp -d "/tmp/spaced-$1.XXXXXX")
DATA=$T/data
S=$DATA/spaced.sock
LOG=$T/spaced.log
PID=

cleanup() {
        if [ -n "$PID" ] && kill -0 "$PID" 2>/dev/null; then
                kill -TERM "$PID"
                for _ in $(seq 100); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
                kill -9 "$PID" 2>/dev/null
        fi
        # Sandboxes a failed run may have left (re-attachable ones survive a kill -9).
        for d in "$DATA"/sandboxes/*/run/rootfs "$DATA"/vol/sandboxes/*/run/rootfs; do
                [ -d "$d" ] && umount -l "$d" 2>/dev/null
        done
        # The quota volume (docs/security.md "Disk"): spaced unmounts it when it stops with
        # no sandbox left; after a kill -9 it is still there. Not lazily: a second mount of
        # the same btrfs image must never exist.
        if mountpoint -q "$DATA/vol" 2>/dev/null && ! umount "$DATA/vol"; then
                echo "# $DATA/vol is still busy; left mounted"
                return
        fi
        rm -rf "$T"
}
trap cleanup EXIT

. "$(dirname "${BASH_SOURCE[0]}")/../../check.sh"
api() { curl -sS --unix-socket "$S" "$@"; }
code() { curl -sS --unix-socket "$S" -o /dev/null -w '%{http_code}' "$@"; }
# JSON is read with jq, once per response, never with an interpreter started per field.
# jx FILTER [JQ OPTIONS...]: FILTER on the one JSON document on stdin (more or none is an
# error), strings bare, other values as compact JSON. In FILTER, req("k") is the field k
# of an object, an error when it is missing (.k would be null: a count or a boolean must
# not pass on a field the daemon left out).
JX_DEFS='def req($k): if type == "object" and has($k) then .[$k] else error("no field \"\($k)\"") end;'
jx() {
        local f=$1
        shift
        jq -rcs "$@" "$JX_DEFS"' if length == 1 then .[0] | ('"$f"') else error("not one JSON document") end'
}
# jget KEY...: the value at that path (a number indexes a list), JSON for null, booleans,
# objects and lists; an error when a step is missing
jget() {
        local IFS=$'\n'
        jx 'reduce ($p | split("\n"))[] as $k (.;
                if type == "array" then ($k | tonumber) as $i
                        | if $i < length and $i >= -length then .[$i] else error("no index \($i)") end
                else req($k) end)' --arg p "$*"
}
# Joins the stdout events of an NDJSON exec stream (every line must be an event).
stdout_of() {
        jq -Rrsj 'rtrimstr("\n") | split("\n") | map(fromjson | select(if type == "object" and has("type") then .type == "stdout" else error("not an event") end)
                | if has("data") then .data | @base64 else .data_b64 // error("no data") end) | join("\n")' | base64 -d
}
# free_port: a TCP port no socket on the host uses (listening or connected, v4 or v6),
# from the range the kernel picks a port 0 bind from; the caller's bind may still lose a
# race, as after any such choice
free_port() {
        local lo hi p
        read -r lo hi </proc/sys/net/ipv4/ip_local_port_range
        for _ in $(seq 20); do
                p=$(shuf -i "$lo-$hi" -n 1)
                [ -z "$(ss -Htan "sport = :$p")" ] && { echo "$p"; return 0; }
        done
        return 1
}
# True once PID has exited (a zombie waiting for its reaper counts as gone, once its other
# threads are gone too: until the last one exits, the process's files, spaced's lock among
# them, stay open, and a spaced started at once found the data dir locked); waits 10 s.
gone() {
        for _ in $(seq 100); do
                [ -e "/proc/$1" ] || return 0
                if grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; then
                        [ "$(ls "/proc/$1/task" 2>/dev/null | wc -l)" -le 1 ] && return 0
                fi
                sleep 0.1
        done
        return 1
}

# L: where the writable layers live (sandboxes/, parked/): on the quota volume DATA/vol
# when spaced could mount it, else in DATA (docs/security.md "Disk").
L=$DATA
# A session's shell command through the exec API -> its stdout; its state; waiting for one.
sh_in() { # session, shell command -> its stdout
        api -X POST "http://x/v1/sessions/$1/exec" -d "$(jq -nc --arg c "$2" '{argv: ["sh", "-c", $c]}')" | stdout_of
}
state_of() { api "http://x/v1/sessions/$1" | jget state; }
wait_state() { # session, state, tenths of a second
        for _ in $(seq "$3"); do
                [ "$(state_of "$1")" = "$2" ] && return 0
                sleep 0.1
        done
        return 1
}

# need_runtime RT: what the runtime RT (ns, gvisor, microvm) needs of the machine, or the
# script ends: a skip without runsc, or without a guest kernel this machine cannot fetch
# (scripts/build-guest, idempotent, makes it); a failure when the build fails otherwise.
need_runtime() {
        if [ "$1" = gvisor ] && ! command -v runsc >/dev/null; then echo "SKIP: runsc is not installed"; exit $SKIP; fi
        if [ "$1" = microvm ]; then
                "$(dirname "${BASH_SOURCE[0]}")/../../../scripts/build-guest" >"$T/build-guest.log" 2>&1
                local rc=$?
                [ $rc -eq 3 ] && { echo "SKIP: no guest kernel, and this machine cannot fetch one"; exit $SKIP; }
                [ $rc -eq 0 ] || { echo "FAIL: scripts/build-guest exited $rc:"; tail -n 5 "$T/build-guest.log"; exit 1; }
        fi
        return 0
}

# SPACED_IN: a command prefix spaced runs under (tests/net: "ip netns exec NS"), unset = none.
start_daemon() { # extra spaced options, if any
        ${SPACED_IN:-} "$SPACED" --data "$DATA" --log-level debug --pidfile "$T/spaced.pid" "$@" >>"$LOG" 2>&1 &
        PID=$!
        for _ in $(seq 100); do
                if [ -S "$S" ] && api http://x/v1/health >/dev/null 2>&1; then
                        L=$DATA
                        mountpoint -q "$DATA/vol" && L=$DATA/vol
                        return 0
                fi
                sleep 0.05
        done
        echo "spaced did not start:"
        tail -n 30 "$LOG"
        return 1
}

# make_rootfs DIR: the smallest tree the tests' commands run in.
make_rootfs() { # DIR [MORE COMMANDS]
        local root=$1 cmds="sh cat echo ls sleep head wc env yes true tr grep rm mkdir dd sync ${2:-}"
        mkdir -p "$root/bin" "$root/root" "$root/tmp" "$root/etc" "$root/proc" "$root/dev" "$root/sys"
        if command -v busybox >/dev/null && ! ldd "$(command -v busybox)" >/dev/null 2>&1; then
                cp "$(command -v busybox)" "$root/bin/busybox"
                for c in $cmds; do ln -s busybox "$root/bin/$c"; done
        else
                for c in $cmds; do
                        src=$(command -v $c) || continue
                        cp -L "$src" "$root/bin/$c"
                        for lib in $(ldd "$src" 2>/dev/null | grep -o '/[^ ]*'); do
                                mkdir -p "$root$(dirname "$lib")"
                                cp -L "$lib" "$root$lib"
                        done
                done
        fi
}

# The end of every script: no sanitizer report in spaced's log, the log's tail when a
# check failed (for a CI log), the summary line "LABEL: N passed, N failed"; returns the
# script's status.
finish() {
        local san="ERROR: AddressSanitizer\|runtime error:\|LeakSanitizer"
        if grep -q "$san" "$LOG" 2>/dev/null; then
                bad "sanitizer reports in the daemon log"
                grep -A20 "$san" "$LOG" | head -60
        else
                ok "no sanitizer report in the daemon log"
        fi
        if [ "$FAIL" -ne 0 ] && [ -f "$LOG" ]; then
                echo "--- spaced log (last 80 lines)"
                tail -n 80 "$LOG"
        fi
        echo "$1: $PASS passed, $FAIL failed"
        [ "$FAIL" -eq 0 ]
}
