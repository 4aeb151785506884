#!/bin/bash
# The daemon authenticates the space-init it re-attaches to (#20 item 5; protocol.md §1,
# security.md): a process that holds init's listening socket and answers a restarted
# spaced with a forged HELLO is refused, its frames are not acted on (the sandbox is not
# marked dead, the session not rolled back), spaced connects again and takes the real init
# once it answers. Also: the key file is 0600 and out of the sandbox's reach, and a
# sandbox with no key on record (an older spaced's) is re-attached with a warning.
# Usage: test_init_auth.sh SPACED_BINARY   (fake-init and space-init next to it)
. "$(dirname "$0")/lib.sh" initauth "${1:-}"
FAKE=$BIN/fake-init
logged() { tail -c +"$OFF" "$LOG" | grep -q "$1"; } # since offset OFF of the log
# The session's state stays "running" in meta across the restart: wait for the re-attach
# itself (10 s at most), then for the sandbox that answers.
attached() {
        for _ in $(seq 100); do
                logged "re-attached sandbox $1" && return 0
                sleep 0.1
        done
        return 1
}
[ -x "$FAKE" ] || { echo "FAIL: $FAKE is not built"; exit 1; }

ROOT=$T/rootfs
make_rootfs "$ROOT"
start_daemon || exit 1
echo "# spaced $SPACED on $DATA"
api -X POST http://x/v1/templates -d "{\"name\":\"mini\",\"from_dir\":\"$ROOT\"}" >/dev/null
R=$(api -X POST http://x/v1/sessions -d '{"template":"mini","memory":"64M","snapshot_interval_ms":0}')
A=$(echo "$R" | jget id)
UA=http://x/v1/sessions/$A
SBX=$(api "$UA" | jget sandbox_id)
IPID=$(api "$UA" | jget init_pid)
sh_in "$A" 'echo v1 > /root/draft.txt' >/dev/null
api -X POST "$UA/snapshots" >/dev/null
sh_in "$A" 'echo v2 > /root/draft.txt' >/dev/null # after the snapshot: a rollback loses it

KEYF=$L/sandboxes/$SBX/init.key
RUN=$L/sandboxes/$SBX/run
check "the init key is kept in the sandbox dir, mode 0600" test "$(stat -c %a "$KEYF" 2>&1)" = 600
KEY=$(head -c 64 "$KEYF")
check "the key is 64 hex digits" test "$(printf %s "$KEY" | tr -d 0-9a-f | wc -c)/${#KEY}" = 0/64
check "inside, the key is neither a file nor in init's command line" \
        test "$(sh_in "$A" 'ls /init.key /root/init.key 2>/dev/null; cat /proc/1/cmdline' | grep -c "$KEY\|init.key")" = 0

# ---- a stranger holds init's socket when spaced restarts ----
kill -9 "$PID"
gone "$PID" || bad "spaced did not die"
mv "$RUN/init.sock" "$RUN/init.sock.real"
WRONG=$(printf '%064d' 0)
"$FAKE" "$RUN/init.sock" 6 "$WRONG" >"$T/fake.out" 2>&1 &
FPID=$!
for _ in $(seq 50); do grep -q ready "$T/fake.out" && break; sleep 0.1; done
OFF=$(wc -c <"$LOG")
start_daemon || exit 1
refused=no
for _ in $(seq 50); do
        logged "refused a connection to sandbox $SBX" && { refused=yes; break; }
        sleep 0.1
done
check "spaced refuses the stranger's HELLO and logs why" test "$refused" = yes
check "the log names the reason (the wrong key)" logged "did not prove it is its space-init: its HELLO has the wrong key"
check "the stranger's frames did not make the sandbox dead" test -z "$(tail -c +"$OFF" "$LOG" | grep "sandbox $SBX died")"
check "the session says why it is not attached yet" test "$(api "$UA" | jx '.error // "" | test("did not prove")')" = true
# The real init answers again: spaced connects anew and takes it.
mv -f "$RUN/init.sock.real" "$RUN/init.sock"
check "spaced then re-attaches the real init on the same sandbox" \
        test "$(attached "$SBX" && api "$UA" | jget init_pid)/$(api "$UA" | jget sandbox_id)" = "$IPID/$SBX"
check "nothing was rolled back (the change after the snapshot is there)" test "$(sh_in "$A" 'cat /root/draft.txt')" = v2
check "no recovery happened" test "$(api "$UA" | jget recoveries)/$(api "$UA/events?limit=1000" | jx '[req("events")[] | select(req("kind") == "recovery")] | length')" = 0/0
wait "$FPID"
check "the stranger got connections and spaced sent it nothing" \
        sh -c "grep -q '^connections [1-9][0-9]* received 0\$' '$T/fake.out'"
echo "# fake-init: $(tail -n 1 "$T/fake.out")"

# ---- a stranger without any key, then none answers: lost only at the proof deadline ----
kill -9 "$PID"
gone "$PID" || bad "spaced did not die"
mv "$RUN/init.sock" "$RUN/init.sock.real"
"$FAKE" "$RUN/init.sock" 3 - >"$T/fake2.out" 2>&1 &
FPID=$!
for _ in $(seq 50); do grep -q ready "$T/fake2.out" && break; sleep 0.1; done
OFF=$(wc -c <"$LOG")
start_daemon || exit 1
for _ in $(seq 50); do
        logged "its HELLO has no key" && break
        sleep 0.1
done
check "a HELLO without a key is refused" logged "did not prove it is its space-init: its HELLO has no key"
mv -f "$RUN/init.sock.real" "$RUN/init.sock"
check "and the real init is taken once it answers" test "$(attached "$SBX" && api "$UA" | jget init_pid)" = "$IPID"
wait "$FPID"

# ---- a sandbox with no key on record (made by an older spaced) ----
kill -9 "$PID"
gone "$PID" || bad "spaced did not die"
rm -f "$KEYF"
OFF=$(wc -c <"$LOG")
start_daemon || exit 1
check "it is re-attached without proof" test "$(attached "$SBX" && api "$UA" | jget init_pid)" = "$IPID"
check "with a warning in the log" logged "sandbox $SBX has no init key on record"
check "and it still runs commands" test "$(sh_in "$A" 'cat /root/draft.txt')" = v2

api -X DELETE "$UA" >/dev/null

# ---- gvisor: the key through the relay; a wrong one on record is refused ----
if [ -x "${SPACE_RUNSC:-/usr/bin/runsc}" ]; then
        G=$(api -X POST http://x/v1/sessions -d '{"template":"mini","runtime":"gvisor","memory":"128M","snapshot_interval_ms":0}' | jget id)
        UG=http://x/v1/sessions/$G
        GSBX=$(api "$UG" | jget sandbox_id)
        sh_in "$G" 'echo g2 > /root/draft.txt' >/dev/null
        check "gvisor: the key is on record" test "$(stat -c %a "$L/sandboxes/$GSBX/init.key" 2>&1)" = 600
        kill -9 "$PID"
        gone "$PID" || bad "spaced did not die"
        OFF=$(wc -c <"$LOG")
        start_daemon || exit 1
        check "gvisor: re-attached, the key shown through the relay" \
                test "$(attached "$GSBX" && api "$UG" | jget sandbox_id)/$(sh_in "$G" 'cat /root/draft.txt')" = "$GSBX/g2"
        check "gvisor: without a refusal" sh -c "! tail -c +$OFF '$LOG' | grep -q 'refused a connection\|no init key'"
        kill -9 "$PID"
        gone "$PID" || bad "spaced did not die"
        printf '%064d\n' 7 >"$L/sandboxes/$GSBX/init.key"
        OFF=$(wc -c <"$LOG")
        start_daemon || exit 1
        for _ in $(seq 50); do logged "refused a connection to sandbox $GSBX" && break; sleep 0.1; done
        check "gvisor: an init that cannot show the key on record is refused" logged "sandbox $GSBX that did not prove it is its space-init: its HELLO has the wrong key"
        api -X DELETE "$UG" >/dev/null
else
        echo "# no runsc: the gvisor part is not run"
fi
finish initauth
