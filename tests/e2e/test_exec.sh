#!/bin/bash
# End to end through the CLI: commands run in a sandbox with their output, exit codes,
# stdin, environment and cwd; a missing command fails fast; timeouts and signals are
# reported; background processes outlive their request and can be re-attached.
. "$(dirname "$0")/lib.sh"

say "creating a sandbox from the base template"
id=$(new_sandbox --template base) && pass "create printed $id" || { fail "create"; finish; }

say "python3 prints 42"
out=$(sp exec "$id" -- python3 -c 'print(6*7)' </dev/null); rc=$?
expect_eq "python3 -c 'print(6*7)' output" "$out" "42"
expect_eq "python3 exit code" "$rc" "0"

say "exit codes come back"
sp exec "$id" -- sh -c 'exit 3' </dev/null; expect_eq "sh -c 'exit 3' exit code" "$?" "3"
sp exec "$id" -- false </dev/null; expect_eq "false exit code" "$?" "1"
sp exec "$id" -- sh -c 'kill -9 $$' </dev/null; expect_eq "a command killed by SIGKILL exits 128+9" "$?" "137"

say "stdout and stderr are kept apart"
sp exec "$id" -- sh -c 'echo to-out; echo to-err >&2' >"$TMPD/o" 2>"$TMPD/e" </dev/null
expect_eq "stdout" "$(cat "$TMPD/o")" "to-out"
expect_eq "stderr" "$(cat "$TMPD/e")" "to-err"

say "stdin reaches the command"
out=$(printf 'hello\nworld\n' | sp exec "$id" -- python3 -c 'import sys; print(sys.stdin.read().upper(), end="")')
expect_eq "piped stdin, upper-cased by python3" "$out" "HELLO
WORLD"
out=$(printf 'abc' | sp exec -i "$id" -- wc -c)
expect_eq "stdin with -i, counted by wc -c" "$(echo $out)" "3"
head -c 100000 /dev/urandom >"$TMPD/bin"
want=$(sha256sum <"$TMPD/bin" | cut -d' ' -f1)
got=$(sp exec "$id" -- sha256sum <"$TMPD/bin" | cut -d' ' -f1)
expect_eq "100 kB of binary stdin arrives intact (sha256)" "$got" "$want"
out=$(sp exec "$id" -- cat </dev/null)
expect_eq "no stdin: cat ends at once with nothing" "$out" ""

say "environment, working directory, hostname, user"
out=$(sp exec --env FOO=bar --env 'X=a b' "$id" -- sh -c 'echo "$FOO/$X"' </dev/null)
expect_eq "--env reaches the command" "$out" "bar/a b"
out=$(sp exec --cwd /tmp "$id" -- pwd </dev/null)
expect_eq "--cwd /tmp" "$out" "/tmp"
sbx=$(sandbox_of "$id")
out=$(sp exec "$id" -- cat /proc/sys/kernel/hostname </dev/null)
expect_eq "hostname is the sandbox id" "$out" "$sbx"
out=$(sp exec "$id" -- id -u </dev/null)
expect_eq "the command runs as root inside" "$out" "0"

say "a command that does not exist fails clearly and fast"
t0=$(now_ms)
err=$(sp exec "$id" -- /no/such/command arg 2>&1 >/dev/null </dev/null); rc=$?
t1=$(now_ms)
[ "$rc" -ne 0 ] && pass "missing command: non-zero exit ($rc)" || fail "missing command exited 0"
case $err in
*"/no/such/command"* | *"No such file"* | *"not found"*) pass "missing command: message says what: $err" ;;
*) fail "missing command: unclear message: '$err'" ;;
esac
[ $((t1 - t0)) -lt 5000 ] && pass "missing command: answered in $((t1 - t0)) ms" || fail "missing command took $((t1 - t0)) ms"
sp exec "$id" -- true </dev/null; expect_eq "the sandbox still works after that" "$?" "0"

say "timeouts"
t0=$(now_ms)
sp exec --timeout 1 "$id" -- sleep 30 </dev/null 2>"$TMPD/e"; rc=$?
t1=$(now_ms)
[ "$rc" -gt 128 ] && pass "sleep 30 with --timeout 1 killed (exit $rc)" || fail "timeout: exit $rc"
[ $((t1 - t0)) -lt 6000 ] && pass "timeout returned after $((t1 - t0)) ms" || fail "timeout took $((t1 - t0)) ms"
grep -q "timed out" "$TMPD/e" && pass "timeout is reported on stderr" || fail "no timeout message: $(cat "$TMPD/e")"

say "background processes"
pid=$(sp exec -d "$id" -- sh -c 'echo started; sleep 3; echo finished; exit 5' </dev/null)
[ "$pid" -gt 0 ] 2>/dev/null && pass "exec -d printed pid $pid" || fail "exec -d printed '$pid'"
sleep 0.5
ps_out=$(sp ps "$id")
echo "$ps_out" | grep -E "^$pid +running" >/dev/null && pass "ps shows $pid running after its request ended" || fail "ps: $ps_out"
out=$(sp logs "$id" "$pid")
expect_eq "logs re-attaches to the output so far" "$out" "started"
out=$(sp logs --follow "$id" "$pid"); rc=$?
expect_eq "logs --follow waits for the end" "$out" "started
finished"
expect_eq "logs --follow exits with the process's code" "$rc" "5"
out=$(sp logs --offset 8 "$id" "$pid")
expect_eq "logs --offset 8 skips 'started\\n'" "$out" "finished"
js=$(sp ps --json "$id")
expect_eq "ps --json has its exit code" "$(printf '%s' "$js" | jq -r --argjson pid "$pid" '[.processes[] | select(.pid == $pid) | .exit_code][0]')" "5"

pid2=$(sp exec -d "$id" -- sleep 1000 </dev/null)
sp kill "$id" "$pid2" KILL && pass "kill $pid2 KILL accepted" || fail "kill failed"
wait_until 5 sh -c "'$SPACE' ps --json '$id' | jq -e --argjson p '$pid2' '[.processes[] | select(.pid == \$p)][0] | has(\"running\") and (.running | not) and .signal == 9' >/dev/null" &&
        pass "the killed process shows as ended by signal 9" || fail "process $pid2 not reported killed: $(sp ps "$id")"

say "deleting the sandbox"
sp rm "$id" >/dev/null && pass "rm $id" || fail "rm $id"
sp inspect "$id" >/dev/null 2>&1; expect_eq "inspect of a deleted session fails" "$?" "1"
left=$(leftovers "$sbx" "$(init_pid_of "$id")")
expect_eq "nothing left of $sbx" "$left" ""
finish
