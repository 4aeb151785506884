#!/bin/bash
# The E2B API's control plane (docs/e2b.md "Control plane", the wire: docs/e2b-wire.md §2),
# with curl as the SDK sends it (chunked bodies, X-API-KEY) on spaced --e2b-listen: create
# (v2 and the old /sandboxes) and its Sandbox object, envVars and metadata on the SPACE
# session, bad input 400, list with the SDK's triple-encoded metadata filter, states and
# X-Next-Token paging, getInfo, a 2 s timeout that deletes, pause (409 the second time) and
# connect (201, files kept, the same access token), snapshots, a create from one, the
# snapshot delete that SPACE does not have (501), fork of 2, metrics, kill (204, then 404),
# another tenant's key 404 on all of it, a bad key 401. Root only; ~40 s.
# Usage: test_e2b_control.sh SPACED_BINARY   (space-init next to it)
. "$(dirname "$0")/lib.sh" e2b_control "${1:-}"

ROOT=$T/rootfs
make_rootfs "$ROOT"
PORT=$(free_port)
E=http://127.0.0.1:$PORT
KA=$("$SPACED" token add --data "$DATA" --tenant alpha --e2b 2>/dev/null)
KB=$("$SPACED" token add --data "$DATA" --tenant beta --e2b 2>/dev/null)
check "token add --e2b prints e2b_ + 40 hex" grep -qE '^e2b_[0-9a-f]{40}$' <<<"$KA"

# e2b KEY METHOD PATH [BODY]: the status; the body in $T/b, the head in $T/h. A body is
# sent chunked, as the SDK's fetch sends it.
e2b() {
        local key=$1 m=$2 p=$3
        shift 3
        local args=(-sS -o "$T/b" -D "$T/h" -w '%{http_code}' -X "$m" -H "X-API-KEY: $key")
        [ $# -gt 0 ] && args+=(-H 'Content-Type: application/json' -H 'Transfer-Encoding: chunked' --data-binary "$1")
        curl "${args[@]}" "$E$p"
}
body() { cat "$T/b"; }
# the body's numeric code and whether its message is a non-empty string: "404 true"
ecode() { jx '"\(req("code")) \(req("message") | type == "string" and length > 0)"' <"$T/b"; }
next_token() { tr -d '\r' <"$T/h" | awk -F': ' 'tolower($1) == "x-next-token" { print $2 }'; }
# SPACE's own API on the Unix socket, as tenant alpha (its e2b_ key is a bearer token too)
spa() { curl -sS --unix-socket "$S" -H "Authorization: Bearer $KA" "$@"; }
spa_code() { curl -sS --unix-socket "$S" -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $KA" "$@"; }
in_sh() { # session, shell command -> stdout (as alpha)
        spa -X POST "http://x/v1/sessions/$1/exec" -d "$(jq -nc --arg c "$2" '{argv: ["sh", "-c", $c]}')" | stdout_of
}
gone_404() { # sandbox, tenths of a second: until getInfo says 404
        for _ in $(seq "$2"); do
                [ "$(e2b "$KA" GET "/sandboxes/$1")" = 404 ] && return 0
                sleep 0.1
        done
        return 1
}

start_daemon --e2b-listen "127.0.0.1:$PORT" --metrics-interval 1 || exit 1
api -X POST http://x/v1/templates -d "{\"name\":\"mini\",\"from_dir\":\"$ROOT\"}" >/dev/null

# ---- keys ----
check "a bad key is 401" test "$(e2b e2b_0000000000000000000000000000000000000000 GET /v2/sandboxes)" = 401
check "... with body code 401 and a message" test "$(ecode)" = "401 true"

# ---- create ----
ST=$(e2b "$KA" POST /v2/sandboxes '{"templateID":"mini","metadata":{"a":"b c","k&":"v="},"envVars":{"FOO":"bar"},"timeout":120}')
check "POST /v2/sandboxes (chunked) is 201" test "$ST" = 201
S1=$(jx 'req("sandboxID")' <"$T/b")
F=$(jx '"\(req("sandboxID") | .[0:4]) \(req("templateID")) \(req("alias")) \(req("clientID") | type) \(req("envdVersion")) \(req("envdAccessToken") | length) \(req("domain"))"' <"$T/b")
check "... the Sandbox object: a session id, template mini, alias, clientID, envd 0.6.4, a 43-byte token, domain null" \
        test "$F" = "ses_ mini mini string 0.6.4 43 null"
TOK1=$(jx 'req("envdAccessToken")' <"$T/b")
F=$(spa "http://x/v1/sessions/$S1" | jx '"\(req("state")) \(req("metadata") | req("a")) \(req("metadata") | req("k&")) \(req("timeouts") | req("timeout_action"))"')
check "... the session runs already, with the metadata, and its timeout deletes it" test "$F" = "running b c v= delete"
check "... envVars are the session's env" test "$(in_sh "$S1" 'echo $FOO')" = bar
ST=$(e2b "$KA" POST /sandboxes '{"templateID":"mini","timeout":300,"secure":true,"allow_internet_access":true}')
check "the old POST /sandboxes (SDK <= 2.50: secure, allow_internet_access) is 201 on a host with egress off" test "$ST" = 201
S2=$(jx 'req("sandboxID")' <"$T/b")
check "... another sandbox" test "${S2:0:4}" = ses_ -a "$S2" != "$S1"

N0=$(spa http://x/v1/sessions | jx 'req("sessions") | length')
LONGKEY=$(printf 'k%.0s' $(seq 65))
check "metadata with a 65-byte key is 400" test "$(e2b "$KA" POST /v2/sandboxes "{\"templateID\":\"mini\",\"metadata\":{\"$LONGKEY\":\"v\"}}")" = 400
check "... body code 400, naming the key" grep -q "${LONGKEY:0:40}.*1 to 64 bytes" <<<"$(jx 'req("message")' <"$T/b")"
check "a metadata value that is not a string is 400" test "$(e2b "$KA" POST /v2/sandboxes '{"templateID":"mini","metadata":{"n":1}}')" = 400
check "timeout 0 is 400" test "$(e2b "$KA" POST /v2/sandboxes '{"templateID":"mini","timeout":0}')" = 400
check "envVars that are not strings are 400" test "$(e2b "$KA" POST /v2/sandboxes '{"templateID":"mini","envVars":{"A":1}}')" = 400
check "a templateID that is no name is 400" test "$(e2b "$KA" POST /v2/sandboxes '{"templateID":"../x"}')" = 400
check "allowOut beside a partial denyOut is 400 (not servable)" \
        test "$(e2b "$KA" POST /v2/sandboxes '{"templateID":"mini","network":{"allowOut":["1.1.1.1"],"denyOut":["10.0.0.0/8"]}}')" = 400
check "egress rules on a host with egress off are 403" \
        test "$(e2b "$KA" POST /v2/sandboxes '{"templateID":"mini","network":{"allowOut":["1.1.1.1"],"denyOut":["0.0.0.0/0"]}}')" = 403
check "a template that does not exist is 404" test "$(e2b "$KA" POST /v2/sandboxes '{"templateID":"nope"}')" = 404
check "... and none of these made a session" test "$(spa http://x/v1/sessions | jx 'req("sessions") | length')" = "$N0"
check "SPACE's create refuses a metadata key of 65 bytes too (400)" \
        test "$(spa_code -X POST http://x/v1/sessions -d "{\"template\":\"mini\",\"metadata\":{\"$LONGKEY\":\"v\"}}")" = 400

# ---- list ----
# {a:'b c','k&':'v='} as the SDK 2.51 sends it (docs/e2b-wire.md §2.4)
MD='a%3Db%252520c%26k%252526%3Dv%25253D'
check "list with the SDK's metadata filter is 200" test "$(e2b "$KA" GET "/v2/sandboxes?metadata=$MD&state=running,paused")" = 200
check "... just the sandbox with that metadata" test "$(jx '[.[] | req("sandboxID")] | join(" ")' <"$T/b")" = "$S1"
F=$(jx '.[0] | "\(req("state")) \(req("metadata") | req("a")) \(req("startedAt") | type) \(req("endAt") | type) \(req("cpuCount") | type) \(req("memoryMB")) \(req("envdVersion"))"' <"$T/b")
check "... its ListedSandbox fields" test "$F" = "running b c string string number 512 0.6.4"
e2b "$KA" GET "/v2/sandboxes?metadata=a%3Dother" >/dev/null
check "a filter that matches nothing gives []" test "$(body)" = "[]"
check "a malformed filter is 400" test "$(e2b "$KA" GET "/v2/sandboxes?metadata=a%3D%2525zz")" = 400
check "state=stopped is 400" test "$(e2b "$KA" GET "/v2/sandboxes?state=stopped")" = 400
check "limit 1001 is 400" test "$(e2b "$KA" GET "/v2/sandboxes?limit=1001")" = 400
# paging: one a page, newest first, the cursor until the last page
SEEN=
TOKEN=
for i in 1 2 3 4; do
        e2b "$KA" GET "/v2/sandboxes?limit=1${TOKEN:+&nextToken=$TOKEN}" >/dev/null
        SEEN="$SEEN$(jx '[.[] | req("sandboxID")] | join(" ")' <"$T/b") "
        TOKEN=$(next_token)
        [ -z "$TOKEN" ] && break
done
check "paging with limit 1 gives both sandboxes, newest first, then stops (no X-Next-Token)" test "$SEEN" = "$S2 $S1 " -a -z "$TOKEN"
e2b "$KA" GET "/v2/sandboxes?order=asc" >/dev/null
check "order=asc: oldest first" test "$(jx '[.[] | req("sandboxID")] | join(" ")' <"$T/b")" = "$S1 $S2"
check "a nextToken of nobody's is 400" test "$(e2b "$KA" GET "/v2/sandboxes?nextToken=bogus")" = 400
e2b "$KB" GET /v2/sandboxes >/dev/null
check "another tenant's list is empty" test "$(body)" = "[]"
e2b "$KA" GET /sandboxes >/dev/null
check "the old GET /sandboxes lists too" test "$(jx 'length' <"$T/b")" = 2
check "SPACE's GET /v1/sessions?metadata= filters the same" \
        test "$(spa --get --data-urlencode 'metadata=a=b+c&k%26=v%3D' http://x/v1/sessions | jx '[req("sessions")[] | req("id")] | join(" ")')" = "$S1"

# ---- getInfo ----
check "getInfo is 200" test "$(e2b "$KA" GET "/sandboxes/$S1")" = 200
F=$(jx '"\(req("sandboxID")) \(req("state")) \(req("lifecycle") | req("onTimeout")) \(req("allowInternetAccess")) \(req("envdAccessToken") == $t) \(req("network") | req("denyOut") | join(","))"' --arg t "$TOK1" <"$T/b")
check "... SandboxDetail: state, onTimeout kill, no internet, the token, denyOut all" test "$F" = "$S1 running kill false true 0.0.0.0/0"

# ---- timeout ----
check "setTimeout 2 s is 204" test "$(e2b "$KA" POST "/sandboxes/$S2/timeout" '{"timeout":2}')" = 204
check "setTimeout without a timeout is 400" test "$(e2b "$KA" POST "/sandboxes/$S1/timeout" '{}')" = 400
check "... the sandbox is gone after it (getInfo 404)" gone_404 "$S2" 100
check "... with body code 404" test "$(ecode)" = "404 true"

# ---- pause, connect ----
check "a file written through SPACE's API" test "$(spa_code -X PUT --data-binary kept "http://x/v1/sessions/$S1/files?path=/root/keep.txt")" = 201
check "pause is 204" test "$(e2b "$KA" POST "/sandboxes/$S1/pause" '{}')" = 204
check "... the session is paused" test "$(spa "http://x/v1/sessions/$S1" | jget state)" = paused
check "a second pause is 409" test "$(e2b "$KA" POST "/sandboxes/$S1/pause" '{}')" = 409
check "... with body code 409" test "$(ecode)" = "409 true"
e2b "$KA" GET "/v2/sandboxes?state=paused" >/dev/null
check "list state=paused has it" test "$(jx '[.[] | req("sandboxID")] | join(" ")' <"$T/b")" = "$S1"
e2b "$KA" GET "/v2/sandboxes?state=running" >/dev/null
check "list state=running has not" test "$(jx '[.[] | req("sandboxID")] | join(" ")' <"$T/b")" = ""
check "connect resumes it: 201" test "$(e2b "$KA" POST "/v2/sandboxes/$S1/connect" '{"timeout":60}')" = 201
check "... with the same access token" test "$(jx 'req("envdAccessToken")' <"$T/b")" = "$TOK1"
check "... it runs, the file kept" test "$(in_sh "$S1" 'cat /root/keep.txt')" = kept
check "connect of a running one is 200" test "$(e2b "$KA" POST "/sandboxes/$S1/connect" '{"timeout":300}')" = 200
check "the old resume of a running one is 409" test "$(e2b "$KA" POST "/sandboxes/$S1/resume" '{}')" = 409

# ---- snapshots ----
check "createSnapshot is 201" test "$(e2b "$KA" POST "/sandboxes/$S1/snapshots" '{"name":"snap-one"}')" = 201
SNAP=$(jx 'req("snapshotID")' <"$T/b")
check "... a snap_ id, named" test "${SNAP:0:5} $(jx 'req("names") | join(",")' <"$T/b")" = "snap_ snap-one"
e2b "$KA" GET "/snapshots?sandboxID=$S1" >/dev/null
check "listSnapshots of the sandbox has it (and no rolling or pause snapshot)" test "$(jx '[.[] | req("snapshotID")] | join(" ")' <"$T/b")" = "$SNAP"
e2b "$KA" GET "/snapshots" >/dev/null
check "listSnapshots of the tenant has it" test "$(jx '[.[] | req("snapshotID")] | join(" ")' <"$T/b")" = "$SNAP"
check "Sandbox.create(snapshotId) is 201" test "$(e2b "$KA" POST /v2/sandboxes "{\"templateID\":\"$SNAP\"}")" = 201
S3=$(jx 'req("sandboxID")' <"$T/b")
check "... it starts from the snapshot's files" test "$(in_sh "$S3" 'cat /root/keep.txt')" = kept
check "deleteSnapshot of it is 501 (SPACE deletes a snapshot only with its sandbox)" test "$(e2b "$KA" DELETE "/templates/$SNAP")" = 501
check "deleteSnapshot of an unknown one is 404" test "$(e2b "$KA" DELETE /templates/snap_0000000000000000)" = 404
check "... with body code 404" test "$(ecode)" = "404 true"

# ---- fork ----
check "fork count 2 is 201" test "$(e2b "$KA" POST "/sandboxes/$S1/fork" '{"count":2}')" = 201
FORKS=$(jx '[.[] | req("sandbox") | req("sandboxID")] | join(" ")' <"$T/b")
F=$(jx '[.[] | req("sandbox") | req("envdAccessToken")] | unique | length' <"$T/b")
read -r FA FB <<<"$FORKS"
check "... two new sandboxes, each with its own token" test "${FA:0:4} ${FB:0:4} $F" = "ses_ ses_ 2" -a "$FA" != "$FB" -a "$FA" != "$S1"
check "... the fork has the files" test "$(in_sh "$FB" 'cat /root/keep.txt')" = kept
F=$(spa "http://x/v1/sessions/$FA" | jx '"\(req("metadata") | req("a")) \(req("timeouts") | req("timeout") | type) \(req("timeouts") | req("timeout_action"))"')
check "... and the metadata (copied by fork), a deadline, the source's timeout action" test "$F" = "b c string delete"
check "a fork count of 65 is 400" test "$(e2b "$KA" POST "/sandboxes/$S1/fork" '{"count":65}')" = 400

# ---- metrics ----
HAS=0
for _ in $(seq 60); do
        e2b "$KA" GET "/sandboxes/$S1/metrics" >/dev/null
        [ "$(jx 'length' <"$T/b")" -gt 0 ] && { HAS=1; break; }
        sleep 0.2
done
check "getMetrics gives samples" test "$HAS" = 1
F=$(jx '.[-1] | "\(req("timestamp") | type) \(req("timestampUnix") | type) \(req("cpuUsedPct") | type) \(req("cpuCount") | type) \(req("memUsed") > 0) \(req("memTotal")) \(req("diskUsed") | type)"' <"$T/b")
check "... in E2B's shape" test "$F" = "string number number number true 536870912 number"
check "metrics with start after end is 400" test "$(e2b "$KA" GET "/sandboxes/$S1/metrics?start=2000000000&end=1000000000")" = 400
e2b "$KA" GET "/sandboxes/$S1/metrics?start=1000000000&end=1000000001" >/dev/null
check "metrics of a range without samples is []" test "$(body)" = "[]"

# ---- another tenant ----
CODES=
for r in "GET /sandboxes/$S1" "POST /v2/sandboxes/$S1/connect {}" "POST /sandboxes/$S1/connect {}" \
        "POST /sandboxes/$S1/timeout {\"timeout\":5}" "POST /sandboxes/$S1/pause {}" "POST /sandboxes/$S1/resume {}" \
        "GET /sandboxes/$S1/metrics" "POST /sandboxes/$S1/snapshots {}" "POST /sandboxes/$S1/fork {}" \
        "GET /snapshots?sandboxID=$S1" "DELETE /templates/$SNAP" "DELETE /sandboxes/$S1"; do
        read -r m p b <<<"$r"
        if [ -n "$b" ]; then e2b "$KB" "$m" "$p" "$b" >/dev/null; else e2b "$KB" "$m" "$p" >/dev/null; fi
        CODES="$CODES $(ecode | cut -d' ' -f1)"
done
check "another tenant's key: body code 404 for all twelve calls" test "$CODES" = "$(printf ' 404%.0s' $(seq 12))"
e2b "$KB" POST /v2/sandboxes "{\"templateID\":\"$SNAP\"}" >/dev/null
check "... and for a create from the snapshot" test "$(ecode | cut -d' ' -f1)" = 404
e2b "$KB" GET /snapshots >/dev/null
check "... its snapshot list is empty" test "$(body)" = "[]"
check "... and the sandbox still runs" test "$(spa "http://x/v1/sessions/$S1" | jget state)" = running

# ---- kill ----
check "kill is 204" test "$(e2b "$KA" DELETE "/sandboxes/$S1")" = 204
check "... with no body" test ! -s "$T/b"
check "a second kill is 404" test "$(e2b "$KA" DELETE "/sandboxes/$S1")" = 404
check "... with body code 404" test "$(ecode)" = "404 true"
check "connect of the killed one is 404" test "$(e2b "$KA" POST "/v2/sandboxes/$S1/connect" '{}')" = 404
for s in $S3 $FA $FB; do e2b "$KA" DELETE "/sandboxes/$s" >/dev/null; done
e2b "$KA" GET /v2/sandboxes >/dev/null
check "after killing the rest the list is empty" test "$(body)" = "[]"

finish e2b_control
