#!/bin/bash
# Integration test of source layers (docs/sessions.md, "Source layers"): a manual snapshot
# (or a fork of now) of a session on no snapshot layer keeps a read-only btrfs snapshot of
# its sandbox as the layer of the snapshot's tree, so the first fork of it starts on that
# layer (O(1)) and shows exactly the snapshot: a removed template file (a whiteout), an
# opaque directory, and nothing written after the snapshot. Also: the layers survive a
# kill -9 of spaced, a session keeps at most 16, a tree with hard links gets none, a
# delete removes them with their btrfs snapshots, and without the quota volume forks
# work as before (a layer materialized once).
# A large writable layer is frozen only for a btrfs snapshot and captured from it after
# the thaw ("Freezing for a btrfs snapshot only"): the same files, the stat cache kept.
# Usage: test_source_layers.sh SPACED_BINARY   (space-init must sit next to it)
. "$(dirname "$0")/lib.sh" srclayers "${1:-}"

CAP=16 # DUR_SOURCE_LAYERS_MAX
same() { [ "$1" = "$2" ] && return 0; diff <(echo "$1") <(echo "$2") | head -n 20; return 1; }
# What the session shows under /root, /bin and /opt: names, types, modes, sizes, contents.
view() { sh_in "$1" 'cd / && ls -lnR root bin opt | grep -v "^total" | tr -s " " | cut -d" " -f1,5,9- | sed "s/^\(d[^ ]*\) [0-9]*/\1/"; cat root/ws/* opt/old/* 2>/dev/null'; }
n_sources() { grep -l '^durable$' "$DATA"/layers/[0-9a-f]*/rec 2>/dev/null | wc -l; }
n_snaps() { ls "$L/layers" 2>/dev/null | wc -l; } # btrfs snapshots on the volume
snap() { api -X POST "http://x/v1/sessions/$1/snapshots" | jget id; }
fork() { api -X POST "http://x/v1/sessions/$1/fork" -d "$2" | jget sessions 0 id; }
started() { grep -c "$1: materialized .* $2" "$LOG"; } # session, how
settle() { for _ in $(seq 30); do [ "$(n_snaps)" = "$1" ] && return 0; sleep 0.1; done; return 1; }

ROOT=$T/rootfs
make_rootfs "$ROOT"
mkdir -p "$ROOT/opt/old"
echo template > "$ROOT/opt/old/t"
echo kept > "$ROOT/opt/keep"
# The machine's side is probed apart from spaced: without loop devices, mkfs or kernel
# btrfs there can be no btrfs volume (a skip); with them, spaced must have mounted one.
MACHINE=$("$(dirname "$0")/../quota-capable" btrfs) || { echo "SKIP: source layers need a btrfs quota volume: $MACHINE"; exit $SKIP; }
start_daemon || exit 1
echo "# spaced $SPACED on $DATA; this machine: $MACHINE"
if [ "$L" = "$DATA" ]; then
        echo "FAIL: spaced mounted no quota volume on a machine that can hold one: $(api http://x/v1/health | jget disk_limits error)"
        exit 1
fi
if [ "$(stat -f -c %T "$L")" != btrfs ]; then
        echo "SKIP: the kernel has ext4 project quotas, so the quota volume is $(stat -f -c %T "$L") (source layers need btrfs snapshots)"
        exit $SKIP
fi
api -X POST http://x/v1/templates -d "{\"name\":\"mini\",\"from_dir\":\"$ROOT\"}" >/dev/null
NEW='{"template":"mini","memory":"64M","snapshot_interval_ms":0}'

A=$(api -X POST http://x/v1/sessions -d "$NEW" | jget id)
sh_in "$A" 'mkdir -p /root/ws/d; echo one > /root/ws/f1; echo two > /root/ws/f2; echo deep > /root/ws/d/deep
rm -f /bin/true; rm -r /opt/old; mkdir /opt/old; echo new > /opt/old/n' >/dev/null
AVIEW=$(view "$A")
check "the session shows a whiteout and an opaque dir" test "$(sh_in "$A" 'ls /bin/true /opt/old/t 2>/dev/null; cat /opt/old/n')" = new
SA=$(snap "$A")
check "the manual snapshot made a source layer (log names $SA)" grep -q "$A: source layer of $SA from a btrfs snapshot" "$LOG"
check "... one layer, one read-only btrfs snapshot" test "$(n_sources)/$(n_snaps)" = 1/1
check "... read-only" test "$(touch "$(ls -d "$L"/layers/* | head -n 1)/upper/x" 2>&1 | grep -c 'Read-only')" = 1
# changed after the snapshot: must not show in a fork of it
sh_in "$A" 'echo later > /root/ws/f1; rm /root/ws/f2; echo new > /root/ws/f3; echo t > /opt/old/t' >/dev/null

F=$(fork "$A" "{\"snapshot\":\"$SA\"}")
check "the first fork of the snapshot starts on its layer" test "$(started "$F" "on its layer")/$(started "$F" "on a new layer")" = 1/0
check "... and shows exactly the snapshot (whiteout, opaque dir, no later change)" same "$(view "$F")" "$AVIEW"
check "... its writable layer is empty" test "$(find "$L/sandboxes/$(api "http://x/v1/sessions/$F" | jget sandbox_id)/upper" -mindepth 1 | wc -l)" = 0
sh_in "$F" 'echo fork > /root/ws/f1; rm /root/ws/d/deep' >/dev/null
check "a write in the fork leaves the parent alone" test "$(sh_in "$A" 'cat /root/ws/f1 /root/ws/d/deep')" = "later
deep"

# a fork of now: a snapshot with its own source layer, the child on it
A2VIEW=$(view "$A")
G=$(fork "$A" '{}')
check "a fork of now starts on the new source layer" test "$(started "$G" "on its layer")/$(n_sources)" = 1/2
check "... and shows the parent's files of now" same "$(view "$G")" "$A2VIEW"

# a tree with hard links gets no source layer (overlayfs breaks lower hard links)
H=$(api -X POST http://x/v1/sessions -d "$NEW" | jget id)
sh_in "$H" 'echo x > /root/a; ln /root/a /root/b' >/dev/null
SH=$(snap "$H")
check "a snapshot with hard links makes no source layer" test "$(grep -c "source layer of $SH" "$LOG")/$(n_sources)" = 0/2
HF=$(fork "$H" "{\"snapshot\":\"$SH\"}")
check "... its fork is materialized whole, still one file" test "$(started "$HF" "whole (hard links)")/$(sh_in "$HF" 'echo y >> /root/a; cat /root/b')" = "1/x
y"

# survives a kill -9 of spaced
kill -9 "$PID"
wait "$PID" 2>/dev/null
PID=
start_daemon || exit 1
check "after kill -9 and a restart the layers are still there" test "$(n_sources)/$(n_snaps)" = 2/2
F2=$(fork "$A" "{\"snapshot\":\"$SA\"}")
check "... a fork of the snapshot still starts on its layer" same "$(started "$F2" "on its layer")/$(view "$F2")" "1/$AVIEW"

# the cap: each session keeps its newest CAP source layers (and any a sandbox lies on)
for s in "$F" "$F2" "$G"; do api -X DELETE "http://x/v1/sessions/$s" >/dev/null; done
for i in $(seq "$CAP"); do
        sh_in "$A" "echo $i > /root/ws/n" >/dev/null
        snap "$A" >/dev/null
done
check "a session keeps at most $CAP source layers" test "$(n_sources)" = "$CAP"
check "... and their btrfs snapshots only" settle "$CAP"
F3=$(fork "$A" "{\"snapshot\":\"$SA\"}")
check "... the oldest went: a fork of it makes a new layer" test "$(started "$F3" "on a new layer")" = 1
check "... with the same files" same "$(view "$F3")" "$AVIEW"

# a large writable layer (> DUR_SNAP_CAPTURE_ENTRIES = 4000 entries): frozen only for a
# btrfs snapshot, captured from it after the thaw
M=$(api -X POST http://x/v1/sessions -d "$NEW" | jget id)
sh_in "$M" 'mkdir /root/many; i=0; while [ $i -lt 4100 ]; do echo $i > /root/many/f$i; i=$((i+1)); done' >/dev/null
snap "$M" >/dev/null # the first capture walks them all (and tells how many there are)
sh_in "$M" 'echo changed > /root/many/f7; rm /root/many/f8; echo new > /root/many/new' >/dev/null
sig() { sh_in "$1" 'ls /root/many | wc -l; cat /root/many/* | wc -c; cat /root/many/f7 /root/many/new /root/many/f9; ls /root/many/f8 2>&1 | wc -l'; }
MSIG=$(sig "$M")
SM=$(snap "$M")
check "a snapshot of a large layer freezes for a btrfs snapshot only" grep -q "snapshot $SM (manual): .* files read, frozen [0-9]* us (for a btrfs snapshot only)" "$LOG"
sh_in "$M" 'echo late > /root/many/f9' >/dev/null
MSIG2=$(sig "$M")
FM=$(fork "$M" "{\"snapshot\":\"$SM\"}")
check "... its fork shows exactly the snapshot (not the write after it)" same "$(sig "$FM")" "$MSIG"
SM2=$(snap "$M")
check "... the next one reads only the file changed since (the stat cache carried over)" grep -q "snapshot $SM2 (manual): [0-9]* bytes new, 1 files read, frozen [0-9]* us (for a btrfs snapshot only)" "$LOG"
FM2=$(fork "$M" "{\"snapshot\":\"$SM2\"}")
check "... and holds that write" same "$(sig "$FM2")" "$MSIG2"
# the same for rolling snapshots, whose btrfs snapshot is only the capture's (".cap.")
R=$(api -X POST http://x/v1/sessions -d '{"template":"mini","memory":"64M","snapshot_interval_ms":1000}' | jget id)
sh_in "$R" 'mkdir /root/many; i=0; while [ $i -lt 4100 ]; do echo $i > /root/many/f$i; i=$((i+1)); done
echo r > /root/many/f9; echo new > /root/new' >/dev/null
SR=$(snap "$R") # from here spaced knows the layer is large
sh_in "$R" 'mv /root/new /root/many/new' >/dev/null # one rename: no capture sees half of it
RSIG=$(sig "$R")
RS=
for _ in $(seq 300); do
        HD=$(api "http://x/v1/sessions/$R" | jget head_snapshot)
        [ "$HD" != "$SR" ] && grep -q "snapshot $HD (rolling): .* (for a btrfs snapshot only)" "$LOG" && RS=$HD && break
        sleep 0.1
done
check "the next rolling snapshot of a large layer freezes for a btrfs snapshot only" test -n "$RS"
FR=$(fork "$R" "{\"snapshot\":\"$RS\"}")
check "... a fork of it shows the change" same "$(sig "$FR")" "$RSIG"
check "... no snapshot of a capture is left" test "$(ls -A "$L/layers" | grep -c '^\.cap')" = 0
check "... and it made no source layer" test "$(grep -c "source layer of $RS" "$LOG")" = 0

# rm: the source layers and their snapshots go with the session
for s in "$A" "$F3" "$H" "$HF" "$M" "$FM" "$FM2" "$R" "$FR"; do api -X DELETE "http://x/v1/sessions/$s" >/dev/null; done
check "deleting the sessions removes every source layer" test "$(n_sources)" = 0
check "... and every btrfs snapshot" settle 0
check "... and every layer" test "$(ls "$DATA/layers" | grep -cv '^\.')" = 0

# without the quota volume: as before (the first fork materializes a layer)
kill -TERM "$PID"
wait "$PID" 2>/dev/null
PID=
start_daemon --disk-volume-size 0 || exit 1
B=$(api -X POST http://x/v1/sessions -d "$NEW" | jget id)
sh_in "$B" 'echo b > /root/b; rm -f /bin/true' >/dev/null
BVIEW=$(view "$B")
SB=$(snap "$B")
FB=$(fork "$B" "{\"snapshot\":\"$SB\"}")
check "without the volume: no source layer, the fork makes a layer" test "$(grep -c "source layer of $SB" "$LOG")/$(started "$FB" "on a new layer")" = 0/1
check "... and shows the snapshot" same "$(view "$FB")" "$BVIEW"
for s in "$B" "$FB"; do api -X DELETE "http://x/v1/sessions/$s" >/dev/null; done

finish srclayers
