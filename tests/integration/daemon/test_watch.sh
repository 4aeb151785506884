#!/bin/bash
# File watching through the API (issue #15 item 2, docs/api.md "Files"): a `curl -N` on
# .../files/watch gets the events of files made by exec inside the session as NDJSON
# (create, write, chmod, rename, remove in a directory made after the watch began), 16
# watches at once and the 17th refused until clients leave (a client leaving cancels its
# watch in space-init), clear errors for a bad path or session, and a stream that ends
# with an error event when its session is paused. Root only; ~15 s.
# SPACE_WATCH_RUNTIME=gvisor (or microvm) runs it all on that runtime.
# Usage: test_watch.sh SPACED_BINARY   (space-init next to it)
RT=${SPACE_WATCH_RUNTIME:-ns}
. "$(dirname "$0")/lib.sh" "watch-$RT" "${1:-}"
need_runtime "$RT"

ROOT=$T/rootfs
make_rootfs "$ROOT" "mv chmod"
start_daemon || exit 1
api -X POST http://x/v1/templates -d "{\"name\":\"mini\",\"from_dir\":\"$ROOT\"}" >/dev/null
A=$(api -X POST http://x/v1/sessions -d '{"template":"mini","runtime":"'$RT'","memory":"128M","snapshot_interval_ms":0}' | jget id)
check "a session" test "${A:0:4}" = ses_
W="http://x/v1/sessions/$A/files/watch"
sh_in "$A" 'mkdir -p /tmp/w' >/dev/null

# watch_bg OUT URL: a streaming client in the background (at most 60 s); its pid in WPID
watch_bg() {
        timeout 60 curl -sS -N --unix-socket "$S" -D "$1.h" "$2" >"$1" 2>"$1.err" &
        WPID=$!
}
# started FILE: the stream's head came (200), within 5 s
started() {
        for _ in $(seq 50); do
                grep -q '^HTTP/1.1 200' "$1.h" 2>/dev/null && return 0
                sleep 0.1
        done
        return 1
}
# events_of FILE: its events as "type path dir" lines (every line must be JSON)
events_of() { jq -rc '"\(.type) \(.path) \(.dir)"' <"$1"; }
# wait_event FILE LINE: LINE among its events within 10 s
wait_event() {
        for _ in $(seq 100); do
                events_of "$1" 2>/dev/null | grep -qxF "$2" && return 0
                sleep 0.1
        done
        return 1
}

# ---- the events of a nested directory made after the watch began ----
watch_bg "$T/w1" "$W?path=/tmp/w"
P1=$WPID
check "the watch answers 200 and streams" started "$T/w1"
check "... as application/x-ndjson" grep -qi '^Content-Type: application/x-ndjson' "$T/w1.h"
check "... chunked" grep -qi '^Transfer-Encoding: chunked' "$T/w1.h"
# a new directory is watched once init saw it made: what happens in it before that shows
# as the create of what it holds then (docs/api.md), so the files come after its event
sh_in "$A" 'mkdir -p /tmp/w/a/b' >/dev/null
check "create of the nested directory comes" wait_event "$T/w1" "create /tmp/w/a/b true"
sh_in "$A" 'echo hi >/tmp/w/a/b/f && echo more >>/tmp/w/a/b/f &&
        chmod 600 /tmp/w/a/b/f && mv /tmp/w/a/b/f /tmp/w/a/b/g && rm /tmp/w/a/b/g' >/dev/null
check "remove of the file comes" wait_event "$T/w1" "remove /tmp/w/a/b/g false"
events_of "$T/w1" >"$T/w1.ev"
grep -qxF "rename_to /tmp/w/a/b/g false" "$T/w1.ev" || { echo "# the events:"; sed 's/^/#   /' "$T/w1.ev"; }
for e in "create /tmp/w/a true" "create /tmp/w/a/b true" "create /tmp/w/a/b/f false" "write /tmp/w/a/b/f false" \
        "chmod /tmp/w/a/b/f false" "rename_from /tmp/w/a/b/f false" "rename_to /tmp/w/a/b/g false"; do
        check "event: $e" grep -qxF "$e" "$T/w1.ev"
done
check "... in the order they happened" test "$(grep -nxF 'create /tmp/w/a/b/f false' "$T/w1.ev" | cut -d: -f1)" -lt \
        "$(grep -nxF 'rename_to /tmp/w/a/b/g false' "$T/w1.ev" | cut -d: -f1)"

# ---- 16 watches; a client leaving cancels its own ----
PIDS=()
for i in $(seq 2 16); do
        watch_bg "$T/m$i" "$W?path=/tmp&recursive=false"
        PIDS+=("$WPID")
done
for i in $(seq 2 16); do started "$T/m$i" || break; done
check "16 watches stream at once" started "$T/m16"
R=$(api "$W?path=/tmp" -w '\n%{http_code}' --max-time 10)
check "the 17th is 409" test "$(tail -n 1 <<<"$R")" = 409
check "... saying why" grep -q 'watches are active' <<<"$(head -n 1 <<<"$R" | jget error message)"
for p in "${PIDS[@]}"; do kill "$p"; done
wait "${PIDS[@]}" 2>/dev/null
ok17=
for _ in $(seq 50); do
        watch_bg "$T/w17" "$W?path=/tmp"
        if started "$T/w17"; then ok17=1; break; fi
        wait "$WPID" 2>/dev/null
done
check "once their clients left, a new watch is accepted (theirs were cancelled)" test -n "$ok17"
kill "$WPID" 2>/dev/null

# ---- bad input ----
R=$(api "$W?path=/nope" -w '\n%{http_code}' --max-time 10)
check "a missing directory is 404" test "$(tail -n 1 <<<"$R")" = 404
check "... naming the path" grep -q '/nope' <<<"$(head -n 1 <<<"$R" | jget error message)"
check "a file is 400 (not a directory)" test "$(code --max-time 10 "$W?path=/bin/sh")" = 400
check "no path is 400" test "$(code --max-time 10 "$W")" = 400
check "a bad recursive is 400" test "$(code --max-time 10 "$W?path=/tmp&recursive=maybe")" = 400
check "an unknown session is 404" test "$(code --max-time 10 "http://x/v1/sessions/ses_0000000000000000/files/watch?path=/")" = 404

# ---- space watch ----
SPACE=$BIN/space
[ -x "$SPACE" ] || { echo "FAIL: $SPACE is not built"; exit 1; }
sh_in "$A" 'mkdir -p /tmp/c' >/dev/null
SPACE_HOST=unix:$S timeout 30 "$SPACE" watch -n 3 "$A" /tmp/c >"$T/cli.out" 2>"$T/cli.err" &
CP=$!
SPACE_HOST=unix:$S timeout 30 "$SPACE" watch --json --no-recursive -n 2 "$A" /tmp/c >"$T/cli.json" 2>&1 &
CJ=$!
sleep 1 # both streams begin (their heads come before any event)
# f stays: made (and removed) before d's own watch is in place, it would go unseen, and
# kept it is seen either by that watch or by the scan of d that follows its create
# (docs/api.md "Watching files").
sh_in "$A" 'mkdir /tmp/c/d && echo x >/tmp/c/d/f && touch /tmp/c/e' >/dev/null
wait "$CP"
check "space watch -n 3 exits 0 after three events" test $? = 0
check "... printing TYPE PATH, a directory with its /" test "$(head -n 1 "$T/cli.out")" = "create       /tmp/c/d/"
check "... and the events below it (recursive by default)" grep -qxE "create +/tmp/c/d/f" "$T/cli.out"
wait "$CJ"
check "space watch --json --no-recursive -n 2 exits 0" test $? = 0
check "... JSON lines of PATH's own entries, nothing of the directory below" \
        test "$(jq -rc '.type + " " + .path + " " + (.dir | tostring)' <"$T/cli.json" | tr '\n' ,)" = \
        "create /tmp/c/d true,create /tmp/c/e false,"
R=$(SPACE_HOST=unix:$S "$SPACE" watch "$A" /nope 2>&1)
check "space watch of a missing directory fails, saying so" grep -q '/nope' <<<"$R"
SPACE_HOST=unix:$S "$SPACE" watch "$A" >/dev/null 2>&1
check "space watch without a path is a usage error (2)" test $? = 2

# ---- the session pauses: the stream ends with an error event ----
check "the first watch still streams" kill -0 "$P1"
check "pause" test "$(code -X POST --max-time 60 "http://x/v1/sessions/$A/pause")" = 200
for _ in $(seq 100); do kill -0 "$P1" 2>/dev/null || break; sleep 0.1; done
check "... ends the stream" test "$(kill -0 "$P1" 2>/dev/null || echo ended)" = ended
check "... with an error event last" test "$(tail -n 1 "$T/w1" | jget type)" = error
check "... a complete chunked response (curl saw no error)" test ! -s "$T/w1.err"
check "a watch of the paused session is 409" test "$(code --max-time 10 "$W?path=/tmp")" = 409

finish "watch-$RT"
