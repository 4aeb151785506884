#!/bin/sh
# Crash safety: kill -9 space-store at random moments while it captures, 30 rounds, the
# tree changing between rounds and half the captures incremental. Afterwards verify must
# pass and every snapshot the tool reported as written must materialize (and equal the
# tree it was taken from when that tree was saved).
# usage: test_crash.sh PATH-TO-space-store [ROUNDS]
set -u
T=${1:?usage: test_crash.sh space-store [rounds]}
ROUNDS=${2:-30}
W=$(mktemp -d /var/tmp/space-store-crash.XXXXXX)
trap 'rm -rf "$W"' EXIT
export SPACE_STORE="$W/store"
"$T" init || exit 1

mkdir -p "$W/src/d1" "$W/src/d2"
i=0
while [ $i -lt 12 ]; do
        head -c $((1000000 + i * 150000)) /dev/urandom >"$W/src/d$((i % 2 + 1))/big$i"
        i=$((i + 1))
done
i=0
while [ $i -lt 300 ]; do
        head -c $((i * 37 % 5000)) /dev/urandom >"$W/src/small$i"
        i=$((i + 1))
done

# How long does a capture of a mostly stored tree take? Kill times are drawn around it.
"$T" put --no-stat-cache "$W/src" >/dev/null || exit 1
head -c 300000 /dev/urandom >>"$W/src/d1/big0" # a change like each round's
start=$(date +%s%N)
"$T" put --no-stat-cache "$W/src" >/dev/null || exit 1
dur_ms=$(( ($(date +%s%N) - start) / 1000000 + 1 ))
echo "one capture takes ~${dur_ms} ms; killing at random points in [0, $((dur_ms * 2))] ms"

: >"$W/reported"
last=""
killed=0
round=1
while [ $round -le "$ROUNDS" ]; do
        # change something every round
        head -c 300000 /dev/urandom >>"$W/src/d1/big$((round % 12))"
        head -c $((round * 13)) /dev/urandom >"$W/src/new$round"
        rm -f "$W/src/small$((round * 7 % 300))"
        # keep a copy of this round's tree to compare a reported snapshot with
        rm -rf "$W/copy"
        cp -a "$W/src" "$W/copy"
        parent=""
        if [ -n "$last" ] && [ $((round % 2)) -eq 0 ]; then parent="--parent $last"; fi
        # shellcheck disable=SC2086
        "$T" put "$W/src" $parent --no-stat-cache >"$W/out.$round" 2>"$W/err.$round" &
        pid=$!
        delay=$(( $(od -An -N2 -tu2 /dev/urandom) % (dur_ms * 2 + 1) ))
        sleep "$(printf '%d.%03d' $((delay / 1000)) $((delay % 1000)))"
        kill -9 $pid 2>/dev/null
        # killed only if the kill came before the end (a finished put is a zombie that
        # kill still "reaches"): its status says which
        wait $pid 2>/dev/null
        st=$?
        [ $st -eq 137 ] && killed=$((killed + 1))
        h=$(cat "$W/out.$round")
        if [ -n "$h" ]; then
                echo "$h $round" >>"$W/reported"
                mv "$W/copy" "$W/tree.$round"
                last=$h
        fi
        round=$((round + 1))
done
nrep=$(wc -l <"$W/reported")
echo "$ROUNDS rounds: $killed killed while running, $nrep reported a snapshot"

fails=0
# with kills drawn over twice a capture's time about half the rounds finish: none
# reported means the checks below would compare nothing
[ "$nrep" -gt 0 ] || { echo "FAIL: no capture reported a snapshot"; fails=$((fails + 1)); }
echo "checking verify passes after the crashes"
if "$T" verify; then echo "ok: verify"; else echo "FAIL: verify"; fails=$((fails + 1)); fi
echo "checking every reported snapshot materializes and equals its tree"
while read -r h round; do
        rm -rf "$W/get"
        if ! "$T" get "$h" "$W/get"; then
                echo "FAIL: get $h (round $round)"
                fails=$((fails + 1))
        elif ! diff -r --no-dereference "$W/tree.$round" "$W/get" >/dev/null; then
                echo "FAIL: snapshot $h differs from round $round's tree"
                fails=$((fails + 1))
        fi
done <"$W/reported"
echo "checking gc cleans up what the crashes left (temp dirs, temp packs), and verify still passes"
echo "  $(find "$W/store/packs" -name '.t-*' | wc -l) temp packs left by killed captures"
"$T" gc || fails=$((fails + 1))
left=$(find "$W/store/tmp" -mindepth 1 | wc -l)
[ "$left" -eq 0 ] || { echo "FAIL: $left leftovers in tmp/"; fails=$((fails + 1)); }
# a kill -9 tears a pack only under its temp name; gc removes those
torn=$(find "$W/store/packs" -name '.t-*' | wc -l)
[ "$torn" -eq 0 ] || { echo "FAIL: $torn temp packs left in packs/"; fails=$((fails + 1)); }
"$T" verify || { echo "FAIL: verify after gc"; fails=$((fails + 1)); }
[ "$killed" -gt 0 ] || { echo "FAIL: no capture was interrupted"; fails=$((fails + 1)); }
echo "$fails failed"
[ "$fails" -eq 0 ]
