#!/bin/bash
# A non-root user through the API (#15 item 5): exec with "user" runs as the uid the
# sandbox's /etc/passwd names, with its HOME and its home as the cwd; uploads and mkdir
# with ?user= belong to it; an unknown user is 400, a malformed one 400 before init is
# asked; no user is root, as before. Root only; ~10 s.
# Usage: test_user.sh SPACED_BINARY   (space-init next to it)
. "$(dirname "$0")/lib.sh" user "${1:-}"

ROOT=$T/rootfs
make_rootfs "$ROOT"
mkdir -p "$ROOT/home/user"
chown 1000:1000 "$ROOT/home/user"
printf 'root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/sh\n' >"$ROOT/etc/passwd"
printf 'root:x:0:\nuser:x:1000:\nwheel:x:10:user\n' >"$ROOT/etc/group"

start_daemon || exit 1
api -X POST http://x/v1/templates -d "{\"name\":\"mini\",\"from_dir\":\"$ROOT\"}" >/dev/null
ID=$(api -X POST http://x/v1/sessions -d '{"template":"mini","memory":"64M","snapshot_interval_ms":0}' | jget id)
check "a session" test "${ID:0:4}" = ses_
U=http://x/v1/sessions/$ID
# the command's ids, groups, HOME|USER|LOGNAME|SHELL and cwd
PROBE='grep -E "^(Uid|Gid|Groups):" /proc/self/status | tr -s "\t " " "; echo "$HOME|$USER|$LOGNAME|$SHELL"; echo "$PWD"'
ex() { api -X POST "$U/exec" -d "$(jq -nc --arg c "$PROBE" --argjson extra "$1" '{argv: ["sh", "-c", $c]} + $extra')" | stdout_of; }

OUT=$(ex '{"user":"user"}')
echo "$OUT" | sed 's/^/# /'
check "exec as user: uid 1000" grep -qx 'Uid: 1000 1000 1000 1000' <<<"$OUT"
check "... gid 1000" grep -qx 'Gid: 1000 1000 1000 1000' <<<"$OUT"
check "... its groups from /etc/group" grep -qx 'Groups: 10 *' <<<"$OUT"
check "... HOME, USER, LOGNAME, SHELL from /etc/passwd" grep -qx '/home/user|user|user|/bin/sh' <<<"$OUT"
check "... cwd its home" test "$(tail -n 1 <<<"$OUT")" = /home/user
OUT=$(ex '{"user":1000,"cwd":"/tmp","env":{"HOME":"/x"}}')
check "by uid: uid 1000" grep -qx 'Uid: 1000 1000 1000 1000' <<<"$OUT"
check "... the request's HOME and cwd win over the user's" test "$(sed -n 4p <<<"$OUT")/$(tail -n 1 <<<"$OUT")" = "/x|user|user|/bin/sh//tmp"
OUT=$(ex '{}')
check "no user: root, HOME /root, cwd /" \
        test "$(grep -c 'Uid: 0 ' <<<"$OUT")/$(sed -n 4p <<<"$OUT" | cut -d'|' -f1)/$(tail -n 1 <<<"$OUT")" = "1//root//"
OUT=$(ex '{"user":"root"}')
check "user root: root, cwd /root" test "$(grep -c 'Uid: 0 ' <<<"$OUT")/$(tail -n 1 <<<"$OUT")" = "1//root"

R=$(api -X POST "$U/exec" -d '{"argv":["true"],"user":"bob"}' -w '\n%{http_code}')
check "an unknown user is 400" test "$(tail -n 1 <<<"$R")" = 400
check "... bad_request: no user bob in /etc/passwd" test "$(head -n 1 <<<"$R" | jx '"\(req("error") | req("code")): \(req("error") | req("message"))"')" = "bad_request: no user bob in /etc/passwd"
for bad in '"Bob"' '"a:b"' '"-x"' '65536' '-1' '"123456"' 'true' '"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"'; do
        check "a malformed user ($bad) is 400" \
                test "$(code -X POST "$U/exec" -d "{\"argv\":[\"true\"],\"user\":$bad}")" = 400
done

R=$(api -X PUT "$U/files?path=/home/user/up/f.txt&parents=1&user=user" --data-binary 'hi' -w '\n%{http_code}')
check "an upload as user is 201" test "$(tail -n 1 <<<"$R")" = 201
check "... and the file belongs to uid 1000" test "$(api "$U/files/stat?path=/home/user/up/f.txt" | jx '"\(req("uid")):\(req("gid"))"')" = 1000:1000
check "... as does the parent it made" test "$(api "$U/files/stat?path=/home/user/up" | jget uid)" = 1000
R=$(api -X POST "$U/exec" -d '{"argv":["sh","-c","echo more >> /home/user/up/f.txt && cat /home/user/up/f.txt"],"user":"user"}' | stdout_of)
check "... user appends to its own file" test "$R" = himore
check "an upload without user belongs to root" \
        test "$(code -X PUT "$U/files?path=/tmp/r.txt" --data-binary x)/$(api "$U/files/stat?path=/tmp/r.txt" | jget uid)" = 201/0
check "an upload by uid: ?user=1000" \
        test "$(code -X PUT "$U/files?path=/tmp/u.txt&user=1000" --data-binary x)/$(api "$U/files/stat?path=/tmp/u.txt" | jget uid)" = 201/1000
R=$(api -X PUT "$U/files?path=/tmp/b.txt&user=bob" --data-binary x -w '\n%{http_code}')
check "an upload as an unknown user is 400 and writes nothing" \
        test "$(tail -n 1 <<<"$R")/$(code "$U/files/stat?path=/tmp/b.txt")" = 400/404
check "... with the message" test "$(head -n 1 <<<"$R" | jget error message)" = "no user bob in /etc/passwd"
check "a malformed ?user= is 400" test "$(code -X PUT "$U/files?path=/tmp/c.txt&user=Bad%20Name" --data-binary x)" = 400
check "mkdir as user (body)" \
        test "$(code -X POST "$U/files/mkdir" -d '{"path":"/tmp/d1/d2","parents":true,"user":"user"}')/$(api "$U/files/stat?path=/tmp/d1" | jget uid)" = 201/1000
check "mkdir as user (?user=)" \
        test "$(code -X POST "$U/files/mkdir?user=user" -d '{"path":"/tmp/d3"}')/$(api "$U/files/stat?path=/tmp/d3" | jget uid)" = 201/1000
check "mkdir as an unknown user is 400" test "$(code -X POST "$U/files/mkdir" -d '{"path":"/tmp/d4","user":"bob"}')" = 400
check "mkdir with a malformed user is 400" test "$(code -X POST "$U/files/mkdir" -d '{"path":"/tmp/d5","user":7.5}')" = 400
check "mkdir without user: root" \
        test "$(code -X POST "$U/files/mkdir" -d '{"path":"/tmp/d6"}')/$(api "$U/files/stat?path=/tmp/d6" | jget uid)" = 201/0

# ---- the CLI: space exec --user, space cp --user ----
SPACE=$BIN/space
export SPACE_HOST=unix:$S
OUT=$("$SPACE" exec --user user "$ID" sh -c 'grep ^Uid: /proc/self/status | tr -s "\t " " "; echo "$HOME $PWD"' </dev/null 2>&1)
check "space exec --user user: uid 1000, its HOME and cwd" test "$OUT" = "$(printf 'Uid: 1000 1000 1000 1000\n/home/user /home/user')"
check "space exec -u 1000 -w /tmp" test "$("$SPACE" exec -u 1000 -w /tmp "$ID" sh -c 'echo $PWD' </dev/null 2>&1)" = /tmp
OUT=$("$SPACE" exec --user bob "$ID" true </dev/null 2>&1)
check "space exec --user bob: exit 1, no user bob in /etc/passwd" test "$?/$OUT" = "1/space: no user bob in /etc/passwd"
check "space exec --user 'a&b': refused" test "$("$SPACE" exec --user 'a&b' "$ID" true </dev/null >/dev/null 2>&1; echo $?)" = 1
mkdir -p "$T/tree/sub"
echo one >"$T/tree/sub/f"
check "space cp --user user: a tree into the sandbox" "$SPACE" cp --user user "$T/tree" "$ID:/home/user/tree"
check "... owned by 1000: the directories and the file" \
        test "$(api "$U/files/stat?path=/home/user/tree" | jget uid)/$(api "$U/files/stat?path=/home/user/tree/sub" | jget uid)/$(api "$U/files/stat?path=/home/user/tree/sub/f" | jget uid)" = 1000/1000/1000
echo two | "$SPACE" cp - "$ID:/tmp/root-f" 
check "space cp without --user: root's" test "$(api "$U/files/stat?path=/tmp/root-f" | jget uid)" = 0
OUT=$("$SPACE" cp --user user "$ID:/tmp/root-f" "$T/back" 2>&1)
check "space cp --user out of a sandbox is a usage error" test "$?" = 2

# ---- a terminal as a user ----
TP=$(api -X POST "$U/terminals" -d "$(jq -nc --arg c "{ $PROBE; } >/tmp/term-probe" '{cmd: ["sh", "-c", $c], user: "user"}')" | jget pid)
check "a terminal as user starts" test "${TP:-0}" -gt 0
for _ in $(seq 50); do [ "$(code "$U/files/stat?path=/tmp/term-probe")" = 200 ] && break; sleep 0.1; done
sleep 0.3 # the probe writes its lines one by one
OUT=$(api "$U/files?path=/tmp/term-probe")
echo "$OUT" | sed 's/^/# terminal: /'
check "... runs as uid 1000 with user's HOME and home as cwd" \
        test "$(grep -c -e '^Uid: 1000 1000 1000 1000' -e '^/home/user|user|user|/bin/sh' -e '^/home/user$' <<<"$OUT")" = 3
R=$(api -X POST "$U/terminals" -d '{"cmd":["true"],"user":"bob"}' -w '\n%{http_code}')
check "a terminal as an unknown user is 400" test "$(tail -n 1 <<<"$R")" = 400
check "a terminal with a malformed user is 400" test "$(code -X POST "$U/terminals" -d '{"cmd":["true"],"user":"A;B"}')" = 400

finish user
