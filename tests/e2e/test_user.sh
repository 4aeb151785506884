#!/bin/bash
# End to end (#15 item 5): the base template has the unprivileged user "user" (uid 1000,
# home /home/user, bash); `space exec -u user` runs as it, with its HOME, groups and home
# as the cwd, and without the rights of root; `space cp -u user` gives it the files;
# root stays the default. On ns and gvisor, and on microvm when this host can run one.
. "$(dirname "$0")/lib.sh"

one_runtime() { # RUNTIME
        rt=$1
        id=$(new_sandbox --template base --runtime "$rt" --snapshot-interval 0) && pass "$rt: created $id" ||
                { fail "$rt: create"; return; }
        expect_eq "$rt: /etc/passwd has user" "$(sp exec "$id" -- grep '^user:' /etc/passwd </dev/null)" \
                "user:x:1000:1000::/home/user:/bin/bash"
        expect_eq "$rt: its home belongs to it, 755" "$(sp exec "$id" -- stat -c '%U:%G %a' /home/user </dev/null)" "user:user 755"
        expect_eq "$rt: exec -u user: id, HOME, USER, SHELL, cwd" \
                "$(sp exec -u user "$id" -- bash -c 'echo "$(id -u):$(id -g):$(id -un) $HOME $USER $SHELL $PWD"' </dev/null)" \
                "1000:1000:user /home/user user /bin/bash /home/user"
        expect_eq "$rt: exec -u 1000 is the same user" "$(sp exec -u 1000 "$id" -- id -un </dev/null)" user
        expect_eq "$rt: without -u: root" "$(sp exec "$id" -- sh -c 'echo "$(id -u) $HOME $PWD"' </dev/null)" "0 /root /"
        out=$(sp exec -u user "$id" -- sh -c 'echo x > /root/nope' </dev/null 2>&1)
        check "$rt: user cannot write root's /root (exit code $?)" test "$?" -ne 0
        check "$rt: ... permission denied" grep -q "ermission denied" <<<"$out"
        echo "for the user" >"$TMPD/u.txt"
        sp cp -u user "$TMPD/u.txt" "$id:/home/user/u.txt" && pass "$rt: cp -u user" || fail "$rt: cp -u user"
        expect_eq "$rt: the copied file is the user's" "$(sp exec "$id" -- stat -c %U /home/user/u.txt </dev/null)" user
        expect_eq "$rt: and the user may change it" \
                "$(sp exec -u user "$id" -- sh -c 'echo more >> u.txt && cat u.txt' </dev/null)" "$(printf 'for the user\nmore')"
        out=$(sp exec -u nobody-here "$id" -- true </dev/null 2>&1)
        expect_eq "$rt: an unknown user: exit 1 with the message" "$?/$out" "1/space: no user nobody-here in /etc/passwd"
        sp rm "$id" >/dev/null </dev/null || fail "$rt: rm"
}

say "ns"
one_runtime ns
say "gvisor"
one_runtime gvisor
say "microvm"
if [ -e /dev/kvm ] && sp create --template base --runtime microvm --snapshot-interval 0 </dev/null >"$TMPD/mv" 2>&1; then
        sp rm "$(cat "$TMPD/mv")" >/dev/null </dev/null
        one_runtime microvm
else
        echo "skip: microvm sessions do not start on this host ($(tail -n 1 "$TMPD/mv"))"
fi
finish
