#!/bin/sh
# store.remote: the remote tier (issue #17) through space-store push / pull / remote-gc
# against the private Swift of tests/s3/s3-server:
#  1. a tree of random files (some MBs, modes, owners, a symlink, a hard link, an empty
#     directory) pushed from store A, pulled into an empty store B and restored: the same
#     bytes and metadata; a second push sends only the record;
#  2. a child snapshot's push sends exactly its new objects (a chunk, three trees, the
#     record), and a pull of it into B fetches just those;
#  3. an object overwritten in the bucket (garbage, then another object's valid body) makes
#     a pull fail with exit 4 naming it, and the store lists nothing; put back, it pulls;
#  4. the proxy stopped during a push: the push fails, the bucket has no record, B cannot
#     pull it; a second push sends only what is left and B's pull restores it; the same
#     after a push killed with SIGKILL part way;
#  5. remote GC with two stores sharing a bucket: exactly the objects and record only a
#     dropped snapshot reached are deleted once past the grace, what B's live snapshot and
#     A's live one need stays, a young unlisted push stays; a later push of the dropped
#     content uploads it again (the known list does not vouch for deleted objects).
# Usage: test_remote.sh SPACE_STORE_BINARY
set -eu
ST=$1
here=$(cd "$(dirname "$0")" && pwd)
srv=$here/../../s3/s3-server
command -v swift-proxy-server >/dev/null || { echo "SKIP: swift is not installed"; exit 77; }
T=$(mktemp -d /tmp/space-remote.XXXXXX)
trap 'sh "$srv" stop "$T/srv" >/dev/null 2>&1 || true; rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
out=$(sh "$srv" start "$T/srv")
port=$(echo "$out" | sed -n 's|.*endpoint=http://127.0.0.1:\([0-9]*\).*|\1|p')
[ -n "$port" ] || fail "no endpoint in: $out"
export SPACE_S3_ENDPOINT=http://127.0.0.1:$port SPACE_S3_BUCKET=space-remote SPACE_S3_ACCESS_KEY=test:tester \
  SPACE_S3_SECRET_KEY=testing SPACE_S3_REGION=us-east-1
E=http://test%3Atester:testing@127.0.0.1:$port
s3() { curl -s -m 10 --aws-sigv4 aws:amz:us-east-1:s3 -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' "$@"; }
mkbucket() {
  i=0
  until c=$(s3 -o /dev/null -w "%{http_code}" -X PUT "$E/$1"); [ "$c" = 200 ]; do
    i=$((i+1)); [ $i -lt 30 ] || fail "create bucket $1: HTTP $c"; sleep 0.5
  done
}
# keys under a prefix of a bucket, one a line, sorted (ListObjectsV2, 1000 a page is enough here)
keys() { s3 "$E/$1?list-type=2&prefix=$(echo "$2" | sed 's|/|%2F|g')" | tr '<' '\n' | sed -n 's/^Key>//p' | sort; }
code() { s3 -o /dev/null -w '%{http_code}' "$@"; }
jget() { sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p"; }
# what materialize must keep: type, mode, owner, size, mtime, link target, link count; and bytes
meta() { (cd "$1" && find . -printf '%p %y %m %U:%G %s %T@ %l %n\n' | sort); }
same_tree() {
  [ "$(meta "$1")" = "$(meta "$2")" ] || { meta "$1" > "$T/m1"; meta "$2" > "$T/m2"; diff "$T/m1" "$T/m2" | head; return 1; }
  diff -r --no-dereference "$1" "$2" >/dev/null
}
mkbucket space-remote
# Random files: MBs in a few, many small ones, modes and owners, links.
tree=$T/tree
mkdir -p "$tree/src/lib" "$tree/data" "$tree/empty"
head -c 3000000 /dev/urandom > "$tree/data/blob1"
head -c 2500000 /dev/urandom > "$tree/data/blob2"
for i in $(seq 1 40); do head -c $((i * 700)) /dev/urandom > "$tree/src/f$i"; done
head -c 20000 /dev/urandom > "$tree/src/lib/edit-me"
printf 'text\n' > "$tree/src/lib/readme"
chmod 0751 "$tree/src/lib"; chmod 4755 "$tree/src/f1"; chmod 0600 "$tree/src/f2"
chown 1234:5678 "$tree/src/f3" 2>/dev/null || true
ln -s ../data/blob1 "$tree/src/link"
ln "$tree/src/f4" "$tree/src/f4-hard"
touch -d '2001-02-03 04:05:06' "$tree/data/blob2" "$tree/empty"
A=$T/A B=$T/B
a1=$("$ST" --store "$A" put "$tree")

echo "# 1. push from A, pull into an empty B, restore"
"$ST" --quiet --store "$A" push "$a1" --json > "$T/p1"
n1=$(jget objects < "$T/p1"); s1=$(jget objects_sent < "$T/p1")
[ "$n1" -gt 40 ] && [ "$s1" = "$n1" ] || fail "first push: $(cat "$T/p1")"
[ "$(code -I "$E/space-remote/snapshots/$a1")" = 200 ] || fail "no snapshots/$a1 in the bucket"
"$ST" --quiet --store "$B" pull "$a1" --json > "$T/l1"
[ "$(jget objects_fetched < "$T/l1")" = "$n1" ] || fail "pull: $(cat "$T/l1")"
"$ST" --store "$B" log | grep -q "^$a1 " || fail "B does not list $a1"
"$ST" --store "$B" get "$a1" "$T/r1"
same_tree "$tree" "$T/r1" || fail "B's restore differs from the tree"
"$ST" --store "$B" verify >/dev/null 2>&1 || fail "B does not verify"
"$ST" --quiet --store "$A" push "$a1" --json > "$T/p1b"
[ "$(jget objects_sent < "$T/p1b")" = 1 ] || fail "second push sent more than the record: $(cat "$T/p1b")"
# a pull of a listed snapshot is nothing to do; a prefix from the bucket works
"$ST" --quiet --store "$B" pull "$(echo "$a1" | cut -c1-10)" || fail "pull by prefix"

echo "# 2. a child snapshot's push sends only its new objects"
head -c 20000 /dev/urandom > "$tree/src/lib/edit-me"
a2=$("$ST" --store "$A" put "$tree" --parent "$a1")
"$ST" --quiet --store "$A" push "$a2" --json > "$T/p2"
# the changed file (one chunk), src/lib and src and the root (three trees), the record
[ "$(jget objects_sent < "$T/p2")" = 5 ] || fail "child push: $(cat "$T/p2")"
[ "$(jget objects_known < "$T/p2")" = $(( $(jget objects < "$T/p2") - 5 )) ] || fail "child push known: $(cat "$T/p2")"
"$ST" --quiet --store "$B" pull "$a2" --json > "$T/l2"
[ "$(jget objects_fetched < "$T/l2")" = 5 ] || fail "child pull fetched other than 5: $(cat "$T/l2")"
"$ST" --store "$B" get "$a2" "$T/r2"
same_tree "$tree" "$T/r2" || fail "child restore differs"

echo "# 3. an object corrupted in the bucket: the pull fails, nothing is listed"
chunk=$(sha256sum "$tree/src/lib/edit-me" | cut -c1-64)
key=space-remote/objects/$chunk
s3 -o "$T/saved" "$E/$key"
[ -s "$T/saved" ] || fail "cannot fetch $key"
printf 'these are not the bytes' > "$T/junk"
s3 -o /dev/null -T "$T/junk" "$E/$key"
rc=0; "$ST" --quiet --store "$T/C" pull "$a2" 2> "$T/err" || rc=$?
[ $rc = 4 ] || fail "corrupt pull exit $rc: $(cat "$T/err")"
grep -q "$chunk" "$T/err" || fail "the message does not name the object: $(cat "$T/err")"
[ -z "$("$ST" --store "$T/C" log)" ] || fail "C lists a snapshot after a failed pull"
# a valid object of ours, but another one: the hash check refuses it
other=$(sha256sum "$tree/src/f10" | cut -c1-64)
s3 -o "$T/otherbody" "$E/space-remote/objects/$other"
s3 -o /dev/null -T "$T/otherbody" "$E/$key"
rc=0; "$ST" --quiet --store "$T/C" pull "$a2" 2> "$T/err" || rc=$?
[ $rc = 4 ] && grep -q "does not match its hash" "$T/err" || fail "swapped object: exit $rc: $(cat "$T/err")"
[ -z "$("$ST" --store "$T/C" log)" ] || fail "C lists a snapshot after a failed pull"
"$ST" --store "$T/C" stats --json | grep -q '"objects":0,' || fail "C kept objects of a failed pull"
s3 -o /dev/null -T "$T/saved" "$E/$key"
"$ST" --quiet --store "$T/C" pull "$a2" || fail "pull after the object was put back"
"$ST" --store "$T/C" get "$a2" "$T/r3" && same_tree "$tree" "$T/r3" || fail "restore after repair differs"

echo "# 4. the server stopped during a push, then a second push finishes"
mkdir -p "$tree/many"
for i in $(seq 1 300); do head -c 9000 /dev/urandom > "$tree/many/m$i"; done
a3=$("$ST" --store "$A" put "$tree" --parent "$a2")
known=$(ls "$A"/remote/*.known)
k0=$(stat -c %s "$known")
rc=0; "$ST" --quiet --store "$A" push "$a3" --jobs 1 --json > "$T/p3" 2> "$T/err3" & pid=$!
i=0
while [ $(( $(stat -c %s "$known") - k0 )) -lt $((40 * 40)) ]; do
  i=$((i+1)); [ $i -lt 300 ] || fail "the push did not get going"; sleep 0.05
done
sh "$srv" stop-proxy "$T/srv"
wait $pid || rc=$?
[ $rc != 0 ] || fail "the push succeeded with the server down: $(cat "$T/p3")"
echo "#   the push failed as it should: $(tail -1 "$T/err3")"
sh "$srv" start-proxy "$T/srv"
i=0
until [ "$(code -I "$E/space-remote/snapshots/$a1")" = 200 ]; do
  i=$((i+1)); [ $i -lt 100 ] || fail "the proxy did not come back"; sleep 0.2
done
[ "$(code -I "$E/space-remote/snapshots/$a3")" = 404 ] || fail "a failed push left its record"
rc=0; "$ST" --quiet --store "$B" pull "$a3" 2>/dev/null || rc=$?
[ $rc = 3 ] || fail "pull of a half-pushed snapshot: exit $rc"
"$ST" --quiet --store "$A" push "$a3" --json > "$T/p3b"
n3=$(jget objects < "$T/p3b"); s3n=$(jget objects_sent < "$T/p3b")
[ "$s3n" -gt 1 ] && [ "$s3n" -lt $((300 - 30)) ] || fail "second push sent $s3n: $(cat "$T/p3b")"
"$ST" --quiet --store "$B" pull "$a3" --json > "$T/l3"
"$ST" --store "$B" verify >/dev/null 2>&1 || fail "B does not verify after the pull"
"$ST" --store "$B" get "$a3" "$T/r4"
same_tree "$tree" "$T/r4" || fail "restore of the snapshot pushed twice differs"

echo "# 4b. a push killed (SIGKILL) part way, then a second push finishes"
mkdir -p "$tree/more"
for i in $(seq 1 200); do head -c 9000 /dev/urandom > "$tree/more/m$i"; done
a4=$("$ST" --store "$A" put "$tree" --parent "$a3")
k0=$(stat -c %s "$known")
"$ST" --quiet --store "$A" push "$a4" --jobs 1 >/dev/null 2>&1 & pid=$!
i=0
while [ $(( $(stat -c %s "$known") - k0 )) -lt $((30 * 40)) ]; do
  i=$((i+1)); [ $i -lt 300 ] || fail "the push to kill did not get going"; sleep 0.05
done
kill -9 $pid; wait $pid 2>/dev/null || true
[ "$(code -I "$E/space-remote/snapshots/$a4")" = 404 ] || fail "a killed push left its record"
"$ST" --quiet --store "$A" push "$a4" --json > "$T/p4k"
s4=$(jget objects_sent < "$T/p4k")
[ "$s4" -gt 1 ] && [ "$s4" -lt $((200 - 20)) ] || fail "push after the kill sent $s4: $(cat "$T/p4k")"
"$ST" --quiet --store "$B" pull "$a4"
"$ST" --store "$B" get "$a4" "$T/r4k"
same_tree "$tree" "$T/r4k" || fail "restore of the snapshot pushed after a kill differs"

echo "# 5. remote GC with two stores sharing a bucket"
export SPACE_S3_BUCKET=space-gc
mkbucket space-gc
G=16 # grace (s): pushes and the GC use the same; a push must end within G/2
g1=$T/g1 g2=$T/g2
mkdir -p "$g1/d" "$g2"
head -c 20000 /dev/urandom > "$g1/common"; cp "$g1/common" "$g2/common"
head -c 20000 /dev/urandom > "$g1/d/only-x1"
head -c 20000 /dev/urandom > "$g2/only-b"
x1=$("$ST" --store "$A" put "$g1")
cp -a "$g1" "$T/g1-x1" # x1's files, to push the same content again after the GC
"$ST" --quiet --store "$A" push "$x1" --grace $G
rm "$g1/d/only-x1"; head -c 20000 /dev/urandom > "$g1/d/only-x2"
x2=$("$ST" --store "$A" put "$g1" --parent "$x1")
"$ST" --quiet --store "$A" push "$x2" --grace $G
b1=$("$ST" --store "$T/B2" put "$g2")
"$ST" --quiet --store "$T/B2" push "$b1" --grace $G
"$ST" --store "$A" rm "$x1"
sha() { sha256sum "$1" | cut -c1-64; }
# what only x1 reached: its file's chunk, its d/ tree and root tree (x2 has others), its record
before=$(keys space-gc objects/)
sleep $((G + 4)) # LastModified is whole seconds (rounded up), the cutoff is taken a little later
# a push younger than the grace, of a snapshot no one lists: kept
mkdir -p "$T/g3"; head -c 20000 /dev/urandom > "$T/g3/young"
y=$("$ST" --store "$T/Y" put "$T/g3")
"$ST" --quiet --store "$T/Y" push "$y" --grace $G
# GC from A: A's listed snapshots (a1, a2, a3 in the other bucket, x2) and B's b1 are live
"$ST" --store "$A" remote-gc --grace $G --live "$b1" --json > "$T/gc1"
cat "$T/gc1"
[ "$(jget objects_deleted < "$T/gc1")" = 3 ] || fail "remote gc deleted other than 3 objects: $(cat "$T/gc1")"
[ "$(jget snapshots_deleted < "$T/gc1")" = 1 ] || fail "remote gc deleted other than x1's record"
[ "$(jget objects_young < "$T/gc1")" = 2 ] && [ "$(jget snapshots_young < "$T/gc1")" = 1 ] ||
  fail "the young push was not kept as young: $(cat "$T/gc1")"
after=$(keys space-gc objects/)
deleted=$(echo "$before" | while read -r k; do echo "$after" | grep -qx "$k" || echo "$k"; done)
echo "$deleted" | grep -qx "objects/$(sha "$T/g1-x1/d/only-x1")" || fail "x1's own chunk was not deleted"
echo "$deleted" | grep -qx "objects/$(sha "$T/g1/common")" && fail "deleted the shared chunk"
[ "$(echo "$deleted" | wc -l)" = 3 ] || fail "deleted: $deleted"
[ "$(code -I "$E/space-gc/snapshots/$x1")" = 404 ] || fail "x1's record is still there"
for s in "$x2" "$b1" "$y"; do [ "$(code -I "$E/space-gc/snapshots/$s")" = 200 ] || fail "record $s deleted"; done
# every live snapshot still pulls whole into an empty store; x1 does not
for s in "$x2" "$b1"; do
  rm -rf "$T/E"; "$ST" --quiet --store "$T/E" pull "$s" || fail "pull $s after the GC"
  "$ST" --store "$T/E" verify >/dev/null 2>&1 || fail "verify $s after the GC"
done
rm -rf "$T/E" "$T/rb"; "$ST" --quiet --store "$T/E" pull "$b1" && "$ST" --store "$T/E" get "$b1" "$T/rb"
same_tree "$g2" "$T/rb" || fail "b1 restored after the GC differs"
rc=0; "$ST" --quiet --store "$T/E" pull "$x1" 2>/dev/null || rc=$?
[ $rc = 3 ] || fail "pull of a collected snapshot: exit $rc"
# a second GC finds nothing more; a live snapshot nowhere stops it before it deletes
"$ST" --store "$A" remote-gc --grace $G --live "$b1" --json | grep -q '"objects_deleted":0,' || fail "second gc deleted"
rc=0; "$ST" --store "$A" remote-gc --grace $G --live "$(printf '%064d' 7)" 2> "$T/err5" || rc=$?
[ $rc != 0 ] && grep -q "nothing deleted" "$T/err5" || fail "a missing live snapshot: exit $rc: $(cat "$T/err5")"
# A's known list still names x1's deleted objects, but their uploads are older than half
# the grace: a push of the same content (the same trees and chunk) sends them again
x4=$("$ST" --store "$A" put "$T/g1-x1")
"$ST" --quiet --store "$A" push "$x4" --grace $G --json > "$T/p4"
[ "$(jget objects_sent < "$T/p4")" = "$(jget objects < "$T/p4")" ] || fail "push after gc: $(cat "$T/p4")"
rm -rf "$T/E" "$T/r5"; "$ST" --quiet --store "$T/E" pull "$x4" || fail "pull of a snapshot pushed after the GC"
"$ST" --store "$T/E" get "$x4" "$T/r5" && same_tree "$T/g1-x1" "$T/r5" || fail "x4 restored differs"
echo "PASS"
