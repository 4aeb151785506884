#!/bin/bash
# Durability under corruption, through the API (docs/sessions.md, "Damaged snapshots"):
# the store's objects are damaged on disk — bytes flipped in a chunk, in a block of trees
# and records, a pack cut short, a pack removed — and restore, fork, create from a
# snapshot, resume and crash recovery (a killed init; a sandbox lost while spaced was down)
# must refuse cleanly: an error that names the snapshot, the session kept as it was (state,
# sandbox, files, timeline), nothing half-made (no session, sandbox or layer), and an event
# saying why; after a repair the session goes on.
#
# The store must really be read. A sandbox starts from a snapshot on the snapshot layer of
# its tree when one exists (docs/sessions.md, "Snapshot layers"), and a resume reuses the
# parked layer: both hold data that was verified (or captured) before, so a start from
# them rightly reads no chunk. This test therefore damages only snapshots that no sandbox
# ever started from (no layer, checked before each request), removes the parked layer
# before a resume (always safe, docs/sessions.md), and runs without the quota volume: on
# it, manual snapshots get a source layer at once (test_source_layers.sh covers that).
# Usage: test_corrupt.sh SPACED_BINARY   (space-init must sit next to it)
. "$(dirname "$0")/lib.sh" corrupt "${1:-}"

command -v jq >/dev/null || { echo "jq is missing (Debian package jq)"; exit 1; }
# JSON through jq, not python3 (lib.sh's helpers are redefined here).
jget() { # keys/indexes -> the value (objects and arrays as JSON)
        local p="" k
        for k in "$@"; do
                case $k in *[!0-9]*) p="$p[\"$k\"]" ;; *) p="$p[$k]" ;; esac
        done
        jq -r ".$p | if type == \"object\" or type == \"array\" then tojson else . end"
}
sh_in() { # session, shell command -> its stdout
        api -X POST "http://x/v1/sessions/$1/exec" -d "$(jq -nc --arg c "$2" '{argv: ["sh", "-c", $c]}')" |
                jq -rj 'select(.type == "stdout") | .data // (.data_b64 | @base64d)'
}
state_of() { api "http://x/v1/sessions/$1" | jget state; }
same() { [ "$1" = "$2" ] && return 0; diff <(echo "$1") <(echo "$2") | head -n 20; return 1; }
# One request, read once: R = "STATUS BODY".
req() { R=$(api -w '\n%{http_code}' "$@"); ST=${R##*$'\n'}; BODY=${R%$'\n'*}; }
n_sessions() { api http://x/v1/sessions | jq '.sessions | length'; }
n_snaps() { api "http://x/v1/sessions/$1/snapshots" | jq '.snapshots | length'; }
root_of() { api "http://x/v1/sessions/$1/snapshots" | jq -r --arg s "$2" '.snapshots[] | select(.id == $s) | .root'; }
not() { ! "$@"; }
says() { printf '%s' "$1" | jq -e "${@:2}" >/dev/null; } # JSON, jq arguments: true?
# The last answer (req) is a 500 whose message names snapshot $1 as damaged.
refused() { test "$ST" = 500 && says "$BODY" --arg s "$1" '.error.message | contains($s) and test("damaged")'; }
# Session URL $1's log has exactly one event matching jq condition $3 ($s: snapshot $2).
logged() { says "$(api "$1/events?limit=1000")" --arg s "$2" "[.events[] | select($3)] | length == 1"; }
# A session's running sandbox, as one line: state, sandbox, init pid, head.
where() { api "http://x/v1/sessions/$1" | jq -r '"\(.state) \(.sandbox_id) \(.init_pid) \(.head_snapshot)"'; }
# Every sandbox directory belongs to a session that runs on it: none half-made, none left.
sandboxes_held() {
        same "$(ls "$L/sandboxes" | sort)" "$(api http://x/v1/sessions | jq -r '.sessions[].sandbox_id // empty' | sort)"
}
no_layer() { test ! -e "$DATA/layers/$1" && test -z "$(ls -A "$DATA/layers" 2>/dev/null | grep '^\.tmp\.')"; }
# A file of random bytes after a marker: stored raw in the pack (it does not compress), so
# the marker finds it there.
blob() { printf 'CORRUPT-MARKER-%s\n' "$1" >"$T/$1"; head -c 65536 /dev/urandom >>"$T/$1"; }
put() { # session, host file, path inside
        test "$(api -X PUT "http://x/v1/sessions/$1/files?path=$3" -T "$2" -o /dev/null -w '%{http_code}')" = 201
}
same_file() { api "http://x/v1/sessions/$1/files?path=$2" -o "$T/back" && cmp -s "$T/back" "$3"; }
PACKS=$DATA/store/packs
pack_of() { grep -laF "CORRUPT-MARKER-$1" "$PACKS"/*.pack; }
# Overwrites 16 bytes of blob NAME's data in its pack, in place (the daemon's open file
# sees it): the chunk no longer matches its hash.
flip_blob() {
        local p off
        p=$(pack_of "$1") || return 1
        off=$(grep -obUaF "CORRUPT-MARKER-$1" "$p" | head -n 1 | cut -d: -f1)
        printf 'XXXXXXXXXXXXXXXX' | dd of="$p" bs=1 seek=$((off + 4096)) conv=notrunc status=none
}
# Overwrites 16 bytes in the middle of the last block of PACK (a capture writes its trees
# and the snapshot record last, zstd-compressed together), in place.
flip_last_block() {
        local p=$1 size idx blk
        size=$(stat -c %s "$p")
        idx=$(od -An -t u8 -j $((size - 56)) -N 8 "$p" | tr -d ' ')
        blk=$(grep -obUaF SPBK "$p" | tail -n 1 | cut -d: -f1)
        printf 'XXXXXXXXXXXXXXXX' | dd of="$p" bs=1 seek=$(((blk + idx) / 2)) conv=notrunc status=none
}
# The newest pack (the one the last capture wrote).
newest_pack() { ls -t "$PACKS"/*.pack | head -n 1; }
verify_store() { "$BIN/space-store" --store "$DATA/store" --quiet verify >/dev/null 2>&1; }

ROOT=$T/rootfs
make_rootfs "$ROOT"
start_daemon --disk-volume-size 0 || exit 1
echo "# spaced $SPACED on $DATA"
api -X POST http://x/v1/templates -d "{\"name\":\"mini\",\"from_dir\":\"$ROOT\"}" >/dev/null
NEW='{"template":"mini","memory":"64M","snapshot_interval_ms":0}'
newses() { api -X POST http://x/v1/sessions -d "$NEW" | jget id; }
snap() { api -X POST "http://x/v1/sessions/$1/snapshots" | jget id; }

# ---- session A: three snapshots, the oldest and the newest to be damaged ----
A=$(newses)
UA=http://x/v1/sessions/$A
blob a1
blob a2
put "$A" "$T/a1" /root/a1 && sh_in "$A" 'echo v1 > /root/keep.txt' >/dev/null
S1=$(snap "$A")
put "$A" "$T/a2" /root/a2 && sh_in "$A" 'echo v2 > /root/keep.txt; rm /root/a1' >/dev/null
S2=$(snap "$A")
sh_in "$A" 'echo v3 > /root/keep.txt' >/dev/null
S3=$(snap "$A")
P3=$(newest_pack)
sh_in "$A" 'echo v4 > /root/keep.txt; echo unsnapshotted > /root/live.txt' >/dev/null
AT=$(where "$A")
NS=$(n_sessions)
AVIEW="v4 unsnapshotted"
aview() { sh_in "$A" 'echo $(cat /root/keep.txt /root/live.txt)'; }
check "setup: A runs with its files" same "$(aview)" "$AVIEW"

check "setup: the store is whole (space-store verify)" verify_store
# A copy of each pack before it is damaged: the repairs put them back.
keep() { cp "$1" "$T/saved.$(basename "$1")"; }
repair_all() { for f in "$T"/saved.*.pack; do cp "$f" "$PACKS/${f##*/saved.}"; done; }
keep "$(pack_of a1)"
check "setup: a byte flipped in the chunk of a1" flip_blob a1
check "setup: the store is damaged (space-store verify says so)" not verify_store
R1=$(root_of "$A" "$S1")
check "setup: no layer of $S1's tree exists (a start must read the store)" no_layer "$R1"

# ---- restore to a snapshot with a damaged chunk ----
req -X POST "$UA/restore" -d "{\"snapshot\":\"$S1\"}"
echo "# restore: $ST $BODY"
check "restore to a damaged snapshot is refused: 500, the message names it as damaged" refused "$S1"
check "... the session runs on as it was (state, sandbox, init, head)" same "$(where "$A")" "$AT"
check "... with its files, unsnapshotted ones too" same "$(aview)" "$AVIEW"
check "... and its timeline (no restore record)" test "$(n_snaps "$A")" = 3
check "... no half-made layer" no_layer "$R1"
check "... no restore in its log" test "$(api "$UA/events?limit=1000" | jq '[.events[] | select(.data.event == "restored")] | length')" = 0

# ---- fork and create from it ----
req -X POST "$UA/fork" -d "{\"snapshot\":\"$S1\",\"count\":2}"
echo "# fork: $ST $BODY"
check "fork of a damaged snapshot is refused (500) naming it" refused "$S1"
check "... no session left of it" test "$(n_sessions)" = "$NS"
check "... no layer" no_layer "$R1"
check "... the parent runs on as it was" test "$(where "$A")/$(aview)" = "$AT/$AVIEW"
check "... its log says the fork failed, and why" \
        logged "$UA" "$S1" '.data.event == "fork_failed" and .data.snapshot == $s and (.data.reason | test("damaged"))'
req -X POST http://x/v1/sessions -d "{\"snapshot\":\"$S1\",\"memory\":\"64M\",\"snapshot_interval_ms\":0}"
echo "# create: $ST $BODY"
check "create from a damaged snapshot is refused (500) naming it" refused "$S1"
check "... no session left of it" test "$(n_sessions)" = "$NS"

# ---- a damaged record and trees: S3's last block ----
keep "$P3"
flip_last_block "$P3"
req -X POST "$UA/fork" -d "{\"snapshot\":\"$S3\"}"
echo "# fork S3: $ST $BODY"
check "fork of a snapshot whose record is damaged is refused (500) naming it" refused "$S3"
check "... no session left of it" test "$(n_sessions)" = "$NS"
req -X POST "$UA/restore" -d "{\"snapshot\":\"$S3\"}"
echo "# restore S3: $ST $BODY"
check "restore to it is refused (500) naming it" refused "$S3"
check "... the session runs on as it was" test "$(where "$A")/$(aview)/$(n_snaps "$A")" = "$AT/$AVIEW/3"

# ---- an intact snapshot still forks and restores ----
req -X POST "$UA/fork" -d "{\"snapshot\":\"$S2\"}"
F=$(echo "$BODY" | jget sessions 0 id)
check "fork of the intact $S2 works (201) with its files" \
        test "$ST/$(sh_in "$F" 'cat /root/keep.txt; test -e /root/a1 || echo no-a1')" = "201/v2
no-a1"
check "... the chunk of another pack is whole" same_file "$F" /root/a2 "$T/a2"
# The checks above see what they look for: a fork is counted, and makes a layer.
check "(the session count sees the fork)" test "$(n_sessions)" = $((NS + 1))
check "(the layer check sees its layer)" not no_layer "$(root_of "$A" "$S2")"
api -X DELETE "http://x/v1/sessions/$F" >/dev/null
req -X POST "$UA/restore" -d "{\"snapshot\":\"$S2\"}"
check "restore to $S2 works (200)" test "$ST/$(sh_in "$A" 'cat /root/keep.txt')" = "200/v2"

# ---- resume from a pause snapshot whose parent's chunk is damaged, then repaired ----
B=$(newses)
UB=http://x/v1/sessions/$B
blob b1
put "$B" "$T/b1" /root/b1 && sh_in "$B" 'echo b-one > /root/b.txt' >/dev/null
SB1=$(snap "$B")
sh_in "$B" 'echo b-two > /root/b.txt' >/dev/null
req -X POST "$UB/pause"
PB=$(echo "$BODY" | jget head_snapshot)
check "B paused at $PB" test "$ST/$(echo "$BODY" | jget state)" = 200/paused
keep "$(pack_of b1)"
check "setup: a byte flipped in the chunk of b1" flip_blob b1
rm -rf "$L/parked/$B" "$L/parked/$B.rec"
req -X POST "$UB/resume"
echo "# resume: $ST $BODY"
check "resume from a damaged snapshot is refused (500) naming it" refused "$PB"
check "... the session stays paused, on no sandbox, head kept" test "$(where "$B")" = "paused null null $PB"
check "... no sandbox directory is left" sandboxes_held
check "... an event says why" \
        logged "$UB" "$PB" '.data.event == "resume_failed" and .data.snapshot == $s and (.data.reason | test("damaged"))'
repair_all
req -X POST "$UB/resume"
check "after the pack is put back, resume works (200) with every file" \
        test "$ST/$(echo "$BODY" | jget state)/$(sh_in "$B" 'cat /root/b.txt')" = "200/running/b-two"
check "... the repaired chunk too" same_file "$B" /root/b1 "$T/b1"

# ---- crash recovery when the newest snapshot is damaged ----
C=$(newses)
UC=http://x/v1/sessions/$C
blob c1
blob c2
put "$C" "$T/c1" /root/c1 && sh_in "$C" 'echo c-one > /root/c.txt' >/dev/null
C1=$(snap "$C")
put "$C" "$T/c2" /root/c2 && sh_in "$C" 'echo c-two > /root/c.txt' >/dev/null
C2=$(snap "$C")
keep "$(pack_of c2)"
check "setup: a byte flipped in the chunk of c2" flip_blob c2
IPID=$(api "$UC" | jget init_pid)
kill -9 "$IPID"
for _ in $(seq 100); do [ "$(state_of "$C")" = paused ] && break; sleep 0.1; done
R=$(api "$UC")
echo "# recovery: $R"
check "a lost sandbox whose newest snapshot is damaged: the session is paused, not recovered from it" \
        test "$(echo "$R" | jq -r '"\(.state) \(.sandbox_id) \(.head_snapshot)"')" = "paused null $C2"
check "... its error names the snapshot" says "$R" --arg s "$C2" '.error | contains($s) and test("damaged")'
check "... a recovery event says so" \
        logged "$UC" "$C2" '.kind == "recovery" and .data.from_snapshot == $s and .data.new_sandbox == null and (.data.error | test("damaged"))'
check "... no sandbox directory is left" sandboxes_held
check "... the timeline is whole" test "$(n_snaps "$C")" = 2
req -X POST "$UC/restore" -d "{\"snapshot\":\"$C1\"}"
check "restore to the older intact snapshot while paused (200)" test "$ST/$(echo "$BODY" | jget state)" = 200/paused
req -X POST "$UC/resume"
check "... and resume: the session runs with its files" \
        test "$ST/$(sh_in "$C" 'cat /root/c.txt; test -e /root/c2 || echo no-c2')" = "200/c-one
no-c2"
check "... the intact chunk too" same_file "$C" /root/c1 "$T/c1"

# ---- while spaced is down: a pack cut short (a lost sandbox), a pack removed (a paused
# session). The new spaced loads the cut pack as damaged (its index rebuilt from what
# parses), and never had the removed one open: the objects are missing. ----
D=$(newses)
UD=http://x/v1/sessions/$D
blob d1
put "$D" "$T/d1" /root/d1 && sh_in "$D" 'echo d-one > /root/d.txt' >/dev/null
D1=$(snap "$D")
DP=$(pack_of d1)
DIPID=$(api "$UD" | jget init_pid)
E=$(newses)
UE=http://x/v1/sessions/$E
blob e1
put "$E" "$T/e1" /root/e1 && sh_in "$E" 'echo e-one > /root/e.txt' >/dev/null
E1=$(snap "$E")
EP=$(pack_of e1)
PE=$(api -X POST "$UE/pause" | jget head_snapshot)
rm -rf "$L/parked/$E" "$L/parked/$E.rec"
B_AT=$(where "$B")
kill -9 "$PID"
wait "$PID" 2>/dev/null
PID=
kill -9 "$DIPID"
check "setup: D's sandbox is gone while spaced is down" gone "$DIPID"
keep "$DP"
truncate -s $(($(stat -c %s "$DP") / 2)) "$DP"
keep "$EP"
rm "$EP"
start_daemon --disk-volume-size 0 || exit 1
for _ in $(seq 100); do [ "$(state_of "$D")" = paused ] && break; sleep 0.1; done
R=$(api "$UD")
echo "# recovery at start: $R"
check "a lost sandbox whose snapshot's pack was cut: paused at start, its error naming $D1" \
        says "$R" --arg s "$D1" '.state == "paused" and (.error | contains($s) and test("damaged"))'
check "... a recovery event says so" \
        logged "$UD" "$D1" '.kind == "recovery" and .data.from_snapshot == $s and .data.new_sandbox == null and (.data.error | test("damaged"))'
check "... the other sessions are back as they were" test "$(where "$B")/$(state_of "$A")/$(state_of "$C")/$(state_of "$E")" = "$B_AT/running/running/paused"
check "... no sandbox directory is left" sandboxes_held
req -X POST "$UE/resume"
echo "# resume: $ST $BODY"
check "resume of a session whose snapshot's pack was removed is refused (500) naming $PE" refused "$PE"
check "... it stays paused" test "$(where "$E")" = "paused null null $PE"
repair_all
req -X POST "$UD/resume"
check "after the packs are put back, resume works with the files (the cut pack loads again)" \
        test "$ST/$(sh_in "$D" 'cat /root/d.txt')" = "200/d-one"
check "... the chunk too" same_file "$D" /root/d1 "$T/d1"
req -X POST "$UE/resume"
check "... and the removed one" test "$ST/$(sh_in "$E" 'cat /root/e.txt')" = "200/e-one"
check "... its chunk too" same_file "$E" /root/e1 "$T/e1"
check "with every pack put back the store is whole (space-store verify): nothing else was touched" verify_store

finish corrupt
