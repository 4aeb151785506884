#!/bin/sh
# Delta chunks through space-store: a second capture of an image with a few changed
# words (fixed chunks, the first capture as parent) stores those chunks as deltas, in a
# pack of version 2, and every snapshot restores bit-exact — also after the first one is
# removed and collected (its chunks are the deltas' bases) and after a flipped byte in
# a delta is caught by verify.
# usage: test_delta.sh PATH-TO-space-store
set -u
T=${1:?usage: test_delta.sh space-store}
W=$(mktemp -d /var/tmp/space-store-delta.XXXXXX)
trap 'rm -rf "$W"' EXIT
export SPACE_STORE="$W/store"
fails=0
check() { # description, then a command that must succeed
        d=$1
        shift
        if "$@"; then echo "ok: $d"; else echo "FAIL: $d"; fails=$((fails + 1)); fi
}
jnum() { sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p" "$2"; }
# a word (4 bytes) at byte offset $1 of the image
poke() { printf '%s' "$2" | dd of="$W/img/ram" bs=1 seek="$1" conv=notrunc status=none; }

# an 8 MiB "RAM image": 64 KiB chunks, each half text and half random
mkdir -p "$W/img"
i=0
while [ $i -lt 128 ]; do
        yes "page $i of a guest kernel's memory" | head -c 32768
        head -c 32768 /dev/urandom
        i=$((i + 1))
done >"$W/img/ram"
cp "$W/img/ram" "$W/v1"

echo "checking a first capture with fixed 64 KiB chunks, then one after a few changed words"
check "put --fixed-chunk 65536" sh -c "'$T' put '$W/img' --fixed-chunk 65536 --json >'$W/p1'"
S1=$(sed -n 's/.*"snapshot":"\([0-9a-f]*\)".*/\1/p' "$W/p1")
check "the first capture has an id" test -n "$S1"
check "the first capture made no deltas" test "$(jnum deltas_written "$W/p1")" = 0
poke 100000 ABCD
poke 3000000 EFGH
poke 7000000 IJKL
cp "$W/img/ram" "$W/v2"
check "put --parent stores the three changed chunks as deltas" \
        sh -c "'$T' put '$W/img' --parent $S1 --fixed-chunk 65536 --json >'$W/p2' && test \"\$(sed -n 's/.*\"deltas_written\":\([0-9]*\).*/\1/p' '$W/p2')\" = 3"
S2=$(sed -n 's/.*"snapshot":"\([0-9a-f]*\)".*/\1/p' "$W/p2")
B2=$(jnum bytes_written "$W/p2")
echo "  second capture: $B2 bytes written (three plain chunks would be > 100,000)"
check "... and writes a few KB, not three chunks" test "$B2" -lt 20000
check "a pack of version 2 holds them" sh -c "for p in '$SPACE_STORE'/packs/*.pack; do [ \"\$(od -An -tu1 -j4 -N1 \"\$p\" | tr -d ' ')\" = 2 ] && exit 0; done; exit 1"
check "--no-delta stores a changed chunk plain" \
        sh -c "cp '$W/img/ram' '$W/ram.keep'; printf MNOP | dd of='$W/img/ram' bs=1 seek=5000000 conv=notrunc status=none && '$T' put '$W/img' --parent $S2 --fixed-chunk 65536 --no-delta --json >'$W/p3' && test \"\$(sed -n 's/.*\"deltas_written\":\([0-9]*\).*/\1/p' '$W/p3')\" = 0; cp '$W/ram.keep' '$W/img/ram'"
check "both snapshots restore bit-exact" sh -c "'$T' get $S1 '$W/g1' --no-owner && cmp '$W/g1/ram' '$W/v1' && '$T' get $S2 '$W/g2' --no-owner && cmp '$W/g2/ram' '$W/v2'"
check "verify finds nothing wrong" "$T" verify

echo "checking the first snapshot removed and collected: its chunks stay as bases"
check "rm the first snapshot, gc" sh -c "'$T' rm $S1 && '$T' gc >/dev/null"
check "the second still restores bit-exact" sh -c "rm -rf '$W/g2' && '$T' get $S2 '$W/g2' --no-owner && cmp '$W/g2/ram' '$W/v2'"
check "verify still finds nothing wrong, and counts the bases as reachable" \
        sh -c "'$T' verify >'$W/v0.out' 2>&1 && grep -q ' 0 unreachable' '$W/v0.out'"

echo "checking a damaged delta is caught"
# the newest pack of version 2 is the second capture's; its first block is a delta (the
# capture's chunks are written before its trees and record), whose zstd frame starts
# after the block header (16), its table (5) and the two hashes (64): overwrite a byte of
# the frame's magic number (28 b5 2f fd)
P2=$(for p in $(ls -t "$SPACE_STORE"/packs/*.pack); do
        [ "$(od -An -tu1 -j4 -N1 "$p" | tr -d ' ')" = 2 ] && { echo "$p"; break; }
done)
check "the delta block's frame is where the format says" \
        test "$(od -An -tx1 -j$((16 + 16 + 5 + 64)) -N4 "$P2" | tr -d ' ')" = 28b52ffd
chmod u+w "$P2"
printf X | dd of="$P2" bs=1 seek=$((16 + 16 + 5 + 64 + 2)) conv=notrunc status=none
check "verify reports the damaged delta" sh -c "! '$T' verify >'$W/v.out' 2>&1 && grep -q 'delta' '$W/v.out'"
check "get refuses it (exit 4)" sh -c "'$T' get $S2 '$W/g3' --no-owner 2>/dev/null; test \$? = 4"

[ "$fails" -eq 0 ] && echo "all delta checks passed" || echo "$fails check(s) failed"
exit "$([ "$fails" -eq 0 ] && echo 0 || echo 1)"
