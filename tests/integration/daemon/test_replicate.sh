#!/bin/bash
# daemon.replicate: spaced replicates snapshots to S3 (issue #17, docs/daemon.md
# "Replication") against the private Swift of tests/s3/s3-server:
#  1. bad --s3-* / --replicate-jobs values and a missing key exit 2; health says
#     replication is off without --s3-endpoint;
#  2. a manual snapshot of a session with files becomes replicated:true (bounded wait),
#     the bucket has snapshots/<store hash>, the session's log has a "replicated" event,
#     health shows nothing pending; a fork's first snapshot and a pause's are replicated;
#  3. with the proxy stopped, another snapshot stays replicated:false and health shows
#     it pending and failed; the proxy back, it becomes true;
#  4. spaced stopped with the proxy down after one more snapshot (unreplicated), started
#     again, then the proxy back: the snapshot is replicated after the restart;
#  4b. 72 snapshots (more than the replicator's 64 slots) taken with the proxy down are
#     all pending, and all replicated once it is back;
#  5. space-store pull of a replicated snapshot into an empty store, then get: the
#     session's files, the same bytes.
# Usage: test_replicate.sh SPACED_BINARY (space-store beside it). Root only; ~60 s.
. "$(dirname "$0")/lib.sh" replicate "$1"
ST=$BIN/space-store
srv=$(cd "$(dirname "$0")/../../s3" && pwd)/s3-server
command -v swift-proxy-server >/dev/null || { echo "SKIP: swift is not installed"; exit $SKIP; }
[ -x "$ST" ] || { echo "FAIL: $ST is not built"; exit 1; }
trap 'sh "$srv" stop "$T/srv" >/dev/null 2>&1; cleanup' EXIT

out=$(sh "$srv" start "$T/srv") || { echo "FAIL: s3-server start: $out"; exit 1; }
port=$(echo "$out" | sed -n 's|.*endpoint=http://127.0.0.1:\([0-9]*\).*|\1|p')
[ -n "$port" ] || { echo "FAIL: no endpoint in: $out"; exit 1; }
EP=http://127.0.0.1:$port
BUCKET=space-repl
E=http://test%3Atester:testing@127.0.0.1:$port
s3() { curl -s -m 10 --aws-sigv4 aws:amz:us-east-1:s3 -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' "$@"; }
s3code() { s3 -o /dev/null -w '%{http_code}' "$@"; }
i=0
until [ "$(s3code -X PUT "$E/$BUCKET")" = 200 ]; do
        i=$((i + 1)); [ $i -lt 30 ] || { echo "FAIL: cannot create the bucket"; exit 1; }; sleep 0.5
done

# ---- 1. options ----
unset SPACE_S3_ACCESS_KEY SPACE_S3_SECRET_KEY
bad_opt() { # description, options...
        local d=$1 rc=0
        shift
        "$SPACED" --data "$T/nodata" "$@" >"$T/opt.out" 2>&1 || rc=$?
        check "$d: exit 2 with a message" test "$rc" = 2 -a -s "$T/opt.out"
}
bad_opt "--s3-endpoint ftp://x" --s3-endpoint ftp://x --s3-bucket abc
bad_opt "--s3-bucket Bad_Name" --s3-endpoint "$EP" --s3-bucket Bad_Name
bad_opt "--s3-region with a space" --s3-endpoint "$EP" --s3-bucket abc --s3-region "us east"
bad_opt "--replicate-jobs 0" --replicate-jobs 0
bad_opt "--replicate-jobs 33" --replicate-jobs 33
bad_opt "--s3-endpoint without --s3-bucket" --s3-endpoint "$EP"
bad_opt "--s3-endpoint without the keys in the environment" --s3-endpoint "$EP" --s3-bucket "$BUCKET"
check "... and the message names the variables" grep -q SPACE_S3_SECRET_KEY "$T/opt.out"
check "spaced --help tells of --s3-endpoint and --replicate-jobs" sh -c "'$SPACED' --help | grep -q -- '--s3-endpoint URL' && '$SPACED' --help | grep -q -- '--replicate-jobs N'"
check "no data directory was made by a refused start" test ! -e "$T/nodata"
# the configuration file takes the options (its keys are the long options)
printf 'data = %s\ns3-endpoint = ftp://x\n' "$T/nodata" > "$T/bad.conf"
rc=0; "$SPACED" --config "$T/bad.conf" --check-config >"$T/opt.out" 2>&1 || rc=$?
check "a bad s3-endpoint in the config file: exit 2 naming the file's line" sh -c "test $rc = 2 && grep -q 'bad.conf:2: bad --s3-endpoint' '$T/opt.out'"
printf 'data = %s\ns3-endpoint = %s\ns3-bucket = %s\nreplicate-jobs = 3\n' "$T/nodata" "$EP" "$BUCKET" > "$T/good.conf"
rc=0; SPACE_S3_ACCESS_KEY=k SPACE_S3_SECRET_KEY=s "$SPACED" --config "$T/good.conf" --check-config >"$T/opt.out" 2>&1 || rc=$?
check "a good one passes --check-config and lists the settings" sh -c "test $rc = 0 && grep -q 's3-bucket = $BUCKET' '$T/opt.out' && grep -q 'replicate-jobs = 3' '$T/opt.out'"
check "... and the keys are not in what it prints" sh -c "! grep -q 'SPACE_S3\|secret' '$T/opt.out'"

ROOT=$T/rootfs
make_rootfs "$ROOT" "cmp"
start_daemon || exit 1
check "without --s3-endpoint health says replication is off" \
        test "$(api http://x/v1/health | jx 'req("replication") | "\(req("enabled"))/\(req("pending"))/\(req("failed"))"')" = "false/0/0"
kill -TERM "$PID"; gone "$PID"; PID=

export SPACE_S3_ACCESS_KEY=test:tester SPACE_S3_SECRET_KEY=testing
RS="--s3-endpoint $EP --s3-bucket $BUCKET --replicate-jobs 2"
# shellcheck disable=SC2086
start_daemon $RS || exit 1
check "spaced logs that it replicates" grep -q "replicating snapshots to $EP, bucket $BUCKET" "$LOG"
api -X POST http://x/v1/templates -d "{\"name\":\"mini\",\"from_dir\":\"$ROOT\"}" >/dev/null
A=$(api -X POST http://x/v1/sessions -d '{"template":"mini","memory":"64M","snapshot_interval_ms":0}' | jget id)
UA=http://x/v1/sessions/$A
check "a session" test -n "$A"

repl_of() { api "$UA/snapshots" | jx '[req("snapshots")[] | select(req("id") == $i) | req("replicated")] | .[0]' --arg i "$1"; }
wait_repl() { # snapshot, want (true/false), tenths of a second
        for _ in $(seq "$3"); do
                [ "$(repl_of "$1")" = "$2" ] && return 0
                sleep 0.1
        done
        return 1
}
health_repl() { api http://x/v1/health | jx 'req("replication") | "\(req("enabled"))/\(req("pending"))/\(req("failed"))"'; }

# ---- 2. a snapshot is replicated ----
sh_in "$A" 'mkdir -p /root/work && dd if=/dev/urandom of=/root/work/blob bs=1024 count=700 2>/dev/null; echo hello > /root/work/note; sync' >/dev/null
sh_in "$A" 'cat /root/work/blob' > "$T/blob.orig"
check "the session's file is 700 KiB" test "$(stat -c %s "$T/blob.orig")" = 716800
R=$(api -X POST "$UA/snapshots" -d '{"label":"one"}')
S1=$(echo "$R" | jget id)
H1=$(echo "$R" | jget store_snapshot)
check "the snapshot answer carries replicated (a boolean)" test "$(echo "$R" | jx 'req("replicated") | type')" = boolean
check "the first snapshot becomes replicated:true (within 30 s)" wait_repl "$S1" true 300
check "the bucket has snapshots/<its store hash>" test "$(s3code -I "$E/$BUCKET/snapshots/$H1")" = 200
check "the session's log has a replicated event naming it" \
        test "$(api "$UA/events" | jx '[req("events")[] | select(req("kind") == "replicated") | req("data") | req("snapshot")] | join(",")')" = "$S1"
check "health: enabled, nothing pending, nothing failed" test "$(health_repl)" = "true/0/0"

# ---- 2b. other reasons: a fork's first snapshot, a pause's ----
all_repl() { # session, tenths of a second: every snapshot of it replicated
        for _ in $(seq "$2"); do
                [ "$(api "http://x/v1/sessions/$1/snapshots" | jx '[req("snapshots")[] | req("replicated")] | (length > 0 and all)')" = true ] && return 0
                sleep 0.1
        done
        return 1
}
F=$(api -X POST "$UA/fork" -d "{\"snapshot\":\"$S1\"}" | jget sessions 0 id)
check "a fork of the first snapshot" test -n "$F"
check "the fork's snapshot (reason fork) becomes replicated (within 30 s)" all_repl "$F" 300
check "the fork's log has a replicated event" \
        test "$(api "http://x/v1/sessions/$F/events" | jx '[req("events")[] | select(req("kind") == "replicated")] | length')" = 1
api -X DELETE "http://x/v1/sessions/$F" >/dev/null
sh_in "$A" 'echo paused > /root/work/pausenote' >/dev/null
check "pause answers paused" test "$(api -X POST "$UA/pause" | jget state)" = paused
check "the pause snapshot becomes replicated (within 30 s)" all_repl "$A" 300
check "... and it is one of reason pause" \
        test "$(api "$UA/snapshots" | jx '[req("snapshots")[] | select(req("reason") == "pause") | req("replicated")] | .[0]')" = true
check "resume answers running" test "$(api -X POST "$UA/resume" | jget state)" = running

# ---- 3. the proxy down: stays false, pending and failed; back: true ----
sh "$srv" stop-proxy "$T/srv" >/dev/null
sh_in "$A" 'echo two > /root/work/note' >/dev/null
S2=$(api -X POST "$UA/snapshots" -d '{"label":"two"}' | jget id)
check "a snapshot taken with the proxy down" test -n "$S2"
fails_seen() { grep -q "replicating snapshot $S2 failed" "$LOG"; }
wait_log() { for _ in $(seq "$1"); do fails_seen && return 0; sleep 0.1; done; return 1; }
check "its push fails (logged, within 40 s)" wait_log 400
check "it stays replicated:false while the proxy is down" test "$(repl_of "$S2")" = false
check "health shows it pending and failed" test "$(health_repl)" = "true/1/1"
check "the first stays replicated:true" test "$(repl_of "$S1")" = true
sleep 2
check "still replicated:false 2 s later" test "$(repl_of "$S2")" = false
sh "$srv" start-proxy "$T/srv" >/dev/null
check "after the proxy is back it becomes replicated:true (within 90 s)" wait_repl "$S2" true 900
check "health: nothing pending or failed again" test "$(health_repl)" = "true/0/0"

# ---- 4. a restart with one unreplicated snapshot ----
sh "$srv" stop-proxy "$T/srv" >/dev/null
sh_in "$A" 'echo three > /root/work/note' >/dev/null
R=$(api -X POST "$UA/snapshots" -d '{"label":"three"}')
S3=$(echo "$R" | jget id)
H3=$(echo "$R" | jget store_snapshot)
check "a third snapshot, unreplicated with the proxy down" test "$(repl_of "$S3")" = false
kill -TERM "$PID"
check "spaced stops (within 10 s) with a push failing" gone "$PID"
PID=
# shellcheck disable=SC2086
start_daemon $RS || exit 1
check "after the restart it is still replicated:false, the first two true" \
        test "$(repl_of "$S3")/$(repl_of "$S1")/$(repl_of "$S2")" = "false/true/true"
pend=$(health_repl | cut -d/ -f2)
check "health counts it (and the stop's rolling snapshot, if any) pending" test "$pend" -ge 1
sh "$srv" start-proxy "$T/srv" >/dev/null
check "after the proxy is back it is replicated (within 90 s)" wait_repl "$S3" true 900
check "the bucket has snapshots/<its store hash>" test "$(s3code -I "$E/$BUCKET/snapshots/$H3")" = 200
for _ in $(seq 300); do [ "$(health_repl)" = "true/0/0" ] && break; sleep 0.1; done
check "health: nothing pending at the end" test "$(health_repl)" = "true/0/0"

# ---- 4b. backpressure: more snapshots than the replicator holds, taken while the
# proxy is down, all replicated once it is back ----
sh "$srv" stop-proxy "$T/srv" >/dev/null
NB=72
t0=$(date +%s)
for k in $(seq $NB); do api -X POST "$UA/snapshots" -d "{\"label\":\"burst $k\"}" >/dev/null; done
echo "# $NB snapshots in $(( $(date +%s) - t0 )) s"
pend=$(health_repl | cut -d/ -f2)
check "health: all $NB pending (more than the 64 slots)" test "$pend" -ge $NB
sh "$srv" start-proxy "$T/srv" >/dev/null
wait_all() { for _ in $(seq "$1"); do [ "$(health_repl)" = "true/0/0" ] && return 0; sleep 0.2; done; return 1; }
check "after the proxy is back every one of them is replicated (within 120 s)" wait_all 600
check "... every snapshot of the session says replicated:true" \
        test "$(api "$UA/snapshots" | jx '[req("snapshots")[] | req("replicated")] | all')" = true
check "... and the log has one replicated event per burst snapshot" \
        test "$(api "$UA/events?limit=1000" | jx '[req("events")[] | select(req("kind") == "replicated") | req("data") | req("snapshot")] | unique | length')" -ge $NB

api http://x/metrics > "$T/metrics.txt"
check "GET /metrics: nothing pending, and at least $NB pushed since the restart" \
        sh -c "grep -qx 'space_replication_pending 0' '$T/metrics.txt' && grep -qx 'space_replication_failed 0' '$T/metrics.txt' && test \$(sed -n 's/^space_replication_pushed_total //p' '$T/metrics.txt') -ge $NB"
if command -v promtool >/dev/null; then
        check "... which promtool accepts" sh -c "promtool check metrics < '$T/metrics.txt' >/dev/null 2>&1"
fi

# ---- 5. a pull into an empty store restores the same bytes ----
export SPACE_S3_ENDPOINT=$EP SPACE_S3_BUCKET=$BUCKET SPACE_S3_REGION=us-east-1
check "space-store pull of the first snapshot into an empty store" "$ST" --quiet --store "$T/empty" pull "$H1"
check "... and get of it" "$ST" --store "$T/empty" get "$H1" "$T/got"
blob=$(find "$T/got" -path '*root/work/blob' -type f | head -n 1)
note=$(find "$T/got" -path '*root/work/note' -type f | head -n 1)
check "the pulled snapshot has the session's file" test -n "$blob"
check "... with the same bytes" cmp -s "$blob" "$T/blob.orig"
check "... and the note of that time" test "$(cat "$note" 2>/dev/null)" = hello
check "the third snapshot pulls with its note" sh -c "'$ST' --quiet --store '$T/empty' pull '$H3' && '$ST' --store '$T/empty' get '$H3' '$T/got3' && grep -rqx three '$T/got3'"

kill -TERM "$PID"; gone "$PID"; PID=
finish daemon.replicate
