#!/bin/bash
# Integration test of API authentication and tenants (docs/security.md, "API clients"):
# `spaced token` add/list/revoke, --listen refusing to start without a usable token, 401s
# on TCP (no token, malformed, unknown, revoked, wrong scheme, oversized header), and two
# tenants: everything B tries on A's session or snapshot answers 404 with the same body
# as a missing id, lists show only one's own, templates and GC are the operator's.
# Usage: test_auth.sh SPACED_BINARY   (space-init must sit next to it)
. "$(dirname "$0")/lib.sh" auth "${1:-}"

PORT=$(free_port)
TCP=http://127.0.0.1:$PORT
tok() { "$SPACED" token "$@" --data "$DATA"; }
# as TOKEN, over TCP: curl arguments
as() { local t=$1; shift; curl -sS -H "Authorization: Bearer $t" "$@"; }
as_code() { local t=$1; shift; curl -sS -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $t" "$@"; }
# The body with the id replaced: a 404 for another tenant's id must read like a missing one's.
masked() { sed "s/$2/ID/g" <<<"$1"; }

# ---- --listen without tokens ----
OUT=$(timeout 30 "$SPACED" --data "$DATA" --listen "127.0.0.1:$PORT" 2>&1)
RC=$?
check "--listen with no token exits non-zero" test "$RC" -ne 0 -a "$RC" -ne 124
check "... saying why and how to make one" grep -q "needs at least one API token.*spaced token add" <<<"$OUT"
RV=$(tok add --tenant alpha --name soon-revoked 2>/dev/null)
check "token add prints an spt_ token of 47 characters" test "${RV:0:4}/${#RV}" = "spt_/47"
tok revoke "$RV" 2>/dev/null
OUT=$(timeout 30 "$SPACED" --data "$DATA" --listen "127.0.0.1:$PORT" 2>&1)
RC=$?
check "--listen with only revoked tokens also refuses" test "$RC" -ne 0 -a "$RC" -ne 124
tok add --tenant 'a b' >/dev/null 2>&1
check "token add refuses a bad tenant name (exit 2)" test $? = 2
check "only the hash is stored: the secret is nowhere in meta.db" sh -c "! grep -q '$RV' '$DATA'/meta.db*"
check "meta.db is mode 0600" test "$(stat -c %a "$DATA/meta.db")" = 600

TA=$(tok add --tenant alpha --name a 2>/dev/null)
TA2=$(tok add --tenant alpha --name a2 2>/dev/null)
TB=$(tok add --tenant beta --name b 2>/dev/null)
check "token list shows the tokens, the revoked one as such" test "$(tok list | grep -c valid)/$(tok list | grep -c revoked)" = "3/1"

start_daemon --listen "127.0.0.1:$PORT" || exit 1
echo "# spaced $SPACED on $DATA and $TCP"
check "the Unix socket is mode 0600" test "$(stat -c %a "$S")" = 600

# ---- 401s on TCP ----
R=$(curl -sS -D "$T/h" "$TCP/v1/health" -w '\n%{http_code}')
check "TCP without a token is 401" test "$(echo "$R" | tail -n 1)" = 401
check "... with WWW-Authenticate: Bearer" grep -qi '^WWW-Authenticate: Bearer' "$T/h"
check "... and the usual error body" test "$(echo "$R" | head -n 1 | jget error code)" = unauthorized
check "no token on a session route is 401 too (not 404)" test "$(curl -sS -o /dev/null -w '%{http_code}' "$TCP/v1/sessions/ses_0123456789abcdef")" = 401
check "a malformed token is 401" test "$(as_code spt_short "$TCP/v1/health")" = 401
check "an unknown well-formed token is 401" test "$(as_code "spt_$(head -c 32 /dev/urandom | base64 | tr '+/' '-_' | head -c 43)" "$TCP/v1/health")" = 401
check "a revoked token is 401" test "$(as_code "$RV" "$TCP/v1/health")" = 401
check "another scheme (Basic) is 401" test "$(curl -sS -o /dev/null -w '%{http_code}' -H "Authorization: Basic $TA" "$TCP/v1/health")" = 401
check "an oversized Authorization header is 401" test "$(as_code "$TA$(printf '%0600d' 0 | tr 0 A)" "$TCP/v1/health")" = 401
check "a valid token is 200" test "$(as_code "$TA" "$TCP/v1/health")" = 200
check "a wrong token on the Unix socket is 401 as well" test "$(code -H "Authorization: Bearer $RV" http://x/v1/health)" = 401

# ---- templates: shared, built by the operator ----
ROOT=$T/rootfs
make_rootfs "$ROOT"
check "a tenant may not build a template (403)" test "$(as_code "$TA" -X POST "$TCP/v1/templates" -d "{\"name\":\"mini\",\"from_dir\":\"$ROOT\"}")" = 403
api -X POST http://x/v1/templates -d "{\"name\":\"mini\",\"from_dir\":\"$ROOT\"}" >/dev/null
check "every tenant sees the operator's template" test "$(as "$TB" "$TCP/v1/templates" | jx '[req("templates")[] | select(req("name") == "mini")] | length')" = 1
check "a tenant may not delete a template (403)" test "$(as_code "$TB" -X DELETE "$TCP/v1/templates/mini")" = 403
check "a tenant may not run GC (403)" test "$(as_code "$TB" -X POST "$TCP/v1/gc")" = 403

# ---- tenant alpha's session and snapshot ----
NEW='{"template":"mini","memory":"64M","snapshot_interval_ms":0}'
R=$(as "$TA" -X POST "$TCP/v1/sessions" -d "$NEW")
A=$(echo "$R" | jget id)
ATOK=$(echo "$R" | jget token)
UA=$TCP/v1/sessions/$A
as "$TA" -X POST "$UA/exec" -d '{"argv":["sh","-c","echo alpha > /root/secret"]}' >/dev/null
SNAP=$(as "$TA" -X POST "$UA/snapshots" | jget id)
check "alpha made a session and a snapshot" test "${A:0:4}/${SNAP:0:5}" = "ses_/snap_"
check "the session object names its tenant" test "$(echo "$R" | jget tenant)" = alpha
check "another token of alpha sees it" test "$(as_code "$TA2" "$UA")" = 200

# ---- tenant beta: 404 for all of it, shaped like a missing id ----
MISSING=ses_00000000deadbeef
REF=$(masked "$(as "$TB" "$TCP/v1/sessions/$MISSING")" "$MISSING")
check "a missing id is 404 not_found" test "$(echo "$REF" | jget error code)" = not_found
try() { # description, method, path under the session, body (may be empty)
        local d=$1 m=$2 p=$3 body=${4:-} R1 R2
        R1=$(as "$TB" -X "$m" "$UA$p" ${body:+-d "$body"} -w '\n%{http_code}')
        R2=$(as "$TB" -X "$m" "$TCP/v1/sessions/$MISSING$p" ${body:+-d "$body"} -w '\n%{http_code}')
        if [ "$(echo "$R1" | tail -n 1)" = 404 ] &&
           [ "$(masked "$(echo "$R1" | head -n 1)" "$A")" = "$(masked "$(echo "$R2" | head -n 1)" "$MISSING")" ]; then
                ok "beta: $d on alpha's session is 404, as for a missing one"
        else
                bad "beta: $d on alpha's session: $R1 (missing: $R2)"
        fi
}
try "GET" GET ""
try "exec" POST /exec '{"argv":["cat","/root/secret"]}'
try "read a file" GET "/files?path=/root/secret"
try "write a file" PUT "/files?path=/root/x" 'overwritten'
try "list files" GET "/files/list?path=/root"
try "stat a file" GET "/files/stat?path=/root/secret"
try "mkdir" POST /files/mkdir '{"path":"/root/d"}'
try "delete a file" DELETE "/files?path=/root/secret"
try "processes" GET /processes
try "process output" GET /processes/1/output
try "signal" POST /processes/1/signal '{"signal":9}'
try "snapshot" POST /snapshots
try "list snapshots" GET /snapshots
try "fork" POST /fork
try "restore" POST /restore "{\"snapshot\":\"$SNAP\"}"
try "pause" POST /pause
try "resume" POST /resume
try "read events" GET /events
try "append an event" POST /events '{"kind":"note","data":"x"}'
try "connect (with the right session token)" POST /connect "{\"token\":\"$ATOK\"}"
try "delete" DELETE ""

R=$(as "$TB" -X POST "$TCP/v1/sessions" -d "$NEW")
B=$(echo "$R" | jget id)
UB=$TCP/v1/sessions/$B
check "beta has a session of its own" test "$(as_code "$TB" "$UB")" = 200
check "beta: alpha's snapshot in restore is 404" test "$(as_code "$TB" -X POST "$UB/restore" -d "{\"snapshot\":\"$SNAP\"}")" = 404
check "beta: alpha's snapshot in fork is 404" test "$(as_code "$TB" -X POST "$UB/fork" -d "{\"snapshot\":\"$SNAP\"}")" = 404
R1=$(as "$TB" -X POST "$TCP/v1/sessions" -d "{\"snapshot\":\"$SNAP\"}" -w '\n%{http_code}')
R2=$(as "$TB" -X POST "$TCP/v1/sessions" -d '{"snapshot":"snap_00000000deadbeef"}' -w '\n%{http_code}')
check "beta: create from alpha's snapshot is 404 like a missing snapshot" test "$(echo "$R1" | tail -n 1)/$(masked "$(echo "$R1" | head -n 1)" "$SNAP")" = "404/$(masked "$(echo "$R2" | head -n 1)" snap_00000000deadbeef)"
ids() { jx '[req("sessions")[] | req("id")] | join(" ")'; }
check "beta's list shows only beta's session" test "$(as "$TB" "$TCP/v1/sessions" | ids)" = "$B"
check "alpha's list shows only alpha's session" test "$(as "$TA" "$TCP/v1/sessions" | ids)" = "$A"
check "the operator (Unix socket, no token) sees neither (tenant default)" test "$(api http://x/v1/sessions | ids)" = ""
check "health counts only the caller's sessions" test "$(as "$TB" "$TCP/v1/health" | jget sessions)" = 1
check "beta's token on the Unix socket acts as beta" test "$(api -H "Authorization: Bearer $TB" http://x/v1/sessions | ids)/$(code -H "Authorization: Bearer $TB" "http://x/v1/sessions/$A")" = "$B/404"
check "alpha's session survived beta's attempts" test "$(as "$TA" "$UA" | jget state)/$(as "$TA" -X POST "$UA/exec" -d '{"argv":["cat","/root/secret"]}' | stdout_of)" = "running/alpha"
R=$(as "$TA" -X POST "$UA/fork" -w '\n%{http_code}')
F=$(echo "$R" | head -n 1 | jget sessions 0 id)
check "alpha's fork belongs to alpha" test "$(echo "$R" | tail -n 1)/$(as_code "$TA" "$TCP/v1/sessions/$F")/$(as_code "$TB" "$TCP/v1/sessions/$F")" = "201/200/404"

# ---- the CLI: --token, SPACE_TOKEN ----
SP=$BIN/space
check "space ls with SPACE_TOKEN over TCP lists the tenant's own" test "$(SPACE_TOKEN=$TB "$SP" --host "127.0.0.1:$PORT" ls -q)" = "$B"
check "space --token wins over SPACE_TOKEN" test "$(SPACE_TOKEN=$TB "$SP" --host "127.0.0.1:$PORT" --token "$TA" ls -q | sort | tr '\n' ' ')" = "$(printf '%s\n' "$A" "$F" | sort | tr '\n' ' ')"
OUT=$(env -u SPACE_TOKEN "$SP" --host "127.0.0.1:$PORT" ls 2>&1)
check "space without a token over TCP fails with the daemon's reason" test $? -ne 0 -a -n "$(grep 'bearer token is required' <<<"$OUT")"
OUT=$(SPACE_TOKEN="not a token" "$SP" --host "127.0.0.1:$PORT" ls 2>&1)
check "a malformed SPACE_TOKEN is refused before sending" grep -q "invalid API token in SPACE_TOKEN" <<<"$OUT"
check "space inspect of another tenant's session fails (404)" test "$(SPACE_TOKEN=$TB "$SP" --host "127.0.0.1:$PORT" inspect "$A" >/dev/null 2>&1; echo $?)" != 0

# ---- revocation counts from the next request; ownership survives a restart ----
tok revoke "$TA2" 2>/dev/null
check "a token revoked while spaced runs is 401 at once" test "$(as_code "$TA2" "$UA")" = 401
kill -TERM "$PID"
for _ in $(seq 100); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
start_daemon --listen "127.0.0.1:$PORT" || exit 1
check "after a restart alpha still sees its sessions, beta still 404" test "$(as_code "$TA" "$UA")/$(as_code "$TB" "$UA")/$(as "$TB" "$TCP/v1/sessions" | ids)" = "200/404/$B"

for s in "$A" "$F"; do as "$TA" -X DELETE "$TCP/v1/sessions/$s" >/dev/null; done
as "$TB" -X DELETE "$UB" >/dev/null
check "alpha deletes its own session" test "$(as_code "$TA" "$UA")" = 404

# ---- a data directory of a newer spaced: spaced token says so (#21) ----
D2=$T/newer
"$SPACED" token add --data "$D2" --tenant alpha >/dev/null 2>&1
NEWER=$(($(sqlite3 "$D2/meta.db" 'SELECT max(version) FROM meta_schema') + 1))
sqlite3 "$D2/meta.db" "INSERT INTO meta_schema (version, applied_ms) VALUES ($NEWER, 0)"
for sub in list "add --tenant alpha"; do
        # shellcheck disable=SC2086
        OUT=$("$SPACED" token $sub --data "$D2" 2>&1)
        RC=$?
        check "token $sub on a meta.db of schema $NEWER fails" test "$RC" = 1
        check "... naming both schema versions and what to do, not strerror(EPROTO) ($OUT)" \
                eval 'grep -q "meta.db: .*schema version $NEWER is newer than this program.s $((NEWER - 1)).*use a newer spaced" <<<"$OUT" &&
                        ! grep -q "Protocol error" <<<"$OUT"'
done
check "... and left the file as it was" test "$(sqlite3 "$D2/meta.db" 'SELECT count(*) FROM tokens')" = 1

finish "auth"
