#!/bin/bash
# Limits: a memory hog is killed at its sandbox's memory limit while the daemon and other
# sandboxes carry on; a fork bomb stops at the pids limit and the daemon survives it and
# cleans it up.
. "$(dirname "$0")/lib.sh"

healthy() { sp health >/dev/null 2>&1; }

other=$(new_sandbox) && pass "created a bystander sandbox $other" || { fail "create"; finish; }

say "memory: 512 MiB wanted, 64 MiB allowed"
m=$(new_sandbox --memory 64M) && pass "created $m with --memory 64M" || { fail "create --memory 64M"; finish; }
js=$(sp inspect --json "$m")
expect_eq "inspect shows the memory limit" "$(json_get "$js" limits.memory)" "$((64 << 20))"
t0=$(now_ms)
sp exec "$m" -- python3 -c 'a=bytearray(512<<20); print("allocated", len(a))' </dev/null >"$TMPD/o" 2>"$TMPD/e"; rc=$?
t1=$(now_ms)
grep -q allocated "$TMPD/o" && fail "the hog got its 512 MiB" || pass "the hog did not get its 512 MiB"
expect_eq "the hog is killed by SIGKILL (exit 128+9)" "$rc" "137"
[ $((t1 - t0)) -lt 30000 ] && pass "it ended in $((t1 - t0)) ms" || fail "it took $((t1 - t0)) ms"
js=$(sp inspect --json "$m")
expect_eq "inspect reports the OOM kill" "$(json_get "$js" health.oom_killed)" "True"
healthy && pass "the daemon is alive" || fail "the daemon is gone"
out=$(sp exec "$other" -- echo alive </dev/null)
expect_eq "the bystander sandbox still runs commands" "$out" "alive"
out=$(sp exec "$m" -- echo still-usable </dev/null)
expect_eq "the limited sandbox itself still runs commands" "$out" "still-usable"
out=$(sp exec "$m" -- python3 -c 'a=bytearray(16<<20); print(len(a))' </dev/null)
expect_eq "16 MiB within the limit is fine" "$out" "$((16 << 20))"

say "pids: a fork bomb with --pids 64"
f=$(new_sandbox --pids 64 --memory 256M) && pass "created $f with --pids 64" || { fail "create --pids 64"; finish; }
bomb=$(sp exec -d "$f" -- sh -c 'b() { b | b & }; b' </dev/null)
[ -n "$bomb" ] && pass "fork bomb started in the background (pid $bomb)" || fail "could not start the fork bomb"
sleep 5
healthy && pass "the daemon answers during the fork bomb" || fail "the daemon does not answer during the fork bomb"
js=$(sp inspect --json "$f")
pids=$(json_get "$js" health.pids)
[ -n "$pids" ] && [ "$pids" -le 64 ] && pass "tasks in the sandbox: $pids <= 64" || fail "tasks in the sandbox: '$pids'"
sbx=$(sandbox_of "$f")
for cg in /sys/fs/cgroup/pids/space/"$sbx" /sys/fs/cgroup/space/"$sbx"; do
        if [ -r "$cg/pids.current" ]; then
                cur=$(cat "$cg/pids.current")
                [ "$cur" -le 64 ] && pass "cgroup pids.current = $cur" || fail "cgroup pids.current = $cur > 64"
        fi
done
out=$(sp exec "$other" -- echo alive </dev/null)
expect_eq "the bystander sandbox still runs commands" "$out" "alive"
t0=$(now_ms)
sp rm "$f" >/dev/null && pass "the fork-bombed sandbox is deleted" || fail "rm of the fork-bombed sandbox failed"
t1=$(now_ms)
[ $((t1 - t0)) -lt 30000 ] && pass "delete took $((t1 - t0)) ms" || fail "delete took $((t1 - t0)) ms"
left=$(leftovers "$sbx" "$(init_pid_of "$f")")
expect_eq "nothing left of $sbx" "$left" ""
healthy && pass "the daemon is alive afterwards" || fail "the daemon died"

sp rm "$m" "$other" >/dev/null && pass "rm $m $other" || fail "rm"
finish
