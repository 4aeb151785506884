#!/bin/bash
# The event log against a tenant that fills it (issue #20 item 3, docs/security.md
# "Hostile tenants"): 400 posts of 64 KiB as fast as one client sends them are rate
# limited (429 with Retry-After) and leave meta.db far below the 25 MiB posted; with small
# --limit values, the oldest posted events are trimmed by count and by bytes while
# spaced's own events stay, a second session of the tenant gets 507 past the tenant's
# total, and another tenant is not held back. Root only; ~30 s.
# Usage: test_events.sh SPACED_BINARY   (space-init next to it)
. "$(dirname "$0")/lib.sh" events "${1:-}"

ROOT=$T/rootfs
make_rootfs "$ROOT"
# posts N FILE SESSION: N posts of the JSON in FILE on one connection; their statuses, one a line
posts() {
        local a=() i
        for i in $(seq "$1"); do a+=(-o /dev/null "http://x/v1/sessions/$3/events"); done
        curl -sS --unix-socket "$S" -H 'Content-Type: application/json' --data-binary "@$2" \
                -w '%{http_code}\n' "${a[@]}"
}
count_of() { grep -c "^$1\$"; }
# the session's events: "seq kind" lines, every page read (at most 20 pages)
events_of() {
        local after=0 page
        for _ in $(seq 20); do
                page=$(api "http://x/v1/sessions/$1/events?after=$after&limit=1000")
                jx 'req("events")[] | "\(req("seq")) \(req("kind"))"' <<<"$page"
                [ "$(jx 'req("more")' <<<"$page")" = true ] || break
                after=$(jx 'req("next")' <<<"$page")
        done
}
db_bytes() { stat -c %s "$DATA/meta.db"; }

printf '{"kind":"note","data":"%s"}' "$(head -c 65000 /dev/zero | tr '\0' x)" >"$T/big.json"
printf '{"kind":"agent","data":"%s"}' "$(head -c 20000 /dev/zero | tr '\0' y)" >"$T/mid.json"
printf '{"kind":"tool_call","data":{"n":1}}' >"$T/small.json"

start_daemon || exit 1
api -X POST http://x/v1/templates -d "{\"name\":\"mini\",\"from_dir\":\"$ROOT\"}" >/dev/null
NEW='{"template":"mini","memory":"64M","snapshot_interval_ms":0}'
A=$(api -X POST http://x/v1/sessions -d "$NEW" | jget id)
check "a session to post to" test "${A:0:4}" = ses_
echo "# $A, default limits"

# ---- the flood of the issue, default limits ----
DB0=$(db_bytes)
MS0=$(date +%s%3N)
posts 400 "$T/big.json" "$A" >"$T/codes1"
MS=$(($(date +%s%3N) - MS0))
N201=$(count_of 201 <"$T/codes1")
N429=$(count_of 429 <"$T/codes1")
DB1=$(db_bytes)
echo "# 400 posts of 64 KiB in $MS ms: $N201 accepted, $N429 answered 429; meta.db $DB0 -> $DB1 bytes"
# 200 at once, then 50 a second: what the rate allows in the time the flood took
check "a flood of 400 posts is rate limited: at most 200 + 50/s accepted" test "$N201" -le $((200 + 50 * (MS + 999) / 1000))
if [ "$MS" -lt 3000 ]; then
        check "... so some were answered 429 (the flood took $MS ms)" test "$N429" -gt 0
fi
check "... after the burst of 200 at least" test "$N201" -ge 200
check "... and every post is answered 201 or 429" test $((N201 + N429)) = 400
check "meta.db stays below 20 MiB (25 MiB were posted)" test "$DB1" -lt $((20 << 20))
check "deleting the session frees its events" test "$(code -X DELETE "http://x/v1/sessions/$A")" = 204
kill -TERM "$PID"
gone "$PID" || kill -9 "$PID"
PID=

# ---- small limits: trimming, the tenant's total ----
start_daemon --limit events=30 --limit event-bytes=200K --limit tenant-event-bytes=300K \
        --limit event-rate=100000 --limit event-burst=100000 || exit 1
B=$(api -X POST http://x/v1/sessions -d "$NEW" | jget id)
check "a second session" test "${B:0:4}" = ses_
posts 100 "$T/small.json" "$B" >"$T/codes2"
check "with events=30, 100 small posts are all accepted (the oldest are trimmed)" \
        test "$(count_of 201 <"$T/codes2")" = 100
events_of "$B" >"$T/ev2"
check "... and 30 posted events are kept" test "$(grep -c ' tool_call$' "$T/ev2")" = 30
check "... the newest: the oldest kept is the 71st post" \
        test "$(grep ' tool_call$' "$T/ev2" | head -n 1 | cut -d' ' -f1)" = "$(($(grep ' tool_call$' "$T/ev2" | tail -n 1 | cut -d' ' -f1) - 29))"
check "... while spaced's own events (lifecycle) are all there" \
        test "$(grep -c ' lifecycle$' "$T/ev2")" -ge 1 -a "$(head -n 1 "$T/ev2" | cut -d' ' -f2)" = lifecycle
posts 30 "$T/mid.json" "$B" >"$T/codes3"
events_of "$B" >"$T/ev3"
check "with event-bytes=200K, 30 posts of 20 KB keep at most 10 of them" \
        test "$(grep -c ' agent$' "$T/ev3")" -le 10 -a "$(count_of 201 <"$T/codes3")" = 30
check "... and push out the small ones (bytes are over)" test "$(grep -c ' tool_call$' "$T/ev3")" -le 10
# The session holds ~200K; a new one of the tenant may hold ~100K more.
C=$(api -X POST http://x/v1/sessions -d "$NEW" | jget id)
D=$(api -X POST http://x/v1/sessions -d "$NEW" | jget id)
posts 12 "$T/mid.json" "$C" >"$T/codes4"
check "past the tenant's 300K, a post to another of its sessions is 507" test "$(count_of 507 <"$T/codes4")" -gt 0
check "... after the ones that fit" test "$(count_of 201 <"$T/codes4")" -ge 3
R=$(curl -sS --unix-socket "$S" -H 'Content-Type: application/json' --data-binary "@$T/mid.json" \
        "http://x/v1/sessions/$C/events" -w '\n%{http_code}')
check "... with a clear error: no_space, the tenant's total" \
        test "$(head -n 1 <<<"$R" | jget error code)/$(tail -n 1 <<<"$R")" = no_space/507
check "... that names the limit" grep -q 'most is 307200' <<<"$(head -n 1 <<<"$R" | jget error message)"
check "spaced's own events still go in: a snapshot of that session works" \
        test "$(code -X POST "http://x/v1/sessions/$C/snapshots")" = 201
check "deleting the big session frees the tenant's bytes" test "$(code -X DELETE "http://x/v1/sessions/$B")" = 204
check "... and the post is accepted again" \
        test "$(code -H 'Content-Type: application/json' --data-binary "@$T/mid.json" "http://x/v1/sessions/$C/events")" = 201

kill -TERM "$PID"
gone "$PID" || kill -9 "$PID"
PID=

# ---- the rate limit: event-rate=1, event-burst=3 ----
start_daemon --limit event-rate=1 --limit event-burst=3 || exit 1
posts 6 "$T/small.json" "$C" >"$T/codes5"
check "with event-burst=3, 3 of 6 quick posts are accepted, 3 answered 429" \
        test "$(count_of 201 <"$T/codes5")/$(count_of 429 <"$T/codes5")" = 3/3
R=$(curl -sS --unix-socket "$S" -D "$T/h" -H 'Content-Type: application/json' --data-binary "@$T/small.json" \
        "http://x/v1/sessions/$C/events")
check "a 429 says Retry-After: 1 (one event a second)" grep -qi '^Retry-After: 1' "$T/h"
check "... and its error code is rate_limited" test "$(jget error code <<<"$R")" = rate_limited
sleep 1.2
check "a second later a post is accepted" \
        test "$(code -H 'Content-Type: application/json' --data-binary "@$T/small.json" "http://x/v1/sessions/$C/events")" = 201
check "another session has its own bucket" \
        test "$(code -H 'Content-Type: application/json' --data-binary "@$T/small.json" "http://x/v1/sessions/$D/events")" = 201

finish events
