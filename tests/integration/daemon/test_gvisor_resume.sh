#!/bin/bash
# Integration test of a gvisor resume whose new sandbox is lost before space-init says
# HELLO (docs/runtime-gvisor.md, "A lost start"): runsc-fault.sh SIGKILLs the restored
# sandbox when the relay starts. One loss: the daemon starts another sandbox from the same
# snapshot and the resume works, the same process counting on. Two losses: the resume
# fails with the real reason (not a made-up signal), the session stays paused with its
# snapshot, and the next resume brings the same process back. Skipped without runsc.
# Usage: test_gvisor_resume.sh SPACED_BINARY   (space-init must sit next to it)
. "$(dirname "$0")/lib.sh" gvresume "${1:-}"

REAL=${SPACE_RUNSC:-/usr/bin/runsc}
[ -x "$REAL" ] || { echo "FAIL: runsc is not installed at $REAL (scripts/install-deps installs it)"; exit 1; }
export SPACE_TEST_REAL_RUNSC=$REAL
export SPACE_RUNSC=$(cd "$(dirname "$0")" && pwd)/runsc-fault.sh

ROOT=$T/rootfs
make_rootfs "$ROOT"
start_daemon --disk-volume-size 0 || exit 1
echo "# spaced $SPACED on $DATA, runsc through $SPACE_RUNSC"
api -X POST http://x/v1/templates -d "{\"name\":\"mini\",\"from_dir\":\"$ROOT\"}" >/dev/null
A=$(api -X POST http://x/v1/sessions -d '{"template":"mini","runtime":"gvisor","snapshot_interval_ms":0}' | jget id)
UA=http://x/v1/sessions/$A
check "a gvisor session $A" test "$(state_of "$A")" = running
BG=$(api -X POST "$UA/exec" -d '{"argv":["sh","-c","i=0; while :; do i=$((i+1)); echo $i >/root/c.new; mv /root/c.new /root/c; sleep 0.1; done"],"background":true}' | jget pid)
check "a counter runs in the background as pid $BG" test "$BG" -gt 0
counter() { sh_in "$A" 'cat /root/c'; }
bg_running() { api "$UA/processes" | jx '[req("processes")[] | select(req("pid") == $bg) | req("running")]' --argjson bg "$BG"; }
sleep 1

echo "# one lost start: the resume starts another sandbox"
api -X POST "$UA/pause" -d '{}' >/dev/null
check "paused" test "$(state_of "$A")" = paused
before=$(api "$UA" | jget head_snapshot)
echo 1 >"$DATA/fault"
C=$(code -X POST "$UA/resume" -d '{}')
check "the resume answers 200 (got $C)" test "$C" = 200
check "the fault was injected once" grep -q "killed sandbox" "$DATA/fault.log"
check "the daemon log says it started another" grep -q "was lost before it said hello" "$LOG"
check "running" test "$(state_of "$A")" = running
check "the same counter process runs on (pid $BG)" test "$(bg_running)" = "[true]"
c1=$(counter)
sleep 0.5
check "and counts ($c1 -> $(counter))" test "$(counter)" -gt "$c1"

echo "# two lost starts: the resume fails with the reason; nothing lost"
api -X POST "$UA/pause" -d '{}' >/dev/null
head=$(api "$UA" | jget head_snapshot)
check "paused again at $head (was $before)" test "$(state_of "$A")" = paused
echo 2 >"$DATA/fault"
R=$(api -X POST "$UA/resume" -d '{}')
echo "# $R"
case $R in *"how is unknown"*) ok "the resume failed with what is known (runsc's sandbox ended)" ;;
*) bad "resume answer: $R" ;; esac
case $R in *"signal 9"*) bad "the reason invents a signal: $R" ;; *) ok "no made-up signal in the reason" ;; esac
check "the session is still paused" test "$(state_of "$A")" = paused
check "at the same snapshot" test "$(api "$UA" | jget head_snapshot)" = "$head"
check "both faults were used" test "$(cat "$DATA/fault")" = 0
C=$(code -X POST "$UA/resume" -d '{}')
check "the next resume works (got $C)" test "$C" = 200
check "with the same counter process (pid $BG)" test "$(bg_running)" = "[true]"
c2=$(counter)
check "which went on from before ($c1 -> $c2)" test "$c2" -gt "$c1"
api -X DELETE "$UA" >/dev/null
finish gvresume
