#!/bin/bash
# Connection slots against clients without a token (issue #20 item 1, docs/security.md
# "Hostile tenants"): 1,100 loopback connections that each send an incomplete request head
# and then a header line a second. While they dribble, a request with a valid token on
# TCP, one from another address and the operator's on the Unix socket are all answered;
# spaced holds at most conns-per-peer of them; the head deadline closes every one of them
# (408) although bytes keep coming. Then small --limit values: the strangers' cap, the
# deadline, and bad --limit values refused. Loopback only. Root only; ~40 s.
# Usage: test_conns.sh SPACED_BINARY   (conn-flood and space-init next to it)
. "$(dirname "$0")/lib.sh" conns "${1:-}"
FLOOD=$BIN/conn-flood
[ -x "$FLOOD" ] || { echo "FAIL: $FLOOD is not built"; exit 1; }

PORT=$(free_port)
TCP=http://127.0.0.1:$PORT
TA=$("$SPACED" token add --data "$DATA" --tenant alpha --name a 2>/dev/null)
# with the token over TCP, 5 s at most: the status
tcp_code() { curl -sS -m 5 -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $TA" "$@" 2>/dev/null; }
unix_code() { curl -sS -m 5 --unix-socket "$S" -o /dev/null -w '%{http_code}' http://x/v1/health 2>/dev/null; }
# flood N SECONDS OUT: conn-flood in the background ($FPID), back once its connections are made
flood() {
        "$FLOOD" 127.0.0.1 "$PORT" "$1" "$2" 1000 >"$3" 2>&1 &
        FPID=$!
        for _ in $(seq 400); do
                grep -q '^ready' "$3" && return 0
                kill -0 "$FPID" 2>/dev/null || break
                sleep 0.1
        done
        echo "# conn-flood did not get ready: $(cat "$3")"
        return 1
}
# wait_flood OUT SECONDS: conn-flood's summary, once it has exited (killed after SECONDS)
wait_flood() {
        for _ in $(seq $(($2 * 10))); do
                kill -0 "$FPID" 2>/dev/null || break
                sleep 0.1
        done
        kill "$FPID" 2>/dev/null
        wait "$FPID" 2>/dev/null
        grep '^opened ' "$1" | tail -n 1
}
field() { grep -o "$1 [0-9]*" | cut -d' ' -f2; }

start_daemon --listen "127.0.0.1:$PORT" || exit 1
echo "# spaced on $DATA and $TCP, default limits"

# ---- 1,100 dribbling connections, default limits ----
T0=$(date +%s)
flood 1100 30 "$T/flood1" || bad "conn-flood started"
echo "# $(head -n 1 "$T/flood1") connections made, dribbling"
check "while 1,100 connections dribble, a request with a token on TCP is answered 200" \
        test "$(tcp_code "$TCP/v1/health")" = 200
check "... and one from another address (127.0.0.2)" \
        test "$(tcp_code --interface 127.0.0.2 "$TCP/v1/health")" = 200
check "... and the operator's on the Unix socket" test "$(unix_code)" = 200
HELD=$(ss -Htn state established "sport = :$PORT" | wc -l)
check "spaced holds at most conns-per-peer (64) connections of the one address ($HELD)" test "$HELD" -le 64
SUM=$(wait_flood "$T/flood1" 30)
T1=$(date +%s)
echo "# conn-flood: $SUM after $((T1 - T0)) s"
check "the request-head deadline closed every dribbling connection although bytes kept coming" \
        test "$(field opened <<<"$SUM")" -gt 0 -a "$(field opened <<<"$SUM")" = "$(field closed <<<"$SUM")"
check "... within 10 s of the last one made (plus the tick), long before the flood's 30 s" test $((T1 - T0)) -lt 28
check "... answering 408 to those it timed out" test "$(field answered408 <<<"$SUM")" -gt 0
check "spaced logs the deadline" grep -q "request head did not arrive within 10000 ms" "$LOG"
check "a token request after the flood is 200" test "$(tcp_code "$TCP/v1/health")" = 200

kill -TERM "$PID"
gone "$PID" || kill -9 "$PID"
PID=

# ---- small limits: strangers, the deadline ----
start_daemon --listen "127.0.0.1:$PORT" --limit strangers=4 --limit request-head-ms=2000 \
        --limit conns-per-peer=1000 --limit tcp-conns=16 || exit 1
flood 40 20 "$T/flood2" || bad "conn-flood started"
HELD=$(ss -Htn state established "sport = :$PORT" | wc -l)
check "with strangers=4, spaced holds at most 4 of 40 dribbling connections ($HELD)" test "$HELD" -le 4
check "... and a token request is answered 200" test "$(tcp_code "$TCP/v1/health")" = 200
check "... and the operator's" test "$(unix_code)" = 200
# a connection with a token stays (not a stranger) while strangers come and go
# ask_keep: one request on the connection KEEP, its whole answer read; the status line
ask_keep() {
        local line len=0 status=
        printf 'GET /v1/health HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n' "$TA" >&$KEEP
        read -r -t 5 status <&$KEEP || return 1
        while read -r -t 5 line <&$KEEP; do
                line=${line%$'\r'}
                [ -z "$line" ] && break
                case ${line,,} in content-length:*) len=${line#*: } ;; esac
        done
        [ "$len" -gt 0 ] && read -r -t 5 -N "$len" _ <&$KEEP
        echo "$status"
}
exec {KEEP}<>"/dev/tcp/127.0.0.1/$PORT"
check "an authenticated keep-alive connection is answered" grep -q ' 200 ' <<<"$(ask_keep)"
flood 40 10 "$T/flood3" || bad "conn-flood started"
check "... and is not dropped for 40 new strangers" grep -q ' 200 ' <<<"$(ask_keep)"
trap '' PIPE # the dribble below writes to a connection spaced closes
printf 'GET /v1/health HTTP/1.1\r\nHost: x\r\n' >&$KEEP
for _ in 1 2 3 4; do
        sleep 1
        printf 'X-Dribble: 1\r\n' >&$KEEP 2>/dev/null || break
done
read -r -t 5 STATUS <&$KEEP
check "the same connection dribbling its next head gets 408 after request-head-ms" grep -q ' 408 ' <<<"$STATUS"
exec {KEEP}>&-
SUM=$(wait_flood "$T/flood3" 10)
check "request-head-ms=2000 closes dribbling connections within seconds ($SUM)" \
        test "$(field opened <<<"$SUM")" = "$(field closed <<<"$SUM")"
wait_flood "$T/flood2" 20 >/dev/null
kill -TERM "$PID"
gone "$PID" || kill -9 "$PID"
PID=

# ---- bad values ----
OUT=$("$SPACED" --data "$DATA" --limit nosuch=1 2>&1)
check "--limit with an unknown name exits 2 naming it" test "$?/$(grep -c "no limit named 'nosuch'" <<<"$OUT")" = 2/1
OUT=$("$SPACED" --data "$DATA" --limit strangers=lots 2>&1)
check "--limit with a bad number exits 2 with the range" test "$?/$(grep -c 'strangers must be a number from 1' <<<"$OUT")" = 2/1
OUT=$("$SPACED" --data "$DATA" --limit request-head-ms=5 2>&1)
check "--limit below its minimum exits 2" test $? = 2
OUT=$("$SPACED" --data "$DATA" --limit tcp-conns=8 --limit strangers=9 2>&1)
check "strangers over tcp-conns is refused" test "$?/$(grep -c 'strangers (9) is more than tcp-conns (8)' <<<"$OUT")" = 2/1
printf 'limit = strangers=7\nlimit = event-rate=3\n' >"$T/spaced.conf"
OUT=$("$SPACED" --config "$T/spaced.conf" --data "$DATA" --check-config 2>&1)
check "the configuration file sets limits (repeatable)" test "$(grep -c '^limit = ' <<<"$OUT")" = 2
check "--help lists the limits" sh -c "'$SPACED' --help | grep -q 'conns-per-peer=N (default 64)'"

finish conns
