#!/bin/bash
# Issue 4, crash recovery: kill -9 of the sandbox's init (from the host); the session runs
# again by itself (how fast is bench-sessions' to measure: target < 1 s; here the time is
# printed and only a deadline no working recovery misses is judged), with the files of its newest snapshot, and its event log
# says what was lost and where it came back from.
. "$(dirname "$0")/lib.sh"

# no rolling snapshots: "the newest snapshot" is then exactly the one taken here
id=$(new_sandbox --template base --snapshot-interval 0) && pass "create printed $id" || { fail "create"; finish; }
sbx=$(sandbox_of "$id")
ipid=$(init_pid_of "$id")
[ "$ipid" -gt 1 ] 2>/dev/null && pass "init of $sbx is host pid $ipid" || { fail "no init pid ('$ipid')"; finish; }

sp exec "$id" -- sh -c 'echo kept >/root/kept.txt' </dev/null
snap=$(sp snapshot "$id" </dev/null) && pass "snapshot $snap" || fail "snapshot"
sp exec "$id" -- sh -c 'echo lost >/root/lost.txt' </dev/null
check "a file written after the snapshot exists before the crash" sp exec "$id" -- test -f /root/lost.txt </dev/null

say "kill -9 the sandbox's init"
comm=$(cat "/proc/$ipid/comm" 2>/dev/null)
case $comm in *init*) pass "pid $ipid is $comm" ;; *) fail "pid $ipid is '$comm', not an init" ;; esac
t0=$(now_ms)
kill -9 "$ipid"
back() {
        js=$(sp inspect --json "$id" 2>/dev/null </dev/null) || return 1
        [ "$(json_get "$js" state)" = running ] || return 1
        p=$(json_get "$js" init_pid)
        [ -n "$p" ] && [ "$p" != "$ipid" ] || return 1
        sp exec "$id" -- true </dev/null 2>/dev/null
}
seen=""
end=$((t0 + 60000))
while ! back; do
        st=$(field "$id" state)
        case " $seen " in *" $st "*) ;; *) seen="$seen $st" ;; esac
        [ "$(now_ms)" -ge "$end" ] && break
        sleep 0.05
done
t1=$(now_ms)
if back; then
        # The daemon's recovery event is written when the new sandbox answers (HELLO):
        # that is when the session ran again. What the client saw adds its own polling,
        # seconds of it on a loaded host, so it is printed, not judged.
        ev_ms=$(events_json "$id" | grep '"kind":"recovery"' | tail -n 1 | jq -r '.time
        | capture("^(?<s>[0-9-]{10}T[0-9:]{8})(\\.(?<f>[0-9]+))?Z$")
        | (.s + "Z" | fromdateiso8601) * 1000 + ((.f // "") + "000" | .[0:3] | tonumber)' 2>/dev/null)
        if [ -z "$ev_ms" ]; then
                fail "running again, but no recovery event with a time"
        elif [ $((ev_ms - t0)) -ge 0 ]; then
                pass "running again with a new init after $((ev_ms - t0)) ms (the recovery event; the client saw it, exec included, after $((t1 - t0)) ms)"
        else
                fail "the recovery event is dated $((t0 - ev_ms)) ms before the kill"
        fi
else
        fail "not running again after 60 s (states seen:$seen; now: $(sp inspect --json "$id"))"
        finish
fi
echo "states seen while waiting:$seen"
record_sandbox "$id"

say "it came back from the newest snapshot"
expect_eq "the snapshotted file" "$(sp exec "$id" -- cat /root/kept.txt </dev/null)" "kept"
sp exec "$id" -- test -e /root/lost.txt </dev/null
expect_eq "the file written after the snapshot is gone (test -e exit)" "$?" "1"
js=$(sp inspect --json "$id")
expect_eq "recoveries" "$(json_get "$js" recoveries)" "1"
nsbx=$(json_get "$js" sandbox_id)
[ "$nsbx" != "$sbx" ] && pass "a new sandbox $nsbx" || fail "the same sandbox id $sbx"
expect_eq "nothing left of the lost sandbox $sbx" "$(leftovers "$sbx" "$ipid")" ""
rec=$(events_json "$id" | grep '"kind":"recovery"')
[ -n "$rec" ] && pass "a recovery event: $rec" || fail "no recovery event"
expect_eq "it names the snapshot it came back from" "$(json_get "$(echo "$rec" | tail -n 1)" data.from_snapshot)" "$snap"
expect_eq "it names the lost sandbox" "$(json_get "$(echo "$rec" | tail -n 1)" data.lost_sandbox)" "$sbx"

say "a second crash, after more work and a newer snapshot"
sp exec "$id" -- sh -c 'echo two >/root/two.txt' </dev/null
snap2=$(sp snapshot "$id" </dev/null) && pass "snapshot $snap2" || fail "snapshot 2"
ipid2=$(field "$id" init_pid)
kill -9 "$ipid2"
ipid=$ipid2
t0=$(now_ms)
wait_until 10 back && pass "running again after $(( $(now_ms) - t0 )) ms" || fail "no second recovery"
record_sandbox "$id"
expect_eq "files of the newer snapshot" "$(sp exec "$id" -- cat /root/kept.txt /root/two.txt </dev/null | tr '\n' ' ')" "kept two "
expect_eq "recoveries" "$(field "$id" recoveries)" "2"

sp rm "$id" >/dev/null && pass "rm $id" || fail "rm"
finish
