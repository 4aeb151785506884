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
#   SOAK_MIN_SESSIONS the floor: fewer sessions beside the hostile neighbours fail the
#                     soak [5 × SOAK_CLIENTS, 40; at most SOAK_SESSIONS]: the clients
#                     went through five whole sessions each on average beside them, and
#                     the p90 of create and of exec rests on 40 samples or more (4 above
#                     it), so it is a tail and not one outlier
#   SOAK_REF_SECONDS, SOAK_REF_SESSIONS  bounds of the reference phase [30, 80]
#   SOAK_OP_TIMEOUT   seconds one CLI call may take before it counts as failed [120]
. "$(dirname "$0")/lib.sh"
DEFAULT_SECONDS=${SOAK_DEFAULT_SECONDS:-180}
BUDGET=${SOAK_SECONDS:-$DEFAULT_SECONDS}
SESSIONS=${SOAK_SESSIONS:-1000}
CLIENTS=${SOAK_CLIENTS:-8}
MIN_SESSIONS=${SOAK_MIN_SESSIONS:-$((5 * CLIENTS))}
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

# timed ARGS...: op ARGS with its output (stdout and stderr) in OUT, its µs in US
timed() {
        local t rc
        now_us; t=$REPLY
        OUT=$(op "$@" 2>&1)
        rc=$?
        now_us; US=$((REPLY - t))
        return $rc
}

# client PHASE N MAX DEADLINE: up to MAX sessions one after the other, none started at or
# after DEADLINE (epoch s). One line per failure on stdout; the µs of each operation that
# worked in $TMPD/PHASE.N.OP (OP: create exec up down rm); each finished session's "ID SBX
# PID" (or "-" when its create failed) in $TMPD/PHASE.N.sessions.
client() {
        local phase=$1 c=$2 max=$3 deadline=$4 i=0 id f
        local pre=$TMPD/$phase.$c
        for f in create exec up down rm sessions; do : >"$pre.$f"; done
        while [ "$i" -lt "$max" ] && [ "$EPOCHSECONDS" -lt "$deadline" ]; do
                i=$((i + 1))
                timed create --json
                soak_ids "$OUT"
                if [ -z "$IDS" ]; then
                        echo "FAIL $phase client $c #$i: create: $OUT"
                        echo - >>"$pre.sessions"
                        continue
                fi
                echo "$US" >>"$pre.create"
                # recorded like new_sandbox does, so the fixture's cleanup checks it too
                echo "$IDS" >>"$STATE/created"
                id=${IDS%% *}
                # shellcheck disable=SC2016 # the sandbox's shell does the arithmetic
                if timed exec "$id" -- sh -c 'echo $((6 * 7))' && [ "$OUT" = 42 ]; then
                        echo "$US" >>"$pre.exec"
                else
                        echo "FAIL $phase client $c #$i: exec in $id: $OUT"
                fi
                if timed cp "$TMPD/payload" "$id:/root/p"; then
                        echo "$US" >>"$pre.up"
                else
                        echo "FAIL $phase client $c #$i: upload to $id: $OUT"
                fi
                if timed cp "$id:/root/p" - && [ "$OUT" = "payload-$$" ]; then
                        echo "$US" >>"$pre.down"
                else
                        echo "FAIL $phase client $c #$i: download from $id: $OUT"
                fi
                if timed rm "$id"; then
                        echo "$US" >>"$pre.rm"
                else
                        echo "FAIL $phase client $c #$i: rm $id: $OUT"
                fi
                echo "$IDS" >>"$pre.sessions"
        done
}

# phase NAME PER SECONDS: CLIENTS clients of PER sessions each until SECONDS have passed;
# sets DONE (sessions finished), FAILURES and ELAPSED (s, one decimal). The samples of
# each operation go to $STATE/soak.d/NAME.OP (µs, one a line) for a closer look.
phase() {
        local name=$1 max=$2 secs=$3 t0 deadline c f
        now_us; t0=$REPLY
        deadline=$((EPOCHSECONDS + secs))
        for c in $(seq 1 "$CLIENTS"); do client "$name" "$c" "$max" "$deadline" >"$TMPD/$name.$c.out" 2>&1 & done
        wait
        now_us
        ELAPSED=$(awk -v d=$((REPLY - t0)) 'BEGIN { printf "%.1f", d / 1e6 }')
        for f in create exec up down rm sessions; do cat "$TMPD/$name".*."$f" >"$STATE/soak.d/$name.$f"; done
        DONE=$(wc -l <"$STATE/soak.d/$name.sessions")
        FAILURES=$(cat "$TMPD/$name".*.out | grep -c '^FAIL')
        cat "$TMPD/$name".*.out | grep '^FAIL' | head -10
        grep -vx -- - "$STATE/soak.d/$name.sessions" >>"$STATE/soak.d/sandboxes"
}

# soak_leftovers FILE: one line "SBX: what" per thing left of the sandboxes FILE lists
# ("ID SBX PID" lines): a mount, a cgroup, a space-init still running. One pass over
# mountinfo and no fork per sandbox, so a thousand are checked in a moment.
soak_leftovers() {
        local id sbx pid cg comm
        [ -s "$1" ] || return 0
        awk '{ print $2 }' "$1" | grep -oF -f - /proc/self/mountinfo | sort | uniq -c |
                awk '{ print $2 ": " $1 " mounts" }'
        while read -r id sbx pid; do
                for cg in /sys/fs/cgroup/*/space/"$sbx" /sys/fs/cgroup/space/"$sbx"; do
                        [ -d "$cg" ] && echo "$sbx: cgroup $cg"
                done
                if [ -n "$pid" ] && read -r comm 2>/dev/null <"/proc/$pid/comm"; then
                        case $comm in *init*) echo "$sbx: process $pid ($comm) of $id" ;; esac
                fi
        done <"$1"
}

# pct P FILE: the P-th percentile (nearest rank) of the µs in FILE, in ms; "-" if none
pct() {
        sort -n "$2" | awk -v p="$1" '{ v[NR] = $1 }
                END { if (!NR) { print "-"; exit }; i = int((p * NR + 99) / 100); printf "%.1f\n", v[i] / 1000 }'
}
# ratio A B: A / B to two decimals; "-" if either is missing
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b + 0 == 0) print "-"; else printf "%.2f\n", a / b }'; }

rm -rf "$STATE/soak.d"
mkdir -p "$STATE/soak.d"
: >"$STATE/soak.d/sandboxes"
rss0=$(spaced_rss_kb)

say "reference: $CLIENTS clients × up to $ref_per sessions, at most $REF_SECONDS s, no hostile neighbours"
phase ref "$ref_per" "$REF_SECONDS"
ref_done=$DONE ref_fail=$FAILURES ref_secs=$ELAPSED
say "reference: $ref_done sessions in $ref_secs s, $ref_fail failed operations"

# hostile CREATE-OPTIONS...: a session for a hostile neighbour; prints its id
hostile() {
        timed create --json "$@"
        soak_ids "$OUT"
        [ -n "$IDS" ] || { echo "$OUT" >&2; return 1; }
        echo "$IDS" >>"$STATE/created"
        echo "$IDS" >>"$STATE/soak.d/hostile.sandboxes"
        echo "${IDS%% *}"
}
# The hostile sandboxes get a CPU quota like any tenant would: without one a fork bomb
# takes both cores of a small host and the soak measures the scheduler, not the daemon.
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
if [ "$h_done" -ge "$bound" ]; then stop="the count, all $bound sessions"; else stop="the $BUDGET s budget, at $h_done of $bound sessions"; fi
say "hostile: $h_done sessions in $h_secs s (stopped by $stop), $h_fail failed operations; load average $load0 → $load1"

# The end state of the hostile neighbours, then they go: the leftover checks that follow
# need no fork bomb beside them.
fp=$(fork_pids)
oom=$(op inspect --json "$mem" 2>/dev/null | sed -n 's/.*"oom_killed":\(true\|false\).*/\1/p')
say "hostile sandboxes at the end: fork bomb holds ${fp:-?} pids; memory bomb oom_killed=${oom:-?}"
op rm "$fork" "$mem" >/dev/null || fail "rm the hostile sandboxes"

failures=$((ref_fail + h_fail))
if [ "$failures" -eq 0 ]; then
        pass "$((ref_done + h_done)) sessions created, used and deleted, no failed operation"
else
        fail "$failures failed operations in $((ref_done + h_done)) sessions"
fi
if [ "$h_done" -ge "$MIN_SESSIONS" ]; then
        pass "$h_done sessions beside the hostile neighbours, at least the floor of $MIN_SESSIONS"
else
        fail "only $h_done sessions went through beside the hostile neighbours in $h_secs s (the floor is $MIN_SESSIONS)"
fi
if [ "$ref_done" -ge "$CLIENTS" ]; then
        pass "$ref_done reference sessions, at least one per client"
else
        fail "only $ref_done reference sessions in $ref_secs s (the floor is one per client, $CLIENTS)"
fi

crashes=0
if daemon_alive; then
        pass "spaced (pid $SPACED_PID) survived; RSS $rss0 → $(spaced_rss_kb) KiB"
else
        crashes=1
        fail "spaced died during the soak"
fi

# what is left of the soak sessions' sandboxes and of the hostile ones
soak_leftovers "$STATE/soak.d/sandboxes" >"$TMPD/left"
done_n=$(wc -l <"$STATE/soak.d/sandboxes")
leaked=$(cut -d: -f1 "$TMPD/left" | sort -u | wc -l)
head -20 "$TMPD/left"
if [ "$leaked" -eq 0 ]; then
        pass "no mount, cgroup or process left of the $done_n sandboxes"
else
        fail "$leaked of the $done_n sandboxes left something"
fi
soak_leftovers "$STATE/soak.d/hostile.sandboxes" >"$TMPD/left.hostile"
if [ -s "$TMPD/left.hostile" ]; then
        fail "the hostile sandboxes left: $(tr '\n' ' ' <"$TMPD/left.hostile")"
        leaked=$((leaked + $(cut -d: -f1 "$TMPD/left.hostile" | sort -u | wc -l)))
else
        pass "the hostile sandboxes $fork and $mem left nothing"
fi

d=$STATE/soak.d
rc50=$(pct 50 "$d/ref.create") rc90=$(pct 90 "$d/ref.create")
re50=$(pct 50 "$d/ref.exec") re90=$(pct 90 "$d/ref.exec")
hc50=$(pct 50 "$d/hostile.create") hc90=$(pct 90 "$d/hostile.create")
he50=$(pct 50 "$d/hostile.exec") he90=$(pct 90 "$d/hostile.exec")
row() { printf '%-24s %8s %8s %10s %10s %10s %10s\n' "$@"; }
{
        echo "$h_done sessions by $CLIENTS concurrent clients in $h_secs s (stopped by $stop) beside a fork bomb (${fp:-?} pids at the end, 0.5 CPU) and a memory bomb (64 MiB limit, 0.5 CPU; oom_killed=${oom:-?}), after $ref_done reference sessions in $ref_secs s without them: $failures failed operations, $crashes daemon crashes, $leaked sandboxes with leftovers"
        row "ms, as the CLI sees it" sessions seconds "create p50" "create p90" "exec p50" "exec p90"
        row "reference" "$ref_done" "$ref_secs" "$rc50" "$rc90" "$re50" "$re90"
        row "hostile neighbours" "$h_done" "$h_secs" "$hc50" "$hc90" "$he50" "$he90"
        row "ratio hostile/reference" "" "" \
                "$(ratio "$hc50" "$rc50")" "$(ratio "$hc90" "$rc90")" "$(ratio "$he50" "$re50")" "$(ratio "$he90" "$re90")"
} >"$STATE/soak"
cat "$STATE/soak"
finish
