#!/bin/bash
# Integration test of durable sessions (docs/sessions.md): the real spaced, runtime and
# space-init on a tiny busybox template, driven with curl. Snapshots and the timeline,
# pause/resume (nothing left on the host while paused), restore (time travel), fork
# independence, crash recovery of a killed init by itself, re-attach after kill -9 of the
# daemon with a background process still writing, rolling snapshots only on change and
# their retention, tokens, GC, and the bad-input cases (each a clear 4xx, nothing changed).
# Usage: test_durable.sh SPACED_BINARY   (space-init must sit next to it)
. "$(dirname "$0")/lib.sh" dur "${1:-}"

n_snaps() { api "http://x/v1/sessions/$1/snapshots" | jx 'req("snapshots") | length'; }
n_reason() { api "http://x/v1/sessions/$1/snapshots" | jx '[req("snapshots")[] | select(req("reason") == $r)] | length' --arg r "$2"; }
no_cgroup() { test -z "$(find /sys/fs/cgroup -maxdepth 4 -name "$1" 2>/dev/null)"; }
no_mount() { ! grep -q "$1" /proc/self/mountinfo; }

ROOT=$T/rootfs
make_rootfs "$ROOT"

start_daemon || exit 1
echo "# spaced $SPACED on $DATA"
api -X POST http://x/v1/templates -d "{\"name\":\"mini\",\"from_dir\":\"$ROOT\"}" >/dev/null
NEW='{"template":"mini","memory":"64M","snapshot_interval_ms":0}'

# ---- create: a token, the durable fields ----
R=$(api -X POST http://x/v1/sessions -d "$NEW")
A=$(echo "$R" | jget id)
TOK=$(echo "$R" | jget token)
UA=http://x/v1/sessions/$A
check "create answers a 43-character token" test "${#TOK}" = 43
check "a new session has no head snapshot and rolling off" test "$(echo "$R" | jget head_snapshot)/$(echo "$R" | jget snapshot_interval_ms)" = "null/0"
check "the token is not shown again" test "$(api "$UA" | jx 'has("token")')" = false

# ---- snapshots and the timeline ----
sh_in "$A" 'echo v1 > /root/draft.txt' >/dev/null
R=$(api -X POST "$UA/snapshots" -d '{"label":"first draft"}' -w '\n%{http_code}')
check "snapshot answers 201" test "$(echo "$R" | tail -n 1)" = 201
S1=$(echo "$R" | head -n 1 | jget id)
check "the snapshot has its label and reason" test "$(echo "$R" | head -n 1 | jget label)/$(echo "$R" | head -n 1 | jget reason)" = "first draft/manual"
sh_in "$A" 'echo v2 > /root/draft.txt; rm -f /bin/true' >/dev/null
S2=$(api -X POST "$UA/snapshots" | jget id)
sh_in "$A" 'echo v3 > /root/draft.txt; mkdir -p /root/d; echo x > /root/d/x' >/dev/null
S3=$(api -X POST "$UA/snapshots" -d '{"label":null}' | jget id)
check "the timeline lists three snapshots oldest first" test "$(api "$UA/snapshots" | jx '[req("snapshots")[] | req("id")] | join(",")')" = "$S1,$S2,$S3"
check "each snapshot names its parent" test "$(api "$UA/snapshots" | jget snapshots 1 parent)" = "$S1"
check "the head is the newest" test "$(api "$UA" | jget head_snapshot)" = "$S3"
LONG=$(printf '%0257d' 0 | tr 0 x)
check "a label over 256 bytes is 400" test "$(code -X POST "$UA/snapshots" -d "{\"label\":\"$LONG\"}")" = 400
check "... and made no snapshot" test "$(n_snaps "$A")" = 3

# ---- restore: time travel in place ----
R=$(api -X POST "$UA/restore" -d "{\"snapshot\":\"$S1\"}" -w '\n%{http_code}')
check "restore answers 200, running" test "$(echo "$R" | tail -n 1)/$(echo "$R" | head -n 1 | jget state)" = "200/running"
check "restore to the first shows the first contents" test "$(sh_in "$A" 'cat /root/draft.txt; ls /root')" = "v1
draft.txt"
check "a file deleted later is back (whiteout undone)" test "$(sh_in "$A" 'test -e /bin/true && echo yes')" = yes
api -X POST "$UA/restore" -d "{\"snapshot\":\"$S2\"}" >/dev/null
check "restore to the second: its deletion holds (whiteout restored)" test "$(sh_in "$A" 'cat /root/draft.txt; test -e /bin/true || echo deleted')" = "v2
deleted"
api -X POST "$UA/restore" -d "{\"snapshot\":\"$S3\"}" >/dev/null
check "restore to the third brings them back" test "$(sh_in "$A" 'cat /root/draft.txt /root/d/x')" = "v3
x"
check "newer snapshots stay; each restore is a record" test "$(n_snaps "$A")/$(n_reason "$A" restore)" = "6/3"

# ---- pause / resume ----
R=$(api "$UA")
SBX=$(echo "$R" | jget sandbox_id)
IPID=$(echo "$R" | jget init_pid)
sh_in "$A" 'echo unsnapshotted > /root/late.txt' >/dev/null
R=$(api -X POST "$UA/pause" -w '\n%{http_code}')
check "pause answers 200, paused, no sandbox" test "$(echo "$R" | tail -n 1)/$(echo "$R" | head -n 1 | jget state)/$(echo "$R" | head -n 1 | jget sandbox_id)" = "200/paused/null"
check "while paused no process of the session remains" gone "$IPID"
check "... no mount" no_mount "$SBX"
check "... no cgroup" no_cgroup "$SBX"
check "... no sandbox directory" test -z "$(ls "$L/sandboxes")"
check "pause of a paused session is 409" test "$(code -X POST "$UA/pause")" = 409
check "exec on a paused session is 409" test "$(code -X POST "$UA/exec" -d '{"argv":["true"]}')" = 409
NEV=$(api "$UA/events?limit=1000" | jx 'req("events") | length')
R=$(api -X POST "$UA/resume" -w '\n%{http_code}')
check "resume answers 200, running on a new sandbox" test "$(echo "$R" | tail -n 1)/$(echo "$R" | head -n 1 | jget state)" = "200/running"
check "after resume every file is there, the unsnapshotted one too" test "$(sh_in "$A" 'cat /root/draft.txt /root/late.txt')" = "v3
unsnapshotted"
check "the event log is whole (one more event: resumed)" test "$(api "$UA/events?limit=1000" | jx 'req("events") | "\(length) \(.[-3] | req("data") | .event)"')" = "$((NEV + 3)) resumed"
check "resume of a running session is 409" test "$(code -X POST "$UA/resume")" = 409
check "the log has the pause with its snapshot" test "$(api "$UA/events?limit=1000" | jx '[req("events")[] | req("data") | select(.event == "paused") | req("snapshot") != null]')" = "[true]"

# ---- resume reuses the paused sandbox's writable layer (the parked layer) ----
P=$(api -X POST http://x/v1/sessions -d "$NEW" | jget id)
UP=http://x/v1/sessions/$P
reused() { grep -c "$1: resume: reused parked layer" "$LOG"; }
sh_in "$P" 'mkdir -p /root/w && echo one > /root/w/a && echo two > /root/w/b && echo dddd > /root/w/d && rm /bin/true && for i in 1 2 3 4 5; do echo u > /root/w/u$i; done' >/dev/null
sleep 0.3 # older than the store's 20 ms racy window: the pause capture caches every entry
api -X POST "$UP/pause" >/dev/null
check "pause keeps the writable layer with a record of its snapshot" test -d "$L/parked/$P" -a "$(sed -n 2p "$L/parked/$P.rec")" = "$(api "$UP" | jget head_snapshot)"
api -X POST "$UP/resume" >/dev/null
check "resume reuses the parked layer" test "$(reused "$P")" = 1
check "... nothing stays parked" test ! -e "$L/parked/$P" -a ! -e "$L/parked/$P.rec"
check "... every file is there, the deletion too" test "$(sh_in "$P" 'cat /root/w/a /root/w/b /root/w/d; test -e /bin/true || echo deleted')" = "one
two
dddd
deleted"
sh_in "$P" 'echo changed > /root/w/a; rm /root/w/b; echo three > /root/w/c; echo DDDD > /root/w/d' >/dev/null
# Older than the store's racy window (as before the pause above): otherwise the capture's
# second, frozen pass reads the just-written files again and the count below depends on timing.
sleep 0.3
PS=$(api -X POST "$UP/snapshots" | jget id)
sh_in "$P" 'echo later > /root/w/a' >/dev/null
api -X POST "$UP/restore" -d "{\"snapshot\":\"$PS\"}" >/dev/null
check "a snapshot after the reuse has every change (same-size rewrite too)" test "$(sh_in "$P" 'cat /root/w/a /root/w/c /root/w/d; test -e /root/w/b || echo b-gone')" = "changed
three
DDDD
b-gone"
check "... and was incremental: the 3 written files read, not the 5 untouched (stat cache kept by the rename)" test "$(grep "$P: snapshot $PS " "$LOG" | grep -o '[0-9]* files read')" = "3 files read"
sh_in "$P" 'echo paused-again > /root/w/a' >/dev/null
api -X POST "$UP/pause" >/dev/null
api -X POST "$UP/restore" -d "{\"snapshot\":\"$PS\"}" >/dev/null
check "restore while paused drops the parked layer" test ! -e "$L/parked/$P" -a ! -e "$L/parked/$P.rec"
api -X POST "$UP/resume" >/dev/null
check "resume after it restores the snapshot instead (no reuse) with its files" test "$(reused "$P")/$(sh_in "$P" 'cat /root/w/a')" = "1/changed"
sh_in "$P" 'echo tampered-test > /root/w/a' >/dev/null
api -X POST "$UP/pause" >/dev/null
sed -i 2s/.*/snap_0000000000000000/ "$L/parked/$P.rec"
api -X POST "$UP/resume" >/dev/null
check "a record naming another snapshot: no reuse, the snapshot's files, nothing left parked" test "$(reused "$P")/$(sh_in "$P" 'cat /root/w/a')/$(ls "$L/parked" | grep -c "$P")" = "1/tampered-test/0"
api -X DELETE "$UP" >/dev/null

# ---- fork: independent copies ----
R=$(api -X POST "$UA/fork" -d "{\"snapshot\":\"$S1\",\"count\":2}" -w '\n%{http_code}')
check "fork answers 201 with two sessions" test "$(echo "$R" | tail -n 1)/$(echo "$R" | head -n 1 | jx 'req("sessions") | length')" = "201/2"
F1=$(echo "$R" | head -n 1 | jget sessions 0 id)
F2=$(echo "$R" | head -n 1 | jget sessions 1 id)
FT=$(echo "$R" | head -n 1 | jget sessions 0 token)
check "each fork has its own token" test "${#FT}" = 43
check "a fork names its parent and source" test "$(api "http://x/v1/sessions/$F1" | jget parent_session)/$(api "http://x/v1/sessions/$F1" | jget source_snapshot)" = "$A/$S1"
check "both forks start from the snapshot" test "$(sh_in "$F1" 'cat /root/draft.txt')/$(sh_in "$F2" 'cat /root/draft.txt')" = "v1/v1"
sh_in "$F1" 'echo fork one > /root/draft.txt' >/dev/null
sh_in "$F2" 'echo fork two > /root/draft.txt' >/dev/null
check "the forks are independent" test "$(sh_in "$F1" 'cat /root/draft.txt')/$(sh_in "$F2" 'cat /root/draft.txt')" = "fork one/fork two"
check "the parent is unchanged" test "$(sh_in "$A" 'cat /root/draft.txt')" = v3
R=$(api -X POST "$UA/fork" -w '\n%{http_code}')
F3=$(echo "$R" | head -n 1 | jget sessions 0 id)
check "fork without a snapshot takes one of now" test "$(echo "$R" | tail -n 1)/$(sh_in "$F3" 'cat /root/late.txt')" = "201/unsnapshotted"
check "the parent's log records the fork" test "$(api "$UA/events?limit=1000" | jx '[req("events")[] | select(req("data") | .event == "forked")] | length')" = 2
R=$(api -X POST http://x/v1/sessions -d "{\"snapshot\":\"$S2\",\"memory\":\"64M\",\"snapshot_interval_ms\":0}" -w '\n%{http_code}')
C1=$(echo "$R" | head -n 1 | jget id)
check "create from a snapshot starts from its files" test "$(echo "$R" | tail -n 1)/$(sh_in "$C1" 'cat /root/draft.txt')" = "201/v2"

# ---- crash recovery ----
sh_in "$A" 'echo in snapshot > /root/crash.txt' >/dev/null
SN=$(api -X POST "$UA/snapshots" | jget id)
sh_in "$A" 'echo after snapshot > /root/crash.txt; echo lost > /root/lost.txt' >/dev/null
IPID=$(api "$UA" | jget init_pid)
T0=$(date +%s%N)
kill -9 "$IPID"
# The recovery's speed (target < 1 s) is bench-sessions' to measure, beside a reference of
# the same run; a test on a loaded machine only judges that it happens by itself, within a
# deadline no working recovery misses (60 s), and prints how long it took.
BACK=no
DEADLINE=$(( $(date +%s) + 60 ))
while [ "$(date +%s)" -lt "$DEADLINE" ]; do
        R=$(api "$UA")
        if [ "$(echo "$R" | jget state)" = running ] && [ "$(echo "$R" | jget init_pid)" != "$IPID" ]; then BACK=yes; break; fi
        sleep 0.05
done
MS=$(( ($(date +%s%N) - T0) / 1000000 ))
check "a killed init: running again by itself (after $MS ms)" test "$BACK" = yes
check "... with the newest snapshot's files" test "$(sh_in "$A" 'cat /root/crash.txt; test -e /root/lost.txt || echo no-lost')" = "in snapshot
no-lost"
R=$(api "$UA/events?limit=1000" | jx '[req("events")[] | select(req("kind") == "recovery")] | last | req("data")
        | "\(req("from_snapshot")) \(req("lost_sandbox") != null) \(req("reason") | contains("signal 9"))"')
check "the log records the loss and the snapshot it came back from" test "$R" = "$SN true true"
check "recoveries counts it" test "$(api "$UA" | jget recoveries)" = 1

# ---- bad input: a clear 4xx and no change ----
SB=$(api -X POST "http://x/v1/sessions/$F2/snapshots" | jget id)
NA=$(n_snaps "$A")
HEAD=$(api "$UA" | jget head_snapshot)
check "restore to another session's snapshot is 404" test "$(code -X POST "$UA/restore" -d "{\"snapshot\":\"$SB\"}")" = 404
check "restore to an unknown snapshot is 404" test "$(code -X POST "$UA/restore" -d '{"snapshot":"snap_0000000000000000"}')" = 404
check "restore without a snapshot is 400" test "$(code -X POST "$UA/restore" -d '{}')" = 400
check "... nothing changed (head, timeline, files)" test "$(api "$UA" | jget head_snapshot)/$(n_snaps "$A")/$(sh_in "$A" 'cat /root/crash.txt')" = "$HEAD/$NA/in snapshot"
check "fork from another session's snapshot is 404" test "$(code -X POST "$UA/fork" -d "{\"snapshot\":\"$SB\"}")" = 404
check "fork count 65 is 400" test "$(code -X POST "$UA/fork" -d '{"count":65}')" = 400
check "fork count 0 is 400" test "$(code -X POST "$UA/fork" -d '{"count":0}')" = 400
check "wrong token on a session is 401" test "$(code -H 'X-Space-Session-Token: AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA' "$UA")" = 401
check "a wrong token's exec is 401 and runs nothing" test "$(code -H 'X-Space-Session-Token: nope' -X POST "$UA/exec" -d '{"argv":["sh","-c","echo bad > /root/crash.txt"]}')/$(sh_in "$A" 'cat /root/crash.txt')" = "401/in snapshot"
check "the right token is accepted" test "$(code -H "X-Space-Session-Token: $TOK" "$UA")" = 200
check "connect with a wrong token is 401" test "$(code -X POST "$UA/connect" -d '{"token":"wrong"}')" = 401
check "connect to an unknown session is 404" test "$(code -X POST http://x/v1/sessions/ses_0000000000000000/connect -d "{\"token\":\"$TOK\"}")" = 404
check "events limit 1001 is 400" test "$(code "$UA/events?limit=1001")" = 400
BIG="{\"kind\":\"note\",\"data\":\"$(printf '%070000d' 0 | tr 0 x)\"}"
check "an event over 64 KiB is 413" test "$(code -X POST "$UA/events" -d "$BIG")" = 413
check "an event of an unknown kind is 400" test "$(code -X POST "$UA/events" -d '{"kind":"lifecycle","data":{}}')" = 400
api -X DELETE "http://x/v1/sessions/$F2" >/dev/null
check "fork of a deleted session is 404" test "$(code -X POST "http://x/v1/sessions/$F2/fork")" = 404
check "a deleted session is 404" test "$(code "http://x/v1/sessions/$F2")" = 404
check "create from a deleted session's snapshot is 404" test "$(code -X POST http://x/v1/sessions -d "{\"snapshot\":\"$SB\"}")" = 404

# ---- the event log: agent events, paging ----
R=$(api -X POST "$UA/events" -d '{"kind":"tool_call","data":{"tool":"grep","args":["-r","x"]}}' -w '\n%{http_code}')
SEQ=$(echo "$R" | head -n 1 | jget seq)
check "an agent event is appended (201, seq)" test "$(echo "$R" | tail -n 1)/$((SEQ > 0))" = "201/1"
check "it reads back as written" test "$(api "$UA/events?after=$((SEQ - 1))&limit=1" | jget events 0 data tool)" = grep
P1=$(api "$UA/events?limit=5")
check "a page of 5 says there is more" test "$(echo "$P1" | jx '"\(req("events") | length) \(req("more")) \(req("next"))"')" = "5 true 5"
check "the next page starts after it" test "$(api "$UA/events?after=5&limit=1" | jget events 0 seq)" = 6
check "the last page says no more" test "$(api "$UA/events?after=$SEQ" | jx '"\(req("events") | length) \(req("more"))"')" = "0 false"

# ---- daemon restart: kill -9, sessions back, background output re-attachable ----
R=$(api -X POST "$UA/exec" -d '{"argv":["sh","-c","i=0; while true; do echo line $i; i=$((i+1)); sleep 0.1; done"],"background":true}')
BG=$(echo "$R" | jget pid)
sleep 0.5
OFF=$(api "$UA/processes/$BG/output?offset=0" | tail -n 1 | jget offset)
api -X POST "http://x/v1/sessions/$F1/pause" >/dev/null
mkdir -p "$L/parked/ses_stale0000000000" && touch "$L/parked/ses_stale0000000000.rec"
IPID=$(api "$UA" | jget init_pid)
kill -9 "$PID"
wait "$PID" 2>/dev/null
sleep 0.3
start_daemon || exit 1
check "after kill -9 and a restart the session runs on the same sandbox" test "$(wait_state "$A" running 20 && api "$UA" | jget init_pid)" = "$IPID"
check "a paused session stays paused" test "$(state_of "$F1")" = paused
check "the background process still runs" test "$(api "$UA/processes" | jx '[req("processes")[] | select(req("pid") == $bg) | req("running")] | .[0]' --argjson bg "$BG")" = true
R=$(api "$UA/processes/$BG/output?offset=$OFF")
check "its output re-attaches from the offset the client had" test "$(echo "$R" | head -n 1 | jget offset)/$(echo "$R" | sed -n 2p | jx 'req("data") | .[:5]')" = "$OFF/line "
R=$(api -X POST "$UA/connect" -d "{\"token\":\"$TOK\"}")
check "connect with the token lists the background process" test "$(echo "$R" | jx 'any(req("processes")[]; req("pid") == $bg and req("running"))' --argjson bg "$BG")" = true
check "every acknowledged snapshot is still listed" test "$(n_snaps "$A")" = "$NA"
check "a paused session resumes after the restart" test "$(api -X POST "http://x/v1/sessions/$F1/resume" | jget state)/$(sh_in "$F1" 'cat /root/draft.txt')" = "running/fork one"
check "... on its parked layer" test "$(reused "$F1")" = 1
check "a parked layer nobody holds is removed at the restart" test ! -e "$L/parked/ses_stale0000000000" -a ! -e "$L/parked/ses_stale0000000000.rec"

# ---- rolling snapshots: only on change, retention ----
R=$(api -X POST http://x/v1/sessions -d '{"template":"mini","memory":"64M","snapshot_interval_ms":1000,"retention":2}')
RL=$(echo "$R" | jget id)
sleep 2.5
check "no rolling snapshot while nothing changed" test "$(n_reason "$RL" rolling)" = 0
sh_in "$RL" 'echo a > /root/r.txt' >/dev/null
sleep 2.5
check "a change gets a rolling snapshot" test "$(n_reason "$RL" rolling)" = 1
sleep 1.5
check "... and only one while nothing changes again" test "$(n_reason "$RL" rolling)" = 1
for i in 1 2 3; do
        H=$(api "http://x/v1/sessions/$RL" | jget head_snapshot)
        sh_in "$RL" "echo $i > /root/r.txt" >/dev/null
        for _ in $(seq 40); do # a rolling check runs every interval (1 s) on the 1 s tick
                [ "$(api "http://x/v1/sessions/$RL" | jget head_snapshot)" != "$H" ] && break
                sleep 0.1
        done
done
check "retention keeps the last 2 rolling snapshots" test "$(n_reason "$RL" rolling)" = 2
check "the head holds the last change" test "$(api "http://x/v1/sessions/$RL/restore" -X POST -d "{\"snapshot\":\"$(api "http://x/v1/sessions/$RL" | jget head_snapshot)\"}" >/dev/null; sh_in "$RL" 'cat /root/r.txt')" = 3
check "the freeze time of a rolling snapshot is logged" grep -q "snapshot snap_.* (rolling).*frozen [0-9]* us" "$LOG"

# ---- delete and GC ----
R=$(api -X POST http://x/v1/gc -w '\n%{http_code}')
check "gc answers 200" test "$(echo "$R" | tail -n 1)" = 200
SBXC=$(api "http://x/v1/sessions/$C1" | jget sandbox_id)
check "delete answers 204" test "$(code -X DELETE "http://x/v1/sessions/$C1")" = 204
check "... its sandbox is gone" test ! -e "$L/sandboxes/$SBXC"
R=$(api -X POST http://x/v1/gc)
check "gc after deletes frees what only they held" test "$(echo "$R" | jget objects_removed)" -gt 0
check "the remaining sessions still restore their snapshots" test "$(api -X POST "$UA/restore" -d "{\"snapshot\":\"$S1\"}" | jget state)/$(sh_in "$A" 'cat /root/draft.txt')" = "running/v1"

# ---- SIGTERM: sandboxes stopped, sessions back on the next start ----
sh_in "$A" 'echo before stop > /root/stop.txt' >/dev/null
kill -TERM "$PID"
wait "$PID"
RC=$?
PID=
check "SIGTERM exits 0" test "$RC" = 0
check "SIGTERM left no sandbox and no mount" test -z "$(ls "$L/sandboxes")$(grep "$L/sandboxes" /proc/self/mountinfo)"
start_daemon || exit 1
check "after SIGTERM and a start the session runs with its last change" test "$(wait_state "$A" running 30 && sh_in "$A" 'cat /root/stop.txt')" = "before stop"
check "its log says it restarted" test "$(api "$UA/events?limit=1000" | jx 'req("events") | .[-3] | req("data") | .event')" = restarted

finish durable
