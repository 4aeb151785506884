#!/bin/bash
# A TCP client's exec whose command exits without reading its (streamed) stdin (#21): spaced
# answers before it has read the request's body, and a close with unread bytes makes the
# kernel send a reset, which can destroy the end of the answer before the client reads it
# (the exit event lost: "spaced closed the connection"). spaced must linger (shut down its
# side, drop the rest until EOF) instead. Ten runs of a command that writes 3,000,000
# bytes and exits 3 with 64 MiB of stdin unread: each must give all the bytes and exit 3.
# Loopback only. Root only; ~20 s.
# Usage: test_linger.sh SPACED_BINARY   (space and space-init next to it)
. "$(dirname "$0")/lib.sh" linger "${1:-}"
SPACE=$BIN/space
[ -x "$SPACE" ] || { echo "FAIL: $SPACE is not built"; exit 1; }

PORT=$(free_port)
TOKEN=$("$SPACED" token add --data "$DATA" --tenant default --name linger 2>/dev/null | tail -n 1)
[ -n "$TOKEN" ] || bad "a token made"
start_daemon --listen "127.0.0.1:$PORT" || exit 1
ROOT=$T/root
make_rootfs "$ROOT"
api -X POST http://x/v1/templates -d "{\"name\":\"mini\",\"from_dir\":\"$ROOT\"}" >/dev/null
ID=$(api -X POST http://x/v1/sessions -d '{"template":"mini"}' | jget id)
[ -n "$ID" ] && wait_state "$ID" running 100 || { bad "a session runs"; finish linger; exit; }
head -c $((64 << 20)) /dev/zero >"$T/stdin"

export SPACE_HOST="127.0.0.1:$PORT" SPACE_TOKEN="$TOKEN"
good=0
end=$((SECONDS + 60))
for i in $(seq 10); do
        [ $SECONDS -lt $end ] || { bad "ten runs within 60 s (ran $((i - 1)))"; break; }
        timeout 20 "$SPACE" exec "$ID" -- sh -c 'yes | head -c 3000000; exit 3' <"$T/stdin" >"$T/out" 2>"$T/err"
        rc=$?
        n=$(wc -c <"$T/out")
        if [ "$n" = 3000000 ] && [ "$rc" = 3 ]; then
                good=$((good + 1))
        else
                echo "# run $i: $n bytes, exit $rc: $(head -c 200 "$T/err")"
        fi
done
check "all ten runs over TCP gave 3,000,000 bytes and exit 3 with stdin unread ($good of 10)" [ "$good" = 10 ]
code=$(curl -sS -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$PORT/v1/health")
check "spaced serves TCP after the lingering closes" [ "$code" = 200 ]
finish linger
