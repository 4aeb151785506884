#!/bin/bash
# Usage metrics (issue #15 item 4, docs/api.md "Metrics", docs/daemon.md "GET /metrics"):
# with --metrics-interval 1, a session running a CPU burner and writing a file gets
# samples whose CPU time grows, memory above 0, disk that grows (with the quota volume);
# ?start=/&end= filter them, a bad time is 400, an unknown session 404. GET /metrics is
# 403 for a tenant's token, 200 for the operator, accepted by promtool's parser, and its
# create counter equals the creates done. `space top --once` prints the session.
# Root only; ~25 s.
# Usage: test_metrics.sh SPACED_BINARY   (space-init and space next to it)
. "$(dirname "$0")/lib.sh" metrics "${1:-}"

command -v promtool >/dev/null || { echo "FAIL: promtool is missing (scripts/install-deps installs prometheus)"; exit 1; }
SPACE=$BIN/space
ROOT=$T/rootfs
make_rootfs "$ROOT"
TOK=$("$SPACED" token add --tenant alpha --name m --data "$DATA" 2>/dev/null)

check "--metrics-interval 0 is refused (exit 2)" sh -c "'$SPACED' --data '$DATA' --metrics-interval 0 >/dev/null 2>&1; test \$? = 2"
check "--metrics-interval 61 is refused (exit 2)" sh -c "'$SPACED' --data '$DATA' --metrics-interval 61 >/dev/null 2>&1; test \$? = 2"

start_daemon --metrics-interval 1 || exit 1
api -X POST http://x/v1/templates -d "{\"name\":\"mini\",\"from_dir\":\"$ROOT\"}" >/dev/null
NEW='{"template":"mini","memory":"64M","snapshot_interval_ms":0}'
A=$(api -X POST http://x/v1/sessions -d "$NEW" | jget id)
check "a session" test "${A:0:4}" = ses_
B=$(api -X POST http://x/v1/sessions -d "$NEW" | jget id)
check "a second session" test "${B:0:4}" = ses_
CREATES=2

# a CPU burner in the background, then a file of 8 MiB
api -X POST "http://x/v1/sessions/$A/exec" -d '{"argv":["sh","-c","while :; do :; done"],"background":true}' >/dev/null
sleep 2.5
M1=$(api "http://x/v1/sessions/$A/metrics")
N1=$(jx 'req("samples") | length' <<<"$M1")
check "samples appear (interval 1 s: at least 2 after 2.5 s)" test "$N1" -ge 2
check "... interval_ms is 1000" test "$(jget interval_ms <<<"$M1")" = 1000
check "... memory_bytes > 0" test "$(jget samples -1 memory_bytes <<<"$M1")" -gt 0
check "... memory_limit_bytes is the session's 64M" test "$(jget samples -1 memory_limit_bytes <<<"$M1")" = $((64 << 20))
C1=$(jget samples -1 cpu_ms <<<"$M1")
T1=$(jget samples -1 t_ms <<<"$M1")
D1=$(jget samples -1 disk_bytes <<<"$M1")
sh_in "$A" 'dd if=/dev/zero of=/root/blob bs=1M count=8 2>/dev/null; sync' >/dev/null
sleep 2.5
M2=$(api "http://x/v1/sessions/$A/metrics")
C2=$(jget samples -1 cpu_ms <<<"$M2")
check "cpu_ms grows under the burner ($C1 -> $C2 ms in ~2.5 s)" test "$C2" -gt $((C1 + 500))
check "... and cpu_pct says so (> 30% of one CPU)" jx 'req("samples")[-1] | req("cpu_pct") > 30' -e <<<"$M2"
if [ "$(api http://x/v1/health | jget disk_limits enforced)" = true ]; then
        # btrfs counts usage as of its last transaction commit: wait for it (at most 40 s)
        D2=$D1
        for _ in $(seq 40); do
                D2=$(api "http://x/v1/sessions/$A/metrics" | jget samples -1 disk_bytes)
                [ "$D2" -ge $((D1 + (6 << 20))) ] && break
                sleep 1
        done
        check "disk_bytes grows by the 8 MiB file ($D1 -> $D2)" test "$D2" -ge $((D1 + (6 << 20)))
else
        echo "# no quota volume here: disk_bytes stays 0, its growth is not checked"
        check "... disk_bytes is 0 without the volume" test "$(jget samples -1 disk_bytes <<<"$M2")" = 0
fi
check "no network bytes without spaced --egress on" \
        test "$(jx 'req("samples")[-1] | "\(req("net_rx_bytes")) \(req("net_tx_bytes"))"' <<<"$M2")" = "0 0"
check "the ring is ordered oldest first" jx '[req("samples")[] | req("t_ms")] | . == sort' -e <<<"$M2"

# ---- the window ----
NALL=$(jx 'req("samples") | length' <<<"$M2")
S_SEC=$(((T1 + 999) / 1000))
NSTART=$(api "http://x/v1/sessions/$A/metrics?start=$S_SEC" | jx '[req("samples")[] | req("t_ms")] | length')
WANT=$(jx '[req("samples")[] | select(req("t_ms") >= $s)] | length' --argjson s $((S_SEC * 1000)) <<<"$(api "http://x/v1/sessions/$A/metrics")")
check "start (Unix seconds) leaves out the older samples ($NSTART of $NALL)" test "$NSTART" -lt "$NALL" -a "$NSTART" -ge 1
check "... exactly those at or after it" test "$NSTART" -le "$WANT" -a "$NSTART" -ge $((WANT - 1))
ENDT=$(date -u -d "@$S_SEC" +%Y-%m-%dT%H:%M:%SZ)
NEND=$(api "http://x/v1/sessions/$A/metrics?end=$ENDT" | jx 'req("samples") | length')
FIRST_AFTER=$(api "http://x/v1/sessions/$A/metrics?end=$ENDT" | jx '[req("samples")[] | select(req("t_ms") > $e)] | length' --argjson e $((S_SEC * 1000)))
check "end (RFC 3339) keeps only the older ones ($NEND)" test "$NEND" -ge 1 -a "$NEND" -lt "$NALL" -a "$FIRST_AFTER" = 0
# the newest before and after (a sample may come in between)
L0=$(api "http://x/v1/sessions/$A/metrics" | jget samples -1 t_ms)
LIM=$(api "http://x/v1/sessions/$A/metrics?limit=2" | jx '[req("samples")[] | req("t_ms")] | "\(length) \(.[-1])"')
L1=$(api "http://x/v1/sessions/$A/metrics" | jget samples -1 t_ms)
check "limit=2 gives the 2 newest ($LIM)" test "$LIM" = "2 $L0" -o "$LIM" = "2 $L1"
check "limit=0: 400" test "$(code "http://x/v1/sessions/$A/metrics?limit=0")" = 400
check "limit=721: 400" test "$(code "http://x/v1/sessions/$A/metrics?limit=721")" = 400
check "start after end: 400" test "$(code "http://x/v1/sessions/$A/metrics?start=2000000000&end=1000000000")" = 400
check "a bad start: 400" test "$(code "http://x/v1/sessions/$A/metrics?start=yesterday")" = 400
check "a bad RFC 3339 end: 400" test "$(code "http://x/v1/sessions/$A/metrics?end=2026-13-01T00:00:00Z")" = 400
check "an over-long start: 400" test "$(code "http://x/v1/sessions/$A/metrics?start=$(printf '%080d' 1)")" = 400
check "... with a message" test "$(api "http://x/v1/sessions/$A/metrics?start=x" | jget error code)" = bad_request
check "an unknown session: 404" test "$(code http://x/v1/sessions/ses_0123456789abcdef/metrics)" = 404
check "another tenant's token: 404 for the session" \
        test "$(code -H "Authorization: Bearer $TOK" "http://x/v1/sessions/$A/metrics")" = 404

# ---- GET /metrics ----
check "GET /metrics with a tenant's token: 403" test "$(code -H "Authorization: Bearer $TOK" http://x/metrics)" = 403
curl -sS --unix-socket "$S" -D "$T/mh" -o "$T/metrics.txt" -w '%{http_code}' http://x/metrics >"$T/mcode"
check "GET /metrics as the operator: 200" test "$(cat "$T/mcode")" = 200
check "... as text/plain; version=0.0.4" grep -qi '^Content-Type: text/plain; version=0.0.4' "$T/mh"
promtool check metrics <"$T/metrics.txt" >"$T/promtool.out" 2>&1
RC=$?
check "promtool check metrics accepts it (exit $RC)" test "$RC" = 0
[ "$RC" = 0 ] || sed 's/^/# promtool: /' "$T/promtool.out" | head -n 20
check "the create counter equals the creates done ($CREATES)" \
        grep -qx "space_session_operations_total{op=\"create\",result=\"ok\"} $CREATES" "$T/metrics.txt"
check "... and its histogram counted them" \
        grep -qx "space_session_operation_duration_seconds_count{op=\"create\"} $CREATES" "$T/metrics.txt"
check "running sessions by state and runtime" grep -qx 'space_sessions{state="running",runtime="ns"} 2' "$T/metrics.txt"
check "a HELP and a TYPE line for every family" \
        test "$(grep -c '^# HELP ' "$T/metrics.txt")" = "$(grep -c '^# TYPE ' "$T/metrics.txt")"
check "the 403 and 404s above are counted by route" \
        grep -q '^space_http_responses_total{method="GET",route="/metrics",code="4xx"} [1-9]' "$T/metrics.txt"

# a pause, a resume and a snapshot are counted too
check "pause" test "$(code -X POST "http://x/v1/sessions/$B/pause")" = 200
check "resume" test "$(code -X POST "http://x/v1/sessions/$B/resume")" = 200
check "snapshot" test "$(code -X POST "http://x/v1/sessions/$B/snapshots" -d '{}')" = 201
api http://x/metrics >"$T/metrics2.txt"
check "... resumes counted" grep -qx 'space_session_operations_total{op="resume",result="ok"} 1' "$T/metrics2.txt"
check "... snapshot bytes observed (pause + snapshot)" grep -qx 'space_snapshot_bytes_count 2' "$T/metrics2.txt"

# ---- space top ----
SPACE_DATA=$DATA timeout 20 "$SPACE" top --once >"$T/top" 2>&1
check "space top --once exits 0" test $? = 0
check "... and prints both sessions" grep -q "^$A *running" "$T/top"
check "... $B too" grep -q "^$B *running" "$T/top"
sed 's/^/# /' "$T/top"
SPACE_DATA=$DATA timeout 20 "$SPACE" top --once -n 3 "$A" >"$T/top1" 2>&1
check "space top --once -n 3 ID prints its 3 newest samples" test "$(grep -c '^20' "$T/top1")" = 3
SPACE_DATA=$DATA timeout 20 "$SPACE" top --once -n 0 "$A" >/dev/null 2>&1
check "... -n 0 is a usage error (exit 2)" test $? = 2
SPACE_DATA=$DATA timeout 20 "$SPACE" top --once ses_0123456789abcdef >/dev/null 2>&1
check "... an unknown session exits 1" test $? = 1
SPACE_DATA=$DATA timeout 20 "$SPACE" top --once --json >"$T/topj" 2>&1
check "space top --once --json exits 0" test $? = 0
check "... a JSON line per session, $A running with its newest sample" \
        test "$(jq -rs --arg a "$A" 'map(select(.id == $a))[0] | "\(.state) \(.metrics.samples | length) \(.metrics.samples[0].memory_bytes > 0)"' "$T/topj")" = "running 1 true"
check "... and $B" test "$(jq -rs --arg b "$B" 'map(select(.id == $b)) | length' "$T/topj")" = 1
SPACE_DATA=$DATA timeout 20 "$SPACE" top --once --json -n 2 "$A" >"$T/topj1" 2>&1
check "space top --once --json -n 2 ID: the API's metrics answer with 2 samples" \
        test "$(jx '"\(req("interval_ms")) \(req("samples") | length)"' <"$T/topj1")" = "1000 2"
check "space top --help" sh -c "SPACE_DATA='$DATA' '$SPACE' top --help | grep -q -- --once"

check "deleting the session frees its samples" test "$(code -X DELETE "http://x/v1/sessions/$A")" = 204
check "... and its metrics are 404" test "$(code "http://x/v1/sessions/$A/metrics")" = 404
finish metrics
