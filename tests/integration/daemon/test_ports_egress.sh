#!/bin/bash
# Exposed ports with egress on (docs/api.md, "Ports"): the sandbox sits in a prepared
# network namespace of spaced's room, and its port is still reached through spaced, by
# path and by port-forward. The script re-runs itself under `unshare -n`: the room's
# veths, nftables table and sysctls stay in that namespace, off the machine's network.
# Usage: test_ports_egress.sh SPACED_BINARY
set -u
if [ -z "${SPACE_PORTS_TEST_NETNS:-}" ]; then
        [ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root"; exit 77; }
        for t in unshare nft socat; do
                command -v $t >/dev/null || { echo "FAIL: $t is missing (scripts/install-deps)"; exit 1; }
        done
        exec env SPACE_PORTS_TEST_NETNS=1 unshare -n "$0" "$@"
fi
. "$(dirname "$0")/lib.sh" ports-egress "${1:-}"
ip link set lo up

start_daemon --egress on --dns-upstream 127.0.0.1:1 || exit 1
ROOT=$T/rootfs
make_rootfs "$ROOT"
for c in httpd nc; do ln -sf busybox "$ROOT/bin/$c"; done
mkdir -p "$ROOT/srv"
echo "hello with egress on" >"$ROOT/srv/index.html"
api -X POST http://x/v1/templates -d "{\"name\":\"web\",\"from_dir\":\"$ROOT\"}" >/dev/null
R=$(api -X POST http://x/v1/sessions -d '{"template":"web","memory":"64M","snapshot_interval_ms":0,"ports":[8000]}')
A=$(echo "$R" | jget id)
TOK=$(echo "$R" | jget ports 0 token)
check "a session on a daemon with egress on" test "${A:0:4}" = ses_
check "... in a prepared namespace (eth0 inside)" grep -q eth0 <<<"$(sh_in "$A" 'cat /proc/net/dev')"
api -X POST "http://x/v1/sessions/$A/exec" -d '{"argv":["httpd","-f","-p","127.0.0.1:8000","-h","/srv"],"background":true}' >/dev/null
api -X POST "http://x/v1/sessions/$A/exec" -d '{"argv":["nc","-ll","-p","8004","-e","/bin/cat"],"background":true}' >/dev/null
R=
for _ in $(seq 30); do
        R=$(curl -sS --unix-socket "$S" -H "X-Space-Port-Token: $TOK" "http://x/v1/sessions/$A/ports/8000/" 2>/dev/null)
        [ "$R" = "hello with egress on" ] && break
        sleep 0.1
done
check "path routing reaches the sandbox's loopback" test "$R" = "hello with egress on"
check "... 502 for a port nothing listens on" test "$(api -X POST "http://x/v1/sessions/$A/ports" -d '{"port":8009,"public":true}' >/dev/null; code "http://x/v1/sessions/$A/ports/8009/")" = 502
LP=$(free_port)
SPACE_HOST=$S "$BIN/space" port-forward "$A" "8004:$LP" >"$T/pf.log" 2>&1 &
PF=$!
for _ in $(seq 50); do ss -Htln "sport = :$LP" | grep -q . && break; sleep 0.1; done
check "port-forward carries raw TCP" test "$(echo hi | timeout 10 socat -t 5 "TCP:127.0.0.1:$LP" -)" = hi
kill "$PF" 2>/dev/null
wait "$PF" 2>/dev/null
finish ports-egress
