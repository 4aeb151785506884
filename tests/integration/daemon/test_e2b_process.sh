#!/bin/bash
# E2B's process service at the wire level (#16, docs/e2b.md "Processes", docs/e2b-wire.md
# §3.5-3.6): Connect RPC requests made with curl as E2B's SDK makes them (an envelope for
# a stream, JSON for a unary call), streams decoded by connect_decode.py once per response.
# Start's events (start first, base64 stdout/stderr, end with exitCode/exited/status, the
# end-stream and the chunked body's end), envs, cwd, the user, a process that outlives a
# stream closed early (List, Connect by pid and by tag), stdin through SendInput and
# CloseStdin, SIGKILL, a pty with input and a resize, Connect-Timeout-Ms as the process's
# lifetime, keepalives, and the errors. Root only; ~30 s.
# SPACE_E2B_PROCESS_RUNTIME=gvisor (or microvm) runs it on that runtime.
# Usage: test_e2b_process.sh SPACED_BINARY   (space-init next to it)
RT=${SPACE_E2B_PROCESS_RUNTIME:-ns}
. "$(dirname "$0")/lib.sh" "e2b-process-$RT" "${1:-}"
need_runtime "$RT"
command -v python3 >/dev/null || { echo "FAIL: python3 is missing"; exit 1; }
DEC="$(dirname "$0")/connect_decode.py"

ROOT=$T/rootfs
make_rootfs "$ROOT" "whoami stty pwd id"
# bash itself: the SDK's commands are /bin/bash -l -c CMD
cp -L "$(command -v bash)" "$ROOT/bin/bash.real" && rm -f "$ROOT/bin/bash" && mv "$ROOT/bin/bash.real" "$ROOT/bin/bash"
for lib in $(ldd "$(command -v bash)" 2>/dev/null | grep -o '/[^ ]*'); do
        mkdir -p "$ROOT$(dirname "$lib")"
        cp -L "$lib" "$ROOT$lib"
done
mkdir -p "$ROOT/home/user/sub"
chown -R 1000:1000 "$ROOT/home/user"
printf 'root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/sh\n' >"$ROOT/etc/passwd"
printf 'root:x:0:\nuser:x:1000:\n' >"$ROOT/etc/group"

start_daemon --e2b on || exit 1
api -X POST http://x/v1/templates -d "{\"name\":\"mini\",\"from_dir\":\"$ROOT\"}" >/dev/null
ID=$(api -X POST http://x/v1/sessions -d '{"template":"mini","runtime":"'$RT'","memory":"128M","snapshot_interval_ms":0,"env":{"SES_VAR":"s1"}}' | jget id)
check "a session" test "${ID:0:4}" = ses_
# The sandbox's envdAccessToken: base64url(HMAC-SHA256(DATA/e2b.key, "e2b-access-token:" ID)).
TOK=$(python3 -c 'import base64,hashlib,hmac,sys
k=open(sys.argv[1],"rb").read()
print(base64.urlsafe_b64encode(hmac.new(k,b"e2b-access-token:"+sys.argv[2].encode(),hashlib.sha256).digest()).decode().rstrip("="))' "$DATA/e2b.key" "$ID")
check "an access token" test ${#TOK} -eq 43

H=(-H "E2b-Sandbox-Id: $ID" -H "E2b-Sandbox-Port: 49983" -H "X-Access-Token: $TOK" -H "Connect-Protocol-Version: 1")
# envelope JSON > file: flags 0, 4-byte big-endian length, the JSON (bytes, not characters)
envelope() {
        local n
        n=$(printf '%s' "$1" | LC_ALL=C wc -c)
        printf "\\x00\\x$(printf %02x $((n >> 24 & 255)))\\x$(printf %02x $((n >> 16 & 255)))\\x$(printf %02x $((n >> 8 & 255)))\\x$(printf %02x $((n & 255)))"
        printf '%s' "$1"
}
# stream OUT METHOD JSON [CURL OPTIONS...]: a server-streaming call; the body in OUT, the
# head in OUT.h, curl's status in OUT.rc (0: the chunked body ended properly)
stream() {
        local out=$1 m=$2 j=$3
        shift 3
        envelope "$j" >"$out.req"
        curl -sS -N --unix-socket "$S" "${H[@]}" -H "Content-Type: application/connect+json" \
                -H "Keepalive-Ping-Interval: ${KA:-50}" -D "$out.h" --data-binary @"$out.req" "$@" \
                "http://x/process.Process/$m" >"$out" 2>"$out.err"
        echo $? >"$out.rc"
}
# stream_bg: the same in the background (its pid in SPID)
stream_bg() {
        stream "$@" &
        SPID=$!
}
# unary METHOD JSON [CURL OPTIONS...] -> "STATUS BODY"
unary() {
        local m=$1 j=$2
        shift 2
        curl -sS --unix-socket "$S" "${H[@]}" -H "Content-Type: application/json" -w ' %{http_code}' \
                -d "$j" "$@" "http://x/process.Process/$m" | tr -d '\n'
}
events() { "$DEC" "$1"; }
# has_events FILE: at least the start event is in, within 10 s; its pid in EPID
has_start() {
        for _ in $(seq 100); do
                EPID=$("$DEC" --partial "$1" 2>/dev/null | head -n 1 | jq -r '.event.start.pid // empty')
                [ -n "$EPID" ] && return 0
                sleep 0.1
        done
        return 1
}
# wait_out FILE KEY TEXT: the data of KEY holds TEXT within 10 s
wait_out() {
        for _ in $(seq 100); do
                "$DEC" --partial --data "$2" "$1" 2>/dev/null | grep -qF -- "$3" && return 0
                sleep 0.1
        done
        return 1
}
# ended FILE: the call's curl finished within 15 s
ended() {
        for _ in $(seq 150); do
                [ -s "$1.rc" ] && return 0
                sleep 0.1
        done
        return 1
}
run_json() { jq -nc --arg c "$1" '{process: {cmd: "/bin/bash", args: ["-l", "-c", $c]}, stdin: false}'; }

# ---- Start: events in order, base64 output, the end, the end-stream ----
stream "$T/s1" Start "$(run_json 'echo hi; echo err >&2; exit 3')" -H "Connect-Timeout-Ms: 60000"
events "$T/s1" >"$T/s1.ev" || bad "the stream decodes"
sed 's/^/# /' "$T/s1.ev"
check "Start: 200" grep -q '^HTTP/1.1 200' "$T/s1.h"
check "... application/connect+json" grep -qi '^Content-Type: application/connect+json' "$T/s1.h"
check "... a chunked body that ends properly (curl 0)" test "$(cat "$T/s1.rc")" = 0
check "... the start event first, with a pid" test "$(head -n 1 "$T/s1.ev" | jq -r '.event.start.pid > 0')" = true
check "... stdout hi (base64)" test "$("$DEC" --data stdout "$T/s1")" = hi
check "... stderr err" test "$("$DEC" --data stderr "$T/s1")" = err
check "... the end event: exitCode 3, exited, status and error" test \
        "$(grep '"end"' "$T/s1.ev" | jq -rc '.event.end | [.exitCode, .exited, .status, .error]')" = '[3,true,"exit status 3","exit status 3"]'
check "... then the end-stream {}" test "$(tail -n 1 "$T/s1.ev")" = 'END {}'
check "... the end event just before it" test "$(tail -n 2 "$T/s1.ev" | head -n 1 | jq -r '.event | keys[0]')" = end

# ---- envs, cwd, the session's env, the user ----
J=$(jq -nc '{process: {cmd: "/bin/bash", args: ["-l", "-c", "echo $FOO/$SES_VAR; pwd; whoami; echo $HOME"], envs: {FOO: "bar"}, cwd: "/tmp"}, stdin: false}')
stream "$T/s2" Start "$J"
check "envs and the session's env, cwd /tmp, the default user" test "$("$DEC" --data stdout "$T/s2" | tr '\n' ' ')" = "bar/s1 /tmp user /home/user "
J=$(jq -nc '{process: {cmd: "/bin/bash", args: ["-l", "-c", "pwd"], cwd: "sub"}, stdin: false}')
stream "$T/s3" Start "$J"
check "a relative cwd is the user's home's" test "$("$DEC" --data stdout "$T/s3")" = /home/user/sub
stream "$T/s4" Start "$(run_json 'pwd; whoami')"
check "no cwd: the user's home" test "$("$DEC" --data stdout "$T/s4" | tr '\n' ' ')" = "/home/user user "
stream "$T/s5" Start "$(run_json 'pwd; whoami')" -H "Authorization: Basic $(printf root: | base64)"
check "Authorization Basic root: root in /root" test "$("$DEC" --data stdout "$T/s5" | tr '\n' ' ')" = "/root root "
stream "$T/s6" Start "$(run_json 'true')" -H "Authorization: Basic $(printf nobody: | base64)"
check "an unknown user: 200 and an end-stream unauthenticated" test \
        "$(events "$T/s6" | sed -n 's/^END //p' | jq -r .error.code)/$(head -n1 "$T/s6.h" | cut -d' ' -f2)" = unauthenticated/200
J=$(jq -nc '{process: {cmd: "/bin/bash", args: ["-c", "true"], cwd: "/nope"}, stdin: false}')
stream "$T/s7" Start "$J"
check "a cwd that does not exist: invalid_argument" test "$(events "$T/s7" | sed -n 's/^END //p' | jq -r .error.code)" = invalid_argument
J=$(jq -nc '{process: {cmd: "/no/such/program"}, stdin: false}')
stream "$T/s8" Start "$J"
check "a program that cannot start: an error, no start event" test \
        "$(events "$T/s8" | wc -l)/$(events "$T/s8" | sed -n 's/^END //p' | jq -r '.error.code != null')" = 1/true
stream "$T/s9" Start '{"process":'
check "a malformed request: invalid_argument" test "$(events "$T/s9" | sed -n 's/^END //p' | jq -r .error.code)" = invalid_argument

# ---- a stream closed early: the process runs on; List; Connect by pid and by tag ----
J=$(jq -nc '{process: {cmd: "/bin/bash", args: ["-l", "-c", "echo one; sleep 6; echo two; exit 5"], envs: {K: "v"}, cwd: "/tmp"}, tag: "job-1", stdin: false}')
stream "$T/e1" Start "$J" --max-time 1
check "the early-closed Start got the first output" test "$("$DEC" --partial --data stdout "$T/e1")" = one
P1=$("$DEC" --partial "$T/e1" | head -n 1 | jq -r .event.start.pid)
L=$(unary List '{}')
echo "# List: $L"
check "List: 200 and the process, running on" test "$(jq -r --argjson p "$P1" '[.processes[] | select(.pid == $p)] | length' <<<"${L% *}")/${L##* }" = 1/200
check "... its config (the request's envs, not the session's), its tag" test \
        "$(jq -rc --argjson p "$P1" '.processes[] | select(.pid == $p) | [.config.cmd, .config.args[2], .config.envs, .config.cwd, .tag]' <<<"${L% *}")" \
        = '["/bin/bash","echo one; sleep 6; echo two; exit 5",{"K":"v"},"/tmp","job-1"]'
stream_bg "$T/c1" Connect "{\"process\":{\"pid\":$P1}}"
stream_bg "$T/c2" Connect '{"process":{"tag":"job-1"}}'
check "Connect by pid: the start event" has_start "$T/c1"
check "... of that pid" test "$EPID" = "$P1"
check "Connect by tag: the start event of the same pid" has_start "$T/c2"
[ -n "$EPID" ] || { echo "# Connect by tag got:"; "$DEC" --partial "$T/c2" | sed 's/^/#   /'; }
check "... of that pid" test "$EPID" = "$P1"
check "Connect by pid ends" ended "$T/c1"
check "Connect by tag ends" ended "$T/c2"
check "... the later output only, and the end (exitCode 5)" test \
        "$("$DEC" --data stdout "$T/c1")/$(events "$T/c1" | grep '"end"' | jq -r .event.end.exitCode)/$(events "$T/c1" | tail -n1)" = "two/5/END {}"
check "... the same by tag" test "$("$DEC" --data stdout "$T/c2")/$(events "$T/c2" | tail -n1)" = "two/END {}"
L=$(unary List '{}')
check "List: an ended process is not listed" test "$(jq -r --argjson p "$P1" '[.processes[] | select(.pid == $p)] | length' <<<"${L% *}")" = 0
stream "$T/c3" Connect "{\"process\":{\"pid\":$P1}}"
check "Connect to an ended process: not_found" test "$(events "$T/c3" | sed -n 's/^END //p' | jq -r .error.code)" = not_found
stream "$T/c4" Connect '{"process":{"pid":999999}}'
check "Connect to an unknown pid: 200, not_found in the end-stream" test \
        "$(events "$T/c4" | sed -n 's/^END //p' | jq -r .error.code)/$(head -n1 "$T/c4.h" | cut -d' ' -f2)" = not_found/200
stream "$T/c5" Connect '{"process":{"tag":"no-such-tag"}}'
check "Connect to an unknown tag: not_found" test "$(events "$T/c5" | sed -n 's/^END //p' | jq -r .error.code)" = not_found

# ---- stdin: SendInput to cat, CloseStdin ends it ----
stream_bg "$T/i1" Start '{"process":{"cmd":"cat"},"stdin":true}'
check "cat with stdin: started" has_start "$T/i1"
P2=$EPID
R=$(unary SendInput "{\"process\":{\"pid\":$P2},\"input\":{\"stdin\":\"$(printf 'hello\n' | base64)\"}}")
check "SendInput: 200 {}" test "$R" = "{} 200"
check "... cat echoes it on the Start stream" wait_out "$T/i1" stdout hello
# a big input, over one op's chunk: all of it arrives, in order
head -c 300000 /dev/zero | tr '\0' 'x' >"$T/big"
jq -nc --argjson p "$P2" --rawfile d "$T/big" '{process: {pid: $p}, input: {stdin: ($d | @base64)}}' >"$T/big.json"
R=$(unary SendInput @"$T/big.json")
check "SendInput of 300,000 bytes: 200" test "$R" = "{} 200"
R=$(unary CloseStdin "{\"process\":{\"pid\":$P2}}")
check "CloseStdin: 200 {}" test "$R" = "{} 200"
check "... cat ends" ended "$T/i1"
check "... with exitCode 0 and all of its input" test \
        "$(events "$T/i1" | grep '"end"' | jq -r .event.end.exitCode)/$("$DEC" --data stdout "$T/i1" | wc -c)" = "0/300006"
R=$(unary SendInput "{\"process\":{\"pid\":$P2},\"input\":{\"stdin\":\"eA==\"}}")
check "SendInput to an ended process: 404 not_found" test "$(jq -r .code <<<"${R% *}")/${R##* }" = not_found/404
stream_bg "$T/i2" Start "$(run_json 'sleep 5')"
check "a command without stdin: started" has_start "$T/i2"
R=$(unary SendInput "{\"process\":{\"pid\":$EPID},\"input\":{\"stdin\":\"eA==\"}}")
check "SendInput to it: failed_precondition" test "$(jq -r .code <<<"${R% *}")" = failed_precondition

# ---- SendSignal SIGKILL ----
P3=$EPID
R=$(unary SendSignal "{\"process\":{\"pid\":$P3},\"signal\":\"SIGNAL_SIGKILL\"}")
check "SendSignal SIGKILL: 200 {}" test "$R" = "{} 200"
check "... its Start stream ends" ended "$T/i2"
check "... end exitCode -1, not exited, signal: killed" test \
        "$(events "$T/i2" | grep '"end"' | jq -rc '.event.end | [.exitCode, .exited, .status]')" = '[-1,false,"signal: killed"]'
stream_bg "$T/i3" Start "$(jq -nc '{process: {cmd: "/bin/bash", args: ["-l", "-c", "sleep 30"]}, tag: "term-me", stdin: false}')"
check "a tagged sleep: started" has_start "$T/i3"
R=$(unary SendSignal '{"process":{"tag":"term-me"},"signal":15}')
check "SendSignal by tag, the signal as its number (15): 200 {}" test "$R" = "{} 200"
check "... its stream ends: signal: terminated" test \
        "$(ended "$T/i3" && events "$T/i3" | grep '"end"' | jq -rc '.event.end | [.exitCode, .status]')" = '[-1,"signal: terminated"]'
R=$(unary SendSignal '{"process":{"tag":"term-me"},"signal":"SIGNAL_SIGKILL"}')
check "... by tag again, now it has ended: not_found" test "$(jq -r .code <<<"${R% *}")/${R##* }" = not_found/404
R=$(unary SendSignal '{"process":{"pid":999999},"signal":"SIGNAL_SIGKILL"}')
check "SendSignal to an unknown pid: 404 not_found" test "$(jq -r .code <<<"${R% *}")/${R##* }" = not_found/404
R=$(unary SendSignal '{"process":{"pid":1},"signal":"SIGNAL_SIGHUP"}')
check "... an unknown signal: invalid_argument" test "$(jq -r .code <<<"${R% *}")" = invalid_argument

# bounds: what a process has not read (1 MiB in space-init) and the tag
stream_bg "$T/i4" Start '{"process":{"cmd":"sleep","args":["30"]},"stdin":true}'
check "a command that reads nothing of its stdin: started" has_start "$T/i4"
head -c 700000 /dev/zero | tr '\0' 'y' >"$T/big2"
jq -nc --argjson p "$EPID" --rawfile d "$T/big2" '{process: {pid: $p}, input: {stdin: ($d | @base64)}}' >"$T/big2.json"
R1=$(unary SendInput @"$T/big2.json")
R2=$(unary SendInput @"$T/big2.json")
check "SendInput past what it may hold unread: the first 200, then resource_exhausted" test \
        "${R1##* }/$(jq -r .code <<<"${R2% *}")" = 200/resource_exhausted
R=$(unary SendSignal "{\"process\":{\"pid\":$EPID},\"signal\":\"SIGNAL_SIGKILL\"}")
check "... killed" test "$R" = "{} 200"
stream "$T/s10" Start "$(jq -nc --arg t "$(head -c 257 /dev/zero | tr '\0' t)" '{process: {cmd: "true"}, tag: $t, stdin: false}')"
check "a tag over 256 bytes: invalid_argument" test "$(events "$T/s10" | sed -n 's/^END //p' | jq -r .error.code)" = invalid_argument
# a burst of output bigger than the background ring: the stream keeps up and loses nothing
stream "$T/o1" Start "$(run_json 'head -c 3000000 /dev/zero | tr "\\0" a')"
"$DEC" --data stdout "$T/o1" | wc -c | sed 's/^/# output bytes: /'
events "$T/o1" | tail -n 2 | cut -c1-200 | sed 's/^/# /'
check "3,000,000 bytes of output arrive whole" test "$("$DEC" --data stdout "$T/o1" | tr -d a | wc -c)/$("$DEC" --data stdout "$T/o1" | wc -c)" = 0/3000000

# ---- a pty: output as pty data, input, a resize ----
J=$(jq -nc '{process: {cmd: "/bin/bash", args: ["-c", "stty size; read x; stty size; echo got-$x"], envs: {TERM: "xterm-256color"}}, pty: {size: {cols: 80, rows: 24}}}')
stream_bg "$T/p1" Start "$J"
check "pty: started" has_start "$T/p1"
P4=$EPID
check "... its size 24 80, as pty data" wait_out "$T/p1" pty "24 80"
R=$(unary Update "{\"process\":{\"pid\":$P4},\"pty\":{\"size\":{\"cols\":100,\"rows\":30}}}")
check "Update (resize): 200 {}" test "$R" = "{} 200"
R=$(unary SendInput "{\"process\":{\"pid\":$P4},\"input\":{\"pty\":\"$(printf 'go\n' | base64)\"}}")
check "SendInput to the pty: 200" test "$R" = "{} 200"
check "... the new size 30 100" wait_out "$T/p1" pty "30 100"
check "... and the line typed" wait_out "$T/p1" pty "got-go"
check "... the stream ends" ended "$T/p1"
check "... with no stdout or stderr data (a terminal has one stream)" test -z "$("$DEC" --data stdout "$T/p1")$("$DEC" --data stderr "$T/p1")"
R=$(unary Update '{"process":{"pid":999999},"pty":{"size":{"cols":10,"rows":10}}}')
check "Update of an unknown pid: not_found" test "$(jq -r .code <<<"${R% *}")" = not_found

# ---- Connect-Timeout-Ms is the process's lifetime ----
stream "$T/t1" Start "$(run_json 'echo a; sleep 30')" -H "Connect-Timeout-Ms: 1500" --max-time 15
check "Connect-Timeout-Ms 1500: the stream ends" test "$(cat "$T/t1.rc")" = 0
check "... the process killed (signal: killed)" test "$(events "$T/t1" | grep '"end"' | jq -r .event.end.status)" = "signal: killed"
check "... the end-stream deadline_exceeded" test "$(events "$T/t1" | sed -n 's/^END //p' | jq -r .error.code)" = deadline_exceeded
stream "$T/t2" Start "$(jq -nc '{process: {cmd: "/bin/bash", args: ["-l", "-c", "sleep 30"]}, tag: "short", stdin: false}')" \
        -H "Connect-Timeout-Ms: 1500" --max-time 0.5
L=$(unary List '{}')
check "... with nobody connected: listed at first" test "$(jq -r '[.processes[] | select(.tag == "short")] | length' <<<"${L% *}")" = 1
sleep 2
L=$(unary List '{}')
check "... killed at its deadline all the same" test "$(jq -r '[.processes[] | select(.tag == "short")] | length' <<<"${L% *}")" = 0
stream "$T/t4" Start "$(jq -nc '{process: {cmd: "/bin/bash", args: ["-l", "-c", "sleep 20"]}, tag: "long", stdin: false}')" --max-time 0.5
stream "$T/t5" Connect '{"process":{"tag":"long"}}' -H "Connect-Timeout-Ms: 1000" --max-time 10
check "Connect's Connect-Timeout-Ms ends only its stream: the start event, then deadline_exceeded" test \
        "$(events "$T/t5" | head -n 1 | jq -r '.event | keys[0]')/$(events "$T/t5" | sed -n 's/^END //p' | jq -r .error.code)" = start/deadline_exceeded
L=$(unary List '{}')
check "... the process runs on" test "$(jq -r '[.processes[] | select(.tag == "long")] | length' <<<"${L% *}")" = 1
R=$(unary SendSignal '{"process":{"tag":"long"},"signal":"SIGNAL_SIGKILL"}')
check "... until killed" test "$R" = "{} 200"
stream "$T/t3" Start "$(run_json 'sleep 0.3')" -H "Connect-Timeout-Ms: abc"
check "a bad Connect-Timeout-Ms: invalid_argument" test "$(events "$T/t3" | sed -n 's/^END //p' | jq -r .error.code)" = invalid_argument

# ---- keepalives on a silent stream, never before the start event ----
KA=1 stream "$T/k1" Start "$(run_json 'sleep 2.5; echo x')"
events "$T/k1" >"$T/k1.ev"
check "keepalives while silent (Keepalive-Ping-Interval: 1)" test "$(grep -c '"keepalive"' "$T/k1.ev")" -ge 1
check "... the start event first all the same" test "$(head -n 1 "$T/k1.ev" | jq -r '.event | keys[0]')" = start

# ---- the data plane's other guards ----
R=$(curl -sS --unix-socket "$S" -H "E2b-Sandbox-Id: $ID" -H "X-Access-Token: wrong" -H "Content-Type: application/json" \
        -w ' %{http_code}' -d '{}' http://x/process.Process/List)
check "List with a wrong access token: 401" test "${R##* }" = 401

ps_left=$(unary List '{}')
echo "# left running: $(jq -c '[.processes[].pid]' <<<"${ps_left% *}")"
finish "e2b process ($RT)"
