#!/bin/bash
# Integration test of disk limits (docs/security.md "Disk"): the real spaced on a tiny
# busybox template, driven with curl. First a start where the quota volume cannot be
# made (a file sits where DATA/vol must go): one warning, /v1/health says why, a create
# asking for a disk limit is a clear 503, sessions without one work. Then the upgrade:
# the volume is made, the old session's sandbox (outside it) re-attaches after kill -9
# and survives pause/resume; new sessions get the limit: it shows in inspect, a writer
# stops with a disk-full error inside while the host and a second session keep their
# space, deleting the file makes room again, fork and pause/resume (the parked layer)
# and a restart keep the limit, a warm-pool sandbox gets it when taken, and bad values
# are a clear 400.
# Usage: test_disk.sh SPACED_BINARY   (space-init must sit next to it)
. "$(dirname "$0")/lib.sh" disk "${1:-}"

if ! command -v mkfs.btrfs >/dev/null || [ ! -w /dev/loop-control ]; then
        echo "SKIP: needs mkfs.btrfs (btrfs-progs) and /dev/loop-control"
        exit $SKIP
fi

# sh_rc SESSION SCRIPT: the script's stdout+stderr, then "rc=N"
sh_rc() {
        api -X POST "http://x/v1/sessions/$1/exec" \
                -d "$(jq -nc --arg c "$2" '{argv: ["sh", "-c", ($c + " 2>&1; echo rc=$?")]}')" | stdout_of
}
state_of() { api "http://x/v1/sessions/$1" | jget state; }
disk_of() { api "http://x/v1/sessions/$1" | jget limits disk; }
wait_state() { # session, state, tenths of a second
        for _ in $(seq "$3"); do
                [ "$(state_of "$1")" = "$2" ] && return 0
                sleep 0.1
        done
        return 1
}
# create BODY: "HTTP-status body"
create() {
        api -X POST http://x/v1/sessions -d "$1" -w '\n%{http_code}' >"$T/create.out"
        echo "$(tail -n 1 "$T/create.out") $(head -n 1 "$T/create.out")"
}
host_free_kb() { df -k --output=avail "$T" | tail -1; }
# image_kb: host disk the volume's sparse image takes (what the sandboxes' writes cost the
# host; unlike the host's free space, not moved by other programs on a shared machine)
image_kb() { du -k "$DATA/vol.img" | cut -f1; }
# full TEXT: a disk-full error as a program inside reports it
full() { case $1 in *"Disk quota exceeded"* | *"No space left"*) return 0 ;; esac; return 1; }

ROOT=$T/rootfs
make_rootfs "$ROOT"
LIMIT=$((64 << 20))

# ---- no volume possible: disk limits off, everything else works ----
mkdir -p "$DATA"
touch "$DATA/vol" # where the volume's mount point must go
start_daemon || exit 1
echo "# spaced $SPACED on $DATA (volume blocked)"
api -X POST http://x/v1/templates -d "{\"name\":\"mini\",\"from_dir\":\"$ROOT\"}" >/dev/null
H=$(api http://x/v1/health)
check "health: disk limits not enforced, with the reason" test "$(echo "$H" | jget disk_limits enforced)" = false
echo "#   $(echo "$H" | jget disk_limits error)"
check "... the reason names the volume" grep -q "vol" <<<"$(echo "$H" | jget disk_limits error)"
check "one warning in the log says disk limits are off" test "$(grep -c "disk limits are off" "$LOG")" = 1
R=$(create '{"template":"mini","memory":"64M","disk":"64M","snapshot_interval_ms":0}')
check "a create asking for a disk limit is 503 saying why" test "${R%% *}" = 503
echo "#   ${R#* }"
check "... the message says disk limits are not available" grep -q "disk limits are not available" <<<"$R"
R=$(create '{"template":"mini","memory":"64M","snapshot_interval_ms":0}')
OLD=$(echo "${R#* }" | jget id)
check "a create without one works (201), with no disk limit" test "${R%% *}/$(disk_of "$OLD")" = "201/0"
check "... its sandbox is in DATA/sandboxes" test -d "$DATA/sandboxes/$(api "http://x/v1/sessions/$OLD" | jget sandbox_id)"
check "... and runs commands" test "$(sh_rc "$OLD" 'echo old > /root/o; cat /root/o')" = "old
rc=0"
OLD_PID=$(api "http://x/v1/sessions/$OLD" | jget init_pid)

# ---- upgrade: the volume appears; the old sandbox re-attaches ----
kill -9 "$PID"
wait "$PID" 2>/dev/null
rm -f "$DATA/vol"
start_daemon --disk-default 1G || exit 1
H=$(api http://x/v1/health)
check "after the upgrade health says disk limits are enforced (default 1G)" test "$(echo "$H" | jget disk_limits enforced)/$(echo "$H" | jget disk_limits default)" = "true/$((1 << 30))"
VFS=$(stat -f -c %T "$DATA/vol")
echo "#   the volume is $VFS"
check "DATA/vol is a btrfs (qgroups) or ext4 (project quota) mount" grep -qE '^(btrfs|ext2/ext3)$' <<<"$VFS"
check "the old session re-attached its sandbox outside the volume (same init)" test "$(wait_state "$OLD" running 50 && api "http://x/v1/sessions/$OLD" | jget init_pid)" = "$OLD_PID"
check "... its files are there" test "$(sh_rc "$OLD" 'cat /root/o')" = "old
rc=0"
api -X POST "http://x/v1/sessions/$OLD/pause" >/dev/null
R=$(api -X POST "http://x/v1/sessions/$OLD/resume")
check "... pause and resume move it onto the volume, files kept" test "$(echo "$R" | jget state)/$(sh_rc "$OLD" 'cat /root/o')" = "running/old
rc=0"
check "... its new sandbox is on the volume" test -d "$L/sandboxes/$(api "http://x/v1/sessions/$OLD" | jget sandbox_id)"

# ---- the limit: inspect, enforcement inside, the host and others unaffected ----
R=$(create "{\"template\":\"mini\",\"memory\":\"64M\",\"disk\":\"64M\",\"snapshot_interval_ms\":0}")
A=$(echo "${R#* }" | jget id)
check "create with disk 64M answers 201 and inspect shows limits.disk" test "${R%% *}/$(disk_of "$A")" = "201/$LIMIT"
R=$(create '{"template":"mini","memory":"64M","snapshot_interval_ms":0}')
B=$(echo "${R#* }" | jget id)
check "a session that asks none gets the default (1G)" test "$(disk_of "$B")" = $((1 << 30))
[ "$VFS" = btrfs ] && check "the session's sandbox directory is a subvolume on the volume (inode 256)" test "$(stat -c %i "$L/sandboxes/$(api "http://x/v1/sessions/$A" | jget sandbox_id)")" = 256
before=$(host_free_kb)
img_before=$(image_kb)
OUT=$(sh_rc "$A" 'dd if=/dev/zero of=/root/fill bs=1M count=200 2>&1; r=$?; sync; (exit $r)')
echo "#   inside: $(echo "$OUT" | tr '\n' ' ')"
check "dd of 200M into a 64M session fails with a disk-full error inside" full "$OUT"
check "... and a non-zero status" test "$(echo "$OUT" | tail -n 1)" != "rc=0"
SZ=$(sh_rc "$A" 'wc -c < /root/fill' | head -n 1)
check "... having written at most the limit ($SZ bytes)" test "$SZ" -le "$LIMIT"
after=$(host_free_kb)
img_after=$(image_kb)
echo "#   host free: $before KiB before, $after KiB after; the volume's image: $img_before KiB -> $img_after KiB"
check "the host's disk holds at most the limit + 16M more (the image grew $((img_after - img_before)) KiB)" \
        test $((img_after - img_before)) -le $(((LIMIT >> 10) + 16384))
check "another session still writes 32M" test "$(sh_rc "$B" 'dd if=/dev/zero of=/root/b bs=1M count=32 2>/dev/null; wc -c < /root/b' | head -n 1)" = $((32 << 20))
check "the daemon still answers" test "$(api http://x/v1/health | jget status)" = ok
OUT=$(sh_rc "$A" 'rm /root/fill && sync && dd if=/dev/zero of=/root/again bs=1M count=8 2>/dev/null; wc -c < /root/again')
check "after deleting the file the session writes again" test "$OUT" = "$((8 << 20))
rc=0"
sh_rc "$A" sync >/dev/null # the quota counts what the filesystem committed
DU=$(api "http://x/v1/sessions/$A" | jget health disk_bytes)
check "health.disk_bytes counts the 8M file ($DU bytes)" test "$DU" -ge $((8 << 20)) -a "$DU" -lt $((16 << 20))

# ---- fork, pause/resume (the parked layer), restart keep the limit ----
SNAP=$(api -X POST "http://x/v1/sessions/$A/snapshots" | jget id)
F=$(api -X POST "http://x/v1/sessions/$A/fork" -d "{\"snapshot\":\"$SNAP\"}" | jget sessions 0 id)
check "a fork has the parent's disk limit" test "$(wait_state "$F" running 50 && disk_of "$F")" = "$LIMIT"
check "... and it holds there" full "$(sh_rc "$F" 'dd if=/dev/zero of=/root/fill bs=1M count=200')"
api -X POST "http://x/v1/sessions/$A/pause" >/dev/null
check "pause parks the layer on the volume" test -d "$L/parked/$A" -a -f "$L/parked/$A.rec"
R=$(api -X POST "http://x/v1/sessions/$A/resume")
check "resume reuses the parked layer" test "$(grep -c "$A: resume: reused parked layer" "$LOG")" = 1
check "... keeps the limit" test "$(echo "$R" | jget state)/$(echo "$R" | jget limits disk)" = "running/$LIMIT"
check "... and the files" test "$(sh_rc "$A" 'wc -c < /root/again' | head -n 1)" = $((8 << 20))
check "... and the limit still holds" full "$(sh_rc "$A" 'dd if=/dev/zero of=/root/fill bs=1M count=200')"
sh_rc "$A" 'rm -f /root/fill' >/dev/null
APID=$(api "http://x/v1/sessions/$A" | jget init_pid)
kill -9 "$PID"
wait "$PID" 2>/dev/null
start_daemon || exit 1
check "after kill -9 and a start the session re-attached (same init) with its limit" test "$(wait_state "$A" running 50 && api "http://x/v1/sessions/$A" | jget init_pid)/$(disk_of "$A")" = "$APID/$LIMIT"
check "... which still holds" full "$(sh_rc "$A" 'dd if=/dev/zero of=/root/fill bs=1M count=200')"
sh_rc "$A" 'rm -f /root/fill' >/dev/null
kill -TERM "$PID"
wait "$PID"
PID=
check "SIGTERM unmounted the volume" test "$(mountpoint -q "$DATA/vol" && echo mounted)" = ""
start_daemon || exit 1
check "after SIGTERM and a start the session is recovered with its limit" test "$(wait_state "$A" running 50 && disk_of "$A")" = "$LIMIT"
check "... which holds in the new sandbox" full "$(sh_rc "$A" 'dd if=/dev/zero of=/root/fill bs=1M count=200')"
R=$(api -X POST "http://x/v1/sessions/$A/restore" -d "{\"snapshot\":\"$SNAP\"}")
check "after a restore it has the limit" test "$(echo "$R" | jget state)/$(echo "$R" | jget limits disk)" = "running/$LIMIT"
check "... which holds there too" full "$(sh_rc "$A" 'dd if=/dev/zero of=/root/fill bs=1M count=200')"

# ---- the warm pool: a pooled sandbox gets the limit when it is taken ----
api -X PUT http://x/v1/pool/mini -d '{"size":1}' >/dev/null
for _ in $(seq 100); do [ "$(api http://x/v1/pool | jget templates 0 ready 2>/dev/null)" = 1 ] && break; sleep 0.1; done
TAKEN=$(api http://x/v1/pool | jget taken)
R=$(create '{"template":"mini","disk":"64M","snapshot_interval_ms":0}')
W=$(echo "${R#* }" | jget id)
check "a create with disk 64M takes the pooled sandbox" test "${R%% *}/$(api http://x/v1/pool | jget taken)" = "201/$((TAKEN + 1))"
check "... whose limit holds" full "$(sh_rc "$W" 'dd if=/dev/zero of=/root/fill bs=1M count=200')"
check "... at 64M" test "$(sh_rc "$W" 'wc -c < /root/fill' | head -n 1)" -le "$LIMIT"
api -X PUT http://x/v1/pool/mini -d '{"size":0}' >/dev/null

# ---- bad values: a clear 400, nothing made ----
N=$(api http://x/v1/sessions | jx 'req("sessions") | length')
for bad in '0' '"0"' '"lots"' '-5' '"1K"' '"17T"' '"999G"' 'true' '"12Q"'; do
        R=$(create "{\"template\":\"mini\",\"disk\":$bad}")
        check "disk $bad is 400 ($(echo "${R#* }" | jget error message))" test "${R%% *}" = 400
done
check "... and made no session" test "$(api http://x/v1/sessions | jx 'req("sessions") | length')" = "$N"

for s in $(api http://x/v1/sessions | jx '[req("sessions")[] | req("id")] | join(" ")'); do
        api -X DELETE "http://x/v1/sessions/$s" >/dev/null
done
kill -TERM "$PID"
wait "$PID"
PID=
check "at the end SIGTERM leaves no mount under the data dir" test -z "$(grep -F "$DATA" /proc/self/mountinfo)"
check "... and no loop device on the image" test -z "$(losetup -j "$DATA/vol.img")"

finish disk
