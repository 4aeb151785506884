#!/bin/bash
# A session's network policy through the API and the CLI (issue #14, docs/api.md
# "Network") on a daemon with the default `--egress off`: a create without egress works,
# one asking egress (true, or an object) is 403 with the operator's flag named, bad rules
# are 400 naming the rule, GET/PUT .../network show and replace the policy (and a PUT
# asking egress is 403), sessions carry "network_policy", the policy survives a daemon
# restart (meta) and a fork, and `space create --allow/--no-egress` and `space network`
# drive the same. Nothing here reaches any network: egress is off on this daemon, so every
# sandbox keeps its private loopback-only netns. Root only; ~20 s.
# Usage: test_network_api.sh SPACED_BINARY   (space-init and space next to it)
. "$(dirname "$0")/lib.sh" network_api "${1:-}"
SPACE=$BIN/space
[ -x "$SPACE" ] || { echo "FAIL: $SPACE is not built"; exit 1; }
export SPACE_HOST=unix:$S

ROOT=$T/rootfs
make_rootfs "$ROOT"
start_daemon || exit 1
api -X POST http://x/v1/templates -d "{\"name\":\"mini\",\"from_dir\":\"$ROOT\"}" >/dev/null
# create BODY-FIELDS -> the answer's body in $T/out, its status on stdout
create() {
        curl -sS --unix-socket "$S" -o "$T/out" -w '%{http_code}' -X POST http://x/v1/sessions \
                -d "{\"template\":\"mini\",\"memory\":\"64M\",\"snapshot_interval_ms\":0$1}"
}
msg() { jx 'req("error") | req("message")' <"$T/out"; }
OFF='{"egress":false,"allow":[],"deny":[],"bandwidth":null}'

# ---- create ----
check "a create without \"network\" is 201" test "$(create '')" = 201
A=$(jget id <"$T/out")
check "... its session says network false and the complete policy" \
        test "$(jx '"\(req("network")) \(req("network_policy"))"' <"$T/out")" = "false $OFF"
check "a create with network false is 201" test "$(create ',"network":false')" = 201
check "... network_policy egress false" test "$(jget network_policy egress <"$T/out")" = false
check "a create with network true is 403" test "$(create ',"network":true')" = 403
check "... saying the operator's flag" test "$(msg)" = "egress is off on this host (spaced --egress on)"
check "a create with a policy object asking egress is 403" \
        test "$(create ',"network":{"allow":["*.example.com:443"],"bandwidth":"20mbit"}')" = 403
check "... with the same message" test "$(msg)" = "egress is off on this host (spaced --egress on)"
check "a bad rule is 400 (checked before the operator's 403)" \
        test "$(create ',"network":{"egress":true,"allow":["ok.example.com","a..b"]}')" = 400
check "... naming the rule and where it is" test "$(msg)" = 'network: allow[1]: "a..b": empty label in the name'
check "a rule with host bits set is 400 naming it" \
        test "$(create ',"network":{"egress":false,"deny":["203.0.113.7/24"]}')/$(msg)" \
        = '400/network: deny[0]: "203.0.113.7/24": host bits set after /24 (the network is 203.0.113.0/24)'
check "a bad bandwidth is 400" \
        test "$(create ',"network":{"egress":false,"bandwidth":"fast"}')/$(msg)" \
        = '400/network: "bandwidth": "fast" is not a rate ("20mbit", "1.5gbit", "500kbit", bits/s)'
check "an unknown policy field is 400" \
        test "$(create ',"network":{"egress":false,"alow":[]}')" = 400
check "network as a string is 400" test "$(create ',"network":"on"')" = 400
RULES=$(jq -nc '[range(257) | "h\(.).example.com"]')
check "257 allow rules are 400" test "$(create ",\"network\":{\"egress\":false,\"allow\":$RULES}")" = 400
check "... saying the limit" test "$(msg)" = 'network: "allow" has 257 rules, at most 256'
check "egress off with rules is 201: the rules are kept" \
        test "$(create ',"network":{"egress":false,"allow":["*.PyPI.org:443","[2001:db8::1]:443"],"deny":["evil.example.com"],"bandwidth":"1.5mbit"}')" = 201
B=$(jget id <"$T/out")
check "... in canonical form" test "$(jget network_policy <"$T/out")" \
        = '{"egress":false,"allow":["*.pypi.org:443","[2001:db8::1]:443"],"deny":["evil.example.com"],"bandwidth":1500000}'
check "... and the sandbox has loopback only" test "$(sh_in "$B" 'grep : /proc/net/dev | tr -d " " | tr ":" " " | while read -r i _; do echo "$i"; done')" = lo

# ---- GET / PUT ----
check "GET .../network is the policy" test "$(api "http://x/v1/sessions/$A/network")" = "$OFF"
NEWP='{"egress":false,"allow":["203.0.113.0/24","example.com"],"deny":["198.51.100.7:25"],"bandwidth":64000}'
check "PUT .../network with egress off is 200 with the policy" \
        test "$(api -X PUT "http://x/v1/sessions/$A/network" -d "$NEWP")" = "$NEWP"
check "... GET says so" test "$(api "http://x/v1/sessions/$A/network")" = "$NEWP"
check "... and so does the session, network still false" \
        test "$(api "http://x/v1/sessions/$A" | jx '"\(req("network")) \(req("network_policy"))"')" = "false $NEWP"
check "... and the session list" \
        test "$(api http://x/v1/sessions | jx 'req("sessions")[] | select(.id == $a) | req("network_policy")' --arg a "$A")" = "$NEWP"
check "PUT asking egress is 403" \
        test "$(code -X PUT "http://x/v1/sessions/$A/network" -d '{"egress":true}')" = 403
check "PUT without \"egress\" is 400" test "$(code -X PUT "http://x/v1/sessions/$A/network" -d '{"allow":[]}')" = 400
check "PUT with an empty body is 400" test "$(code -X PUT "http://x/v1/sessions/$A/network")" = 400
check "PUT with a bad rule is 400" \
        test "$(code -X PUT "http://x/v1/sessions/$A/network" -d '{"egress":false,"allow":["1.2.3.4:99999"]}')" = 400
check "... and changed nothing" test "$(api "http://x/v1/sessions/$A/network")" = "$NEWP"
check "GET .../network of an unknown session is 404" test "$(code http://x/v1/sessions/ses_0000000000000000/network)" = 404
check "DELETE .../network is 405" test "$(code -X DELETE "http://x/v1/sessions/$A/network")" = 405
check "the change is in the session's event log" \
        test "$(api "http://x/v1/sessions/$A/events?limit=1000" | jx '[req("events")[] | select(.kind == "network")] | length')" = 1

# ---- fork, restart ----
FK=$(api -X POST "http://x/v1/sessions/$A/fork" -d '{}' | jget sessions 0 id)
check "a fork is made" test "${FK:0:4}" = ses_
check "... with the parent's policy" test "$(api "http://x/v1/sessions/$FK/network")" = "$NEWP"
kill -TERM "$PID"
gone "$PID" || kill -9 "$PID"
wait "$PID" 2>/dev/null
start_daemon || exit 1
wait_state "$A" running 100
check "after a daemon restart the policy is as it was (from meta)" test "$(api "http://x/v1/sessions/$A/network")" = "$NEWP"
check "... the fork's too" test "$(api "http://x/v1/sessions/$FK/network")" = "$NEWP"
check "... and the one made with rules" test "$(api "http://x/v1/sessions/$B/network" | jget allow 0)" = "*.pypi.org:443"

# ---- the CLI ----
C=$("$SPACE" create -t mini -m 64M --snapshot-interval 0 --no-egress --allow 203.0.113.9:443 --allow '*.example.org' \
        --deny 198.51.100.0/24 --bandwidth 20mbit 2>"$T/err")
check "space create --no-egress --allow ... --deny ... --bandwidth makes a session" test "${C:0:4}" = ses_
check "... with that policy" test "$(api "http://x/v1/sessions/$C/network")" \
        = '{"egress":false,"allow":["203.0.113.9:443","*.example.org"],"deny":["198.51.100.0/24"],"bandwidth":20000000}'
OUT=$("$SPACE" create -t mini -m 64M --allow example.com 2>&1)
check "space create --allow (egress implied) fails with the daemon's 403 message" \
        test "$?/$OUT" = "1/space: egress is off on this host (spaced --egress on)"
OUT=$("$SPACE" create -t mini -m 64M --egress 2>&1)
check "space create --egress: the same" test "$OUT" = "space: egress is off on this host (spaced --egress on)"
OUT=$("$SPACE" create -t mini -m 64M --no-egress --allow 'a..b' 2>&1)
check "space create with a bad rule says which" test "$OUT" = 'space: network: allow[0]: "a..b": empty label in the name'
"$SPACE" create --egress --no-egress >/dev/null 2>&1
check "space create --egress --no-egress is a usage error" test $? = 2
check "space network ID prints the policy" test "$("$SPACE" network "$C" | tr -s ' ' | tr '\n' '|')" \
        = "egress off|allow 203.0.113.9:443|allow *.example.org|deny 198.51.100.0/24|bandwidth 20000000 bit/s each way|"
check "space network ID --json prints the daemon's object" test "$("$SPACE" network --json "$C" | jget bandwidth)" = 20000000
check "space network ID --off --deny R replaces the policy" \
        test "$("$SPACE" network "$C" --off --deny evil.example.com --json)" \
        = '{"egress":false,"allow":[],"deny":["evil.example.com"],"bandwidth":null}'
OUT=$("$SPACE" network "$C" --on --allow example.com 2>&1)
check "space network ID --on fails with the 403 message" test "$?/$OUT" = "1/space: egress is off on this host (spaced --egress on)"
check "... and left the policy alone" test "$(api "http://x/v1/sessions/$C/network" | jget deny 0)" = evil.example.com
"$SPACE" network "$C" --allow example.com >/dev/null 2>&1
check "space network ID --allow without --on/--off is a usage error" test $? = 2
"$SPACE" network "$C" --on --off >/dev/null 2>&1
check "space network --on --off is a usage error" test $? = 2

finish network_api
