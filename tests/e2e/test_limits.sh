#!/bin/bash
# Limits: a memory hog is killed at its sandbox's memory limit while the daemon and other
# sandboxes carry on; a fork bomb stops at the pids limit and the daemon survives it and
# cleans it up; space create --disk sets the writable layer's limit, which a fork and a
# pause/resume keep, and a bad --disk is refused.
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
expect_eq "inspect reports the OOM kill" "$(json_get "$js" health.oom_killed)" "true"
healthy && pass "the daemon is alive" || fail "the daemon is gone"
out=$(sp exec "$other" -- echo alive </dev/null)
expect_eq "the bystander sandbox still runs commands" "$out" "alive"
out=$(sp exec "$m" -- echo still-usable </dev/null)
expect_eq "the limited sandbox itself still runs commands" "$out" "still-usable"
out=$(sp exec "$m" -- python3 -c 'a=bytearray(16<<20); print(len(a))' </dev/null)
expect_eq "16 MiB within the limit is fine" "$out" "$((16 << 20))"

say "pids: a fork bomb with --pids 64"
f=$(new_sandbox --pids 64 --memory 256M) && pass "created $f with --pids 64" || { fail "create --pids 64"; finish; }
sbx=$(sandbox_of "$f")
pidcg=""
for cg in /sys/fs/cgroup/pids/space/"$sbx" /sys/fs/cgroup/space/"$sbx"; do
        [ -r "$cg/pids.current" ] && pidcg=$cg
done
[ -n "$pidcg" ] && pass "the sandbox's pids cgroup is $pidcg" || fail "no pids cgroup found for $sbx"
bomb=$(sp exec -d "$f" -- sh -c 'b() { b | b & }; b' </dev/null)
[ -n "$bomb" ] && pass "shell fork bomb started in the background (pid $bomb)" || fail "could not start the fork bomb"
max=0
for i in $(seq 1 15); do
        cur=$(cat "$pidcg/pids.current" 2>/dev/null || echo 0)
        [ "$cur" -gt "$max" ] && max=$cur
        sleep 0.2
done
[ "$max" -le 64 ] && [ "$max" -ge 2 ] && pass "the bomb peaked at $max sampled tasks, no more than the limit 64" ||
        fail "the bomb peaked at $max tasks (wanted 2..64)"
if [ -r "$pidcg/pids.events" ]; then
        hits=$(awk '$1 == "max" { print $2 }' "$pidcg/pids.events")
        [ "${hits:-0}" -gt 0 ] && pass "the kernel refused $hits forks at the limit (pids.events)" || fail "pids.events max = '$hits'"
fi
healthy && pass "the daemon answers during the fork bomb" || fail "the daemon does not answer during the fork bomb"
# a bomb whose children stay: fork until refused, then report how far it got
forker='import os, time
n = 0
while True:
    try:
        pid = os.fork()
    except OSError as e:
        print("refused after", n, "forks:", e.strerror, flush=True)
        break
    if pid == 0:
        time.sleep(120)
        os._exit(0)
    n += 1
time.sleep(120)'
# The shell bomb may hold every slot when the forker asks for one (EAGAIN: "cannot start the
# command"): it asks again until a shell of the bomb has died and left one, for 15 s at most.
fp=
for _ in $(seq 75); do
        fp=$(sp exec -d "$f" -- python3 -c "$forker" </dev/null 2>/dev/null) && [ -n "$fp" ] && break
        fp=
        sleep 0.2
done
[ -n "$fp" ] && pass "the forker started beside the bomb (pid $fp)" || fail "the forker never got a slot in 15 s"
wait_until 20 sh -c "'$SPACE' logs '$f' '$fp' 2>/dev/null | grep -q refused"
out=$(sp logs "$f" "$fp")
n=$(echo "$out" | sed -n 's/refused after \([0-9]*\) forks.*/\1/p')
[ -n "$n" ] && [ "$n" -lt 64 ] && pass "fork() was refused at the limit: $out" || fail "forker: '$out'"
js=$(sp inspect --json "$f")
pids=$(json_get "$js" health.pids)
# the shell bomb may have collapsed by now (its shells exit when their forks fail), but the
# forker and its n sleeping children stay: at least n+1 tasks, never more than the limit
[ -n "$pids" ] && [ -n "$n" ] && [ "$pids" -le 64 ] && [ "$pids" -ge $((n + 1)) ] &&
        pass "inspect: $pids tasks in the sandbox (the forker and its $n children at least; limit 64)" ||
        fail "inspect health.pids: '$pids' (the forker made $n children)"
t0=$(now_ms)
out=$(timeout 20 "$SPACE" exec "$f" -- true </dev/null 2>&1); rc=$?
t1=$(now_ms)
[ $rc -ne 124 ] && pass "a new command in the full sandbox answers in $((t1 - t0)) ms (exit $rc${out:+: $out})" ||
        fail "a new command in the full sandbox hangs"
js=$(sp inspect --json "$f")
expect_eq "the full sandbox is still running after a refused fork" "$(json_get "$js" state)/$(json_get "$js" health.alive)" "running/true"
sp kill "$f" "$fp" KILL
wait_until 10 sh -c "[ \$(cat '$pidcg/pids.current') -lt 8 ]"
out=$(sp exec "$f" -- echo recovered </dev/null 2>&1)
expect_eq "once the forker is killed the sandbox runs commands again" "$out" "recovered"
out=$(sp exec "$other" -- echo alive </dev/null)
expect_eq "the bystander sandbox still runs commands" "$out" "alive"
t0=$(now_ms)
sp rm "$f" >/dev/null && pass "the fork-bombed sandbox is deleted" || fail "rm of the fork-bombed sandbox failed"
t1=$(now_ms)
[ $((t1 - t0)) -lt 30000 ] && pass "delete took $((t1 - t0)) ms" || fail "delete took $((t1 - t0)) ms"
left=$(leftovers "$sbx" "$(init_pid_of "$f")")
expect_eq "nothing left of $sbx" "$left" ""
healthy && pass "the daemon is alive afterwards" || fail "the daemon died"

say "disk: space create --disk 64M"
if [ "$(json_get "$(sp health)" disk_limits.enforced)" != true ]; then
        echo "SKIP (disk part): this spaced has no quota volume: $(json_get "$(sp health)" disk_limits.error)"
else
        k=$(new_sandbox --disk 64M) && pass "created $k with --disk 64M" || { fail "create --disk 64M"; finish; }
        expect_eq "inspect shows the disk limit" "$(field "$k" limits.disk)" "$((64 << 20))"
        expect_eq "a session without --disk has the daemon's default" "$(field "$other" limits.disk)" \
                "$(json_get "$(sp health)" disk_limits.default)"
        out=$(sp exec "$k" -- sh -c 'dd if=/dev/zero of=/root/fill bs=1M count=100 2>&1; rm -f /root/fill' </dev/null)
        case $out in *"Disk quota exceeded"*) pass "writing 100M fails inside: Disk quota exceeded" ;; *) fail "dd: $out" ;; esac
        kf=$(sp fork "$k" </dev/null 2>/dev/null | head -n 1)
        [ -n "$kf" ] && record_sandbox "$kf"
        expect_eq "a fork of it has the same disk limit" "$(field "$kf" limits.disk)" "$((64 << 20))"
        sp pause "$k" </dev/null >/dev/null && sp resume "$k" </dev/null >/dev/null && record_sandbox "$k"
        expect_eq "after pause and resume it has it too" "$(field "$k" limits.disk)/$(field "$k" state)" "$((64 << 20))/running"
        out=$(sp exec "$k" -- sh -c 'dd if=/dev/zero of=/root/fill bs=1M count=100 2>&1; rm -f /root/fill' </dev/null)
        case $out in *"Disk quota exceeded"*) pass "... and it still holds" ;; *) fail "dd after resume: $out" ;; esac
        for bad in 0 lots 1K; do
                sp create --disk "$bad" </dev/null >"$TMPD/o" 2>"$TMPD/e"
                rc=$?
                [ $rc -ne 0 ] && pass "create --disk $bad is refused ($rc: $(head -c 120 "$TMPD/e"))" || fail "create --disk $bad made $(cat "$TMPD/o")"
        done
        sp create --disk 100T </dev/null >"$TMPD/o" 2>"$TMPD/e"
        rc=$?
        grep -q "disk must be between" "$TMPD/e" && pass "create --disk 100T: the daemon says the range ($rc)" ||
                fail "create --disk 100T: rc $rc, $(cat "$TMPD/o" "$TMPD/e")"
        sp rm "$k" $kf >/dev/null && pass "rm $k $kf" || fail "rm $k $kf"
fi

sp rm "$m" "$other" >/dev/null && pass "rm $m $other" || fail "rm"
finish
