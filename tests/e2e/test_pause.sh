#!/bin/bash
# Issue 4, pause/resume: after pause no process, mount or cgroup of the session is left on
# the host; resume brings back the same id with all its files and its full event log.
. "$(dirname "$0")/lib.sh"

id=$(new_sandbox --template base) && pass "create printed $id" || { fail "create"; finish; }
sbx=$(sandbox_of "$id")
ipid=$(init_pid_of "$id")

say "work in the session: files, commands, an agent's note, a background process"
sp exec "$id" -- sh -c 'mkdir -p /root/proj/src && echo "int main;" >/root/proj/src/a.c && seq 1 100000 >/root/proj/numbers && ln -s src/a.c /root/proj/link && chmod 600 /root/proj/numbers' </dev/null
head -c 3000000 /dev/urandom >"$TMPD/blob"
sp cp "$TMPD/blob" "$id:/root/proj/blob" && pass "copied a 3 MB blob in" || fail "cp blob"
want_sum=$(sp exec "$id" -- sh -c 'cd /root/proj && find . -type f -o -type l | sort | xargs sha256sum; stat -c "%n %a" numbers; readlink link' </dev/null)
[ -n "$want_sum" ] && pass "fingerprint of the files taken" || fail "no fingerprint"
seq_note=$(sp event --kind note --data '{"text":"before pause"}' "$id" </dev/null); rc=$?
expect_eq "event append exits 0" "$rc" "0"
[ "$seq_note" -gt 0 ] 2>/dev/null && pass "the note got seq $seq_note" || fail "event printed '$seq_note'"
bg=$(sp exec -d "$id" -- sleep 1000 </dev/null)
[ "$bg" -gt 0 ] 2>/dev/null && pass "a background sleep runs as pid $bg" || fail "exec -d: '$bg'"
events_json "$id" >"$TMPD/ev.before"
n_before=$(wc -l <"$TMPD/ev.before")
[ "$n_before" -ge 4 ] && pass "$n_before events before the pause" || fail "only $n_before events before the pause"
pids=$(host_pids "$sbx")
[ -n "$pids" ] && pass "host pids of $sbx: $(echo $pids)" || fail "no host pids found for $sbx"

say "pause"
t0=$(now_ms)
out=$(sp pause "$id" </dev/null); rc=$?
t1=$(now_ms)
expect_eq "pause exits 0" "$rc" "0"
expect_eq "pause prints the id" "$out" "$id"
echo "pause took $((t1 - t0)) ms"
js=$(sp inspect --json "$id")
expect_eq "state" "$(json_get "$js" state)" "paused"
expect_eq "sandbox_id while paused" "$(json_get "$js" sandbox_id)" ""
expect_eq "init_pid while paused" "$(json_get "$js" init_pid)" ""
head=$(json_get "$js" head_snapshot)
case $head in snap_*) pass "head_snapshot $head" ;; *) fail "head_snapshot '$head'" ;; esac
reason=$(sp snapshots --json "$id" | jq -r --arg id "$head" '[.snapshots[] | select(.id == $id)] | if length > 0 then .[0].reason else "missing" end')
expect_eq "the head snapshot's reason" "$reason" "pause"
expect_eq "nothing left of $sbx (mounts, cgroups, init)" "$(leftovers "$sbx" "$ipid")" ""
# shellcheck disable=SC2086
expect_eq "none of its host processes is alive" "$(alive_of $pids)" ""
grep -qF "$sbx" /proc/self/mountinfo && fail "a mount still names $sbx" || pass "no mount names $sbx"
ls "$LAYERS/sandboxes/$sbx" >/dev/null 2>&1 && fail "its directory $LAYERS/sandboxes/$sbx is still there" || pass "no sandbox directory left"
expect_eq "ls shows it paused" "$(sp ls | awk -v i="$id" '$1 == i { print $2 }')" "paused"
sp pause "$id" >/dev/null 2>&1 </dev/null; expect_eq "pausing it again is an error" "$?" "1"

say "resume"
t0=$(now_ms)
out=$(sp resume "$id" </dev/null); rc=$?
t1=$(now_ms)
expect_eq "resume exits 0" "$rc" "0"
expect_eq "resume prints the id" "$out" "$id"
echo "resume took $((t1 - t0)) ms"
record_sandbox "$id"
js=$(sp inspect --json "$id")
expect_eq "state" "$(json_get "$js" state)" "running"
nsbx=$(json_get "$js" sandbox_id)
[ -n "$nsbx" ] && [ "$nsbx" != "$sbx" ] && pass "a new sandbox $nsbx" || fail "sandbox after resume: '$nsbx' (was $sbx)"
expect_eq "the same id in the object" "$(json_get "$js" id)" "$id"
got_sum=$(sp exec "$id" -- sh -c 'cd /root/proj && find . -type f -o -type l | sort | xargs sha256sum; stat -c "%n %a" numbers; readlink link' </dev/null)
expect_eq "every file is back, same content, modes and link" "$got_sum" "$want_sum"
events_json "$id" >"$TMPD/ev.after"
head -n "$n_before" "$TMPD/ev.after" | cmp -s - "$TMPD/ev.before" && pass "the event log before the pause is intact" ||
        fail "the event log changed: $(diff "$TMPD/ev.before" "$TMPD/ev.after" | head -5)"
grep -q '"kind":"lifecycle".*"paused"' "$TMPD/ev.after" && pass "a 'paused' event" || fail "no paused event"
grep -q '"kind":"lifecycle".*"resumed"' "$TMPD/ev.after" && pass "a 'resumed' event" || fail "no resumed event"
grep -q '"text":"before pause"' "$TMPD/ev.after" && pass "the agent's note is still there" || fail "the note is gone"
expect_eq "commands run again" "$(sp exec "$id" -- python3 -c 'print(6*7)' </dev/null)" "42"
sp resume "$id" >/dev/null 2>&1 </dev/null; expect_eq "resuming a running session is an error" "$?" "1"

say "pause and resume a second time"
sp pause "$id" >/dev/null </dev/null && pass "pause again" || fail "pause again"
expect_eq "nothing left of $nsbx" "$(leftovers "$nsbx" "")" ""
sp resume "$id" >/dev/null </dev/null && pass "resume again" || fail "resume again"
record_sandbox "$id"
expect_eq "files still there" "$(sp exec "$id" -- tail -n 1 /root/proj/numbers </dev/null)" "100000"

say "the CLI with a session token: the right one works, a wrong one changes nothing"
id2=$(sp create --token-file "$TMPD/tok" </dev/null) && pass "create --token-file: $id2" || fail "create --token-file"
record_sandbox "$id2"
expect_eq "the token file is mode 600" "$(stat -c %a "$TMPD/tok")" "600"
tok=$(cat "$TMPD/tok")
[ ${#tok} -ge 43 ] && pass "a token of ${#tok} characters" || fail "token '$tok'"
out=$(SPACE_SESSION_TOKEN=$tok sp exec "$id2" -- echo yes </dev/null)
expect_eq "exec with the right token" "$out" "yes"
err=$(SPACE_SESSION_TOKEN=wrong-$tok sp pause "$id2" 2>&1 >/dev/null </dev/null); rc=$?
expect_eq "pause with a wrong token exits 1" "$rc" "1"
case $err in *token*|*nauthori*) pass "and says why: $err" ;; *) fail "unclear message: $err" ;; esac
expect_eq "the session still runs" "$(field "$id2" state)" "running"
SPACE_SESSION_TOKEN=wrong-$tok sp exec "$id2" -- true </dev/null 2>/dev/null
expect_eq "exec with a wrong token exits 1" "$?" "1"
out=$(sp connect --json --token "$tok" "$id2" </dev/null)
expect_eq "connect with the token answers the session" "$(json_get "$out" id)" "$id2"
sp connect --token "wrong-$tok" "$id2" >/dev/null 2>&1 </dev/null
expect_eq "connect with a wrong token exits 1" "$?" "1"
SPACE_SESSION_TOKEN=$tok sp rm "$id2" >/dev/null && pass "rm with the token" || fail "rm with the token"

sp rm "$id" >/dev/null && pass "rm $id" || fail "rm"
finish
