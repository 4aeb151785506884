#!/bin/bash
# Integration test of spaced: starts the real daemon on a temporary data directory with a
# tiny template (static busybox, or host binaries with their libraries), then drives the
# API with curl over the Unix socket: sessions, exec, stdin, files, background processes,
# client disconnects, a killed init (recovered), deletion, re-attach after kill -9 of the
# daemon and SIGTERM. The durable lifecycle (snapshots, pause, fork, ...) is
# test_durable.sh.
# Usage: test_daemon.sh SPACED_BINARY   (space-init must sit next to it)
. "$(dirname "$0")/lib.sh" it "${1:-}"

last_event() { tail -n 1; }

ROOT=$T/rootfs
make_rootfs "$ROOT"

start_daemon || exit 1
echo "# spaced $SPACED on $DATA"

H=$(api http://x/v1/health)
check "health answers ok" test "$(echo "$H" | jget status)" = ok

R=$(api -X POST http://x/v1/templates -d "{\"name\":\"mini\",\"from_dir\":\"$ROOT\"}")
check "template build streams progress then done" test "$(echo "$R" | last_event | jget type)" = done
check "template list has it" test "$(api http://x/v1/templates | jget templates 0 name)" = mini
R=$(api -X POST http://x/v1/templates -d "{\"name\":\"mini\",\"from_dir\":\"$ROOT\"}" -o /dev/null -w '%{http_code}')
check "building an existing template is 409" test "$R" = 409

SES=$(api -X POST http://x/v1/sessions -d '{"template":"mini","memory":"64M","pids":64}' -D "$T/create.head" -w '\n%{http_code}')
CODE=$(echo "$SES" | tail -n 1)
SES=$(echo "$SES" | head -n 1)
check "create answers 201" test "$CODE" = 201
# where its time went (docs/api.md "Server-Timing"): every phase, the sandbox made (no pool)
check "... with a Server-Timing of its phases, the sandbox made" grep -qiE \
        '^Server-Timing: session;dur=[0-9.]+, sandbox;dur=[0-9.]+;desc="made", hello;dur=[0-9.]+, commit;dur=[0-9.]+, total;dur=[0-9.]+' \
        "$T/create.head"
ID=$(echo "$SES" | jget id)
SBX=$(echo "$SES" | jget sandbox_id)
IPID=$(echo "$SES" | jget init_pid)
U=http://x/v1/sessions/$ID
check "session is running with its limits" test "$(echo "$SES" | jget state)/$(echo "$SES" | jget limits memory)/$(echo "$SES" | jget limits pids)" = "running/67108864/64"
check "session is listed" test "$(api http://x/v1/sessions | jget sessions 0 id)" = "$ID"

E=$(api -X POST "$U/exec" -d '{"argv":["sh","-c","echo hello; echo oops >&2; exit 3"]}')
check "exec streams stdout" test "$(echo "$E" | stdout_of)" = hello
check "exec streams stderr separately" test "$(echo "$E" | grep '"stderr"' | jget data)" = oops
check "exec ends with exit code 3" test "$(echo "$E" | last_event | jget exit_code)" = 3
check "exec starts with the pid" test "$(echo "$E" | head -n 1 | jget type)" = start
E=$(api -X POST "$U/exec" -d '{"argv":["cat"],"stdin":"from stdin\n"}')
check "stdin reaches the command" test "$(echo "$E" | stdout_of)" = "from stdin"
E=$(api -X POST "$U/exec" -d '{"argv":["cat"],"stdin_b64":"AAEC/w=="}')
check "binary output comes as data_b64" test "$(echo "$E" | grep stdout | jget data_b64)" = "AAEC/w=="
E=$(api -X POST "$U/exec" -d '{"argv":["sh","-c","echo $FOO $PWD"],"env":{"FOO":"bar"},"cwd":"/tmp"}')
check "env and cwd apply" test "$(echo "$E" | stdout_of)" = "bar /tmp"
E=$(api -X POST "$U/exec" -d '{"argv":["no-such-command"]}' -w '\n%{http_code}')
check "a missing command is 422 exec_failed" test "$(echo "$E" | tail -n 1)/$(echo "$E" | head -n 1 | jget error code)" = "422/exec_failed"
E=$(api -X POST "$U/exec" -d '{"argv":["sleep","5"],"timeout_ms":200}')
check "timeout kills with signal 9" test "$(echo "$E" | last_event | jget signal)/$(echo "$E" | last_event | jget timed_out)" = "9/true"
E=$(api -X POST "$U/exec" -d '{"argv":[]}' -o /dev/null -w '%{http_code}')
check "empty argv is 400" test "$E" = 400

R=$(api -X PUT "$U/files?path=/root/a.txt" --data-binary 'written by the API' -w '\n%{http_code}')
check "upload answers 201 with the size" test "$(echo "$R" | tail -n 1)/$(echo "$R" | head -n 1 | jget written)" = "201/18"
E=$(api -X POST "$U/exec" -d '{"argv":["cat","/root/a.txt"]}')
check "a command reads the uploaded file" test "$(echo "$E" | stdout_of)" = "written by the API"
api -X POST "$U/exec" -d '{"argv":["sh","-c","echo made inside > /root/b.txt"]}' >/dev/null
check "the API reads a file a command wrote" test "$(api "$U/files?path=/root/b.txt")" = "made inside"
head -c 20000000 /dev/urandom >"$T/big"
R=$(api -X PUT "$U/files?path=/tmp/big&mode=0600" -T "$T/big" -o /dev/null -w '%{http_code}')
api "$U/files?path=/tmp/big" -o "$T/big.back"
check "a 20 MB upload comes back identical" cmp -s "$T/big" "$T/big.back"
check "mode applies" test "$(api "$U/files/stat?path=/tmp/big" | jget mode)" = $((0100600))
check "list shows the files" test "$(api "$U/files/list?path=/root" | jx '[req("entries")[] | req("name")] | join(",")')" = "a.txt,b.txt"
R=$(api -X POST "$U/files/mkdir" -d '{"path":"/root/d/e","parents":true}' -o /dev/null -w '%{http_code}')
check "mkdir -p answers 201" test "$R" = 201
check "stat of the dir says dir" test "$(api "$U/files/stat?path=/root/d/e" | jget type)" = dir
R=$(api -X DELETE "$U/files?path=/root/d&recursive=1" -o /dev/null -w '%{http_code}')
check "recursive delete answers 204" test "$R" = 204
R=$(api "$U/files?path=/root/nope" -o /dev/null -w '%{http_code}')
check "a missing file is 404" test "$R" = 404
R=$(api "$U/files?path=/../../../etc/shadow" -o /dev/null -w '%{http_code}')
check "a path can't leave the sandbox root" test "$R" = 404
R=$(api "$U/files" -o /dev/null -w '%{http_code}')
check "a missing path parameter is 400" test "$R" = 400

R=$(api -X POST "$U/exec" -d '{"argv":["sh","-c","echo one; sleep 0.3; echo two"],"background":true}' -w '\n%{http_code}')
BG=$(echo "$R" | head -n 1 | jget pid)
check "background exec answers 201 with a pid" test "$(echo "$R" | tail -n 1)" = 201
O=$(api "$U/processes/$BG/output?offset=0&follow=1")
check "re-attach with follow replays and follows to exit" test "$(echo "$O" | stdout_of | tr '\n' ' ')/$(echo "$O" | last_event | jget exit_code)" = "one two /0"
O=$(api "$U/processes/$BG/output?offset=4")
check "re-attach from an offset" test "$(echo "$O" | stdout_of)" = "two"
check "ps lists the background process" test "$(api "$U/processes" | jget processes 0 pid)" = "$BG"
R=$(api -X POST "$U/exec" -d '{"argv":["sleep","60"],"background":true}' | jget pid)
api -X POST "$U/processes/$R/signal" -d '{"signal":9}' >/dev/null
sleep 0.2
check "signal kills a background process" test "$(api "$U/processes" | jx '[req("processes")[] | select(req("pid") == $p) | req("signal")] | .[0]' --argjson p "$R")" = 9

# A client that goes away during a foreground exec: its process group is killed.
printf 'for f in /proc/[0-9]*/cmdline; do cat $f; echo; done | tr "\\000" " " | grep -c "slee[p] 61"\n' >"$T/count.sh"
api -X PUT "$U/files?path=/root/count.sh" -T "$T/count.sh" >/dev/null
timeout 1 curl -sS --unix-socket "$S" -X POST "$U/exec" -d '{"argv":["sh","-c","echo up; sleep 61; echo never"]}' >/dev/null 2>&1
sleep 0.5
N=$(api -X POST "$U/exec" -d '{"argv":["sh","/root/count.sh"]}' | stdout_of)
check "a disconnected client's command is killed (processes left: $N)" test "$N" = 0

# A slow reader: the daemon must not buffer the whole output.
api --limit-rate 1M -X POST "$U/exec" -d '{"argv":["sh","-c","yes | head -c 4000000"]}' -o "$T/slow"
check "a slow reader gets all of a 4 MB output" test "$(stdout_of <"$T/slow" | wc -c)" = 4000000

# The memory limit kills a hog; the session lives on.
E=$(api -X POST "$U/exec" -d '{"argv":["sh","-c","x=$(yes | head -c 300000000); echo survived"]}')
check "a memory hog is killed with signal 9" test "$(echo "$E" | last_event | jget signal)" = 9
check "health shows oom_killed" test "$(api "$U" | jget health oom_killed)" = true
check "the session still runs commands" test "$(api -X POST "$U/exec" -d '{"argv":["echo","alive"]}' | stdout_of)" = alive

# space-init killed: requests in flight fail with 503, the session recovers by itself.
SES2=$(api -X POST http://x/v1/sessions -d '{"template":"mini"}')
ID2=$(echo "$SES2" | jget id)
(api -X POST "http://x/v1/sessions/$ID2/exec" -d '{"argv":["sleep","60"]}' >"$T/dying" 2>&1) &
sleep 0.3
kill -9 "$(echo "$SES2" | jget init_pid)"
wait $!
check "an exec in flight ends with an error event" test "$(last_event <"$T/dying" | jget type)" = error
for _ in $(seq 40); do
        [ "$(api "http://x/v1/sessions/$ID2" | jget state)" = running ] && break
        sleep 0.05
done
check "the session runs again after its init was killed" test "$(api "http://x/v1/sessions/$ID2" | jget state)/$(api "http://x/v1/sessions/$ID2" | jget recoveries)" = running/1
R=$(api -X POST "http://x/v1/sessions/$ID2/exec" -d '{"argv":["echo","back"]}' | stdout_of)
check "exec works on the recovered session" test "$R" = back
check "the daemon is alive" test "$(api http://x/v1/health | jget status)" = ok
R=$(api -X DELETE "http://x/v1/sessions/$ID2" -o /dev/null -w '%{http_code}')
check "a recovered session can be deleted" test "$R" = 204

# Pipelining across asynchronous answers: a list (answered by init), an exec stream and
# the deletion of another session, written at once, answered in order.
SES4=$(api -X POST http://x/v1/sessions -d '{"template":"mini"}' | jget id)
# All four written at once (socat, not closing its sending side), the answers read until
# the daemon closes the connection after the last (Connection: close) within 20 s.
BODY='{"argv":["echo","piped"]}'
printf 'GET /v1/sessions/%s/files/list?path=/root HTTP/1.1\r\n\r\nPOST /v1/sessions/%s/exec HTTP/1.1\r\nContent-Length: %d\r\n\r\n%sDELETE /v1/sessions/%s HTTP/1.1\r\n\r\nGET /v1/health HTTP/1.1\r\nConnection: close\r\n\r\n' \
        "$ID" "$ID" "${#BODY}" "$BODY" "$SES4" | timeout 20 socat -t 30 - UNIX-CONNECT:"$S",shut-none >"$T/piped"
PRC=$?
R="$(grep -ao 'HTTP/1\.1 [0-9][0-9][0-9] ' "$T/piped" | cut -c10-12 | paste -sd,)/$(grep -qaF '"data":"piped\n"' "$T/piped" && echo piped || echo no-output)"
[ "$PRC" = 0 ] || R="$R, socat exit $PRC (no close)"
check "pipelined requests are answered in order ($R)" test "$R" = "200,200,204,200/piped"
check "the pipelined delete happened" test "$(api "http://x/v1/sessions/$SES4" -o /dev/null -w '%{http_code}')" = 404

R=$(api -X DELETE http://x/v1/templates/mini -o /dev/null -w '%{http_code}')
check "a template in use can't be removed (409)" test "$R" = 409
R=$(api -X DELETE "$U" -o /dev/null -w '%{http_code}')
check "delete answers 204" test "$R" = 204
R=$(api "$U" -o /dev/null -w '%{http_code}')
check "a deleted session is 404" test "$R" = 404
check "no sandbox directory is left" test -z "$(ls "$L/sandboxes")"
check "no overlay mount is left" test -z "$(grep "$L/sandboxes" /proc/self/mountinfo)"
check "init of the deleted session is gone" gone "$IPID"

# kill -9 of the daemon leaves the sandbox running; the next start re-attaches it.
SES3=$(api -X POST http://x/v1/sessions -d '{"template":"mini"}')
ID3=$(echo "$SES3" | jget id)
IPID3=$(echo "$SES3" | jget init_pid)
kill -9 "$PID"
wait "$PID" 2>/dev/null
start_daemon || exit 1
for _ in $(seq 40); do
        [ "$(api "http://x/v1/sessions/$ID3" | jget state)" = running ] && break
        sleep 0.05
done
check "a restarted daemon re-attached the sandbox (same init)" test "$(api "http://x/v1/sessions/$ID3" | jget init_pid)" = "$IPID3"
R=$(api -X POST "http://x/v1/sessions/$ID3/exec" -d '{"argv":["echo","still here"]}' | stdout_of)
check "... and it runs commands" test "$R" = "still here"
check "... and only its sandbox is on disk" test "$(ls "$L/sandboxes")" = "$(api "http://x/v1/sessions/$ID3" | jget sandbox_id)"

# SIGTERM stops every sandbox (the sessions stay, for the next start).
for _ in 1 2 3; do api -X POST http://x/v1/sessions -d '{"template":"mini"}' >/dev/null; done
check "four sessions run" test "$(api http://x/v1/health | jget sessions)" = 4
kill -TERM "$PID"
wait "$PID"
RC=$?
PID=
check "SIGTERM exits 0" test "$RC" = 0
check "SIGTERM removed every sandbox" test -z "$(ls "$L/sandboxes")"
check "SIGTERM left no mounts" test -z "$(grep "$L/sandboxes" /proc/self/mountinfo)"
check "the socket is removed" test ! -e "$S"

finish daemon
