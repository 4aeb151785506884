#!/bin/bash
# Issue 4, daemon crash loop: a workload writes files and takes snapshots in three
# sessions (one with rolling snapshots every second, one with manual ones only, one that
# is paused and resumed) while spaced is killed with -9 at random moments and restarted,
# for $ROUNDS rounds. Afterwards every snapshot the CLI acknowledged is in its session's
# timeline, the store verifies, each of them materializes with space-store and holds what
# was written before it, and every session is listed, running or paused, and runs
# commands. This test runs its own spaced on its own data dir (it has to kill it); the
# base template is built there from the debootstrap cache.
. "$(dirname "$0")/lib.sh"

ROUNDS=${SPACE_CRASH_ROUNDS:-30}
STORE_TOOL=$BIN/space-store
DATA2=$(mktemp -d /var/tmp/space-e2e-crash.XXXXXX)
LOG=$STATE/crashloop-spaced.log
export SPACE_HOST="unix:$DATA2/spaced.sock"
: >"$LOG"
SPACED_PID=
WORK_PID=

start_spaced() { own_spaced "$DATA2" "$LOG"; }

stop_all() {
        [ -n "$WORK_PID" ] && kill "$WORK_PID" 2>/dev/null && wait "$WORK_PID" 2>/dev/null
        WORK_PID=
        own_spaced_stop
}
trap 'stop_all; rm -rf "$TMPD"' EXIT

say "a spaced of our own on $DATA2 (log: $LOG)"
start_spaced && pass "spaced answers (pid $SPACED_PID)" || { fail "spaced did not start"; finish; }
t0=$(now_ms)
sp template build base --debootstrap bookworm --packages python3 >"$TMPD/build.log" 2>&1 &&
        pass "base template built in $(( $(now_ms) - t0 )) ms" || { fail "template build: $(tail -n 5 "$TMPD/build.log")"; finish; }

s_roll=$(sp create --snapshot-interval 1s </dev/null) && pass "session with rolling snapshots: $s_roll" || fail "create 1"
s_man=$(sp create --snapshot-interval 0 </dev/null) && pass "session with manual snapshots: $s_man" || fail "create 2"
s_pause=$(sp create --snapshot-interval 0 </dev/null) && pass "session to pause and resume: $s_pause" || fail "create 3"
SESSIONS="$s_roll $s_man $s_pause"
[ "$(echo $SESSIONS | wc -w)" -eq 3 ] || finish

# The workload: "ID SNAP I strict|weak" for every acknowledged snapshot. strict when the
# session was not recovered between the write and the snapshot (its recoveries count did
# not move): the snapshot must then hold w/I. Otherwise only its own consistency counts.
ACKED=$TMPD/acked
: >"$ACKED"
workload() {
        i=0
        while :; do
                i=$((i + 1))
                for s in $s_roll $s_man; do
                        r0=$(field "$s" recoveries)
                        # 2 MB of random bytes too, so captures last long enough to be hit
                        sp exec "$s" -- sh -c "mkdir -p /root/w && head -c 2000000 /dev/urandom >/root/w/blob && echo $i >/root/w/$i && echo $i >/root/w/last" </dev/null >/dev/null 2>&1 || continue
                        snap=$(sp snapshot --label "i$i" "$s" </dev/null 2>/dev/null) || continue
                        case $snap in snap_*) ;; *) continue ;; esac
                        r1=$(field "$s" recoveries)
                        kind=weak
                        [ -n "$r0" ] && [ "$r0" = "$r1" ] && kind=strict
                        echo "$s $snap $i $kind" >>"$ACKED"
                done
                if [ $((i % 4)) -eq 0 ]; then
                        sp pause "$s_pause" </dev/null >/dev/null 2>&1
                        sp exec "$s_pause" -- sh -c "echo $i >>/root/p" </dev/null >/dev/null 2>&1
                        sp resume "$s_pause" </dev/null >/dev/null 2>&1
                fi
        done
}
workload &
WORK_PID=$!

say "$ROUNDS rounds of kill -9 spaced at a random moment, then restart"
restart_ms_total=0
restart_ms_max=0
round_bad=0
rounds_done=0
for round in $(seq 1 "$ROUNDS"); do
        sleep "0.$(( (RANDOM % 13) + 2 ))"
        kill -9 "$SPACED_PID"
        wait "$SPACED_PID" 2>/dev/null
        t0=$(now_ms)
        if ! start_spaced; then
                fail "round $round: spaced did not come back"
                break
        fi
        dt=$(( $(now_ms) - t0 ))
        restart_ms_total=$((restart_ms_total + dt))
        [ $dt -gt $restart_ms_max ] && restart_ms_max=$dt
        # every round, not only at the end: each running session takes a command (a
        # sandbox left frozen by a kill during a capture would hang it: hence timeout)
        for s in $SESSIONS; do
                ok=0
                for try in 1 2 3 4 5; do
                        st=$(field "$s" state)
                        if [ "$st" = paused ]; then ok=1; break; fi
                        if [ "$st" = running ] && timeout 10 "$SPACE" exec "$s" -- true </dev/null >/dev/null 2>&1; then ok=1; break; fi
                        sleep 0.3
                done
                [ $ok -eq 1 ] || { round_bad=$((round_bad + 1)); echo "FAIL: round $round: $s ($st) takes no command"; }
        done
        printf 'round %d: restarted in %d ms, %d snapshots acknowledged so far\n' "$round" "$dt" "$(wc -l <"$ACKED")"
        rounds_done=$round
done
[ "$rounds_done" -eq "$ROUNDS" ] &&
        pass "$ROUNDS rounds; restart took $((restart_ms_total / ROUNDS)) ms on average, $restart_ms_max ms at most" ||
        fail "only $rounds_done of $ROUNDS rounds: spaced did not come back after a kill"
expect_eq "rounds after which a session took no command" "$round_bad" "0"
kill "$WORK_PID" 2>/dev/null
wait "$WORK_PID" 2>/dev/null
WORK_PID=
nacked=$(wc -l <"$ACKED")
[ "$nacked" -ge 10 ] && pass "$nacked snapshots acknowledged during the rounds" || fail "only $nacked snapshots acknowledged: the workload made no progress"
echo "spaced log: $(grep -c . "$LOG") lines; last:"; tail -n 3 "$LOG"

say "every session is in a consistent state"
settled() {
        for s in $SESSIONS; do
                st=$(field "$s" state)
                [ "$st" = running ] || [ "$st" = paused ] || return 1
        done
}
wait_until 30 settled && pass "all three are running or paused" ||
        fail "not settled after 30 s: $(for s in $SESSIONS; do echo "$s=$(field "$s" state)"; done)"
listed=$(sp ls --quiet)
for s in $SESSIONS; do
        echo "$listed" | grep -qx "$s" && pass "$s is listed ($(field "$s" state), $(field "$s" recoveries) recoveries)" || fail "$s is not listed"
        if state_is "$s" paused; then
                sp resume "$s" >/dev/null </dev/null && pass "$s resumes" || fail "$s does not resume: $(sp resume "$s" 2>&1)"
        fi
        out=$(sp exec "$s" -- sh -c 'echo ok' </dev/null 2>&1)
        expect_eq "exec in $s" "$out" "ok"
done

say "every acknowledged snapshot is in its timeline, materializes and verifies"
for s in $SESSIONS; do sp snapshots --json "$s" >"$TMPD/snaps.$s" </dev/null || fail "snapshots of $s"; done
if "$STORE_TOOL" --store "$DATA2/store" verify --json >"$TMPD/verify" 2>"$TMPD/verify.err"; then
        v=$(head -c 4096 "$TMPD/verify")
        problems=$(json_get "$v" problems)
        nsnap=$(json_get "$v" snapshots)
        [ "$problems" = 0 ] && [ "${nsnap:-0}" -gt 0 ] && pass "space-store verify: $v" || fail "space-store verify: $v"
else
        fail "space-store verify failed: $(cat "$TMPD/verify") $(tail -n 5 "$TMPD/verify.err")"
fi
# space-store get takes the snapshot's store record: "store_snapshot" in the daemon's
# object; without it, the store's log maps the snapshot's "root" tree to a record.
"$STORE_TOOL" --store "$DATA2/store" log --json >"$TMPD/storelog" 2>"$TMPD/storelog.err" ||
        fail "space-store log: $(cat "$TMPD/storelog.err")"
missing=0 bad=0 strict=0 weak=0
# has_w[session]: an earlier acknowledged snapshot held /root/w. Every later one must too:
# the workload never removes it, and a recovery goes back to the newest snapshot, which is
# no older than that one. Before it, a recovery may go back to a state without w.
declare -A has_w=()
while read -r s snap i kind; do
        root=$(jq -r --arg id "$snap" '[.snapshots[] | select(.id == $id)] | .[0].root // ""' "$TMPD/snaps.$s")
        if [ -z "$root" ]; then
                missing=$((missing + 1))
                echo "FAIL: $snap of $s (acknowledged after write $i) is not in the timeline"
                continue
        fi
        rec=$(jq -rn --slurpfile sn "$TMPD/snaps.$s" --arg id "$snap" --arg root "$root" --arg ses "$s" '
([$sn[0].snapshots[] | select(.id == $id)] | .[0].store_snapshot // "") as $rec
| if $rec != "" then $rec
  else [inputs | select(.root == $root)] | (map(select(.session == $ses)) + map(select(.session != $ses))) | .[0].snapshot // ""
  end' "$TMPD/storelog")
        if [ -z "$rec" ]; then
                bad=$((bad + 1))
                echo "FAIL: no snapshot record in the store holds root $root of $snap"
                continue
        fi
        dir=$TMPD/m
        rm -rf "$dir"
        if ! "$STORE_TOOL" --store "$DATA2/store" --quiet get "$rec" "$dir" >"$TMPD/get" 2>&1; then
                bad=$((bad + 1))
                echo "FAIL: $snap (root $root) does not materialize: $(tail -n 2 "$TMPD/get")"
                continue
        fi
        w=$(find "$dir" -type d -path '*/root/w' | head -n 1)
        if [ -z "$w" ] && [ -n "${has_w[$s]:-}" ]; then
                bad=$((bad + 1))
                echo "FAIL: $snap of $s has no /root/w, which snapshot ${has_w[$s]} before it held"
                continue
        fi
        [ -n "$w" ] && [ -z "${has_w[$s]:-}" ] && has_w[$s]=$snap
        if [ "$kind" = strict ]; then
                strict=$((strict + 1))
                if [ -z "$w" ] || [ "$(cat "$w/$i" 2>/dev/null)" != "$i" ]; then
                        bad=$((bad + 1))
                        echo "FAIL: $snap of $s lacks w/$i written before it (w: $(ls "$w" 2>/dev/null | sort -n | tail -n 3 | tr '\n' ' '))"
                fi
        else
                weak=$((weak + 1))
                last=$(cat "$w/last" 2>/dev/null)
                if [ -n "$w" ] && { [ -z "$last" ] || [ "$(cat "$w/$last" 2>/dev/null)" != "$last" ] || [ "$last" -gt "$i" ]; }; then
                        bad=$((bad + 1))
                        echo "FAIL: $snap of $s is inconsistent: w/last='$last'"
                fi
        fi
done <"$ACKED"
expect_eq "acknowledged snapshots missing from their timeline" "$missing" "0"
expect_eq "acknowledged snapshots that do not materialize or lack their write" "$bad" "0"
echo "checked $strict snapshots strictly (write before it present) and $weak for consistency (a recovery came between)"
[ "$strict" -gt 0 ] && pass "at least one strict check ran" || fail "no strict check ran"

say "stop: nothing of the sandboxes is left"
sbxs=$(for s in $SESSIONS; do field "$s" sandbox_id; done)
stop_all
grep -qF "$DATA2" /proc/self/mountinfo && fail "mounts left under $DATA2: $(grep -cF "$DATA2" /proc/self/mountinfo)" || pass "no mounts under $DATA2"
cg_left=0
for b in $sbxs; do
        for cg in /sys/fs/cgroup/*/space/"$b" /sys/fs/cgroup/space/"$b"; do
                [ -d "$cg" ] && { fail "cgroup left: $cg"; cg_left=$((cg_left + 1)); }
        done
done
# each of the three sessions was running (resumed above), so each had a sandbox to check
[ "$(echo $sbxs | wc -w)" -eq 3 ] && [ "$cg_left" -eq 0 ] &&
        pass "no cgroup left of the 3 sessions' sandboxes ($(echo $sbxs))" ||
        fail "cgroups of sandboxes '$(echo $sbxs)' (want 3): $cg_left left"
if grep -qE "ERROR: AddressSanitizer|runtime error:" "$LOG"; then fail "sanitizer reports in $LOG"; fi
[ "$FAILS" -eq 0 ] && rm -rf "$DATA2" || echo "data dir kept: $DATA2"
finish
