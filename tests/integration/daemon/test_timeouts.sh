#!/bin/bash
# Lifecycle timeouts (issue #15 item 3, docs/sessions.md "Timeouts"): an idle_timeout of
# 2 s pauses a session (an idle_timeout event, state paused); an exec and an upload to it
# with auto_resume resume it and run, without auto_resume they are 409; a timeout with
# action delete deletes; PUT …/timeouts extends and clears; bad values are 400; a restart
# of spaced keeps the settings, and a timeout that passed while it was down fires at its
# start; requests to an exposed port and an open port-forward connection keep it running,
# a request to the port resumes it; the CLI (space create --timeout ..., space timeout).
# Root only; ~25 s.
# Usage: test_timeouts.sh SPACED_BINARY   (space-init next to it)
. "$(dirname "$0")/lib.sh" timeouts "${1:-}"

ROOT=$T/rootfs
make_rootfs "$ROOT"
# an HTTP server for the port checks (busybox's, when the rootfs has busybox)
HTTPD=
if [ -x "$ROOT/bin/busybox" ]; then
        ln -sf busybox "$ROOT/bin/httpd"
        ln -sf busybox "$ROOT/bin/nc"
        mkdir -p "$ROOT/srv"
        echo "served" >"$ROOT/srv/index.html"
        HTTPD=1
fi
# kinds_of SESSION: the kinds of its events, one a line
kinds_of() { api "http://x/v1/sessions/$1/events?limit=1000" | jx 'req("events")[] | req("kind")'; }
# lifecycle_of SESSION: its events as "kind" or "lifecycle:EVENT", one a line
lifecycle_of() { api "http://x/v1/sessions/$1/events?limit=1000" | jx 'req("events")[] | if req("kind") == "lifecycle" then "lifecycle:\(req("data") | req("event"))" else req("kind") end'; }
# event_of SESSION KIND: the data of its last event of KIND, compact JSON
event_of() { api "http://x/v1/sessions/$1/events?limit=1000" | jx '[req("events")[] | select(req("kind") == $k)] | last | req("data")' --arg k "$2"; }
new() { api -X POST http://x/v1/sessions -d "$1" | jget id; }
# create_code BODY: the status of a create with BODY (nothing is made on a 400)
create_code() { code -X POST http://x/v1/sessions -d "$1"; }
put_code() { code -X PUT "http://x/v1/sessions/$1/timeouts" -d "$2"; }
exec_code() { code -X POST "http://x/v1/sessions/$1/exec" -d '{"argv":["true"]}'; }
gone_404() { # session, tenths of a second: until GET says 404
        for _ in $(seq "$2"); do
                [ "$(code "http://x/v1/sessions/$1")" = 404 ] && return 0
                sleep 0.1
        done
        return 1
}

start_daemon || exit 1
api -X POST http://x/v1/templates -d "{\"name\":\"mini\",\"from_dir\":\"$ROOT\"}" >/dev/null
BASE='"template":"mini","memory":"64M","snapshot_interval_ms":0'

# ---- bad values: 400, nothing made ----
N0=$(api http://x/v1/sessions | jx 'req("sessions") | length')
check "idle_timeout 0 is 400" test "$(create_code "{$BASE,\"idle_timeout\":0}")" = 400
check "idle_timeout over 30 days is 400" test "$(create_code "{$BASE,\"idle_timeout\":2592001}")" = 400
check "idle_timeout \"10m\" (not seconds) is 400" test "$(create_code "{$BASE,\"idle_timeout\":\"10m\"}")" = 400
check "timeout over a year ahead is 400" test "$(create_code "{$BASE,\"timeout\":31536001}")" = 400
check "timeout in the past is 400" test "$(create_code "{$BASE,\"timeout\":\"2020-01-01T00:00:00Z\"}")" = 400
check "timeout that is not a time is 400" test "$(create_code "{$BASE,\"timeout\":\"tomorrow\"}")" = 400
check "timeout_action explode is 400" test "$(create_code "{$BASE,\"timeout\":60,\"timeout_action\":\"explode\"}")" = 400
check "auto_resume \"yes\" is 400" test "$(create_code "{$BASE,\"auto_resume\":\"yes\"}")" = 400
MSG=$(api -X POST http://x/v1/sessions -d "{$BASE,\"idle_action\":\"stop\"}" | jget error message)
check "... with a message that names the field" grep -q idle_action <<<"$MSG"
check "... and no session was made" test "$(api http://x/v1/sessions | jx 'req("sessions") | length')" = "$N0"

# ---- idle_timeout pauses; auto_resume resumes for an exec and an upload ----
A=$(new "{$BASE,\"idle_timeout\":2,\"auto_resume\":true}")
check "a session with idle_timeout 2 and auto_resume" test "${A:0:4}" = ses_
TA=$(api "http://x/v1/sessions/$A" | jx 'req("timeouts") | "\(req("idle_timeout")) \(req("idle_action")) \(req("auto_resume")) \(req("timeout")) \(req("last_activity") | type)"')
check "... shown in the session: idle 2 s, pause, auto_resume, no timeout, a last activity" test "$TA" = "2 pause true null string"
B=$(new "{$BASE,\"idle_timeout\":1}")
check "a session with idle_timeout 1 and no auto_resume" test "${B:0:4}" = ses_
C=$(new "{$BASE,\"timeout\":2,\"timeout_action\":\"delete\"}")
check "a session with timeout 2 s, action delete" test "${C:0:4}" = ses_
check "A is paused by its idle_timeout" wait_state "$A" paused 100
check "... with an idle_timeout event: action pause" test "$(event_of "$A" idle_timeout | jx 'req("action")')" = pause
check "C is deleted by its timeout" gone_404 "$C" 80
check "B is paused by its idle_timeout" wait_state "$B" paused 60
check "an exec on paused B (no auto_resume) is 409" test "$(exec_code "$B")" = 409
check "... a file read too" test "$(code "http://x/v1/sessions/$B/files?path=/etc")" = 409
check "... and B stays paused" test "$(state_of "$B")" = paused
OUT=$(sh_in "$A" 'echo resumed-$((40 + 2))')
check "an exec on paused A (auto_resume) resumes it and runs" test "$OUT" = resumed-42
check "... A runs" test "$(state_of "$A")" = running
check "... its log: idle_timeout, paused, resumed" \
        test "$(lifecycle_of "$A" | grep -E '^(idle_timeout|lifecycle:.*)$' | tail -n 3 | tr '\n' ' ')" = "idle_timeout lifecycle:paused lifecycle:resumed "
check "A is paused again after 2 s without a request" wait_state "$A" paused 100
check "an upload to paused A resumes it and writes" \
        test "$(code -X PUT "http://x/v1/sessions/$A/files?path=/root/up.txt" --data-binary 'uploaded while paused')" = 201
check "... the file is there" test "$(api "http://x/v1/sessions/$A/files?path=/root/up.txt")" = "uploaded while paused"
# No more pauses of A from here: it must be running for the restart below.
check "PUT idle_timeout null on A is 200" test "$(put_code "$A" '{"idle_timeout":null}')" = 200

# ---- requests to an exposed port are activity, and resume with auto_resume ----
if [ -n "$HTTPD" ]; then
        G=$(new "{$BASE,\"idle_timeout\":3,\"auto_resume\":true,\"ports\":[{\"port\":8000,\"public\":true}]}")
        api -X POST "http://x/v1/sessions/$G/exec" -d '{"argv":["httpd","-f","-p","127.0.0.1:8000","-h","/srv"],"background":true}' >/dev/null
        ok=0
        for _ in $(seq 6); do
                sleep 0.8
                [ "$(api "http://x/v1/sessions/$G/ports/8000/")" = served ] && ok=$((ok + 1))
        done
        check "6 requests to G's port 0.8 s apart are served" test "$ok" = 6
        check "... and keep G (idle_timeout 3 s) running for 4.8 s" test "$(state_of "$G")" = running
        check "G is paused once its port is left alone" wait_state "$G" paused 100
        # A resumed ns sandbox runs no process of before: nothing listens, 502, but it runs.
        check "a request to the port of paused G resumes it (502: its server did not survive)" \
                test "$(code "http://x/v1/sessions/$G/ports/8000/")" = 502
        check "... G runs" test "$(state_of "$G")" = running
        # An open connection through port-forward is activity while it lasts.
        H=$(new "{$BASE,\"idle_timeout\":2}")
        api -X POST "http://x/v1/sessions/$H/exec" -d '{"argv":["nc","-ll","-p","8004","-e","/bin/cat"],"background":true}' >/dev/null
        LP=$(free_port)
        SPACE_HOST=unix:$S "$BIN/space" port-forward "$H" "8004:$LP" >"$T/pf.log" 2>&1 &
        PF=$!
        for _ in $(seq 50); do ss -Htln "sport = :$LP" | grep -q . && break; sleep 0.1; done
        exec 3<>"/dev/tcp/127.0.0.1/$LP"
        echo ping >&3
        line=
        read -r -t 5 line <&3
        check "a connection to H's port through port-forward echoes" test "$line" = ping
        sleep 4
        check "... and keeps H (idle_timeout 2 s) running while open, 4 s without a request" test "$(state_of "$H")" = running
        exec 3>&-
        kill "$PF" 2>/dev/null
        wait "$PF" 2>/dev/null
        check "H is paused once the connection is closed" wait_state "$H" paused 100
else
        echo "# no busybox in the rootfs: the port checks are skipped"
fi

# ---- PUT …/timeouts: extend, clear, bad values ----
D=$(new "{$BASE,\"timeout\":3}")
T0=$(api "http://x/v1/sessions/$D" | jget timeouts timeout)
R=$(api -X PUT "http://x/v1/sessions/$D/timeouts" -d '{"timeout":3600}')
T1=$(jget timeout <<<"$R")
check "PUT timeout 3600 extends D's timeout ($T0 -> $T1)" test "$T1" \> "$T0"
check "PUT with an RFC 3339 time sets it" test "$(put_code "$D" "{\"timeout\":\"$(date -u -d '+2 hours' +%Y-%m-%dT%H:%M:%SZ)\"}")" = 200
check "PUT idle_timeout 0 is 400" test "$(put_code "$D" '{"idle_timeout":0}')" = 400
check "PUT an unknown member is 400" test "$(put_code "$D" '{"idle":5}')" = 400
check "PUT idle_action maybe is 400" test "$(put_code "$D" '{"idle_action":"maybe"}')" = 400
check "PUT on an unknown session is 404" test "$(put_code ses_0000000000000000 '{"timeout":null}')" = 404
check "... the bad PUTs changed nothing" test "$(api "http://x/v1/sessions/$D" | jget timeouts idle_timeout)" = null
sleep 3
check "D still runs past its first deadline" test "$(state_of "$D")" = running
R=$(api -X PUT "http://x/v1/sessions/$D/timeouts" -d '{"timeout":null,"idle_timeout":600,"idle_action":"delete","auto_resume":true}')
check "PUT clears the timeout and sets idle_timeout, idle_action, auto_resume" \
        test "$(jx '"\(req("timeout")) \(req("idle_timeout")) \(req("idle_action")) \(req("auto_resume"))"' <<<"$R")" = "null 600 delete true"
check "... and D has no timeout event (its first deadline never fired)" test "$(kinds_of "$D" | grep -c '^timeout$')" = 0

# ---- the CLI: space create's options, space timeout ----
export SPACE_HOST=unix:$S
F=$("$BIN/space" create -t mini -m 64M --snapshot-interval 0 --timeout 1h --idle-timeout 10m --on-timeout delete \
        --auto-resume)
check "space create --timeout 1h --idle-timeout 10m --on-timeout delete --auto-resume" test "${F:0:4}" = ses_
check "... the session has them" test "$(api "http://x/v1/sessions/$F" | jx 'req("timeouts") | "\(req("idle_timeout")) \(req("timeout_action")) \(req("idle_action")) \(req("auto_resume")) \(req("timeout") | type)"')" = "600 delete pause true string"
check "space timeout ID prints them" "$BIN/space" timeout "$F" >"$T/tl"
check "... one line each: idle-timeout 600s (then pause)" grep -qx 'idle-timeout   600s (then pause)' "$T/tl"
check "... auto-resume on" grep -qx 'auto-resume    on' "$T/tl"
check "... the timeout, then delete" grep -qx 'timeout        20[0-9-]*T[0-9:.]*Z (then delete)' "$T/tl"
check "space timeout ID --no-timeout --idle-timeout 90s --no-auto-resume" \
        test "$("$BIN/space" timeout "$F" --no-timeout --idle-timeout 90s --no-auto-resume --json | jx '"\(req("timeout")) \(req("idle_timeout")) \(req("auto_resume"))"')" = "null 90 false"
"$BIN/space" timeout "$F" --idle-timeout 0 >/dev/null 2>&1
check "space timeout --idle-timeout 0 is a usage error (exit 2)" test $? = 2
"$BIN/space" timeout "$F" --at 2020-01-01T00:00:00Z >"$T/te" 2>&1
check "space timeout --at a past time: exit 1 with the daemon's message" \
        test $? = 1 -a -n "$(grep 'not in the future' "$T/te")"

# ---- a restart keeps them; a timeout that passes while spaced is down fires at its start ----
E=$(new "{$BASE,\"timeout\":2}")
check "a session E with timeout 2 s" test "${E:0:4}" = ses_
kill -TERM "$PID"
gone "$PID" || kill -9 "$PID"
PID=
sleep 2.5
start_daemon || exit 1
check "after the restart D keeps its timeouts" \
        test "$(api "http://x/v1/sessions/$D" | jx 'req("timeouts") | "\(req("timeout")) \(req("idle_timeout")) \(req("idle_action")) \(req("auto_resume"))"')" = "null 600 delete true"
check "... A its auto_resume" test "$(api "http://x/v1/sessions/$A" | jget timeouts auto_resume)" = true
check "... B its idle_timeout (and stays paused)" test "$(api "http://x/v1/sessions/$B" | jx '"\(req("timeouts") | req("idle_timeout")) \(req("state"))"')" = "1 paused"
check "E's timeout, passed while spaced was down, pauses it at the start" wait_state "$E" paused 100
check "... with a timeout event: action pause" test "$(event_of "$E" timeout | jx 'req("action")')" = pause
check "... and the fired timeout is gone from E" test "$(api "http://x/v1/sessions/$E" | jget timeouts timeout)" = null

finish timeouts
