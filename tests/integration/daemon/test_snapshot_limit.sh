#!/bin/bash
# Integration test of snapshot storage limits (docs/security.md "Snapshot storage", issue
# #20 item 4): a session with --disk 16M that writes 12 MB of random data and snapshots,
# six times, must not grow the store past its limit (4 x 16M by default). Manual snapshots
# past it are a clear 507 and leave nothing behind after a GC; rolling snapshots drop the
# oldest ones to stay within; a pause past it keeps the session (and its files) with a
# snapshot_limit event; inspect shows usage and limits; the tenant's total limit holds
# across a restart; bad option values stop spaced.
# Usage: test_snapshot_limit.sh SPACED_BINARY   (space-init must sit next to it)
. "$(dirname "$0")/lib.sh" snaplimit "${1:-}"

if ! command -v mkfs.btrfs >/dev/null || [ ! -w /dev/loop-control ]; then
        echo "SKIP: needs mkfs.btrfs (btrfs-progs) and /dev/loop-control (disk limits)"
        exit $SKIP
fi

MB=$((1 << 20))
LIMIT=$((64 * MB)) # 4 x the 16M disk limit
# create BODY: "HTTP-status body"
create() {
        api -X POST http://x/v1/sessions -d "$1" -w '\n%{http_code}' >"$T/create.out"
        echo "$(tail -n 1 "$T/create.out") $(head -n 1 "$T/create.out")"
}
# snap SESSION: "HTTP-status body" of a manual snapshot
snap() {
        api -X POST "http://x/v1/sessions/$1/snapshots" -d '{}' -w '\n%{http_code}' >"$T/snap.out"
        echo "$(tail -n 1 "$T/snap.out") $(head -n 1 "$T/snap.out")"
}
# random12 SESSION: /root/r becomes 12 MB of new random data
random12() { sh_in "$1" 'dd if=/dev/urandom of=/root/r bs=1M count=12 2>/dev/null; sync; wc -c < /root/r'; }
# usage SESSION: "bytes limit tenant_bytes tenant_limit over_limit" from inspect
usage() {
        api "http://x/v1/sessions/$1" | jx 'req("snapshot_storage") | "\(req("bytes")) \(req("limit")) \(req("tenant_bytes")) \(req("tenant_limit")) \(req("over_limit"))"'
}
n_snaps() { api "http://x/v1/sessions/$1/snapshots" | jx 'req("snapshots") | length'; }
store_kb() { du -sk "$DATA/store" | cut -f1; }
gc() { api -X POST http://x/v1/gc >/dev/null; }

# ---- bad option values: a clear message, exit 2 ----
for bad in "--snapshot-bytes-factor=abc" "--snapshot-bytes-factor=-1" "--snapshot-bytes-factor=1001" \
        "--tenant-snapshot-bytes=1K" "--tenant-snapshot-bytes=lots"; do
        "$SPACED" --data "$T/bad" "$bad" >"$T/bad.out" 2>&1
        rc=$?
        check "spaced $bad exits 2 ($(head -n 1 "$T/bad.out"))" test "$rc" = 2
done

ROOT=$T/rootfs
make_rootfs "$ROOT"
start_daemon --disk-volume-size 2G || exit 1
api -X POST http://x/v1/templates -d "{\"name\":\"mini\",\"from_dir\":\"$ROOT\"}" >/dev/null
[ "$(api http://x/v1/health | jget disk_limits enforced)" = true ] || {
        echo "SKIP: the quota volume did not come up: $(api http://x/v1/health | jget disk_limits error)"
        exit $SKIP
}

# ---- manual snapshots: the issue's six rounds ----
R=$(create '{"template":"mini","memory":"64M","disk":"16M","snapshot_interval_ms":0}')
A=$(echo "${R#* }" | jget id)
check "a session with disk 16M starts (201)" test "${R%% *}" = 201
read -r used lim tused tlim over <<<"$(usage "$A")"
check "inspect shows snapshot storage: 0 used, limit 4 x 16M, no tenant limit" test "$used/$lim/$tlim/$over" = "0/$LIMIT/0/false"
gc
kb0=$(store_kb)
for i in 1 2 3 4 5 6; do
        check "round $i: 12 MB of random data written" test "$(random12 "$A")" = $((12 * MB))
        R=$(snap "$A")
        st[$i]=${R%% *}
        body[$i]=${R#* }
done
check "snapshots 1-5 fit (201 each: ${st[*]})" test "${st[1]}${st[2]}${st[3]}${st[4]}${st[5]}" = 201201201201201
check "the sixth is refused with 507" test "${st[6]}" = 507
MSG=$(echo "${body[6]}" | jget error message)
echo "#   $MSG"
check "... saying the session's snapshot storage is full, with usage and limit" grep -q "snapshot storage of session $A is full.*limit of $LIMIT" <<<"$MSG"
check "... and its code is no_space" test "$(echo "${body[6]}" | jget error code)" = no_space
check "the timeline holds the five" test "$(n_snaps "$A")" = 5
read -r used lim tused tlim over <<<"$(usage "$A")"
check "inspect: $used bytes used, within the limit $lim" test "$used" -gt $((55 * MB)) -a "$used" -le "$LIMIT"
check "... the tenant's total counts them ($tused)" test "$tused" -ge "$used"
gc
kb1=$(store_kb)
echo "#   store: $kb0 KiB -> $kb1 KiB"
check "after a GC the store grew at most the limit + 2M ($(((kb1 - kb0) >> 10)) MiB)" test $((kb1 - kb0)) -le $(((LIMIT >> 10) + 2048))
R=$(snap "$A")
check "another manual snapshot is refused at once (507) while nothing could make room" test "${R%% *}" = 507
check "the session still runs commands" test "$(sh_in "$A" 'echo ok')" = ok

# ---- rolling snapshots: the oldest go to stay within ----
R=$(create '{"template":"mini","memory":"64M","disk":"16M","snapshot_interval_ms":1000,"retention":100}')
B=$(echo "${R#* }" | jget id)
check "a session with rolling snapshots every second, retention 100, starts" test "${R%% *}" = 201
for i in 1 2 3 4 5 6 7 8; do
        random12 "$B" >/dev/null
        # the next rolling snapshot after the write (one during it may have been taken)
        head=$(api "http://x/v1/sessions/$B" | jget head_snapshot)
        for _ in $(seq 30); do
                [ "$(api "http://x/v1/sessions/$B" | jget head_snapshot)" != "$head" ] && break
                sleep 0.1
        done
done
taken=$(api "http://x/v1/sessions/$B/events" | jx '[req("events")[] | select(req("kind") == "snapshot" and (req("data") | req("reason")) == "rolling")] | length')
check "at least eight rolling snapshots were taken ($taken)" test "$taken" -ge 8
read -r used lim tused tlim over <<<"$(usage "$B")"
check "the session's snapshots stay within the limit ($used of $lim)" test "$used" -le "$LIMIT" -a "$lim" = "$LIMIT"
N=$(n_snaps "$B")
check "... older rolling ones were dropped ($N kept of 8, retention 100)" test "$N" -le 5 -a "$N" -ge 3
check "... the log says why" grep -q "$B: snapshot limit: dropped" "$LOG"
check "... the session is not over its limit" test "$over" = false

# ---- pause past the limit keeps the session ----
R=$(create '{"template":"mini","memory":"64M","disk":"16M","snapshot_interval_ms":0}')
C=$(echo "${R#* }" | jget id)
for i in 1 2 3 4 5; do
        random12 "$C" >/dev/null
        st[$i]=$(snap "$C" | cut -d' ' -f1)
done
check "a third session fills its storage with five manual snapshots" test "${st[1]}${st[2]}${st[3]}${st[4]}${st[5]}" = 201201201201201
SUM=$(sh_in "$C" 'rm /root/r; dd if=/dev/urandom of=/root/last bs=1M count=12 2>/dev/null; sync; cat /root/last | wc -c')
R=$(api -X POST "http://x/v1/sessions/$C/pause" -w '\n%{http_code}')
check "a pause past the limit still pauses (200)" test "$(echo "$R" | tail -n 1)/$(echo "$R" | head -n 1 | jget state)" = "200/paused"
read -r used lim tused tlim over <<<"$(usage "$C")"
check "... inspect says it is over its limit ($used of $lim)" test "$over/$((used > lim))" = "true/1"
EV=$(api "http://x/v1/sessions/$C/events" | jx '[req("events")[] | select(req("kind") == "snapshot_limit")] | length')
check "... one snapshot_limit event" test "$EV" = 1
R=$(api -X POST "http://x/v1/sessions/$C/resume" -w '\n%{http_code}')
check "... it resumes (200) with the file written before the pause" test "$(echo "$R" | tail -n 1)/$(sh_in "$C" 'wc -c < /root/last')" = "200/$SUM"
R=$(snap "$C")
check "... and a manual snapshot is refused (507)" test "${R%% *}" = 507

# ---- the tenant's total, after a restart ----
before=$(usage "$A")
kill -TERM "$PID"
wait "$PID"
PID=
start_daemon --tenant-snapshot-bytes 128M || exit 1
wait_state "$A" running 100
read -r used lim tused tlim over <<<"$(usage "$A")"
SUMB=$(api "http://x/v1/sessions/$A/snapshots" | jx '[req("snapshots")[] | req("bytes_added")] | add')
check "after a restart the session's usage is its timeline's bytes_added ($used = $SUMB; before: $before)" test "$used/$lim" = "$SUMB/$LIMIT"
check "... and the tenant limit shows (128M; the tenant holds $tused)" test "$tlim" = $((128 * MB)) -a "$tused" -gt $((128 * MB))
R=$(create '{"template":"mini","memory":"64M","disk":"16M","snapshot_interval_ms":0}')
D=$(echo "${R#* }" | jget id)
sh_in "$D" 'echo small > /root/s' >/dev/null
R=$(snap "$D")
MSG=$(echo "${R#* }" | jget error message)
echo "#   $MSG"
check "a new session's first manual snapshot is refused (507): the tenant is full" test "${R%% *}" = 507
check "... the message names the tenant's limit" grep -q "snapshot storage of tenant default is full.*limit of $((128 * MB))" <<<"$MSG"

for s in $(api http://x/v1/sessions | jx '[req("sessions")[] | req("id")] | join(" ")'); do
        api -X DELETE "http://x/v1/sessions/$s" >/dev/null
done
kill -TERM "$PID"
wait "$PID"
PID=

finish snapshot_limit
