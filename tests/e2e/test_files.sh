#!/bin/bash
# End to end: files written through the API are seen by commands and the other way,
# byte for byte; directories copy both ways; bad paths fail cleanly and can't leave the
# sandbox's root.
. "$(dirname "$0")/lib.sh"

id=$(new_sandbox) && pass "created $id" || { fail "create"; finish; }

say "API write -> command read"
echo "written by the API $$" >"$TMPD/a.txt"
sp cp "$TMPD/a.txt" "$id:/root/a.txt" && pass "space cp to the sandbox" || fail "space cp to the sandbox"
out=$(sp exec "$id" -- cat /root/a.txt </dev/null)
expect_eq "cat inside sees it" "$out" "written by the API $$"
chmod 0750 "$TMPD/a.txt"
sp cp "$TMPD/a.txt" "$id:/root/mode.txt"
out=$(sp exec "$id" -- stat -c %a /root/mode.txt </dev/null)
expect_eq "the file mode is kept" "$out" "750"

say "command write -> API read"
sp exec "$id" -- sh -c 'echo "written inside" > /root/b.txt' </dev/null
sp cp "$id:/root/b.txt" "$TMPD/b.txt" && pass "space cp from the sandbox" || fail "space cp from the sandbox"
expect_eq "the host copy has the content" "$(cat "$TMPD/b.txt" 2>/dev/null)" "written inside"
out=$(sp cp "$id:/root/b.txt" -)
expect_eq "space cp to stdout" "$out" "written inside"
echo "from stdin" | sp cp - "$id:/root/c.txt"
out=$(sp exec "$id" -- cat /root/c.txt </dev/null)
expect_eq "space cp from stdin" "$out" "from stdin"
mkdir -p "$TMPD/into"
sp cp "$id:/root/b.txt" "$TMPD/into"
expect_eq "copy into an existing host directory keeps the name" "$(cat "$TMPD/into/b.txt" 2>/dev/null)" "written inside"
sp cp "$TMPD/a.txt" "$id:/tmp/"
out=$(sp exec "$id" -- cat /tmp/a.txt </dev/null)
expect_eq "copy into a sandbox directory keeps the name" "$out" "written by the API $$"

say "binary data, 5 MiB, both ways"
head -c $((5 << 20)) /dev/urandom >"$TMPD/big"
want=$(sha256sum <"$TMPD/big" | cut -d' ' -f1)
sp cp "$TMPD/big" "$id:/root/big"
got=$(sp exec "$id" -- sha256sum /root/big </dev/null | cut -d' ' -f1)
expect_eq "sha256 inside matches" "$got" "$want"
sp cp "$id:/root/big" "$TMPD/big.back"
expect_eq "sha256 after the round trip matches" "$(sha256sum <"$TMPD/big.back" | cut -d' ' -f1)" "$want"

say "directories"
mkdir -p "$TMPD/tree/sub/deeper"
echo one >"$TMPD/tree/one"
echo two >"$TMPD/tree/sub/deeper/two"
sp cp "$TMPD/tree" "$id:/root/tree" && pass "directory upload" || fail "directory upload"
out=$(sp exec "$id" -- cat /root/tree/one /root/tree/sub/deeper/two </dev/null)
expect_eq "files of the uploaded tree" "$out" "one
two"
sp exec "$id" -- sh -c 'mkdir -p /root/out/x && echo made > /root/out/x/f' </dev/null
sp cp "$id:/root/out" "$TMPD/out" && pass "directory download" || fail "directory download"
expect_eq "file of the downloaded tree" "$(cat "$TMPD/out/x/f" 2>/dev/null)" "made"

say "errors"
err=$(sp cp "$id:/root/nope.txt" "$TMPD/nope" 2>&1); rc=$?
expect_eq "a missing sandbox file: exit 1" "$rc" "1"
case $err in "space: "*) pass "message: $err" ;; *) fail "message: '$err'" ;; esac
[ ! -e "$TMPD/nope" ] && pass "no host file made for a failed copy" || fail "a failed copy left $TMPD/nope"
err=$(sp cp "$TMPD/a.txt" "$id:/no/such/dir/a.txt" 2>&1); rc=$?
expect_eq "upload into a missing directory: exit 1" "$rc" "1"
sp cp --parents "$TMPD/a.txt" "$id:/new/dir/a.txt" && pass "--parents makes the directories" || fail "--parents"
err=$(sp cp "$TMPD/a.txt" "ses_ffffffffffffffff:/root/a" 2>&1); rc=$?
expect_eq "an unknown session: exit 1" "$rc" "1"

say "paths can't leave the sandbox root"
secret="host-secret-$$-$RANDOM"
echo "$secret" >/tmp/space-e2e-secret.$$
# the sandbox has a file of its own at the same path: each copy below must work and
# bring that one (resolved in the sandbox's root), not merely fail
sp exec "$id" -- sh -c "echo inside-$$ >/tmp/space-e2e-secret.$$" </dev/null
out=$(sp cp "$id:/../../../../tmp/space-e2e-secret.$$" - 2>/dev/null)
[ "$out" != "$secret" ] && pass "/../../tmp/<host file> is not the host's file" || fail "read a host file through ../"
expect_eq "... it is the sandbox's file at that path ('..' of / is /)" "$out" "inside-$$"
sp exec "$id" -- ln -s /tmp/space-e2e-secret.$$ /root/link </dev/null
out=$(sp cp "$id:/root/link" - 2>/dev/null)
[ "$out" != "$secret" ] && pass "a symlink to a host path is resolved inside the sandbox" || fail "read a host file through a symlink"
expect_eq "... to the sandbox's own file" "$out" "inside-$$"
sp exec "$id" -- ln -s / /root/rootlink </dev/null
echo "pwned" | sp cp - "$id:/root/rootlink/tmp/space-e2e-escape.$$" 2>/dev/null
[ ! -e "/tmp/space-e2e-escape.$$" ] && pass "writing through a symlink to / stays inside" || fail "wrote /tmp/space-e2e-escape.$$ on the host"
expect_eq "... the write landed in the sandbox's /tmp" "$(sp exec "$id" -- cat /tmp/space-e2e-escape.$$ </dev/null 2>&1)" "pwned"
rm -f /tmp/space-e2e-secret.$$ /tmp/space-e2e-escape.$$

sp rm "$id" >/dev/null && pass "rm $id" || fail "rm $id"
finish
