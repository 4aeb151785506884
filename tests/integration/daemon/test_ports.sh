#!/bin/bash
# Integration test of exposed ports (docs/api.md, "Ports"), with spaced's egress off (its
# default: nothing on the host's network changes; the sandbox has loopback only): HTTP
# servers inside ns sandboxes reached through spaced by path and by Host, per-port tokens
# (a token opens its own port of its own session only), public ports, 502/404/401/403,
# 64 MiB bodies streamed both ways, an Upgrade passed through as raw bytes, `space
# port-forward` carrying raw TCP, and exposed ports kept across a daemon restart.
# SPACE_PORTS_RUNTIME=gvisor (or microvm) runs it all on that runtime, whose network stack
# spaced cannot enter: space-init connects to the port inside and the bytes travel over
# the sandbox's init connection (src/daemon/port_relay.h).
# Usage: test_ports.sh SPACED_BINARY   (space-init and space must sit next to it)
RT=${SPACE_PORTS_RUNTIME:-ns}
. "$(dirname "$0")/lib.sh" "ports-$RT" "${1:-}"
if [ "$RT" = gvisor ] && ! command -v runsc >/dev/null; then echo "SKIP: runsc is not installed"; exit 77; fi
command -v socat >/dev/null || { echo "FAIL: socat is missing (scripts/install-deps installs it)"; exit 1; }
SPACE=$BIN/space
[ -x "$SPACE" ] || { echo "FAIL: $SPACE is not built"; exit 1; }

PORT=$(free_port)
TCP=http://127.0.0.1:$PORT
DOMAIN=ports.test
tok() { "$SPACED" token "$@" --data "$DATA"; }
TA=$(tok add --tenant alpha --name a 2>/dev/null)
TB=$(tok add --tenant beta --name b 2>/dev/null)
as() { local t=$1; shift; curl -sS -H "Authorization: Bearer $t" "$@"; }
# status of a plain request (curl arguments) to spaced's TCP listener
st() { curl -sS -o /dev/null -w '%{http_code}' "$@"; }

start_daemon --listen "127.0.0.1:$PORT" --ports-domain "$DOMAIN" || exit 1
echo "# spaced $SPACED on $DATA and $TCP"

ROOT=$T/rootfs
make_rootfs "$ROOT"
for c in httpd nc md5sum cut sed printf; do ln -sf busybox "$ROOT/bin/$c"; done
mkdir -p "$ROOT/srv/cgi-bin" "$ROOT/srv2"
echo "hello from 8000" >"$ROOT/srv/index.html"
echo "hello from 8001" >"$ROOT/srv2/index.html"
# the request body's md5 (busybox httpd gives a CGI the body on stdin)
printf '#!/bin/sh\necho "Content-Type: text/plain"\necho\nmd5sum | cut -d" " -f1\n' >"$ROOT/srv/cgi-bin/md5"
# an Upgrade server: reads the head, answers 101, then echoes what comes
printf '#!/bin/sh\nwhile read -r l; do [ "$l" = "$(printf "\\r")" ] && break; done\nprintf "HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: echo\\r\\nConnection: Upgrade\\r\\n\\r\\n"\nexec cat\n' >"$ROOT/bin/upgrade.sh"
chmod +x "$ROOT/srv/cgi-bin/md5" "$ROOT/bin/upgrade.sh"
api -X POST http://x/v1/templates -d "{\"name\":\"web\",\"from_dir\":\"$ROOT\"}" >/dev/null

NEW='{"template":"web","runtime":"'$RT'","memory":"256M","snapshot_interval_ms":0}'
A=$(as "$TA" -X POST "$TCP/v1/sessions" -d "$NEW" | jget id)
B=$(as "$TB" -X POST "$TCP/v1/sessions" -d "$NEW" | jget id)
check "two tenants' sessions" test "${A:0:4}/${B:0:4}" = "ses_/ses_"
bg() { # session, token, shell command in the background
        as "$2" -X POST "$TCP/v1/sessions/$1/exec" -d "$(jq -nc --arg c "$3" '{argv: ["sh", "-c", $c], background: true}')" >/dev/null
}
bg "$A" "$TA" "dd if=/dev/urandom of=/srv/big bs=1M count=64 2>/dev/null; md5sum /srv/big | cut -d' ' -f1 > /srv/big.md5; exec httpd -f -p 127.0.0.1:8000 -h /srv"
bg "$A" "$TA" "exec httpd -f -p 127.0.0.1:8001 -h /srv2"
bg "$A" "$TA" "exec nc -ll -p 8003 -e /bin/upgrade.sh"
bg "$A" "$TA" "exec nc -ll -p 8004 -e /bin/cat"
bg "$B" "$TB" "exec httpd -f -p 127.0.0.1:8000 -h /srv2"
for _ in $(seq 100); do
        [ "$(as "$TA" "$TCP/v1/sessions/$A/files?path=/srv/big.md5" 2>/dev/null | wc -c)" -ge 32 ] && break
        sleep 0.1
done

# ---- the API ----
R=$(as "$TA" -X POST "$TCP/v1/sessions/$A/ports" -d '{"port":8000}' -w '\n%{http_code}')
check "expose 8000 answers 201" test "$(echo "$R" | tail -n 1)" = 201
P8000=$(echo "$R" | head -n 1 | jget token)
check "... with a port token (spp_, 47 characters)" test "${P8000:0:4}/${#P8000}" = "spp_/47"
check "... its path" test "$(echo "$R" | head -n 1 | jget path)" = "/v1/sessions/$A/ports/8000/"
check "... and its url under --ports-domain" test "$(echo "$R" | head -n 1 | jget url)" = "http://8000-$A.$DOMAIN/"
check "the token is stored only as a hash" sh -c "! grep -q '$P8000' '$DATA'/meta.db*"
P8001=$(as "$TA" -X POST "$TCP/v1/sessions/$A/ports" -d '{"port":8001}' | jget token)
as "$TA" -X POST "$TCP/v1/sessions/$A/ports" -d '{"port":8003}' >/dev/null
PB=$(as "$TB" -X POST "$TCP/v1/sessions/$B/ports" -d '{"port":8000}' | jget token)
R=$(as "$TA" -X POST "$TCP/v1/sessions/$A/ports" -d '{"port":8001,"public":true}' -w '\n%{http_code}')
check "8001 made public: 201 without a token" test "$(echo "$R" | tail -n 1)/$(echo "$R" | head -n 1 | jx 'has("token")')" = "201/false"
as "$TA" -X POST "$TCP/v1/sessions/$A/ports" -d '{"port":8009,"public":true}' >/dev/null
check "ports lists them" test "$(as "$TA" "$TCP/v1/sessions/$A/ports" | jx '[req("ports")[] | req("port")] | sort | join(",")')" = "8000,8001,8003,8009"
check "... without any token" test "$(as "$TA" "$TCP/v1/sessions/$A/ports" | jx '[req("ports")[] | has("token")] | any')" = false
check "port 0 is 400" test "$(st -H "Authorization: Bearer $TA" -X POST "$TCP/v1/sessions/$A/ports" -d '{"port":0}')" = 400
check "port 65536 is 400" test "$(st -H "Authorization: Bearer $TA" -X POST "$TCP/v1/sessions/$A/ports" -d '{"port":65536}')" = 400
check "beta may not expose alpha's ports (404)" test "$(st -H "Authorization: Bearer $TB" -X POST "$TCP/v1/sessions/$A/ports" -d '{"port":9000}')" = 404
for p in $(seq 9100 9130); do as "$TB" -X POST "$TCP/v1/sessions/$B/ports" -d "{\"port\":$p,\"public\":true}" >/dev/null; done
check "the 33rd port of a session is 409" test "$(st -H "Authorization: Bearer $TB" -X POST "$TCP/v1/sessions/$B/ports" -d '{"port":9200}')" = 409
check "unexpose answers 204" test "$(st -H "Authorization: Bearer $TB" -X DELETE "$TCP/v1/sessions/$B/ports/9100")" = 204
check "... then 404" test "$(st -H "Authorization: Bearer $TB" -X DELETE "$TCP/v1/sessions/$B/ports/9100")" = 404

# ---- ports at create; a fork gets none ----
R=$(as "$TA" -X POST "$TCP/v1/sessions" -d '{"template":"web","runtime":"'$RT'","memory":"128M","snapshot_interval_ms":0,"ports":[7000,{"port":7001,"public":true}]}')
C=$(echo "$R" | jget id)
CT=$(echo "$R" | jx '[req("ports")[] | select(req("port") == 7000) | req("token")][0]')
check "create with ports: each private one's token in the answer" test "${CT:0:4}/$(echo "$R" | jx '[req("ports")[] | has("token")] | map(tostring) | join(",")')" = "spp_/true,false"
check "... and they are exposed" test "$(as "$TA" "$TCP/v1/sessions/$C/ports" | jx '[req("ports")[] | "\(req("port")):\(req("public"))"] | join(",")')" = "7000:false,7001:true"
bg "$C" "$TA" "exec httpd -f -p 127.0.0.1:7000 -h /srv"
R=
for _ in $(seq 30); do R=$(curl -sS -H "X-Space-Port-Token: $CT" "$TCP/v1/sessions/$C/ports/7000/" 2>/dev/null); [ "$R" = "hello from 8000" ] && break; sleep 0.1; done
check "... and the create's token opens its port" test "$R" = "hello from 8000"
check "a port listed twice at create is 400" test "$(st -H "Authorization: Bearer $TA" -X POST "$TCP/v1/sessions" -d '{"template":"web","runtime":"'$RT'","ports":[7000,7000]}')" = 400
check "port 0 at create is 400" test "$(st -H "Authorization: Bearer $TA" -X POST "$TCP/v1/sessions" -d '{"template":"web","runtime":"'$RT'","ports":[0]}')" = 400
F=$(as "$TA" -X POST "$TCP/v1/sessions/$C/fork" -d '{}' | jget sessions 0 id)
check "a fork starts with no exposed ports (tokens are never copied)" test "$(as "$TA" "$TCP/v1/sessions/$F/ports" | jx 'req("ports") | length')" = 0
as "$TA" -X DELETE "$TCP/v1/sessions/$F" >/dev/null

# ---- path routing and tokens ----
UP=$TCP/v1/sessions/$A/ports
check "path routing with the port's token (Bearer)" test "$(as "$P8000" "$UP/8000/index.html")" = "hello from 8000"
check "... with X-Space-Port-Token" test "$(curl -sS -H "X-Space-Port-Token: $P8000" "$UP/8000/")" = "hello from 8000"
check "... with the owner's API token" test "$(as "$TA" "$UP/8000/")" = "hello from 8000"
R=$(curl -sS "$UP/8000/" -w '\n%{http_code}')
check "no token is 401" test "$(echo "$R" | tail -n 1)" = 401
check "... saying how to give one" grep -q "needs its token" <<<"$R"
check "another tenant's API token is 403" test "$(st -H "Authorization: Bearer $TB" "$UP/8000/")" = 403
check "a wrong port token is 403" test "$(st -H "X-Space-Port-Token: spp_$(head -c 32 /dev/urandom | base64 | tr '+/' '-_' | head -c 43)" "$UP/8000/")" = 403
as "$TA" -X POST "$TCP/v1/sessions/$A/ports" -d '{"port":8001}' >/dev/null # private again, new token
check "the token of 8000 does not open 8001" test "$(st -H "X-Space-Port-Token: $P8000" "$UP/8001/")" = 403
check "8001's old token no longer opens it" test "$(st -H "X-Space-Port-Token: $P8001" "$UP/8001/")" = 403
check "the token of A:8000 does not open B:8000" test "$(st -H "X-Space-Port-Token: $P8000" "$TCP/v1/sessions/$B/ports/8000/")" = 403
check "B:8000's own token does" test "$(curl -sS -H "X-Space-Port-Token: $PB" "$TCP/v1/sessions/$B/ports/8000/")" = "hello from 8001"
check "... and not A:8000" test "$(st -H "X-Space-Port-Token: $PB" "$UP/8000/")" = 403
check "a port not exposed is 404" test "$(st -H "Authorization: Bearer $TA" "$UP/8002/")" = 404
check "... as on a session that does not exist" test "$(st "$TCP/v1/sessions/ses_00000000deadbeef/ports/8000/")" = 404
as "$TA" -X POST "$TCP/v1/sessions/$A/ports" -d '{"port":8001,"public":true}' >/dev/null
check "a public port needs no token" test "$(curl -sS "$UP/8001/")" = "hello from 8001"
R=$(curl -sS "$UP/8009/" -w '\n%{http_code}')
check "nothing listening is 502" test "$(echo "$R" | tail -n 1)" = 502
check "... saying so" grep -q "nothing listens on port 8009" <<<"$R"
check "…/ports/8000 redirects to …/ports/8000/ (308)" test "$(st -H "X-Space-Port-Token: $P8000" "$UP/8000")" = 308
# a browser: ?space_token= becomes a cookie of that port's path and leaves the address bar
R=$(curl -sS -D - -o /dev/null "$UP/8000/index.html?a=1&space_token=$P8000")
check "?space_token= redirects (307) ..." grep -q "^HTTP/1.1 307" <<<"$R"
check "... without the token in the Location" grep -q "^Location: /v1/sessions/$A/ports/8000/index.html?a=1$(printf '\r')$" <<<"$R"
check "... setting an HttpOnly cookie for that port's path" grep -q "^Set-Cookie: space_port_token=$P8000; Path=/v1/sessions/$A/ports/8000/; HttpOnly" <<<"$R"
check "the cookie opens the port" test "$(curl -sS -b "space_port_token=$P8000" "$UP/8000/")" = "hello from 8000"

# ---- Host routing ----
H="8000-$A.$DOMAIN"
check "Host routing with the port's token" test "$(curl -sS -H "Host: $H" -H "X-Space-Port-Token: $P8000" "$TCP/index.html")" = "hello from 8000"
check "... with curl --resolve" test "$(curl -sS --resolve "$H:$PORT:127.0.0.1" -H "X-Space-Port-Token: $P8000" "http://$H:$PORT/")" = "hello from 8000"
check "... 401 without" test "$(st -H "Host: $H" "$TCP/")" = 401
check "... the token of B:8000 is 403 there" test "$(st -H "Host: $H" -H "X-Space-Port-Token: $PB" "$TCP/")" = 403
check "a Host of another domain goes to the API" test "$(st -H "Host: 8000-$A.other.test" -H "Authorization: Bearer $TA" "$TCP/v1/health")" = 200
check "the public port by Host" test "$(curl -sS -H "Host: 8001-$A.$DOMAIN" "$TCP/")" = "hello from 8001"

# ---- big bodies, streamed both ways ----
WANT=$(as "$TA" "$TCP/v1/sessions/$A/files?path=/srv/big.md5")
GOT=$(curl -sS -H "X-Space-Port-Token: $P8000" "$UP/8000/big" | md5sum | cut -d' ' -f1)
check "a 64 MiB download arrives whole" test -n "$WANT" -a "$GOT" = "$WANT"
head -c $((64 << 20)) /dev/urandom >"$T/up"
WANT=$(md5sum <"$T/up" | cut -d' ' -f1)
GOT=$(curl -sS -H "X-Space-Port-Token: $P8000" --data-binary @"$T/up" "$UP/8000/cgi-bin/md5")
check "a 64 MiB upload arrives whole" test "$GOT" = "$WANT"
RSS=$(awk '/^VmHWM/ {print $2}' "/proc/$PID/status")
check "spaced's peak RSS stayed under 100 MiB ($RSS KiB)" test "$RSS" -lt 102400

# ---- Upgrade: raw bytes both ways after the 101 ----
R=$( (printf 'GET /v1/sessions/%s/ports/8003/ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\nX-Space-Port-Token: %s\r\n\r\n' "$A" "$(as "$TA" -X POST "$TCP/v1/sessions/$A/ports" -d '{"port":8003}' | jget token)"
        sleep 0.5; printf 'ping-over-upgrade\n'; sleep 0.5) | timeout 10 socat -t 1 - "TCP:127.0.0.1:$PORT")
check "an Upgrade is answered 101 by the sandbox's server" grep -q "^HTTP/1.1 101" <<<"$R"
check "... then bytes go both ways" grep -q "^ping-over-upgrade" <<<"$R"

# ---- port-forward ----
LP=$(free_port)
SPACE_HOST=127.0.0.1:$PORT SPACE_TOKEN=$TA "$SPACE" port-forward "$A" "8004:$LP" >"$T/pf.log" 2>&1 &
PF=$!
for _ in $(seq 50); do ss -Htln "sport = :$LP" | grep -q . && break; sleep 0.1; done
head -c $((4 << 20)) /dev/urandom >"$T/raw"
GOT=$(timeout 90 socat -t 60 "TCP:127.0.0.1:$LP" - <"$T/raw" | md5sum | cut -d' ' -f1)
check "port-forward carries 4 MiB of raw TCP both ways (an echo server inside)" test "$GOT" = "$(md5sum <"$T/raw" | cut -d' ' -f1)"
check "... to a port that is not exposed" test "$(as "$TA" "$TCP/v1/sessions/$A/ports" | jx '[req("ports")[] | req("port")] | index(8004)')" = null
GOT=$(echo hi | timeout 10 socat -t 5 "TCP:127.0.0.1:$LP" -)
check "... a second connection too" test "$GOT" = hi
kill "$PF" 2>/dev/null
wait "$PF" 2>/dev/null
check "port-forward needs the owner's token (404 for beta)" test "$(st -H "Authorization: Bearer $TB" -H 'Connection: Upgrade' -H 'Upgrade: space-tcp' "$TCP/v1/sessions/$A/ports/8004/forward")" = 404
check "... and the upgrade headers (426)" test "$(st -H "Authorization: Bearer $TA" "$TCP/v1/sessions/$A/ports/8004/forward")" = 426

# ---- the CLI ----
R=$(SPACE_HOST=127.0.0.1:$PORT SPACE_TOKEN=$TA "$SPACE" expose "$A" 8005 --public 2>&1)
check "space expose --public" grep -q "/v1/sessions/$A/ports/8005/" <<<"$R"
R=$(SPACE_HOST=127.0.0.1:$PORT SPACE_TOKEN=$TA "$SPACE" ports "$A" 2>&1)
check "space ports lists it" grep -q "8005" <<<"$R"
SPACE_HOST=127.0.0.1:$PORT SPACE_TOKEN=$TA "$SPACE" unexpose "$A" 8005 >/dev/null 2>&1
check "space unexpose removes it" test "$(as "$TA" "$TCP/v1/sessions/$A/ports" | jx '[req("ports")[] | req("port")] | index(8005)')" = null

# ---- a daemon restart keeps the ports (the sandboxes live on: kill -9, re-attach) ----
kill -9 "$PID"
gone "$PID"
start_daemon --listen "127.0.0.1:$PORT" --ports-domain "$DOMAIN" || exit 1
for _ in $(seq 300); do [ "$(as "$TA" "$TCP/v1/sessions/$A" | jget state 2>/dev/null)" = running ] && break; sleep 0.1; done
check "after a restart the ports are listed" test "$(as "$TA" "$TCP/v1/sessions/$A/ports" | jx '[req("ports")[] | req("port")] | sort | join(",")')" = "8000,8001,8003,8009"
R=
for _ in $(seq 150); do
        R=$(curl -sS -H "X-Space-Port-Token: $P8000" "$UP/8000/" 2>/dev/null)
        [ "$R" = "hello from 8000" ] && break
        sleep 0.1
done
check "... and the same token opens 8000 of the re-attached sandbox" test "$R" = "hello from 8000"
check "... and still not without it" test "$(st "$UP/8000/")" = 401
# a proxied connection left open across the stop: spaced still stops cleanly (and, under
# ASan, its leak report lands in the log that finish reads)
exec 7<>/dev/tcp/127.0.0.1/$PORT
printf 'GET /v1/sessions/%s/ports/8003/ HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\nAuthorization: Bearer %s\r\n\r\n' "$A" "$TA" >&7
sleep 0.3
kill -TERM "$PID"
check "spaced stops on TERM with a proxied connection open" gone "$PID"
wait "$PID" 2>/dev/null
check "... exiting 0" test $? = 0
exec 7>&-
PID=

finish "ports-$RT"
