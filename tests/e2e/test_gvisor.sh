#!/bin/bash
# Issue 7, the gvisor runtime: processes survive pause → resume (same pid, counter goes on
# from where it was), a python3 http.server answers after resume without a restart, three
# forks of one memory snapshot run on independently, a crash recovers the processes of
# the newest memory snapshot, and ns and gvisor sessions run side by side with their own
# limits. Skipped when runsc is absent.
. "$(dirname "$0")/lib.sh"

RUNSC=${SPACE_RUNSC:-/usr/bin/runsc}
if [ ! -x "$RUNSC" ]; then
        echo "FAIL: runsc is not installed at $RUNSC (scripts/install-deps installs it)"
        exit 1
fi

counter() { sp exec "$1" -- cat /root/counter </dev/null 2>/dev/null; }
# ps_pid ID: pid of the first running background process the session lists
ps_pid() { sp ps "$1" </dev/null 2>/dev/null | awk '$2 == "running" { print $1; exit }'; }
memory_event() { events_json "$1" | grep '"kind":"memory"' | grep "\"event\":\"$2\"" | tail -n 1; }
ge() { [ -n "$1" ] && [ -n "$2" ] && [ "$1" -ge "$2" ] 2>/dev/null; }

say "create a gvisor session"
id=$(new_sandbox --template base --runtime gvisor --snapshot-interval 0) && pass "create printed $id" || { fail "create --runtime gvisor"; finish; }
js=$(sp inspect --json "$id")
expect_eq "runtime" "$(json_get "$js" runtime)" "gvisor"
expect_eq "capability memory_snapshots" "$(json_get "$js" capabilities.memory_snapshots)" "true"
expect_eq "a command runs" "$(sp exec "$id" -- python3 -c 'print(6*7)' </dev/null)" "42"
expect_eq "ls works (statx shim)" "$(sp exec "$id" -- sh -c 'mkdir -p /root/d && touch /root/d/a /root/d/b && ls /root/d | tr "\n" " "' </dev/null)" "a b "
expect_eq "stat works (statx shim)" "$(sp exec "$id" -- stat -c '%U %a' /etc/passwd </dev/null)" "root 644"
expect_eq "files written inside are root's inside" "$(sp exec "$id" -- sh -c 'echo x >/root/f; python3 -c "import os; print(os.stat(\"/root/f\").st_uid)"' </dev/null)" "0"

say "continuity: a counter every 100 ms, pause, resume"
bg=$(sp exec -d "$id" -- sh -c 'i=0; while :; do i=$((i+1)); echo $i >/root/counter.new; mv /root/counter.new /root/counter; echo "tick $i"; sleep 0.1; done' </dev/null)
[ "$bg" -gt 0 ] 2>/dev/null && pass "the counter runs as pid $bg" || fail "exec -d: '$bg'"
sp exec -d "$id" -- sh -c 'cd /root && echo hello-from-gvisor >index.html && exec python3 -m http.server 8000 --bind 127.0.0.1' </dev/null >"$TMPD/web.pid"
web=$(cat "$TMPD/web.pid")
get_page() { sp exec "$id" -- python3 -c 'import urllib.request; print(urllib.request.urlopen("http://127.0.0.1:8000/index.html", timeout=5).read().decode().strip())' </dev/null 2>/dev/null; }
wait_until 20 sh -c "[ \"\$($SPACE exec $id -- cat /root/counter </dev/null 2>/dev/null)\" -ge 10 ] 2>/dev/null" && pass "the counter reached 10" || fail "the counter did not reach 10"
wait_until 20 get_page >/dev/null && pass "http.server (pid $web) answers before the pause" || fail "http.server does not answer"
before=$(counter "$id")
t0=$(now_ms)
sp pause "$id" >/dev/null </dev/null && pass "pause" || fail "pause"
echo "pause took $(( $(now_ms) - t0 )) ms"
ev=$(memory_event "$id" checkpoint)
echo "$ev"
case $ev in *'"memory":true'*) pass "the pause stored a memory image" ;; *) fail "no memory image in the pause: $ev" ;; esac
pause_snap=$(field "$id" head_snapshot)
t0=$(now_ms)
sp resume "$id" >/dev/null </dev/null && pass "resume" || fail "resume"
echo "resume took $(( $(now_ms) - t0 )) ms"
record_sandbox "$id"
after=$(counter "$id")
ge "$after" "$before" && pass "counter after resume ($after) continues from before the pause ($before)" ||
        fail "counter after resume '$after' < before the pause '$before' (restarted?)"
expect_eq "the counter has the same pid" "$(ps_pid "$id")" "$bg"
sleep 0.5
later=$(counter "$id")
ge "$later" $((after + 1)) && pass "and it keeps counting ($after → $later)" || fail "the counter stopped: $after → $later"
expect_eq "http.server answers after resume" "$(get_page)" "hello-from-gvisor"
sp ps "$id" </dev/null | grep -q "^$web .*running" && pass "http.server is the same process (pid $web)" ||
        fail "http.server pid $web is not running: $(sp ps "$id" </dev/null)"
case $(memory_event "$id" restored) in *'"memory":true'*) pass "the event log says the processes were restored" ;;
*) fail "no 'restored' memory event" ;; esac
out=$(sp logs "$id" "$bg" </dev/null 2>&1)
echo "$out" | grep -qx "tick 1" && pass "its output from before the pause is still there (logs)" || fail "logs: $(echo "$out" | head -3)"
echo "$out" | grep -qx "tick $((after + 1))" && pass "and its output after the resume" || fail "no 'tick $((after + 1))' in logs"

say "fork ×3 from the pause snapshot $pause_snap"
forks=$(sp fork -s "$pause_snap" -n 3 "$id" </dev/null)
n=$(echo "$forks" | wc -w)
expect_eq "three sessions" "$n" "3"
for f in $forks; do
        record_sandbox "$f"
        c=$(counter "$f")
        ge "$c" "$before" && pass "$f: counter $c starts at the snapshot's value (≥ $before)" || fail "$f: counter '$c' < $before"
        expect_eq "$f: the counter process is pid $bg there too" "$(ps_pid "$f")" "$bg"
done
# shellcheck disable=SC2086
set -- $forks
f1=$1 f2=$2 f3=$3
sp exec "$f1" -- sh -c "kill $bg" </dev/null
sleep 0.3
s1=$(counter "$f1"); s2=$(counter "$f2"); s3=$(counter "$f3")
sleep 1
e1=$(counter "$f1"); e2=$(counter "$f2"); e3=$(counter "$f3")
expect_eq "$f1: killed there, its counter stopped" "$e1" "$s1"
ge "$e2" $((s2 + 3)) && pass "$f2 counts on independently ($s2 → $e2)" || fail "$f2: $s2 → $e2"
ge "$e3" $((s3 + 3)) && pass "$f3 counts on independently ($s3 → $e3)" || fail "$f3: $s3 → $e3"
ge "$(counter "$id")" "$after" && pass "the source session is untouched" || fail "source counter went back"

say "crash recovery from the newest memory snapshot"
# The snapshot holds a counter at least this high; what a read after the restart
# sees may already be past the snapshot's value, so it is no lower bound.
before_msnap=$(counter "$f2")
msnap=$(sp snapshot --memory --json "$f2" </dev/null)
case $msnap in *'"memory":true'*) pass "snapshot --memory of $f2 holds the processes" ;; *) fail "snapshot --memory: $msnap" ;; esac
running_again() { [ "$(field "$f2" state)" = running ] && [ -n "$(ps_pid "$f2")" ]; }
wait_until 20 running_again && pass "$f2 runs on after the memory snapshot" || fail "$f2 after snapshot --memory: $(field "$f2" state)"
record_sandbox "$f2"
# Right after a restart from the image an exec may still meet the old relay: read again.
read_at_snap() { at_snap=$(counter "$f2"); [ -n "$at_snap" ]; }
wait_until 10 read_at_snap && pass "$f2 answers an exec after the restart (counter $at_snap)" ||
        fail "$f2: no exec answer within 10 s of the restart"
ipid=$(field "$f2" init_pid)
[ "$ipid" -gt 1 ] 2>/dev/null && pass "$f2 sandbox pid $ipid" || fail "no sandbox pid for $f2"
kill -9 "$ipid"
recovered() { [ "$(field "$f2" state)" = running ] && [ "$(field "$f2" init_pid)" != "$ipid" ] && [ -n "$(ps_pid "$f2")" ]; }
wait_until 20 recovered && pass "$f2 runs again" || fail "$f2 did not come back: $(field "$f2" state)"
record_sandbox "$f2"
expect_eq "recoveries" "$(field "$f2" recoveries)" "1"
# runsc's sandbox is not the daemon's child: the reason must not invent a wait status.
rec=$(events_json "$f2" | grep '"kind":"recovery"' | tail -n 1)
case $rec in *"sandbox process $ipid ended, how is unknown"*) pass "the recovery reason says how little is known of the end" ;;
*) fail "recovery reason: $rec" ;; esac
expect_eq "the counter process was restored, same pid" "$(ps_pid "$f2")" "$bg"
c=$(counter "$f2")
ge "$c" "$before_msnap" && pass "its counter ($c) goes on from the newest memory snapshot (≥ $before_msnap)" ||
        fail "counter '$c' after recovery (< $before_msnap, read before the snapshot: an older snapshot?)"
case $(memory_event "$f2" restored) in *'"memory":true'*) pass "recovery restored memory (event)" ;; *) fail "no memory restore on recovery" ;; esac

say "no memory image: boot from files and say so"
# A fork of a snapshot of a running session is file-only (memory goes with pause).
fsnap=$(sp snapshot "$f3" </dev/null) && pass "snapshot $fsnap of $f3 (files only: no --memory)" || fail "snapshot of $f3"
f4=$(sp fork -s "$fsnap" "$f3" </dev/null) && pass "fork $f4 of it" || fail "fork of $fsnap"
record_sandbox "$f4"
ev=$(memory_event "$f4" booted)
case $ev in *'"memory":false'*'no memory image'*) pass "event: booted from files ($ev)" ;; *) fail "no 'booted' event: '$ev'" ;; esac
expect_eq "no counter runs there" "$(ps_pid "$f4")" ""

say "ns and gvisor side by side, each with its own limits"
nsid=$(new_sandbox --template base --runtime ns --memory 200M --pids 64 --snapshot-interval 0) && pass "ns session $nsid" || fail "ns create"
gvid=$(new_sandbox --template base --runtime gvisor --memory 300M --pids 128 --snapshot-interval 0) && pass "gvisor session $gvid" || fail "gvisor create"
expect_eq "ns runtime" "$(field "$nsid" runtime)" "ns"
expect_eq "ns has no memory snapshots" "$(field "$nsid" capabilities.memory_snapshots)" "false"
expect_eq "gvisor runtime" "$(field "$gvid" runtime)" "gvisor"
# gvisor's host cgroup counts the sentry's threads: twice the session's pids and 256 more
# (src/runtime/gvisor/gvisor.c host_pids), so a burst of processes cannot starve the sentry
for pair in "$nsid 209715200 64" "$gvid 314572800 $((128 * 2 + 256))"; do
        set -- $pair
        sbx=$(field "$1" sandbox_id)
        lim=$(cat /sys/fs/cgroup/memory/space/"$sbx"/memory.limit_in_bytes /sys/fs/cgroup/space/"$sbx"/memory.max 2>/dev/null | head -n 1)
        expect_eq "$1: memory limit of its cgroup" "$lim" "$2"
        pl=$(cat /sys/fs/cgroup/pids/space/"$sbx"/pids.max /sys/fs/cgroup/space/"$sbx"/pids.max 2>/dev/null | head -n 1)
        expect_eq "$1: pids limit of its cgroup" "$pl" "$3"
        expect_eq "$1: runs commands" "$(sp exec "$1" -- echo ok </dev/null)" "ok"
done
sp exec "$gvid" -- sh -c 'echo gv >/root/who' </dev/null
sp exec "$nsid" -- sh -c 'echo ns >/root/who' </dev/null
expect_eq "files stay apart (gvisor)" "$(sp exec "$gvid" -- cat /root/who </dev/null)" "gv"
expect_eq "files stay apart (ns)" "$(sp exec "$nsid" -- cat /root/who </dev/null)" "ns"

say "a template's default runtime: sessions from it run on it unless they ask"
sp template build base-gv --from-dir "$DATA/templates/base/rootfs" --runtime gvisor </dev/null >/dev/null &&
        pass "template base-gv built with runtime gvisor" || fail "template build --runtime gvisor"
expect_eq "the template list shows its runtime" \
        "$(sp template ls --json </dev/null | jq -c '[.templates[] | select(.name == "base-gv") | .runtime]')" '["gvisor"]'
tdef=$(new_sandbox --template base-gv --snapshot-interval 0) || fail "create from base-gv"
expect_eq "a create that names no runtime runs on the template's" "$(field "$tdef" runtime)" "gvisor"
tns=$(new_sandbox --template base-gv --runtime ns --snapshot-interval 0) || fail "create from base-gv --runtime ns"
expect_eq "a create that names one runs on that one" "$(field "$tns" runtime)" "ns"
expect_eq "an unknown runtime is refused at build" "$(sp template build base-bad --from-dir "$DATA/templates/base/rootfs" --runtime nope </dev/null >/dev/null 2>&1; echo $?)" "1"

say "delete everything; nothing of runsc is left"
all="$id $forks $f4 $nsid $gvid $tdef $tns"
for s in $all; do sp rm "$s" </dev/null >/dev/null || fail "rm $s"; done
# mine SBX...: those of the sandboxes this test made that runsc still lists
mine() { "$RUNSC" --root="$DATA/runsc" list 2>/dev/null | awk 'NR > 1 { print $1 }' | grep -Fx -f "$TMPD/sbx"; }
for s in $all; do grep "^$s " "$STATE/created" | awk '{ print $2 }'; done | sort -u >"$TMPD/sbx"
none_left() { [ -z "$(mine)" ]; }
wait_until 10 none_left
left=$(mine)
expect_eq "runsc lists none of this test's containers" "$left" ""
sp template rm base-gv </dev/null >/dev/null || fail "template rm base-gv"
finish
