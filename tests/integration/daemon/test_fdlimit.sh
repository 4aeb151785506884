#!/bin/bash
# Out of file descriptors (#21 item 1): spaced's open files limit (soft and hard) is lowered
# to a few above what it holds, and 100 loopback connections wait on its listener. accept
# fails with EMFILE while the listener stays readable: spaced must back off rather than
# spin (its CPU time over 3 s stays low), log the shortage a few times rather than per
# attempt, and serve again once the connections are gone. Loopback only. Root only; ~15 s.
# Usage: test_fdlimit.sh SPACED_BINARY   (conn-flood and space-init next to it)
. "$(dirname "$0")/lib.sh" fdlimit "${1:-}"
FLOOD=$BIN/conn-flood
[ -x "$FLOOD" ] || { echo "FAIL: $FLOOD is not built"; exit 1; }
command -v prlimit >/dev/null || { echo "FAIL: prlimit is missing (util-linux)"; exit 1; }

PORT=$(free_port)
unix_code() { curl -sS -m "$1" --unix-socket "$S" -o /dev/null -w '%{http_code}' http://x/v1/health 2>/dev/null; }
# cpu_ticks PID: user + system time of all its threads, in clock ticks
cpu_ticks() { sed 's/^.*) //' "/proc/$1/stat" | awk '{ print $12 + $13 }'; }

"$SPACED" token add --data "$DATA" --tenant alpha --name a >/dev/null 2>&1 || bad "a token made"
start_daemon --listen "127.0.0.1:$PORT" || exit 1
HELD=$(ls "/proc/$PID/fd" | wc -l)
MAXFD=$((HELD + 12))
# Both limits: spaced raises its soft limit to the hard one at start, and must not here.
prlimit --pid "$PID" --nofile="$MAXFD:$MAXFD" || bad "prlimit lowered spaced's limit"
echo "# spaced holds $HELD fds; its open files limit is now $MAXFD"

"$FLOOD" 127.0.0.1 "$PORT" 100 8 1000 >"$T/flood" 2>&1 &
FPID=$!
for _ in $(seq 100); do
        grep -q '^ready' "$T/flood" && break
        kill -0 "$FPID" 2>/dev/null || break
        sleep 0.1
done
check "conn-flood made its 100 connections" grep -q '^ready 100$' "$T/flood"
sleep 0.5
C0=$(cpu_ticks "$PID")
sleep 3
C1=$(cpu_ticks "$PID")
HZ=$(getconf CLK_TCK)
echo "# spaced used $((C1 - C0)) ticks of $((3 * HZ)) in 3 s with no fds left"
check "spaced does not spin while accept has no fd to give (< 10% of a CPU)" test $((C1 - C0)) -lt $((3 * HZ / 10))
check "spaced logs the shortage" grep -q "out of file descriptors" "$LOG"
N=$(grep -c "out of file descriptors\|accept: Too many open files" "$LOG")
check "... a few times, not once per attempt ($N lines)" test "$N" -le 5

for _ in $(seq 120); do kill -0 "$FPID" 2>/dev/null || break; sleep 0.1; done
kill "$FPID" 2>/dev/null
wait "$FPID" 2>/dev/null
check "once the connections are gone, spaced serves again" test "$(unix_code 10)" = 200
check "... and says it accepts again" grep -q "accepting connections again" "$LOG"
check "spaced is still running" kill -0 "$PID"

kill -TERM "$PID"
gone "$PID" || kill -9 "$PID"
PID=
finish daemon.fdlimit
