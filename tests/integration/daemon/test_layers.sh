#!/bin/bash
# Integration test of snapshot layers (docs/sessions.md, "Snapshot layers"): forks share
# one read-only layer of their snapshot under a nearly empty writable layer; whiteouts,
# opaque directories, renames, chmod and hard links made over a layer are in the next
# snapshot; recovery and restore start over a layer (the difference only, when it can be
# expressed); a re-attached sandbox is still captured over its layer; GC keeps layers in
# use and removes the others. Every check compares what the session shows.
# Usage: test_layers.sh SPACED_BINARY   (space-init must sit next to it)
. "$(dirname "$0")/lib.sh" layers "${1:-}"

same() { [ "$1" = "$2" ] && return 0; diff <(echo "$1") <(echo "$2") | head -n 20; return 1; }
sbx_of() { api "http://x/v1/sessions/$1" | jget sandbox_id; }
# Everything the session shows under /root and /bin: names, types, modes, file sizes and
# contents (busybox has no stat, so ls -ln and cat; a directory's size depends on the
# file system, which differs between a layer and a writable layer on the quota volume).
view() { sh_in "$1" 'cd / && ls -lnR root bin | grep -v "^total" | tr -s " " | cut -d" " -f1,5,9- | sed "s/^\(d[^ ]*\) [0-9]*/\1/"; cat root/ws/* root/ws/*/* 2>/dev/null'; }
n_layers() { ls "$DATA/layers" 2>/dev/null | grep -cv '^\.' ; }
upper_entries() { find "$L/sandboxes/$(sbx_of "$1")/upper" -mindepth 1 | wc -l; }
recover() { # session: kill -9 its init, wait for the new one
        local ipid
        ipid=$(api "http://x/v1/sessions/$1" | jget init_pid)
        kill -9 "$ipid"
        for _ in $(seq 100); do
                R=$(api "http://x/v1/sessions/$1")
                [ "$(echo "$R" | jget state)" = running ] && [ "$(echo "$R" | jget init_pid)" != "$ipid" ] && return 0
                sleep 0.1
        done
        return 1
}

ROOT=$T/rootfs
make_rootfs "$ROOT"
start_daemon || exit 1
echo "# spaced $SPACED on $DATA"
api -X POST http://x/v1/templates -d "{\"name\":\"mini\",\"from_dir\":\"$ROOT\"}" >/dev/null
NEW='{"template":"mini","memory":"64M","snapshot_interval_ms":0}'

A=$(api -X POST http://x/v1/sessions -d "$NEW" | jget id)
UA=http://x/v1/sessions/$A
sh_in "$A" 'mkdir -p /root/ws/d /root/ws/gone /root/ws/redo; for i in 1 2 3; do echo file $i > /root/ws/f$i; done
echo deep > /root/ws/d/deep; echo g > /root/ws/gone/g; echo r > /root/ws/redo/old; echo x > /root/ws/mv-me; rm -f /bin/true' >/dev/null
S1=$(api -X POST "$UA/snapshots" | jget id)
AVIEW=$(view "$A")

# ---- fork: one shared layer, empty writable layers ----
R=$(api -X POST "$UA/fork" -d "{\"snapshot\":\"$S1\",\"count\":2}")
F1=$(echo "$R" | jget sessions 0 id)
F2=$(echo "$R" | jget sessions 1 id)
check "two forks run on one snapshot layer" test "$(n_layers)" = 1
check "their writable layers hold nothing" test "$(upper_entries "$F1")/$(upper_entries "$F2")" = "0/0"
check "each sandbox records its layer" test -s "$L/sandboxes/$(sbx_of "$F1")/layer"
check "the forks show the snapshot (a template file removed included)" same "$(view "$F1")" "$AVIEW"
check "... and the same in both" same "$(view "$F2")" "$AVIEW"
R=$(api -X POST "$UA/fork" -d "{\"snapshot\":\"$S1\"}")
F4=$(echo "$R" | jget sessions 0 id)
check "a later fork of the snapshot reuses the layer" test "$(n_layers)/$(grep -c "$F4: materialized .* on its layer" "$LOG")" = "1/1"

# ---- changes over the layer: whiteouts, opaque dirs, renames, xattrs ----
sh_in "$F1" 'echo changed > /root/ws/f1; rm /root/ws/f2; rm -r /root/ws/gone; rm -r /root/ws/redo; mkdir /root/ws/redo
echo new > /root/ws/redo/new; mv /root/ws/mv-me /root/ws/moved; chmod 600 /root/ws/f3; echo more > /root/ws/d/more' >/dev/null
F1VIEW=$(view "$F1")
check "the sibling fork does not see them" same "$(view "$F2")" "$AVIEW"
UF1=http://x/v1/sessions/$F1
SF1=$(api -X POST "$UF1/snapshots" | jget id)
R=$(api -X POST "$UF1/fork" -d "{\"snapshot\":\"$SF1\"}")
G1=$(echo "$R" | jget sessions 0 id)
check "a snapshot over the layer holds the merged files: a fork of it shows them" same "$(view "$G1")" "$F1VIEW"
check "... written as a difference over the parent's layer (no new layer)" same "$(n_layers)/$(grep -c "$G1: materialized .* as a difference" "$LOG")" "1/1"

# ---- recovery: the difference over the same layer ----
sh_in "$F1" 'echo unsnapshotted > /root/ws/f1' >/dev/null
N0=$(upper_entries "$F1")
check "recovery after kill -9 of init" recover "$F1"
check "recovery shows the newest snapshot" same "$(view "$F1")" "$F1VIEW"
check "... written as a difference over the fork's layer" test "$(grep -c "$F1: materialized .* as a difference" "$LOG")" = 1
N=$(upper_entries "$F1")
check "... which holds what the lost writable layer held ($N entries)" same "$N" "$N0"

# ---- pause and resume on the parked layer, over its snapshot layer ----
api -X POST "$UF1/pause" >/dev/null
check "a paused session over a layer keeps the record of its layer in the parked one" test -s "$L/parked/$F1/layer"
api -X POST "$UF1/resume" >/dev/null
check "resume reuses the parked layer and shows the same files" test "$(grep -c "$F1: resume: reused parked layer" "$LOG")/$(view "$F1")" = "1/$F1VIEW"

# ---- hard links over a layer ----
sh_in "$F1" 'ln /root/ws/f3 /root/ws/f3-link; echo linked >> /root/ws/f3' >/dev/null
F1VIEW=$(view "$F1")
check "a hard link made over the layer" test "$(sh_in "$F1" 'cat /root/ws/f3-link | tail -n 1')" = linked
api -X POST "$UF1/snapshots" >/dev/null
check "recovery with a changed hard link (a new layer: a difference can't hold it)" recover "$F1"
check "... shows the newest snapshot, the link too" same "$(view "$F1")" "$F1VIEW"
sh_in "$F1" 'echo both >> /root/ws/f3-link' >/dev/null
check "... still one file under two names" same "$(sh_in "$F1" 'tail -n 1 /root/ws/f3')" both

# ---- restore over layers ----
R=$(api -X POST "$UF1/restore" -d "{\"snapshot\":\"$SF1\"}" -w '\n%{http_code}')
check "restore to an older snapshot answers 200 and shows its files" test "$(echo "$R" | tail -n 1)/$(sh_in "$F1" 'cat /root/ws/f1; ls /root/ws | grep -c link')" = "200/changed
0"

# ---- re-attach after kill -9 of spaced: captures still over the layer ----
sh_in "$F2" 'echo after restart > /root/ws/f1' >/dev/null
F2VIEW=$(view "$F2")
kill -9 "$PID"
wait "$PID" 2>/dev/null
PID=
start_daemon || exit 1
check "the fork runs again after the restart" wait_state "$F2" running 50
SNAP=$(api -X POST "http://x/v1/sessions/$F2/snapshots" | jget id)
R=$(api -X POST "http://x/v1/sessions/$F2/fork" -d "{\"snapshot\":\"$SNAP\"}")
G2=$(echo "$R" | jget sessions 0 id)
check "a snapshot of the re-attached sandbox holds the layer's files and the change" same "$(view "$G2")" "$F2VIEW"

# ---- GC: layers in use stay, the others go ----
for s in "$G1" "$G2" "$F4" "$A" "$F1"; do api -X DELETE "http://x/v1/sessions/$s" >/dev/null; done
BEFORE=$(n_layers)
api -X POST http://x/v1/gc >/dev/null
AFTER=$(n_layers)
# A delete removes the layers (and the source layers of its snapshots) nobody uses any more.
check "deletes remove layers nobody uses, gc keeps the one in use ($BEFORE -> $AFTER)" same "$BEFORE/$AFTER" "1/1"

check "a session over a kept layer still snapshots after the gc" test "$(api -X POST "http://x/v1/sessions/$F2/snapshots" -o /dev/null -w '%{http_code}')" = 201
R=$(api -X POST "http://x/v1/sessions/$F2/fork" -d '{}')
G3=$(echo "$R" | jget sessions 0 id)
check "... with every file (a fork of now shows them)" same "$(view "$G3")" "$F2VIEW"
for s in "$F2" "$G3"; do api -X DELETE "http://x/v1/sessions/$s" >/dev/null; done
api -X POST http://x/v1/gc >/dev/null
sleep 0.3
check "with no session left, no layer is left" test "$(n_layers)" = 0

finish layers
