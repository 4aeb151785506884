#!/bin/bash
# Terminals (#15 item 1, docs/api.md "Terminals"): POST .../terminals starts a shell on a
# pseudo-terminal of the sandbox; the WebSocket of .../terminals/{pid}, spoken by ws-probe
# (RFC 6455 apart from libspace), carries typing and output, resizes it (stty size), replays
# the recent screen to a new connection, answers pings, ends with the exit frame and a
# close; protocol errors (an unmasked frame, a frame over 1 MiB) close with 1002 and 1009;
# bad requests are 400/404/426; at most 16 terminals; `space exec -t` gives the exit code.
# The same terminal on gvisor and microvm when runsc and the guest kernel are there.
# Root only; ~40 s.
# Usage: test_terminals.sh SPACED_BINARY   (space-init, space and ws-probe next to it)
. "$(dirname "$0")/lib.sh" terminals "${1:-}"
PROBE=$BIN/ws-probe
SPACE=$BIN/space
[ -x "$PROBE" ] && [ -x "$SPACE" ] || { echo "FAIL: ws-probe or space is not built"; exit 1; }

ROOT=$T/rootfs
make_rootfs "$ROOT"
for c in stty tty; do
        if [ -L "$ROOT/bin/sh" ]; then
                ln -s busybox "$ROOT/bin/$c"
        else
                cp -L "$(command -v $c)" "$ROOT/bin/$c"
        fi
done

# microVMs, when the guest kernel is built (scripts/build-guest); their images go to a
# private guest dir, removed with $T.
GUEST_CACHE=${SPACE_GUEST_DIR:-/var/cache/space/guest}
GUEST=
if [ -e "$GUEST_CACHE/vmlinux" ]; then
        GUEST=$T/guest
        export SPACE_GUEST_DIR=$GUEST
        mkdir -p "$GUEST"
        ln -s "$GUEST_CACHE/vmlinux" "$GUEST/vmlinux"
        ln -s "$GUEST_CACHE/modules" "$GUEST/modules"
fi

start_daemon || exit 1
api -X POST http://x/v1/templates -d "{\"name\":\"mini\",\"from_dir\":\"$ROOT\"}" >/dev/null
A=$(api -X POST http://x/v1/sessions -d '{"template":"mini","memory":"64M","snapshot_interval_ms":0}' | jget id)
check "a session" test "${A:0:4}" = ses_
U=http://x/v1/sessions/$A/terminals
probe() { timeout 30 "$PROBE" "$S" "$@"; }

# ---- start, type, resize, replay, exit ----
P=$(api -X POST "$U" -d '{"cmd":["sh"],"rows":33,"cols":77,"env":{"MARK":"m1"}}' | jget pid)
check "POST terminals answers a pid" test "$P" -gt 0
L=$(api "$U")
check "GET terminals lists it, running, as a terminal" \
        test "$(jx '[req("terminals")[] | select(.pid == '"$P"') | .running and .tty] | .[0]' <<<"$L")" = true

OUT=$(probe "/v1/sessions/$A/terminals/$P" \
        'send:test -t 0 && test -t 1 && echo TTY_$((40+2)) $MARK $TERM; stty size
' wait:'TTY_42 m1 xterm-256color' 'wait:33 77' \
        ping:hello \
        'text:{"type":"resize","rows":50,"cols":132}' 'send:stty size
' 'wait:50 132' \
        'send:sleep 100; echo AFTER_$((5+5))
' sleep:300 'send:'$'\x03' 'send:echo INT_$((2+3))
' wait:INT_5 'send:stat -c DEV_%d_%t:%T $(tty) /dev/null; echo DONE_$((1+1))
' wait:DONE_2 dump close 2>&1)
R=$?
# the terminal's device: on a devpts of the sandbox's own, not the host's /dev/pts
SBX_DEV=$(grep -ao 'DEV_[0-9]*_[0-9a-f]*:' <<<"$OUT" | head -n 1) # DEV_<st_dev>_<major hex>:
SBX_FS=$(cut -d_ -f2 <<<"$SBX_DEV")
SBX_MAJOR=$(cut -d_ -f3 <<<"$SBX_DEV" | tr -d :)
HOST_DEV=$(stat -c %d /dev/pts)
echo "# the terminal inside: on device $SBX_FS, major 0x$SBX_MAJOR; the host's /dev/pts is device $HOST_DEV"
check "the terminal is a pty (major 136..143)" test "$((0x${SBX_MAJOR:-0}))" -ge 136 -a "$((0x${SBX_MAJOR:-0}))" -le 143
check "... of a devpts of the sandbox's own, not the host's" test -n "$SBX_FS" -a "$SBX_FS" != "$HOST_DEV"
echo "$OUT" | sed 's/^/#   /' | tail -n 12
check "the shell sees a terminal of the size asked for, with its env and TERM" grep -q '^saw TTY_42 m1 xterm-256color' <<<"$OUT"
check "a resize frame changes stty size" grep -q '^saw 50 132' <<<"$OUT"
check "a ping is answered with its pong" grep -q '^pong hello' <<<"$OUT"
check "Ctrl-C (byte 3) interrupts the shell's command" grep -q '^saw INT_5' <<<"$OUT"
check "our close is echoed with 1000" test "$R" = 0
check "... and the command after the interrupted sleep did not run" sh -c "! grep -q AFTER_10 <<'E'
$OUT
E"

OUT=$(probe "/v1/sessions/$A/terminals/$P" wait:TTY_42 'wait:50 132' wait:INT_5 \
        'send:exit 7
' expect-exit:7 2>&1)
check "a new WebSocket replays the recent screen, and exit 7 comes as the exit frame, then close 1000" test $? = 0
echo "$OUT" | sed 's/^/#   /' | tail -n 3
L=$(api "$U")
check "the ended terminal is listed with its exit code" \
        test "$(jx '[req("terminals")[] | select(.pid == '"$P"') | .exit_code] | .[0]' <<<"$L")" = 7

# ---- the terminal outlives its WebSocket ----
P2=$(api -X POST "$U" -d '{"cmd":["sh"]}' | jget pid)
probe "/v1/sessions/$A/terminals/$P2" 'send:echo ONE_$((0+1))
' wait:ONE_1 quit >/dev/null 2>&1
check "a client that leaves without a close frame: the terminal runs on" \
        test "$(api "$U" | jx '[req("terminals")[] | select(.pid == '"$P2"') | .running] | .[0]')" = true
OUT=$(probe "/v1/sessions/$A/terminals/$P2" wait:ONE_1 'send:stty size
' 'wait:24 80' 2>&1)
check "... and a new one sees its screen; the default size is 24 x 80" test $? = 0

# ---- protocol errors ----
OUT=$(probe "/v1/sessions/$A/terminals/$P2" unmasked expect-close:1002 2>&1)
check "an unmasked client frame closes with 1002" test $? = 0
OUT=$(probe "/v1/sessions/$A/terminals/$P2" big expect-close:1009 2>&1)
check "a frame over 1 MiB closes with 1009" test $? = 0
OUT=$(probe "/v1/sessions/$A/terminals/$P2" 'text:{"type":"resize","rows":0,"cols":80}' expect-close:1007 2>&1)
check "a resize to 0 rows closes with 1007 and says why" grep -q 'close 1007: resize: rows and cols' <<<"$OUT"
OUT=$(probe "/v1/sessions/$A/terminals/$P2" 'text:{"type":"paste"}' expect-close:1007 2>&1)
check "an unknown message type closes with 1007" test $? = 0

# ---- the limit: 64 WebSockets per session ----
PIDS=()
for i in $(seq 64); do
        timeout 30 "$PROBE" "$S" "/v1/sessions/$A/terminals/$P2" sleep:20000 >"$T/ws.$i" 2>&1 & # (timeout passes our kill on)
        PIDS+=($!)
done
for _ in $(seq 50); do [ "$(grep -l '^upgraded' "$T"/ws.* 2>/dev/null | wc -l)" -ge 64 ] && break; sleep 0.1; done
check "64 WebSockets on one session's terminal" test "$(grep -l '^upgraded' "$T"/ws.* | wc -l)" = 64
OUT=$(probe "/v1/sessions/$A/terminals/$P2" 2>&1)
check "a 65th is 503" grep -q "^HTTP/1.1 503" <<<"$OUT"
check "... saying why" grep -q "has 64 terminal connections open already" <<<"$OUT"
for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
wait "${PIDS[@]}" 2>/dev/null
sleep 0.3
OUT=$(probe "/v1/sessions/$A/terminals/$P2" 'send:echo BACK_$((2*4))
' wait:BACK_8 2>&1)
check "... and once they are gone, a new one is served" test $? = 0

# ---- bad requests ----
OUT=$(probe "/v1/sessions/$A/terminals/999999" 2>&1)
check "a WebSocket to no terminal is refused with 404" test "$(head -c 12 <<<"$OUT")" = "HTTP/1.1 404"
BGP=$(api -X POST "http://x/v1/sessions/$A/exec" -d '{"argv":["sleep","60"],"background":true}' | jget pid)
OUT=$(probe "/v1/sessions/$A/terminals/$BGP" 'send:x' 'wait:never' 2>&1)
check "a background process that is no terminal takes no WebSocket input" test $? -ne 0
check "GET without Upgrade is 426" test "$(code "$U/$P2")" = 426
check "a bad Sec-WebSocket-Key is 400" test "$(code -H 'Connection: Upgrade' -H 'Upgrade: websocket' \
        -H 'Sec-WebSocket-Version: 13' -H 'Sec-WebSocket-Key: short' "$U/$P2")" = 400
check "another WebSocket version is 426" test "$(code -H 'Connection: Upgrade' -H 'Upgrade: websocket' \
        -H 'Sec-WebSocket-Version: 8' -H 'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==' "$U/$P2")" = 426
check "a pid that is not a number is 400" test "$(code "$U/abc")" = 400
for b in '{}' '{"cmd":[]}' '{"cmd":"sh"}' '{"cmd":["sh"],"rows":0}' '{"cmd":["sh"],"cols":1001}' \
        '{"cmd":["sh"],"rows":"24"}' '{"cmd":["sh"],"env":["A=1"]}' '{"cmd":["sh"],"cwd":5}'; do
        check "POST terminals $b is 400" test "$(code -X POST "$U" -d "$b")" = 400
done
E=$(api -X POST "$U" -d '{"cmd":["sh"],"rows":0}')
check "... with a message" grep -q 'rows and cols must be integers from 1 to 1000' <<<"$E"
check "a command that does not exist is 422" test "$(code -X POST "$U" -d '{"cmd":["nosuchcmd"]}')" = 422
check "... saying so" grep -q 'nosuchcmd: command not found' <<<"$(api -X POST "$U" -d '{"cmd":["nosuchcmd"]}')"
check "terminals of a session that does not exist are 404" test "$(code http://x/v1/sessions/ses_nope/terminals)" = 404

# ---- the limit: 16 running terminals ----
N=$(api "$U" | jx '[req("terminals")[] | select(.running)] | length')
for _ in $(seq $((16 - N))); do api -X POST "$U" -d '{"cmd":["sleep","60"]}' >/dev/null; done
check "16 terminals run" test "$(api "$U" | jx '[req("terminals")[] | select(.running)] | length')" = 16
E=$(api -X POST "$U" -d '{"cmd":["sleep","60"]}')
check "a 17th is refused with a clear message" grep -q '16 terminals are running already' <<<"$E"
check "... as 409" test "$(code -X POST "$U" -d '{"cmd":["sleep","60"]}')" = 409
for p in $(api "$U" | jx 'req("terminals")[] | select(.running) | .pid'); do
        api -X POST "http://x/v1/sessions/$A/processes/$p/signal" -d '{"signal":9}' >/dev/null
done

# ---- space exec -t: a command on a terminal, its exit code ----
OUT=$(printf 'echo CLI_$((6*7)); exit 3\n' | timeout 30 "$SPACE" --host "$S" exec -t "$A" -- sh)
R=$?
check "space exec -t runs the command on a terminal and exits with its code (3)" test "$R" = 3
check "... its output came" grep -q CLI_42 <<<"$OUT"
OUT=$(timeout 30 "$SPACE" --host "$S" exec -t "$A" -- sh -c 'test -t 0 && echo ON_TTY; exit 0' </dev/null)
check "space exec -t: the command's stdin is a terminal" grep -q ON_TTY <<<"$OUT"
# (cat, whose terminal stays cooked: a line-editing shell may read keys typed before its
# prompt as an answer to its own queries)
OUT=$(printf 'PIPED_LINE\n' | timeout 30 "$SPACE" --host "$S" exec -t "$A" -- cat)
R=$?
check "space exec -t: the end of a piped stdin is a ^D, the end of input of cat (exit 0)" test "$R" = 0
check "... after the line typed came back (echo and cat)" test "$(grep -c PIPED_LINE <<<"$OUT")" = 2

# ---- gVisor and microVMs: space-init as their PID 1, their own devpts ----
# rt_terminal RUNTIME: a session of it, a terminal sized, typed into, resized, exited
rt_terminal() {
        local g gp out
        g=$(api -X POST http://x/v1/sessions -d '{"template":"mini","runtime":"'"$1"'","memory":"256M","snapshot_interval_ms":0}' | jget id)
        check "a $1 session" test "$(state_of "$g")" = running
        gp=$(api -X POST "http://x/v1/sessions/$g/terminals" -d '{"cmd":["sh"],"rows":31,"cols":91}' | jget pid)
        out=$(probe "/v1/sessions/$g/terminals/$gp" 'send:test -t 0 && echo RT_$((4*5)); tty; stty size
' wait:RT_20 wait:/dev/pts/ 'wait:31 91' 'text:{"type":"resize","rows":20,"cols":60}' 'send:stty size
' 'wait:20 60' 'send:exit 4
' expect-exit:4 2>&1)
        check "$1: a terminal from the sandbox's devpts, sized, resized, its exit code" test $? = 0
        echo "$out" | sed 's/^/#   /' | tail -n 4
        api -X DELETE "http://x/v1/sessions/$g" >/dev/null
}
if [ -x "${SPACE_RUNSC:-/usr/bin/runsc}" ]; then
        rt_terminal gvisor
else
        echo "# no runsc: the gvisor part is skipped"
fi
if [ -n "$GUEST" ]; then
        rt_terminal microvm
else
        echo "# no guest kernel in $GUEST_CACHE (scripts/build-guest): the microvm part is skipped"
fi

finish terminals
