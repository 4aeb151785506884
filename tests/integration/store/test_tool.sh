#!/bin/sh
# space-store, the admin tool: every subcommand, its --help, exit codes, messages for bad
# input, corruption seen through the tool, and the progress line on a terminal.
# usage: test_tool.sh PATH-TO-space-store
set -u
T=${1:?usage: test_tool.sh space-store}
W=$(mktemp -d /var/tmp/space-store-tool.XXXXXX)
trap 'rm -rf "$W"' EXIT
export SPACE_STORE="$W/store"
fails=0
check() { # description, then a command that must succeed
        d=$1
        shift
        if "$@"; then echo "ok: $d"; else echo "FAIL: $d"; fails=$((fails + 1)); fi
}
status() { # expected status, command...: runs it, keeps stderr in $W/err
        want=$1
        shift
        "$@" >"$W/out" 2>"$W/err"
        got=$?
        [ "$got" -eq "$want" ] || { echo "  exit $got, wanted $want: $*"; cat "$W/err"; return 1; }
}
has() { grep -q -- "$1" "$2" || { echo "  no \"$1\" in $2:"; cat "$2"; return 1; }; }

mkdir -p "$W/src/sub" "$W/src/empty"
head -c 2000000 /dev/urandom >"$W/src/big"
echo hello >"$W/src/sub/hello"
ln -s ../big "$W/src/sub/link"
ln "$W/src/sub/hello" "$W/src/hard"
mkfifo "$W/src/fifo"
chmod 4755 "$W/src/big"
touch -d @1500000000 "$W/src/sub/hello"

echo "checking --help on the tool and on every subcommand"
check "main --help" status 0 "$T" --help
check "help lists exit codes" has "exit status" "$W/out"
for c in init put get diff log show fork rm verify gc stats push pull remote-gc; do
        check "$c --help" status 0 "$T" "$c" --help
        check "$c --help prints usage" has "usage: space-store $c" "$W/out"
done
check "main --help names the bucket's environment" status 0 "$T" --help
check "  ... SPACE_S3_SECRET_KEY" has "SPACE_S3_SECRET_KEY" "$W/out"

echo "checking usage errors exit 2 with a message"
check "no command" status 2 env -u SPACE_STORE "$T"
check "unknown command" status 2 "$T" frobnicate
check "says unknown" has 'unknown command "frobnicate"' "$W/err"
check "no store given" status 2 env -u SPACE_STORE "$T" log
check "says how to give one" has "SPACE_STORE" "$W/err"
check "put without dir" status 2 "$T" put
check "bad option" status 2 "$T" put --bogus "$W/src"
check "bad reason" status 2 "$T" put --reason sometimes "$W/src"
check "a directory that is no store is not found (3)" status 3 "$T" --store "$W/src" log
check "says not a space store" has "not a space store" "$W/err"
check "missing store is not found (3)" status 3 "$T" --store "$W/nope" log

echo "checking the remote commands' usage errors (no server needed)"
if "$T" push 0000 2>&1 | grep -q "without libcurl"; then
        echo "ok: built without libcurl: push, pull and remote-gc say so"
else
        check "push --jobs past its limit" status 2 "$T" push --jobs 33 0000
        check "pull --grace is push's" status 2 "$T" pull --grace 10 0000
        check "remote-gc --live takes a full id" status 2 "$T" remote-gc --live abcd
        check "pull of a bad id" status 2 env SPACE_S3_ENDPOINT=http://127.0.0.1:9 SPACE_S3_BUCKET=bkt \
                SPACE_S3_ACCESS_KEY=a SPACE_S3_SECRET_KEY=b "$T" pull XYZW
        check "pull without a bucket" status 2 env -u SPACE_S3_ENDPOINT "$T" pull abcd
        check "  says which setting is missing" has "SPACE_S3_ENDPOINT" "$W/err"
        check "  and makes no store" test ! -e "$SPACE_STORE"
        check "a bad endpoint" status 2 env SPACE_S3_ENDPOINT=ftp://x SPACE_S3_BUCKET=bkt SPACE_S3_ACCESS_KEY=a \
                SPACE_S3_SECRET_KEY=b "$T" pull abcd
fi

echo "checking put, log, show, get"
check "init" status 0 "$T" init
check "put" status 0 "$T" put "$W/src" --session ses_test --label first
A=$(cat "$W/out")
check "put prints a 64-hex id" sh -c "echo '$A' | grep -Eq '^[0-9a-f]{64}$'"
check "log lists it" status 0 "$T" log
check "log shows the id" has "$A" "$W/out"
check "log shows the label" has "ses_test first" "$W/out"
check "show by prefix" status 0 "$T" show "$(echo "$A" | cut -c1-8)"
check "show is json with the session" has '"session":"ses_test"' "$W/out"
check "get" status 0 "$T" get "$A" "$W/out1"
check "content restored" cmp "$W/src/big" "$W/out1/big"
check "mode restored" sh -c "[ \"\$(stat -c %a '$W/out1/big')\" = 4755 ]"
check "mtime restored" sh -c "[ \"\$(stat -c %Y '$W/out1/sub/hello')\" = 1500000000 ]"
check "symlink restored" sh -c "[ \"\$(readlink '$W/out1/sub/link')\" = ../big ]"
check "hard link restored" sh -c "[ \"\$(stat -c %i '$W/out1/hard')\" = \"\$(stat -c %i '$W/out1/sub/hello')\" ]"
check "fifo restored" test -p "$W/out1/fifo"
check "empty dir restored" test -d "$W/out1/empty"

echo "checking incremental put and diff"
echo changed >>"$W/src/sub/hello"
rm "$W/src/fifo"
echo new >"$W/src/new"
check "put --parent --json" status 0 "$T" put "$W/src" --parent "$A" --json
B=$(sed -E 's/.*"snapshot":"([0-9a-f]{64})".*/\1/' "$W/out")
check "json: only the changed and the new file were read" has '"files_read":2' "$W/out"
check "diff" status 0 "$T" diff "$A" "$B"
check "diff: modified file" has "^M sub/hello" "$W/out"
check "diff: hard link name modified too" has "^M hard" "$W/out"
check "diff: removed fifo" has "^D fifo" "$W/out"
check "diff: added file" has "^A new" "$W/out"
check "diff: big unchanged" sh -c "! grep -q ' big$' '$W/out'"

echo "checking get refuses bad targets and unknown snapshots"
check "non-empty target fails (1)" status 1 "$T" get "$A" "$W/out1"
check "says not empty" has "not empty" "$W/err"
check "malformed snapshot id is a usage error (2)" status 2 "$T" show xyz
check "says what an id is" has "not a snapshot id" "$W/err"
check "unknown snapshot is not found (3)" status 3 "$T" get 0123456789 "$W/out2"
check "says no snapshot" has "no snapshot 0123456789" "$W/err"
check "put of a missing dir is not found (3)" status 3 "$T" put "$W/missing"

echo "checking fork, stats, rm, gc"
check "fork" status 0 "$T" fork "$B" --label branch
F=$(cat "$W/out")
check "fork shares the root" sh -c "[ \"\$('$T' show $F | sed -E 's/.*\"root\":\"([0-9a-f]+)\".*/\1/')\" = \"\$('$T' show $B | sed -E 's/.*\"root\":\"([0-9a-f]+)\".*/\1/')\" ]"
check "stats" status 0 "$T" stats --json
check "stats counts 3 snapshots" has '"snapshots":3' "$W/out"
check "rm" status 0 "$T" rm "$A"
num() { sed -En "s/.*\"$1\":([0-9]+).*/\1/p" "$2"; } # KEY FILE: a number of a JSON line
files() { find "$W/store" -type f -printf '%P %s\n' | sort; }
"$T" stats --json >"$W/stats.before"
files >"$W/files.before"
check "gc --dry-run" status 0 "$T" gc --dry-run --json
cp "$W/out" "$W/dry"
check "dry run says it is one" has '"dry_run":true' "$W/dry"
check "dry run finds A's objects to remove" test "$(num objects_removed "$W/dry")" -gt 0
"$T" stats --json >"$W/stats.after"
check "dry run removes nothing: stats unchanged" cmp "$W/stats.before" "$W/stats.after"
files >"$W/files.after"
check "dry run removes nothing: every store file still there, same size" cmp "$W/files.before" "$W/files.after"
sleep 0.1
check "gc" status 0 "$T" gc --json
check "gc removed objects" sh -c "! grep -q '\"objects_removed\":0,' '$W/out'"
check "gc removed what the dry run said it would" test "$(num objects_removed "$W/out")" = "$(num objects_removed "$W/dry")"
"$T" stats --json >"$W/stats.gc"
before=$(num objects "$W/stats.before") removed=$(num objects_removed "$W/dry") after=$(num objects "$W/stats.gc")
check "stats count that many objects fewer ($before - $removed = $after)" test "$((${before:-0} - ${removed:-0}))" = "${after:-none}"
check "no temp packs are left" sh -c "! find '$W/store/packs' -name '.t-*' | grep -q ."
check "A is not listed" status 3 "$T" show "$A"
check "B still restores" status 0 "$T" get "$B" "$W/out4"
check "verify clean" status 0 "$T" verify

echo "checking corruption inside a pack is named by verify (exit 4) and refused by get (exit 4)"
pack=$(find "$W/store/packs" -type f -name '*.pack' -size +100k | head -1)
name=$(basename "$pack")
chmod u+w "$pack"
printf 'X' | dd of="$pack" bs=1 seek=1000 conv=notrunc 2>/dev/null
check "verify finds it" status 4 "$T" verify
check "verify names the object and its pack" sh -c "grep -Eq 'object [0-9a-f]{64} is corrupt \\(pack $name\\)' '$W/out'"
check "get refuses" status 4 "$T" get "$B" "$W/out5"
check "get names it" sh -c "grep -Eq 'object [0-9a-f]{64} is corrupt \\(pack $name\\)' '$W/err'"
echo garbage >"$W/store/packs/garbage"
check "verify reports a foreign file" status 4 "$T" verify
check "names the foreign file" has "packs/garbage" "$W/out"

echo "checking the progress line appears on a terminal and not in a pipe"
if command -v script >/dev/null 2>&1; then
        check "progress on a tty" sh -c "script -qec \"'$T' put '$W/src'\" /dev/null | tr '\r' '\n' | grep -q 'put: '"
fi
check "no progress in a pipe" sh -c "'$T' put '$W/src' 2>&1 >/dev/null | grep -c 'put: ' | grep -q '^0$'"

echo "$fails failed"
[ "$fails" -eq 0 ]
