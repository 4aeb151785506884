#!/bin/bash
# Issue 4, time travel: three snapshots with different contents; restore to the first
# shows the first contents, restore to the third brings them back, and the timeline keeps
# every snapshot across restores.
. "$(dirname "$0")/lib.sh"

id=$(new_sandbox --template base --snapshot-interval 0) && pass "create printed $id" || { fail "create"; finish; }

say "three versions, a snapshot after each"
snaps=""
for v in 1 2 3; do
        sp exec "$id" -- sh -c "echo version-$v >/root/state.txt && echo $v >/root/only-$v.txt" </dev/null
        s=$(sp snapshot --label "v$v" "$id" </dev/null) || fail "snapshot v$v"
        case $s in snap_*) pass "snapshot v$v: $s" ;; *) fail "snapshot v$v printed '$s'" ;; esac
        snaps="$snaps $s"
done
set -- $snaps
s1=${1:-x} s2=${2:-x} s3=${3:-x}
sp exec "$id" -- sh -c 'echo uncommitted >/root/state.txt' </dev/null
timeline=$(snap_ids "$id" | tr '\n' ' ')
case $timeline in *"$s1"*"$s2"*"$s3"*) pass "the timeline has the three, oldest first" ;; *) fail "timeline: $timeline" ;; esac
n_before=$(snap_ids "$id" | wc -l)

say "restore to the first"
sbx_before=$(field "$id" sandbox_id)
out=$(sp restore "$id" "$s1" </dev/null); rc=$?
expect_eq "restore exits 0" "$rc" "0"
expect_eq "restore prints the session id" "$out" "$id"
record_sandbox "$id"
expect_eq "state after restore" "$(field "$id" state)" "running"
expect_eq "state.txt is version 1" "$(sp exec "$id" -- cat /root/state.txt </dev/null)" "version-1"
expect_eq "files of v1 only: ls /root/only-*" "$(sp exec "$id" -- sh -c 'ls /root/only-*' </dev/null)" "/root/only-1.txt"
left=$(leftovers "$sbx_before" "")
expect_eq "nothing left of the sandbox before the restore ($sbx_before)" "$left" ""
timeline=$(snap_ids "$id" | tr '\n' ' ')
case $timeline in *"$s1"*"$s2"*"$s3"*) pass "the newer snapshots stay in the timeline" ;; *) fail "timeline after restore: $timeline" ;; esac
[ "$(snap_ids "$id" | wc -l)" -ge "$n_before" ] && pass "no snapshot was dropped" || fail "snapshots dropped"

say "restore to the third brings them back"
sp restore "$id" "$s3" >/dev/null </dev/null; expect_eq "restore to v3 exits 0" "$?" "0"
record_sandbox "$id"
expect_eq "state.txt is version 3" "$(sp exec "$id" -- cat /root/state.txt </dev/null)" "version-3"
expect_eq "files of v1..v3" "$(sp exec "$id" -- sh -c 'ls /root/only-*' </dev/null | tr '\n' ' ')" "/root/only-1.txt /root/only-2.txt /root/only-3.txt "

say "and to the second, in between"
sp restore "$id" "$s2" >/dev/null </dev/null; expect_eq "restore to v2 exits 0" "$?" "0"
record_sandbox "$id"
expect_eq "state.txt is version 2" "$(sp exec "$id" -- cat /root/state.txt </dev/null)" "version-2"
sp exec "$id" -- test -e /root/only-3.txt </dev/null
expect_eq "v3's file is gone again (test -e exit)" "$?" "1"

say "the event log tells the story"
ev=$(events_json "$id")
n=$(echo "$ev" | grep -c '"kind":"lifecycle".*"restored"')
expect_eq "three 'restored' lifecycle events" "$n" "3"
first=$(echo "$ev" | grep '"restored"' | head -n 1)
expect_eq "the first restored event names the snapshot restored to (\"from\")" "$(json_get "$first" data.from)" "$s1"
last=$(echo "$ev" | grep '"restored"' | tail -n 1)
expect_eq "the last one names $s2" "$(json_get "$last" data.from)" "$s2"
expect_eq "its \"snapshot\" is the new head" "$(json_get "$last" data.snapshot)" "$(field "$id" head_snapshot)"
echo "$ev" | grep -q '"kind":"exec"' && pass "exec events are logged" || fail "no exec events"

sp rm "$id" >/dev/null && pass "rm $id" || fail "rm"
finish
