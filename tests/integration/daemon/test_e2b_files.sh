#!/bin/bash
# The E2B API's files at the wire level (#16, docs/e2b.md "Files", docs/e2b-wire.md §3.7-3.10),
# with curl as E2B's SDK would send them to `spaced --e2b on`: filesystem.Filesystem's
# Stat, ListDir (depth 1 and 2, 2500 entries, too many), MakeDir (new, existing, over a file), Move, Remove as
# Connect JSON; relative paths resolving to /home/user; root (Authorization: Basic, and
# ?username=) against the default user, by the owner of what they write; GET /files of
# text, of every byte value, of an empty file (Content-Length: 0), of a missing one (404,
# body code 404) and of a directory (400); POST /files multipart with two parts, chunked,
# parts of megabytes, and octet-stream plain and gzipped (corrupt: 400); a WatchDir stream
# seeing a file written by another request, and one ended at its Connect-Timeout-Ms; GET /health 204, then 502 once the session is
# paused. Root only; ~20 s.
# Usage: test_e2b_files.sh SPACED_BINARY   (space-init next to it)
. "$(dirname "$0")/lib.sh" e2b-files "${1:-}"
command -v openssl >/dev/null || { echo "FAIL: openssl is missing"; exit 1; }

ROOT=$T/rootfs
make_rootfs "$ROOT"
mkdir -p "$ROOT/home/user"
chown 1000:1000 "$ROOT/home/user"
printf 'root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/sh\n' >"$ROOT/etc/passwd"
printf 'root:x:0:\nuser:x:1000:\n' >"$ROOT/etc/group"

start_daemon --e2b on || exit 1
api -X POST http://x/v1/templates -d "{\"name\":\"mini\",\"from_dir\":\"$ROOT\"}" >/dev/null
ID=$(api -X POST http://x/v1/sessions -d '{"template":"mini","memory":"64M","snapshot_interval_ms":0}' | jget id)
check "a session" test "${ID:0:4}" = ses_
# Its envdAccessToken: base64url(HMAC-SHA256(DATA/e2b.key, "e2b-access-token:" + id)),
# what create and connect hand out (the control plane is tested on its own).
TOK=$(printf 'e2b-access-token:%s' "$ID" |
        openssl dgst -sha256 -mac HMAC -macopt "hexkey:$(od -An -v -tx1 "$DATA/e2b.key" | tr -d ' \n')" -binary |
        base64 -w0 | tr '+/' '-_' | tr -d '=')
check "an access token" test "${#TOK}" = 43
E2B=(-H "E2b-Sandbox-Id: $ID" -H "E2b-Sandbox-Port: 49983" -H "X-Access-Token: $TOK")
ROOTAUTH=(-H "Authorization: Basic $(printf 'root:' | base64)")
U=http://x/v1/sessions/$ID

# rpc METHOD JSON [CURL ARGS]: a unary Connect call; prints the body, then the status
rpc() {
        api "${E2B[@]}" -H 'Content-Type: application/json' -H 'Connect-Protocol-Version: 1' "${@:3}" \
                -X POST "http://x/filesystem.Filesystem/$1" -d "$2" -w '\n%{http_code}'
}
body() { sed '$d' <<<"$1"; }
status() { tail -n 1 <<<"$1"; }
# the uid of a file, by SPACE's own API
uid_of() { api "$U/files/stat?path=$1" | jget uid; }

# ---- MakeDir ----
R=$(rpc MakeDir '{"path":"d/sub"}')
check "MakeDir of a relative path: 200" test "$(status "$R")" = 200
check "... its entry: the path under /home/user, a directory" \
        test "$(body "$R" | jx '"\(req("entry") | req("path")) \(.entry | req("name")) \(.entry | req("type"))"')" = \
        "/home/user/d/sub sub FILE_TYPE_DIRECTORY"
check "... made with its parent, both the default user's" test "$(uid_of /home/user/d)/$(uid_of /home/user/d/sub)" = 1000/1000
R=$(rpc MakeDir '{"path":"/home/user/d/sub"}')
check "MakeDir of an existing directory: already_exists (409), which the SDK turns into false" \
        test "$(status "$R") $(body "$R" | jget code)" = "409 already_exists"

# ---- POST /files ----
printf 'hello e2b\n' >"$T/a.txt"
for i in $(seq 0 255); do printf "\\$(printf %03o "$i")"; done >"$T/all.bin"
check "every byte value in the binary file" test "$(wc -c <"$T/all.bin")" = 256
R=$(api "${E2B[@]}" -X POST "http://x/files" -H 'Transfer-Encoding: chunked' \
        -F "file=@$T/a.txt;filename=d/a.txt" -F "file=@$T/all.bin;filename=/tmp/all.bin" -w '\n%{http_code}')
check "POST /files, multipart, two parts, chunked: 200" test "$(status "$R")" = 200
check "... one entry per file, in order, with absolute paths" \
        test "$(body "$R" | jx 'map("\(req("name")) \(req("type")) \(req("path"))") | join(",")')" = \
        "a.txt file /home/user/d/a.txt,all.bin file /tmp/all.bin"
check "... the default user's" test "$(uid_of /home/user/d/a.txt)" = 1000
R=$(api "${E2B[@]}" -X POST "http://x/files?path=/tmp/r.txt&username=root" -F "file=@$T/a.txt;filename=ignored" \
        -w '\n%{http_code}')
check "POST /files?username=root: 200, and the file is root's" test "$(status "$R")/$(uid_of /tmp/r.txt)" = 200/0
R=$(api "${E2B[@]}" -X POST "http://x/files?path=o/plain.txt" -H 'Content-Type: application/octet-stream' \
        --data-binary @"$T/all.bin" -w '\n%{http_code}')
check "POST /files, octet-stream: 200, relative to home" \
        test "$(status "$R") $(body "$R" | jget 0 path)" = "200 /home/user/o/plain.txt"
check "... the bytes as sent" cmp -s "$T/all.bin" <(api "$U/files?path=/home/user/o/plain.txt")
gzip -c "$T/all.bin" >"$T/all.gz"
R=$(api "${E2B[@]}" -X POST "http://x/files?path=o/gz.bin" -H 'Content-Type: application/octet-stream' \
        -H 'Content-Encoding: gzip' -H 'Transfer-Encoding: chunked' --data-binary @"$T/all.gz" -w '\n%{http_code}')
check "POST /files, gzip: 200, written gunzipped" \
        test "$(status "$R")/$(api "$U/files?path=/home/user/o/gz.bin" | cmp -s - "$T/all.bin" && echo same)" = 200/same
R=$(api "${E2B[@]}" -X POST "http://x/files?path=d" -H 'Content-Type: application/octet-stream' --data-binary x \
        -w '\n%{http_code}')
check "POST /files onto a directory: 400 with a body code" test "$(status "$R") $(body "$R" | jget code)" = "400 400"
R=$(api "${E2B[@]}" -X POST "http://x/files" -F "file=@$T/a.txt;filename=same" -F "file=@$T/a.txt;filename=./same" \
        -w '\n%{http_code}')
check "two parts for one file: 400" test "$(status "$R")" = 400
# big enough that init's queue fills and the client is paused and resumed, part after part
head -c $((6 << 20)) /dev/urandom >"$T/big1"
head -c $((5 << 20)) /dev/urandom >"$T/big2"
R=$(api "${E2B[@]}" -X POST "http://x/files" -H 'Transfer-Encoding: chunked' \
        -F "file=@$T/big1;filename=big/1" -F "file=@$T/big2;filename=big/2" -w '\n%{http_code}')
check "POST /files, two parts of 6 and 5 MiB: 200, two entries" test "$(status "$R") $(body "$R" | jx length)" = "200 2"
check "... each file's bytes as sent" \
        test "$(api "$U/files?path=/home/user/big/1" | cmp -s - "$T/big1" && api "$U/files?path=/home/user/big/2" | cmp -s - "$T/big2" && echo same)" = same
check "GET /files of 6 MiB: the bytes" cmp -s "$T/big1" <(api "${E2B[@]}" "http://x/files?path=big/1")
R=$(api "${E2B[@]}" -X POST "http://x/files?path=/tmp/bob&username=bob" -H 'Content-Type: application/octet-stream' \
        --data-binary x -w '\n%{http_code}')
check "POST /files as a user the sandbox lacks: 401, nothing written" \
        test "$(status "$R") $(code "$U/files/stat?path=/tmp/bob")" = "401 404"
R=$(api "${E2B[@]}" -X POST "http://x/files?path=/tmp/z" -H 'Content-Type: application/octet-stream' \
        -H 'Content-Encoding: gzip' --data-binary 'not gzip at all' -w '\n%{http_code}')
check "a corrupt gzip body: 400, nothing written" test "$(status "$R") $(code "$U/files/stat?path=/tmp/z")" = "400 404"
R=$(api "${E2B[@]}" -X POST "http://x/files?path=/tmp/z" -H 'Content-Type: application/octet-stream' \
        -H 'Content-Encoding: br' --data-binary x -w '\n%{http_code}')
check "Content-Encoding br: 400" test "$(status "$R")" = 400
touch "$T/empty"
api "${E2B[@]}" -X POST "http://x/files?path=empty" -H 'Content-Type: application/octet-stream' \
        --data-binary @"$T/empty" >/dev/null

# ---- GET /files ----
check "GET /files of a text file: its bytes" test "$(api "${E2B[@]}" "http://x/files?path=d/a.txt")" = "hello e2b"
check "GET /files of every byte value" cmp -s "$T/all.bin" <(api "${E2B[@]}" "http://x/files?path=%2Ftmp%2Fall.bin")
api "${E2B[@]}" -D "$T/empty.h" -o "$T/empty.out" "http://x/files?path=empty"
check "GET /files of an empty file: 200 with Content-Length: 0" \
        test "$(head -n 1 "$T/empty.h" | tr -d '\r' | cut -d' ' -f2)/$(grep -i '^Content-Length:' "$T/empty.h" | tr -d '\r ')/$(wc -c <"$T/empty.out")" = \
        "200/Content-Length:0/0"
R=$(api "${E2B[@]}" "http://x/files?path=nope.txt" -w '\n%{http_code}')
check "GET /files of a missing file: 404, body code 404 (FileNotFoundError)" \
        test "$(status "$R") $(body "$R" | jget code)" = "404 404"
check "GET /files of a directory: 400" test "$(code "${E2B[@]}" "http://x/files?path=d")" = 400
check "GET /files?username=root resolves against /root" \
        test "$(code "${E2B[@]}" "http://x/files?path=r.txt&username=root")/$(code "${E2B[@]}" "http://x/files?path=/tmp/r.txt")" = 404/200

# ---- Stat, ListDir ----
R=$(rpc Stat '{"path":"d/a.txt"}')
check "Stat: 200" test "$(status "$R")" = 200
check "... EntryInfo: name, type, path, size as a string, mode, permissions, owner, group" \
        test "$(body "$R" | jx '.entry | "\(req("name"))|\(req("type"))|\(req("path"))|\(req("size"))|\(req("mode"))|\(req("permissions"))|\(req("owner"))|\(req("group"))"')" = \
        "a.txt|FILE_TYPE_FILE|/home/user/d/a.txt|10|420|-rw-r--r--|user|user"
check "... modifiedTime in RFC 3339" grep -qE '^20[0-9]{2}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$' \
        <<<"$(body "$R" | jget entry modifiedTime)"
R=$(rpc Stat '{"path":"r.txt"}' "${ROOTAUTH[@]}")
check "Stat as root (Authorization: Basic): a relative path is under /root" \
        test "$(status "$R") $(body "$R" | jget code)" = "404 not_found"
R=$(rpc Stat '{"path":"/tmp/r.txt"}' "${ROOTAUTH[@]}")
check "... and root's file is owned by root" test "$(body "$R" | jget entry owner)" = root
R=$(rpc Stat '{"path":"nope"}')
check "Stat of a missing path: not_found (404)" test "$(status "$R") $(body "$R" | jget code)" = "404 not_found"
R=$(rpc MakeDir '{"path":"d/a.txt"}')
check "MakeDir over a file: invalid_argument" test "$(body "$R" | jget code)" = invalid_argument

sh_in "$ID" 'echo x >/home/user/d/sub/deep.txt && ln -s a.txt /home/user/d/link' >/dev/null
R=$(rpc ListDir '{"path":"d"}')
check "ListDir depth 1: 200" test "$(status "$R")" = 200
check "... the directory's entries, paths absolute" \
        test "$(body "$R" | jx '.entries | map("\(req("name")):\(req("type")):\(req("path"))") | join(",")')" = \
        "a.txt:FILE_TYPE_FILE:/home/user/d/a.txt,link:FILE_TYPE_SYMLINK:/home/user/d/link,sub:FILE_TYPE_DIRECTORY:/home/user/d/sub"
check "... a symlink's target, absolute" test "$(body "$R" | jget entries 1 symlinkTarget)" = /home/user/d/a.txt
R=$(rpc ListDir '{"path":"/home/user/d","depth":2}')
check "ListDir depth 2: the entries below too" \
        test "$(body "$R" | jx '.entries | map(req("path")) | join(",")')" = \
        "/home/user/d/a.txt,/home/user/d/link,/home/user/d/sub,/home/user/d/sub/deep.txt"
R=$(rpc ListDir '{"path":"d/a.txt"}')
check "ListDir of a file: invalid_argument" test "$(body "$R" | jget code)" = invalid_argument
R=$(rpc ListDir '{"path":"d","depth":17}')
check "ListDir past depth 16: invalid_argument" test "$(body "$R" | jget code)" = invalid_argument

sh_in "$ID" 'mkdir /home/user/many && cd /home/user/many && i=0 && while [ $i -lt 2500 ]; do : >f$i; i=$((i+1)); done' >/dev/null
R=$(rpc ListDir '{"path":"many"}')
check "ListDir of 2500 entries (more than one page of init's): all of them, sorted" \
        test "$(status "$R") $(body "$R" | jx '.entries | "\(length) \(.[0] | req("name")) \(.[-1] | req("name")) \(map(req("name")) == (map(.name) | sort))"')" = \
        "200 2500 f0 f999 true"
sh_in "$ID" 'cd /home/user/many && i=2500 && while [ $i -lt 25000 ]; do : >f$i; i=$((i+1)); done' >/dev/null
R=$(rpc ListDir '{"path":"many"}')
check "ListDir of 25000 entries (past 4 MiB of answer): resource_exhausted, not a cut list" \
        test "$(status "$R") $(body "$R" | jget code)" = "429 resource_exhausted"
sh_in "$ID" 'rm -r /home/user/many' >/dev/null

# ---- Move, Remove ----
R=$(rpc Move '{"source":"d/a.txt","destination":"e/moved.txt"}')
check "Move: 200 and the destination's entry (its parent made)" \
        test "$(status "$R") $(body "$R" | jx '.entry | "\(req("path")) \(req("size"))"')" = "200 /home/user/e/moved.txt 10"
check "... the source is gone" test "$(rpc Stat '{"path":"d/a.txt"}' | body "$(cat)" | jget code)" = not_found
R=$(rpc Move '{"source":"d/none","destination":"e/x"}')
check "Move of a missing source: not_found" test "$(body "$R" | jget code)" = not_found
R=$(rpc Remove '{"path":"e"}')
check "Remove of a directory: 200 {}, recursive" test "$(status "$R") $(body "$R")" = "200 {}"
check "... it is gone" test "$(rpc Stat '{"path":"e"}' | body "$(cat)" | jget code)" = not_found
R=$(rpc Remove '{"path":"e"}')
check "Remove of a missing path: 200 (envd's RemoveAll)" test "$(status "$R")" = 200

# ---- WatchDir ----
# the request: one Connect envelope (flags 0, a 4-byte big-endian length, the JSON)
MSG='{"path":"w","recursive":true,"includeEntry":true}'
rpc MakeDir '{"path":"w"}' >/dev/null
{ printf '\0\0\0\0'; printf "\\$(printf %03o ${#MSG})"; printf '%s' "$MSG"; } >"$T/watch.req"
timeout 30 curl -sS -N --unix-socket "$S" "${E2B[@]}" -H 'Content-Type: application/connect+json' \
        -H 'Connect-Protocol-Version: 1' -H 'Keepalive-Ping-Interval: 1' -D "$T/watch.h" \
        --data-binary @"$T/watch.req" -X POST http://x/filesystem.Filesystem/WatchDir >"$T/watch.out" 2>"$T/watch.err" &
WPID=$!
started() { for _ in $(seq 50); do grep -qa '{"start":{}}' "$T/watch.out" 2>/dev/null && return 0; sleep 0.1; done; return 1; }
started || { echo "head, errors, body:"; cat "$T/watch.h" "$T/watch.err"; od -c "$T/watch.out" | head; } | sed 's/^/#   /'
check "WatchDir: 200, application/connect+json, the start message first" started
check "... its head" grep -qi '^Content-Type: application/connect+json' "$T/watch.h"
check "... the first envelope is {\"start\":{}}" test "$(head -c 17 "$T/watch.out" | tail -c 12)" = '{"start":{}}'
api "${E2B[@]}" -X POST "http://x/files?path=w/new.txt" -H 'Content-Type: application/octet-stream' --data-binary hi >/dev/null
event() { for _ in $(seq 50); do grep -qa "$1" "$T/watch.out" && return 0; sleep 0.1; done; return 1; }
check "... a file written by another request: a create event named relative to the directory" \
        event '"filesystem":{"name":"new.txt","type":"EVENT_TYPE_CREATE"'
check "... then a write event (the upload's rename over its file is envd's create and write)" \
        event '"filesystem":{"name":"new.txt","type":"EVENT_TYPE_WRITE"'
check "... and nothing of the upload's temporary file" test "$(grep -ac 'space-upload' "$T/watch.out")" = 0
check "... with its entry (includeEntry): the file's EntryInfo" \
        event '"entry":{"name":"new.txt","type":"FILE_TYPE_FILE","path":"/home/user/w/new.txt","size":"2","mode":420,"permissions":"-rw-r--r--","owner":"user","group":"user"'
check "... and a keepalive after a second of quiet" event '{"keepalive":{}}'
kill "$WPID" 2>/dev/null
wait "$WPID" 2>/dev/null
T0=$(date +%s%N)
OUT=$(timeout 10 curl -sS --unix-socket "$S" "${E2B[@]}" -H 'Content-Type: application/connect+json' \
        -H 'Connect-Timeout-Ms: 1500' --data-binary @"$T/watch.req" -X POST http://x/filesystem.Filesystem/WatchDir | tr -d '\0\2')
MS=$((($(date +%s%N) - T0) / 1000000))
check "WatchDir with Connect-Timeout-Ms 1500: ends by itself with deadline_exceeded (after $MS ms)" \
        test "$(grep -ao '{"error":{"code":"deadline_exceeded"' <<<"$OUT")/$((MS >= 1400 && MS < 5000))" = '{"error":{"code":"deadline_exceeded"/1'
MSG='{"path":"nowhere"}'
{ printf '\0\0\0\0'; printf "\\$(printf %03o ${#MSG})"; printf '%s' "$MSG"; } >"$T/watch2.req"
OUT=$(timeout 10 curl -sS --unix-socket "$S" "${E2B[@]}" -H 'Content-Type: application/connect+json' \
        --data-binary @"$T/watch2.req" -X POST http://x/filesystem.Filesystem/WatchDir -w '\n%{http_code}' | tr -d '\0\2')
check "WatchDir of a missing directory: 200 and an end-stream not_found" \
        test "$(tail -n 1 <<<"$OUT")/$(head -n 1 <<<"$OUT" | grep -ao '{"error":{"code":"not_found"')" = '200/{"error":{"code":"not_found"'

# ---- health ----
check "GET /health of a running sandbox: 204" test "$(code "${E2B[@]}" http://x/health)" = 204
check "pause" test "$(code -X POST --max-time 60 "$U/pause")" = 200
check "GET /health of the paused sandbox: 502" test "$(code "${E2B[@]}" http://x/health)" = 502

finish e2b-files
