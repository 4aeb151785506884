#!/bin/bash
# Issue 5, the warm pool: pool size 0 works (every create cold); a pooled sandbox is
# indistinguishable from a cold one made with the same options (hostname, env, limits
# inside and in its cgroups, clean /tmp, ids, capabilities, files, processes); the pool
# refills after it was drained; a pooled sandbox never carries anything of a previous
# user; spaced killed with -9 while its pool is full leaves no mount, cgroup or process of
# the pooled sandboxes after its restart. This test runs its own spaced on its own data
# dir (it kills it); the base template is built there from the debootstrap cache.
. "$(dirname "$0")/lib.sh"

DATA2=$(mktemp -d /var/tmp/space-e2e-pool.XXXXXX)
LOG=$STATE/pool-spaced.log
export SPACE_HOST="unix:$DATA2/spaced.sock"
: >"$LOG"
SPACED_PID=
SEEN=$TMPD/seen_sandboxes   # every sandbox id this test saw, checked at the end
LAYERS2=$DATA2
: >"$SEEN"

start_spaced() {
        own_spaced "$DATA2" "$LOG" "$@" || return 1
        LAYERS2=$DATA2 # where sandbox dirs go: the quota volume if spaced mounted it
        mountpoint -q "$DATA2/vol" && LAYERS2=$DATA2/vol
        return 0
}

stop_spaced() { own_spaced_stop; }
trap 'stop_spaced; rm -rf "$TMPD" "$DATA2"' EXIT

pool_field() { json_get "$(sp pool --json 2>/dev/null)" "$1"; }
# ready of template base (0 when it has no pool)
ready() { _r=$(json_get "$(sp pool --json 2>/dev/null)" templates.0.ready); echo "${_r:-0}"; }
ready_is() { [ "$(ready)" = "$1" ]; }
# the sandbox directories no session holds: the pooled ones
pooled_ids() {
        _held=$(for s in $(sp ls --quiet 2>/dev/null); do field "$s" sandbox_id; done)
        for d in "$LAYERS2"/sandboxes/sbx_*; do
                [ -d "$d" ] || continue
                _id=${d##*/}
                echo "$_held" | grep -qx "$_id" || echo "$_id"
        done
}
note_seen() { for _x in "$@"; do echo "$_x" >>"$SEEN"; done; }
# cgroup_limits SBX: memory, cpu and pids limits of a sandbox as the host sees them
cgroup_limits() {
        if [ -d /sys/fs/cgroup/memory/space/"$1" ]; then
                cat /sys/fs/cgroup/memory/space/"$1"/memory.limit_in_bytes /sys/fs/cgroup/cpu/space/"$1"/cpu.cfs_quota_us \
                        /sys/fs/cgroup/pids/space/"$1"/pids.max 2>&1 | tr '\n' ' '
        else
                cat /sys/fs/cgroup/space/"$1"/memory.max /sys/fs/cgroup/space/"$1"/cpu.max \
                        /sys/fs/cgroup/space/"$1"/pids.max 2>&1 | tr '\n' ' '
        fi
}
# What a user can see of the sandbox from inside, minus what differs by design (the
# sandbox id = hostname, compared apart; times).
PROBE='echo "uid: $(id)"; echo "hostname is sbx: $(hostname | grep -c "^sbx_[0-9a-f]\{16\}$")";
env | sort | grep -v "^HOSTNAME=";
df -B1 --output=size,itotal /tmp /dev/shm | tail -n 2;
echo "nofile $(ulimit -n) nproc $(ulimit -p) core $(ulimit -c)";
grep -E "^Cap(Inh|Prm|Eff|Bnd|Amb)|^NoNewPrivs|^Seccomp:" /proc/self/status;
echo "tmp: $(ls -A /tmp | wc -l) shm: $(ls -A /dev/shm | wc -l) root entries: $(ls -A / | tr "\n" " ")";
echo "processes: $(cat /proc/[0-9]*/comm 2>/dev/null | grep -v -x -e sh -e cat -e grep -e sort -e tr | sort | tr "\n" " ")";
cat /proc/1/cmdline | tr "\0" " "; echo;
ls -A /root /var/tmp | tr "\n" " "; echo'
OPTS="--memory 256M --cpus 0.5 --pids 100 --env FOO=bar --env LANG=C"

say "a spaced of our own on $DATA2 with --pool base=0 (log: $LOG)"
start_spaced --pool base=0 && pass "spaced answers (pid $SPACED_PID)" || { fail "spaced did not start"; finish; }
t0=$(now_ms)
sp template build base --debootstrap bookworm --packages python3 >"$TMPD/build.log" 2>&1 &&
        pass "base template built in $(( $(now_ms) - t0 )) ms" || { fail "template build: $(tail -n 5 "$TMPD/build.log")"; finish; }

say "pool size 0: every create is cold"
cold=$(sp create $OPTS </dev/null) && pass "cold session $cold" || { fail "create with pool 0"; finish; }
cold_sbx=$(field "$cold" sandbox_id)
note_seen "$cold_sbx"
expect_eq "nothing was made ahead or taken" "$(pool_field made)/$(pool_field taken)" "0/0"
expect_eq "no sandbox directory besides the session's" "$(ls "$LAYERS2/sandboxes" | tr '\n' ' ')" "$cold_sbx "
cold_probe=$(sp exec "$cold" -- sh -c "$PROBE" </dev/null 2>&1)
expect_eq "the cold sandbox's hostname is its sandbox id" "$(sp exec "$cold" -- hostname </dev/null)" "$cold_sbx"

say "bad pool requests are refused with a clear error"
out=$(sp pool base=300 2>&1) && fail "size 300 accepted" || {
        echo "$out" | grep -q "between 0 and 256" && pass "size over 256 refused: $out" || fail "size 300: $out"; }
out=$(sp pool Bad=1 2>&1) && fail "bad template name accepted" || pass "bad template name refused: $out"
expect_eq "nothing was made by them" "$(pool_field made)" "0"

say "pool size 3, set through the API"
sp pool base=3 >/dev/null && pass "space pool base=3" || fail "space pool base=3"
wait_until 60 ready_is 3 && pass "3 pooled sandboxes ready" || fail "pool not filled: $(sp pool --json)"
pooled_before=$(pooled_ids | sort)
note_seen $pooled_before
expect_eq "3 pooled sandbox directories" "$(echo "$pooled_before" | grep -c sbx_)" "3"

say "a pooled sandbox is indistinguishable from a cold one"
warm=$(sp create $OPTS </dev/null) && pass "pooled session $warm" || { fail "create with a pool"; finish; }
warm_sbx=$(field "$warm" sandbox_id)
echo "$pooled_before" | grep -qx "$warm_sbx" && pass "it got pooled sandbox $warm_sbx" ||
        fail "its sandbox $warm_sbx was not one of the pooled ones ($pooled_before)"
expect_eq "taken from the pool once" "$(pool_field taken)" "1"
expect_eq "its writable layer is empty" "$(find "$LAYERS2/sandboxes/$warm_sbx/upper" -mindepth 1 | wc -l)" "0"
warm_probe=$(sp exec "$warm" -- sh -c "$PROBE" </dev/null 2>&1)
if [ "$warm_probe" = "$cold_probe" ]; then
        pass "same view from inside (ids, env, /tmp and /dev/shm sizes, rlimits, capabilities, seccomp, files, processes)"
else
        fail "the pooled sandbox looks different from inside:"
        diff <(echo "$cold_probe") <(echo "$warm_probe")
fi
echo "$warm_probe" | grep -q "^FOO=bar$" && echo "$warm_probe" | grep -q "^LANG=C$" && pass "session env is there" ||
        fail "session env missing: $warm_probe"
echo "$warm_probe" | grep -q "^268435456 " && pass "/tmp is sized by the 256M limit" || fail "/tmp size: $warm_probe"
expect_eq "hostname is its own sandbox id" "$(sp exec "$warm" -- hostname </dev/null)" "$warm_sbx"
expect_eq "same cgroup limits on the host" "$(cgroup_limits "$warm_sbx")" "$(cgroup_limits "$cold_sbx")"
case "$(cgroup_limits "$warm_sbx")" in
268435456\ 50000\ 100\ * | 268435456\ 50000\ 100000\ 100\ *) pass "limits are 256M, 0.5 CPU, 100 pids: $(cgroup_limits "$warm_sbx")" ;;
*) fail "pooled sandbox limits: $(cgroup_limits "$warm_sbx")" ;;
esac
default=$(sp create </dev/null) && note_seen "$(field "$default" sandbox_id)"
case "$(cgroup_limits "$(field "$default" sandbox_id)")" in
"536870912 -1 512 " | "536870912 max 100000 512 ") pass "a create with no options gets the defaults (512M, no CPU limit, 512 pids)" ;;
*) fail "defaults of a pooled sandbox: $(cgroup_limits "$(field "$default" sandbox_id)")" ;;
esac
sp rm "$default" >/dev/null

say "a pooled sandbox never carries anything of a previous user"
sp exec "$warm" -- sh -c 'echo secret >/tmp/secret; echo secret >/root/secret; echo secret >/dev/shm/secret' </dev/null
sp exec -d "$warm" -- sleep 1000 </dev/null >/dev/null && pass "left files and a background sleep in $warm"
warm_pid=$(field "$warm" init_pid)
sp rm "$warm" >/dev/null && pass "deleted $warm"
[ -d "$LAYERS2/sandboxes/$warm_sbx" ] && fail "its sandbox directory is still there" || pass "its sandbox directory is gone"
expect_eq "nothing left of its sandbox" "$(leftovers "$warm_sbx" "$warm_pid")" ""
wait_until 60 ready_is 3 || fail "pool did not refill to 3"
for i in 1 2 3 4 5; do
        s=$(sp create $OPTS </dev/null) || { fail "create $i"; continue; }
        sbx=$(field "$s" sandbox_id)
        note_seen "$sbx"
        [ "$sbx" = "$warm_sbx" ] && fail "sandbox $warm_sbx handed out again"
        out=$(sp exec "$s" -- sh -c 'cat /tmp/secret /root/secret /dev/shm/secret 2>/dev/null; cat /proc/[0-9]*/comm | grep -c sleep' </dev/null)
        expect_eq "session $i ($sbx) sees no earlier files and no earlier process" "$out" "0"
        sp rm "$s" >/dev/null
done

say "the pool refills after it was drained"
wait_until 60 ready_is 3 && pass "3 ready" || fail "pool not at 3: $(sp pool --json)"
taken0=$(pool_field taken)
in_pool=$(pooled_ids | sort)
drained=""
for i in 1 2 3; do drained="$drained $(sp create </dev/null)"; done
got=$(for s in $drained; do field "$s" sandbox_id; done | sort)
note_seen $got
expect_eq "3 creates took the 3 pooled sandboxes (oldest first)" "$(echo $got)" "$(echo $in_pool)"
expect_eq "counted as taken" "$(( $(pool_field taken) - taken0 ))" "3"
wait_until 60 ready_is 3 && pass "refilled to 3 after being drained" || fail "no refill: $(sp pool --json)"
refilled=$(pooled_ids | sort)
note_seen $refilled
[ -z "$(comm -12 <(echo "$refilled") <(echo "$in_pool"))" ] && pass "with 3 new sandboxes" ||
        fail "an old sandbox is still pooled: $refilled / $in_pool"
for s in $drained; do sp rm "$s" >/dev/null; done
say "a burst of 6 concurrent creates on a pool of 3"
burst=$(for i in 1 2 3 4 5 6; do sp create </dev/null & done; wait)
expect_eq "6 sessions made" "$(echo $burst | wc -w)" "6"
for s in $burst; do note_seen "$(field "$s" sandbox_id)"; expect_eq "$s runs" "$(sp exec "$s" -- echo ok </dev/null)" "ok"; done
wait_until 60 ready_is 3 && pass "refilled to 3 after the burst" || fail "no refill: $(sp pool --json)"
for s in $burst; do sp rm "$s" >/dev/null; done

say "pool size lowered to 1, then back to 3"
sp pool base=1 >/dev/null
wait_until 30 ready_is 1 && pass "1 ready" || fail "pool not at 1: $(sp pool --json)"
expect_eq "the 2 others are destroyed" "$(pooled_ids | wc -l)" "1"
sp pool base=3 >/dev/null
wait_until 60 ready_is 3 && pass "3 ready again" || fail "pool not at 3: $(sp pool --json)"

say "spaced killed with -9 while its pool is full"
full=$(pooled_ids | sort)
note_seen $full
expect_eq "3 pooled sandboxes before the kill" "$(echo "$full" | grep -c sbx_)" "3"
pids=$(for x in $full; do host_pids "$x"; done | sort -u | tr '\n' ' ')
[ -n "$pids" ] && pass "their processes: $pids" || fail "no processes found for the pooled sandboxes"
kill -KILL "$SPACED_PID"
wait "$SPACED_PID" 2>/dev/null
SPACED_PID=
start_spaced --pool base=0 && pass "spaced restarted with --pool base=0" || { fail "restart"; finish; }
left=""
for x in $full; do left="$left$(leftovers "$x" "")"; [ -d "$LAYERS2/sandboxes/$x" ] && left="$left dir $x"; done
for p in $pids; do grep -q "/space/sbx_" "/proc/$p/cgroup" 2>/dev/null && left="$left process $p"; done
expect_eq "nothing left of the pooled sandboxes (mounts, cgroups, processes, dirs)" "$left" ""
expect_eq "the restarted daemon has no pool" "$(pooled_ids | wc -l)/$(pool_field made)" "0/0"
expect_eq "the cold session survived the restart" "$(sp exec "$cold" -- cat /etc/hostname >/dev/null </dev/null && echo ok)" "ok"

say "stopped with SIGTERM: nothing of any sandbox this test saw is left"
sp pool base=2 >/dev/null
wait_until 60 ready_is 2 || fail "pool not at 2"
note_seen $(pooled_ids)
stop_spaced
left=""
for x in $(sort -u "$SEEN"); do left="$left$(leftovers "$x" "")"; done
grep -F "$DATA2" /proc/self/mountinfo >/dev/null && left="$left mounts under $DATA2"
expect_eq "no mount, cgroup or process left" "$left" ""
expect_eq "no sandbox directory left" "$(ls "$LAYERS2/sandboxes" 2>/dev/null | wc -l)" "0"
finish
