#!/bin/bash
# End to end: exec and attach streams are byte streams both ways (#21). Every byte value,
# NUL and invalid UTF-8 through stdout and stdin, empty and large streams, stdin with no
# size cap, a slow reader holding spaced's memory bounded, NUL in a background process's
# log and its re-attach.
. "$(dirname "$0")/lib.sh"

# Large stream size: 1 GiB out and in unless STREAM_MB says otherwise (a slow machine).
MB=${STREAM_MB:-1024}

say "creating a sandbox from the base template"
id=$(new_sandbox --template base) && pass "create printed $id" || { fail "create"; finish; }

say "a NUL byte in the output"
out=$(sp exec "$id" -- printf 'a\000b' </dev/null | od -An -tx1 | tr -s ' '); rc=${PIPESTATUS[0]}
expect_eq "printf 'a\\000b' arrives as its three bytes" "$out" " 61 00 62"
expect_eq "printf 'a\\000b' exit code" "$rc" "0"

say "every byte 0..255 through stdin and back through stdout"
fmt=""
for i in $(seq 0 255); do printf -v o '\\%03o' "$i"; fmt="$fmt$o"; done
printf "$fmt" >"$TMPD/all"
expect_eq "the host file holds 256 bytes" "$(wc -c <"$TMPD/all")" "256"
sp exec "$id" -- cat <"$TMPD/all" >"$TMPD/all.back"
check "cat of all 256 byte values comes back the same" cmp -s "$TMPD/all" "$TMPD/all.back"
sp exec "$id" -- sh -c 'cat >&2' <"$TMPD/all" 2>"$TMPD/all.err" >/dev/null
check "the same through stderr" cmp -s "$TMPD/all" "$TMPD/all.err"
printf '\xff\xfe\xc3(\xed\xa0\x80' >"$TMPD/bad"
sp exec "$id" -- cat <"$TMPD/bad" >"$TMPD/bad.back"
check "invalid UTF-8 (and a lone surrogate) comes back the same" cmp -s "$TMPD/bad" "$TMPD/bad.back"

say "empty streams"
expect_eq "no output at all" "$(sp exec "$id" -- true </dev/null | wc -c)" "0"
expect_eq "an empty stdin: wc -c counts 0" "$(sp exec "$id" -- wc -c </dev/null)" "0"

say "a stdin over the old 512 KiB cap, through a pipe"
head -c $((8 << 20)) /dev/urandom >"$TMPD/big"
want=$(sha256sum <"$TMPD/big" | cut -d' ' -f1)
got=$(cat "$TMPD/big" | sp exec -i "$id" -- sha256sum | cut -d' ' -f1)
expect_eq "cat 8 MiB | space exec -i ID -- sha256sum" "$got" "$want"

say "$MB MiB out and $MB MiB in"
t0=$(now_ms)
n=$(sp exec "$id" -- head -c $((MB << 20)) /dev/zero </dev/null | wc -c)
t1=$(now_ms)
expect_eq "$MB MiB out through exec" "$n" "$((MB << 20))"
echo "    out: $MB MiB in $((t1 - t0)) ms"
t0=$(now_ms)
n=$(head -c $((MB << 20)) /dev/zero | sp exec "$id" -- wc -c)
t1=$(now_ms)
expect_eq "$MB MiB in through exec -i" "$n" "$((MB << 20))"
echo "    in: $MB MiB in $((t1 - t0)) ms"

say "a client that reads slowly: spaced's memory stays bounded"
spid=$(cat "$STATE/pid")
rss() { awk '/^VmRSS:/ { print $2 }' "/proc/$spid/status"; }
before=$(rss)
sp exec "$id" -- head -c $((256 << 20)) /dev/zero </dev/null | { sleep 4; cat >/dev/null; } &
reader=$!
peak=$before
for _ in $(seq 1 30); do
        r=$(rss); [ "$r" -gt "$peak" ] && peak=$r
        sleep 0.1
done
wait "$reader"
grow=$(((peak - before) / 1024))
[ "$grow" -lt 64 ] && pass "spaced grew by $grow MiB while a reader held 256 MiB back" ||
        fail "spaced grew by $grow MiB with a slow reader"
t0=$(now_ms)
n=$(head -c $((64 << 20)) /dev/zero | sp exec "$id" -- sh -c 'sleep 3; wc -c')
t1=$(now_ms)
expect_eq "64 MiB of stdin to a command that reads it only after 3 s" "$n" "$((64 << 20))"

say "NUL in a background process's log, and re-attach"
pid=$(sp exec -d "$id" -- sh -c "printf 'x\\000y'; cat /dev/null" </dev/null)
wait_until 10 sh -c "'$SPACE' logs '$id' '$pid' </dev/null | od -An -tx1 | grep -q '78 00 79'" ||
        fail "the background command's output did not show up within 10 s"
out=$(sp logs "$id" "$pid" </dev/null | od -An -tx1 | tr -s ' ')
expect_eq "logs of printf 'x\\000y'" "$out" " 78 00 79"
out=$(sp logs --follow "$id" "$pid" </dev/null | od -An -tx1 | tr -s ' ')
expect_eq "logs --follow (re-attach) of the same" "$out" " 78 00 79"

say "the raw API: NDJSON by default, the binary framing on request"
sock=${SPACE_HOST#unix:}
curl -sS --unix-socket "$sock" -X POST -d '{"argv":["printf","a\\000b"]}' \
        "http://x/v1/sessions/$id/exec" >"$TMPD/nd"
check "NDJSON: NUL goes as data_b64 (YQBi)" grep -q '"data_b64":"YQBi"' "$TMPD/nd"
check "NDJSON: every line parses (jq)" sh -c "jq -e . '$TMPD/nd' >/dev/null"
curl -sS --unix-socket "$sock" -X POST -H 'Accept: application/vnd.space.stream' \
        -d '{"argv":["printf","a\\000b"]}' "http://x/v1/sessions/$id/exec" >"$TMPD/fr"
# frames: start event, stdout "a\0b" (kind 1, length 3), exit event
check "framed: stdout frame 01 00000003 61 00 62" sh -c "od -An -tx1 '$TMPD/fr' | tr -d ' \\n' | grep -q '010000000361006210'"
{ printf '{"argv":["wc","-c"]}\n'; head -c 1000000 /dev/zero; } |
        curl -sS --unix-socket "$sock" -X POST -H 'Transfer-Encoding: chunked' --data-binary @- \
        "http://x/v1/sessions/$id/exec?stdin=stream" >"$TMPD/st"
check "stdin=stream with curl: wc -c counts 1000000" grep -q '"data":"1000000\\n"' "$TMPD/st"

finish
