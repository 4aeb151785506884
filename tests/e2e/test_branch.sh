#!/bin/bash
# Issue 4, draft-then-branch: a session writes draft.txt, snapshots, forks two sessions
# from that snapshot; each fork edits the draft its own way; the results are independent
# of each other and the parent is unchanged. Then a fork "of now" (no --snapshot).
. "$(dirname "$0")/lib.sh"

say "a session writes a draft and snapshots it"
id=$(new_sandbox --template base) && pass "create printed $id" || { fail "create"; finish; }
sp exec "$id" -- sh -c 'mkdir -p /root/work && printf "title\nfirst draft\n" >/root/work/draft.txt' </dev/null
check "draft.txt written" sp exec "$id" -- test -f /root/work/draft.txt </dev/null
snap=$(sp snapshot --label draft "$id" </dev/null); rc=$?
expect_eq "snapshot exits 0" "$rc" "0"
case $snap in snap_*) pass "snapshot printed $snap" ;; *) fail "snapshot printed '$snap'"; finish ;; esac
sp snapshots "$id" </dev/null | grep -E "^$snap .* draft\$" >/dev/null && pass "the timeline lists $snap with its label" ||
        fail "snapshots: $(sp snapshots "$id" </dev/null)"

js=$(sp snapshot --json --label again "$id" </dev/null)
fz=$(json_get "$js" freeze_ms)
case $fz in [0-9]*) pass "a snapshot's answer says how long the sandbox was frozen: $fz ms" ;; *) fail "no freeze_ms in $js" ;; esac
case $(json_get "$js" store_snapshot) in [0-9a-f][0-9a-f][0-9a-f][0-9a-f]*) pass "and names its store record" ;; *) fail "no store_snapshot in $js" ;; esac

say "fork 2 from the snapshot"
t0=$(now_ms)
forks=$(sp fork --snapshot "$snap" --count 2 "$id" </dev/null); rc=$?
t1=$(now_ms)
expect_eq "fork --count 2 exits 0" "$rc" "0"
set -- $forks
expect_eq "fork printed 2 ids" "$#" "2"
f1=${1:-none} f2=${2:-none}
echo "forks: $f1 $f2 ($((t1 - t0)) ms)"
[ "$f1" != "$f2" ] && [ "$f1" != "$id" ] && [ "$f2" != "$id" ] && pass "the forks are new, distinct sessions" ||
        fail "fork ids: '$forks' (parent $id)"
for f in $f1 $f2; do
        record_sandbox "$f"
        expect_eq "$f state" "$(field "$f" state)" "running"
        expect_eq "$f parent_session" "$(field "$f" parent_session)" "$id"
        expect_eq "$f source_snapshot" "$(field "$f" source_snapshot)" "$snap"
        expect_eq "$f starts with the draft" "$(sp exec "$f" -- cat /root/work/draft.txt </dev/null)" "title
first draft"
done
[ "$(field "$f1" sandbox_id)" != "$(field "$f2" sandbox_id)" ] && pass "each fork has its own sandbox" ||
        fail "the forks share a sandbox"

say "each fork edits the draft differently"
sp exec "$f1" -- sh -c 'echo "ending A" >>/root/work/draft.txt' </dev/null
sp exec "$f2" -- sh -c 'sed -i "s/first draft/second draft (B)/" /root/work/draft.txt && echo b >/root/work/only-b.txt' </dev/null
expect_eq "fork 1 has its edit only" "$(sp exec "$f1" -- cat /root/work/draft.txt </dev/null)" "title
first draft
ending A"
expect_eq "fork 2 has its edit only" "$(sp exec "$f2" -- cat /root/work/draft.txt </dev/null)" "title
second draft (B)"
sp exec "$f1" -- test -e /root/work/only-b.txt </dev/null
expect_eq "fork 2's new file is not in fork 1 (test -e exit)" "$?" "1"
expect_eq "the parent is unchanged" "$(sp exec "$id" -- cat /root/work/draft.txt </dev/null)" "title
first draft"
sp exec "$id" -- test -e /root/work/only-b.txt </dev/null
expect_eq "fork 2's new file is not in the parent (test -e exit)" "$?" "1"

say "the parent goes on; a fork of now sees what it has at that moment"
sp exec "$id" -- sh -c 'echo "parent later" >>/root/work/draft.txt' </dev/null
f3=$(sp fork "$id" </dev/null); rc=$?
expect_eq "fork (of now) exits 0" "$rc" "0"
case $f3 in ses_*) pass "fork printed $f3" ;; *) fail "fork printed '$f3'" ;; esac
record_sandbox "$f3"
expect_eq "the fork of now has the parent's latest draft" "$(sp exec "$f3" -- cat /root/work/draft.txt </dev/null)" "title
first draft
parent later"
sp exec "$id" -- sh -c 'echo "after the fork" >>/root/work/draft.txt' </dev/null
expect_eq "a later parent edit does not reach that fork" "$(sp exec "$f3" -- tail -n 1 /root/work/draft.txt </dev/null)" "parent later"
expect_eq "fork 1 still has its own draft" "$(sp exec "$f1" -- tail -n 1 /root/work/draft.txt </dev/null)" "ending A"

say "a fork outlives its parent"
sp rm "$id" >/dev/null && pass "rm parent $id" || fail "rm parent"
expect_eq "fork 2 still reads its draft" "$(sp exec "$f2" -- head -n 1 /root/work/draft.txt </dev/null)" "title"
sp rm "$f1" "$f2" "$f3" >/dev/null && pass "rm forks" || fail "rm forks"
finish
