#!/bin/bash
# Issue 20, item 7: a workspace nested 300 and 1000 directories deep (past the store's old
# limit of 256) is snapshotted, paused and resumed, forked and restored with the file at
# the bottom intact; the session stays durable (a snapshot after it works too).
. "$(dirname "$0")/lib.sh"

# chain N: "d/d/.../d" (N names), the path of the deepest directory under /root/deepN
chain() { printf 'd/%.0s' $(seq 1 "$1") | sed 's:/$::'; }

id=$(new_sandbox --template base) && pass "create printed $id" || { fail "create"; finish; }
for n in 300 1000; do
        say "a directory $n deep with a file at the bottom"
        # cd one level at a time: no path given to mkdir is longer than a name
        sp exec "$id" -- sh -c "mkdir /root/deep$n && cd /root/deep$n && i=0 &&
                while [ \$i -lt $n ]; do mkdir d && cd d || exit 1; i=\$((i + 1)); done && echo bottom-$n > f" </dev/null
        expect_eq "made it" "$?" "0"
done
p300=/root/deep300/$(chain 300)/f
p1000=/root/deep1000/$(chain 1000)/f
expect_eq "the file 1000 deep reads back" "$(sp exec "$id" -- cat "$p1000" </dev/null)" "bottom-1000"

say "snapshot"
snap=$(sp snapshot --label deep "$id" 2>&1 </dev/null); rc=$?
expect_eq "snapshot exits 0 ($snap)" "$rc" "0"
case $snap in snap_*) pass "snapshot printed $snap" ;; *) fail "snapshot printed '$snap'"; finish ;; esac

say "pause and resume"
out=$(sp pause "$id" 2>&1 </dev/null); expect_eq "pause exits 0 ($out)" "$?" "0"
out=$(sp resume "$id" 2>&1 </dev/null); expect_eq "resume exits 0 ($out)" "$?" "0"
expect_eq "after resume, the file 300 deep" "$(sp exec "$id" -- cat "$p300" </dev/null)" "bottom-300"
expect_eq "after resume, the file 1000 deep" "$(sp exec "$id" -- cat "$p1000" </dev/null)" "bottom-1000"

say "fork from the snapshot"
f=$(sp fork --snapshot "$snap" "$id" 2>&1 </dev/null); rc=$?
expect_eq "fork exits 0 ($f)" "$rc" "0"
record_sandbox "$f"
expect_eq "the fork has the file 1000 deep" "$(sp exec "$f" -- cat "$p1000" </dev/null)" "bottom-1000"
sp rm "$f" >/dev/null </dev/null

say "restore"
sp exec "$id" -- sh -c "echo changed > $p1000 && rm $p300" </dev/null
out=$(sp restore "$id" "$snap" 2>&1 </dev/null); expect_eq "restore exits 0 ($out)" "$?" "0"
expect_eq "restored: the file 1000 deep" "$(sp exec "$id" -- cat "$p1000" </dev/null)" "bottom-1000"
expect_eq "restored: the file 300 deep" "$(sp exec "$id" -- cat "$p300" </dev/null)" "bottom-300"
s2=$(sp snapshot "$id" 2>&1 </dev/null); expect_eq "a snapshot after the restore ($s2)" "$?" "0"

say "deeper than the store's limit (2048 levels): the snapshot fails, and says so in an event"
c=$(chain 1000)
sp exec "$id" -- sh -c "mkdir /root/too && cd /root/too && mkdir -p $c && cd $c && mkdir -p $c && cd $c && mkdir -p $(chain 60)" </dev/null
expect_eq "made a chain 2060 deep" "$?" "0"
out=$(sp snapshot "$id" 2>&1 </dev/null); rc=$?
echo "  snapshot: $(echo "$out" | cut -c1-160)"
expect_eq "the snapshot fails" "$rc" "1"
ev=$(events_json "$id" | jq -sc '[.[] | select(.kind == "snapshot_failed")] | last | .data' 2>/dev/null)
echo "  event: $(echo "$ev" | cut -c1-160)"
case $ev in
*'"reason":"manual"'*'"error":"'*"the store's limit"*) pass "a snapshot_failed event records the reason and the error" ;;
*) fail "no snapshot_failed event: '$ev'" ;;
esac
sp exec "$id" -- rm -rf /root/too </dev/null
s3=$(sp snapshot "$id" 2>&1 </dev/null); expect_eq "with the chain gone, snapshots work again ($s3)" "$?" "0"
sp rm "$id" >/dev/null </dev/null && pass "rm $id" || fail "rm"
finish
