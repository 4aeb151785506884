#!/bin/bash
# Soak under hostile neighbours: 1,000 sessions created, used (a command, an upload and a
# download) and deleted by 8 concurrent clients, while one sandbox runs a fork bomb and
# another a memory bomb in a loop. Passes with zero daemon crashes, zero failed operations
# and nothing left of any soak sandbox (mounts, cgroups, processes). Writes the figures to
# $STATE/soak for the fixture's summary.
# Usage: soak.sh BIN_DIR STATE_DIR PROBE [SESSIONS] [CLIENTS]
. "$(dirname "$0")/lib.sh"
SESSIONS=${SOAK_SESSIONS:-1000}
CLIENTS=${SOAK_CLIENTS:-8}
per=$((SESSIONS / CLIENTS))

# The hostile sandboxes get a CPU quota like any tenant would: without one a fork bomb
# takes both cores of a small host and the soak measures the scheduler, not the daemon.
fork=$(new_sandbox --pids 256 --cpus 0.5) || { fail "create the fork-bomb sandbox"; finish; }
mem=$(new_sandbox -m 64M --cpus 0.5) || { fail "create the memory-bomb sandbox"; finish; }
sp exec -d "$fork" -- sh -c 'b() { b | b & }; b' </dev/null >/dev/null
sp exec -d "$mem" -- sh -c 'while :; do python3 -c "b = bytearray(1 << 30)" 2>/dev/null; done' </dev/null >/dev/null
sleep 2
fpids=$(cat /sys/fs/cgroup/pids/space/"$(sandbox_of "$fork")"/pids.current /sys/fs/cgroup/space/"$(sandbox_of "$fork")"/pids.current 2>/dev/null | head -1)
say "hostile: $fork runs a fork bomb ($fpids pids, 0.5 CPU), $mem allocates 1 GiB under 64 MiB in a loop (0.5 CPU)"

echo "payload-$$" >"$TMPD/payload"
# client N: its share of sessions, one after the other; one line per failure
client() {
        for i in $(seq 1 "$per"); do
                id=$(new_sandbox) || { echo "FAIL client $1 #$i: create"; continue; }
                out=$(sp exec "$id" -- sh -c 'echo $((6 * 7))' </dev/null 2>&1)
                [ "$out" = 42 ] || echo "FAIL client $1 #$i: exec in $id: $out"
                sp cp "$TMPD/payload" "$id:/root/p" </dev/null >/dev/null 2>&1 || echo "FAIL client $1 #$i: upload to $id"
                got=$(sp cp "$id:/root/p" - </dev/null 2>&1)
                [ "$got" = "payload-$$" ] || echo "FAIL client $1 #$i: download from $id: $got"
                sp rm "$id" </dev/null >/dev/null 2>&1 || echo "FAIL client $1 #$i: rm $id"
                echo "$id" >>"$TMPD/soaked"
        done
}

say "$CLIENTS clients × $per sessions"
t0=$(date +%s)
rss0=$(spaced_rss_kb)
for c in $(seq 1 "$CLIENTS"); do client "$c" >"$TMPD/client.$c" 2>&1 & done
wait
t1=$(date +%s)
failures=$(cat "$TMPD"/client.* | grep -c '^FAIL')
done_n=$(wc -l <"$TMPD/soaked")
cat "$TMPD"/client.* | grep '^FAIL' | head -10
[ "$failures" -eq 0 ] && pass "$done_n sessions created, used and deleted in $((t1 - t0)) s, no failed operation" ||
        fail "$failures failed operations in $done_n sessions"
[ "$done_n" -eq $((per * CLIENTS)) ] || fail "only $done_n of $((per * CLIENTS)) sessions went through"

crashes=0
if daemon_alive; then
        pass "spaced (pid $SPACED_PID) survived; RSS $rss0 → $(spaced_rss_kb) KiB"
else
        crashes=1
        fail "spaced died during the soak"
fi

# what is left of the soak sessions' sandboxes
leaked=0
while read -r id; do
        sbx=$(sandbox_of "$id")
        l=$(leftovers "$sbx" "$(init_pid_of "$id")")
        if [ -n "$l" ]; then
                leaked=$((leaked + 1))
                echo "leftover of $id: $l"
        fi
done <"$TMPD/soaked"
[ "$leaked" -eq 0 ] && pass "no mount, cgroup or process left of the $done_n sandboxes" || fail "$leaked sandboxes left something"

fp=$(cat /sys/fs/cgroup/pids/space/"$(sandbox_of "$fork")"/pids.current /sys/fs/cgroup/space/"$(sandbox_of "$fork")"/pids.current 2>/dev/null | head -1)
oom=$(json_get "$(sp inspect --json "$mem" </dev/null)" health.oom_killed)
say "hostile sandboxes at the end: fork bomb holds $fp pids; memory bomb oom_killed=$oom"
sp rm "$fork" "$mem" >/dev/null || fail "rm the hostile sandboxes"
for s in "$fork" "$mem"; do
        l=$(leftovers "$(sandbox_of "$s")" "$(init_pid_of "$s")")
        [ -z "$l" ] && pass "hostile $s left nothing" || fail "hostile $s left: $l"
done

echo "$done_n sessions by $CLIENTS concurrent clients in $((t1 - t0)) s beside a fork bomb ($fpids pids) and a memory bomb (64 MiB limit): $failures failed operations, $crashes daemon crashes, $leaked sandboxes with leftovers" >"$STATE/soak"
cat "$STATE/soak"
finish
