#!/bin/bash
# Soak under hostile neighbours: concurrent clients create sessions, use them (a command,
# an upload, a download) and delete them, first alone (the reference), then while one
# sandbox runs a fork bomb and another a memory bomb in a loop (the hostile phase, bounded
# in time and in count). Passes with zero daemon crashes, zero failed operations, nothing
# left of any soak sandbox (mounts, cgroups, processes), and enough sessions to mean
# something. Reports create and exec p50/p90 of both phases and their ratio, here and in
# $STATE/soak for the fixture's summary.
# Usage: soak.sh BIN_DIR STATE_DIR PROBE
#
# Environment (defaults in brackets):
#   SOAK_SECONDS      time budget of the hostile phase [SOAK_DEFAULT_SECONDS, which the
#                     ctest sets from -DSPACE_SOAK_SECONDS, 180]; no client starts a session
#                     after it, each finishes the one it is in
#   SOAK_SESSIONS     upper bound of the hostile phase's sessions [1000]
#   SOAK_CLIENTS      concurrent clients [8]
#   SOAK_MIN_SESSIONS the floor: fewer hostile sessions than this fail the soak [100, at
#                     most SOAK_SESSIONS]: 100 samples put 10 of create's and of exec's
#                     above the p90, so the percentiles say something
#   SOAK_REF_SECONDS, SOAK_REF_SESSIONS  bounds of the reference phase [30, 80]
#   SOAK_OP_TIMEOUT   seconds one CLI call may take before it counts as failed [120]
. "$(dirname "$0")/lib.sh"
DEFAULT_SECONDS=${SOAK_DEFAULT_SECONDS:-180}
BUDGET=${SOAK_SECONDS:-$DEFAULT_SECONDS}
SESSIONS=${SOAK_SESSIONS:-1000}
CLIENTS=${SOAK_CLIENTS:-8}
MIN_SESSIONS=${SOAK_MIN_SESSIONS:-100}
REF_SECONDS=${SOAK_REF_SECONDS:-30}
REF_SESSIONS=${SOAK_REF_SESSIONS:-80}
OP_TIMEOUT=${SOAK_OP_TIMEOUT:-120}

# each client's share of a count bound (at least one session each)
per=$((SESSIONS / CLIENTS)); [ "$per" -ge 1 ] || per=1
ref_per=$((REF_SESSIONS / CLIENTS)); [ "$ref_per" -ge 1 ] || ref_per=1
bound=$((per * CLIENTS))
[ "$MIN_SESSIONS" -le "$bound" ] || MIN_SESSIONS=$bound
if [ "$BUDGET" -gt "$DEFAULT_SECONDS" ]; then
        say "note: SOAK_SECONDS=$BUDGET is above the $DEFAULT_SECONDS s the ctest TIMEOUT was sized for; configure with -DSPACE_SOAK_SECONDS=$BUDGET to raise both"
fi

# op CMD...: one CLI call that gives up after OP_TIMEOUT (a hang is a failed operation)
op() { timeout -k 5 "$OP_TIMEOUT" "$SPACE" "$@" </dev/null; }

# now_us: the wall clock in µs, from bash itself (no fork per measurement beside a fork
# bomb); the locale may print the fraction after a comma
now_us() { REPLY=${EPOCHREALTIME//[.,]/}; }

# soak_ids JSON: IDS="ID SBX PID" of the session object `space create --json` printed,
# empty if it is not one (a bash match: no fork per session)
ids_re='^\{"id":"([^"]+)".*"sandbox_id":"([^"]+)".*"init_pid":([0-9]+)'
soak_ids() {
        IDS=
        [[ $1 =~ $ids_re ]] && IDS="${BASH_REMATCH[1]} ${BASH_REMATCH[2]} ${BASH_REMATCH[3]}"
}

echo "payload-$$" >"$TMPD/payload"

# client PHASE N MAX DEADLINE: up to MAX sessions one after the other, none started at or
# after DEADLINE (epoch s). One line per failure on stdout; the µs of each create and exec
# in $TMPD/PHASE.N.create and .exec; each finished session's id (or "-" when its create
# failed) in $TMPD/PHASE.N.sessions.
client() {
        local phase=$1 c=$2 max=$3 deadline=$4 i=0 t js ids id out got
        local pre=$TMPD/$phase.$c
        : >"$pre.create"; : >"$pre.exec"; : >"$pre.sessions"
        while [ "$i" -lt "$max" ] && [ "$EPOCHSECONDS" -lt "$deadline" ]; do
                i=$((i + 1))
                now_us; t=$REPLY
                js=$(op create --json 2>&1)
                now_us
                soak_ids "$js"; ids=$IDS
                if [ -z "$ids" ]; then
                        echo "FAIL $phase client $c #$i: create: $js"
                        echo - >>"$pre.sessions"
                        continue
                fi
                echo $((REPLY - t)) >>"$pre.create"
                # recorded like new_sandbox does, so the fixture's cleanup checks it too
                echo "$ids" >>"$STATE/created"
                id=${ids%% *}
                now_us; t=$REPLY
                out=$(op exec "$id" -- sh -c 'echo $((6 * 7))' 2>&1)
                now_us
                if [ "$out" = 42 ]; then
                        echo $((REPLY - t)) >>"$pre.exec"
                else
                        echo "FAIL $phase client $c #$i: exec in $id: $out"
                fi
                op cp "$TMPD/payload" "$id:/root/p" >/dev/null 2>&1 || echo "FAIL $phase client $c #$i: upload to $id"
                got=$(op cp "$id:/root/p" - 2>&1)
                [ "$got" = "payload-$$" ] || echo "FAIL $phase client $c #$i: download from $id: $got"
                op rm "$id" >/dev/null 2>&1 || echo "FAIL $phase client $c #$i: rm $id"
                echo "$id" >>"$pre.sessions"
        done
}

# phase NAME PER SECONDS: CLIENTS clients of PER sessions each until SECONDS have passed;
# sets DONE (sessions finished), FAILURES and ELAPSED (s, one decimal)
phase() {
        local name=$1 max=$2 secs=$3 t0 deadline c
        now_us; t0=$REPLY
        deadline=$((EPOCHSECONDS + secs))
        for c in $(seq 1 "$CLIENTS"); do client "$name" "$c" "$max" "$deadline" >"$TMPD/$name.$c.out" 2>&1 & done
        wait
        now_us
        ELAPSED=$(awk -v d=$((REPLY - t0)) 'BEGIN { printf "%.1f", d / 1e6 }')
        cat "$TMPD/$name".*.create >"$TMPD/$name.create"
        cat "$TMPD/$name".*.exec >"$TMPD/$name.exec"
        cat "$TMPD/$name".*.sessions >"$TMPD/$name.sessions"
        DONE=$(wc -l <"$TMPD/$name.sessions")
        FAILURES=$(cat "$TMPD/$name".*.out | grep -c '^FAIL')
        cat "$TMPD/$name".*.out | grep '^FAIL' | head -10
        grep -vx -- - "$TMPD/$name.sessions" >>"$TMPD/soaked"
}

# pct P FILE: the P-th percentile (nearest rank) of the µs in FILE, in ms; "-" if none
pct() {
        sort -n "$2" | awk -v p="$1" '{ v[NR] = $1 }
                END { if (!NR) { print "-"; exit }; i = int((p * NR + 99) / 100); printf "%.1f\n", v[i] / 1000 }'
}
# ratio A B: A / B to two decimals; "-" if either is missing
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b + 0 == 0) print "-"; else printf "%.2f\n", a / b }'; }

: >"$TMPD/soaked"
rss0=$(spaced_rss_kb)

say "reference: $CLIENTS clients × up to $ref_per sessions, at most $REF_SECONDS s, no hostile neighbours"
phase ref "$ref_per" "$REF_SECONDS"
ref_done=$DONE ref_fail=$FAILURES ref_secs=$ELAPSED
say "reference: $ref_done sessions in $ref_secs s, $ref_fail failed operations"

# The hostile sandboxes get a CPU quota like any tenant would: without one a fork bomb
# takes both cores of a small host and the soak measures the scheduler, not the daemon.
hostile() {
        local js ids
        js=$(op create --json "$@" 2>&1)
        soak_ids "$js"; ids=$IDS
        [ -n "$ids" ] || return 1
        echo "$ids" >>"$STATE/created"
        echo "${ids%% *}"
}
fork=$(hostile --pids 256 --cpus 0.5) || { fail "create the fork-bomb sandbox"; finish; }
mem=$(hostile -m 64M --cpus 0.5) || { fail "create the memory-bomb sandbox"; sp rm "$fork" >/dev/null; finish; }
sp exec -d "$fork" -- sh -c 'b() { b | b & }; b' </dev/null >/dev/null
sp exec -d "$mem" -- sh -c 'while :; do python3 -c "b = bytearray(1 << 30)" 2>/dev/null; done' </dev/null >/dev/null
sleep 2
fork_pids() { cat /sys/fs/cgroup/pids/space/"$(sandbox_of "$fork")"/pids.current /sys/fs/cgroup/space/"$(sandbox_of "$fork")"/pids.current 2>/dev/null | head -1; }
fpids=$(fork_pids)
load0=$(cut -d' ' -f1 /proc/loadavg)
say "hostile: $fork runs a fork bomb (${fpids:-?} pids, 0.5 CPU), $mem allocates 1 GiB under 64 MiB in a loop (0.5 CPU)"

say "hostile: $CLIENTS clients × up to $per sessions, budget $BUDGET s"
phase hostile "$per" "$BUDGET"
h_done=$DONE h_fail=$FAILURES h_secs=$ELAPSED
load1=$(cut -d' ' -f1 /proc/loadavg)
if [ "$h_done" -ge "$bound" ]; then stop="all $bound sessions"; else stop="the $BUDGET s budget, at $h_done of $bound sessions"; fi
say "hostile: $h_done sessions in $h_secs s (stopped by $stop), $h_fail failed operations; load average ${load0} → ${load1}"

failures=$((ref_fail + h_fail))
done_n=$(wc -l <"$TMPD/soaked")
[ "$failures" -eq 0 ] && pass "$((ref_done + h_done)) sessions created, used and deleted, no failed operation" ||
        fail "$failures failed operations in $((ref_done + h_done)) sessions"
[ "$h_done" -ge "$MIN_SESSIONS" ] && pass "$h_done hostile-phase sessions, at least the floor of $MIN_SESSIONS" ||
        fail "only $h_done sessions went through beside the hostile neighbours in $h_secs s (the floor is $MIN_SESSIONS)"
[ "$ref_done" -ge "$CLIENTS" ] && pass "$ref_done reference sessions, at least one per client" ||
        fail "only $ref_done reference sessions in $ref_secs s (the floor is one per client, $CLIENTS)"

crashes=0
if daemon_alive; then
        pass "spaced (pid $SPACED_PID) survived; RSS $rss0 → $(spaced_rss_kb) KiB"
else
        crashes=1
        fail "spaced died during the soak"
fi

# what is left of the soak sessions' sandboxes
leaked=0
while read -r id; do
        l=$(leftovers "$(sandbox_of "$id")" "$(init_pid_of "$id")")
        if [ -n "$l" ]; then
                leaked=$((leaked + 1))
                echo "leftover of $id: $l"
        fi
done <"$TMPD/soaked"
[ "$leaked" -eq 0 ] && pass "no mount, cgroup or process left of the $done_n sandboxes" || fail "$leaked sandboxes left something"

fp=$(fork_pids)
oom=$(op inspect --json "$mem" 2>/dev/null | sed -n 's/.*"oom_killed":\(true\|false\).*/\1/p')
say "hostile sandboxes at the end: fork bomb holds ${fp:-?} pids; memory bomb oom_killed=${oom:-?}"
sp rm "$fork" "$mem" >/dev/null || fail "rm the hostile sandboxes"
for s in "$fork" "$mem"; do
        l=$(leftovers "$(sandbox_of "$s")" "$(init_pid_of "$s")")
        [ -z "$l" ] && pass "hostile $s left nothing" || fail "hostile $s left: $l"
done

rc50=$(pct 50 "$TMPD/ref.create") rc90=$(pct 90 "$TMPD/ref.create")
re50=$(pct 50 "$TMPD/ref.exec") re90=$(pct 90 "$TMPD/ref.exec")
hc50=$(pct 50 "$TMPD/hostile.create") hc90=$(pct 90 "$TMPD/hostile.create")
he50=$(pct 50 "$TMPD/hostile.exec") he90=$(pct 90 "$TMPD/hostile.exec")
{
        echo "$h_done sessions by $CLIENTS concurrent clients in $h_secs s (stopped by $stop) beside a fork bomb (${fpids:-?} pids, 0.5 CPU) and a memory bomb (64 MiB limit, 0.5 CPU), after $ref_done reference sessions in $ref_secs s without them: $failures failed operations, $crashes daemon crashes, $leaked sandboxes with leftovers"
        printf '%-24s %8s %8s %10s %10s %10s %10s\n' "ms (CLI call)" sessions seconds "create p50" "create p90" "exec p50" "exec p90"
        printf '%-24s %8s %8s %10s %10s %10s %10s\n' "reference" "$ref_done" "$ref_secs" "$rc50" "$rc90" "$re50" "$re90"
        printf '%-24s %8s %8s %10s %10s %10s %10s\n' "hostile neighbours" "$h_done" "$h_secs" "$hc50" "$hc90" "$he50" "$he90"
        printf '%-24s %8s %8s %10s %10s %10s %10s\n' "ratio hostile/reference" "" "" \
                "$(ratio "$hc50" "$rc50")" "$(ratio "$hc90" "$rc90")" "$(ratio "$he50" "$re50")" "$(ratio "$he90" "$re90")"
} >"$STATE/soak"
cat "$STATE/soak"
finish
