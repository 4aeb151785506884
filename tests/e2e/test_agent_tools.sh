#!/bin/bash
# Issue 15 end to end, through the CLI, on the base template (Debian with bash and
# python3) and on each of ns and gvisor: a file watch of what the unprivileged `user`'s
# program writes, a terminal that is a real tty of the sandbox (as root and as user), an
# idle timeout that pauses a session and an exec that resumes it, and usage metrics of a
# session that burns CPU (e2e.user covers the user itself). Skipped without root; gvisor
# needs runsc (scripts/install-deps installs it).
. "$(dirname "$0")/lib.sh"

RUNSC=${SPACE_RUNSC:-/usr/bin/runsc}
[ -x "$RUNSC" ] || { echo "FAIL: runsc is not installed at $RUNSC (scripts/install-deps installs it)"; exit 1; }
command -v script >/dev/null || { echo "FAIL: script (bsdutils) is missing"; exit 1; }

# run_in ID CMD: a shell command in the session, its stdout
run_in() { sp exec "$1" -- sh -c "$2" </dev/null 2>/dev/null; }
# as_user ID CMD: the same as user
as_user() { sp exec --user user "$1" -- sh -c "$2" </dev/null 2>/dev/null; }

for rt in ns gvisor; do
        say "$rt: a session of the base template"
        id=$(new_sandbox --template base --runtime "$rt" --snapshot-interval 0) && pass "$rt: create printed $id" ||
                { fail "$rt: create"; continue; }
        expect_eq "$rt: exec --user user runs as it, at home" "$(as_user "$id" 'echo "$(id -un) $(pwd)"')" "user /home/user"

        say "$rt: a watch of what user's program writes"
        timeout 60 "$SPACE" watch -n 2 "$id" /home/user >"$TMPD/w.$rt" 2>"$TMPD/w.$rt.err" </dev/null &
        wp=$!
        sleep 1 # the watch is in place once its stream began
        as_user "$id" 'python3 -c "import os; os.makedirs(\"/home/user/proj\"); open(\"/home/user/proj/a.py\", \"w\").write(\"print(1)\")"'
        wait "$wp"
        expect_eq "$rt: space watch -n 2 ends by itself" "$?" "0"
        expect_eq "$rt: the watch saw the directory and the file in it" \
                "$(awk '{ print $1, $2 }' "$TMPD/w.$rt" | tr '\n' ,)" "create /home/user/proj/,create /home/user/proj/a.py,"

        say "$rt: a terminal"
        out=$(timeout 60 script -qec "$SPACE exec -t $id -- sh -c 'tty; stty size; test -t 0 && echo in-a-tty'" /dev/null </dev/null | tr -d '\r')
        check "$rt: exec -t runs on a pty of the sandbox's devpts ($(head -n 1 <<<"$out"))" grep -q '^/dev/pts/[0-9]' <<<"$out"
        check "$rt: ... with the caller's window size" grep -qE '^[0-9]+ [0-9]+$' <<<"$out"
        check "$rt: ... stdin is a tty" grep -qx 'in-a-tty' <<<"$out"
        out=$(timeout 60 script -qec "$SPACE exec -t --user user $id -- sh -c 'id -un; exit 7'" /dev/null </dev/null | tr -d '\r')
        check "$rt: exec -t --user user" grep -qx 'user' <<<"$out"
        timeout 60 "$SPACE" exec -t "$id" -- sh -c 'exit 7' </dev/null >/dev/null 2>&1
        expect_eq "$rt: exec -t gives back the exit code" "$?" "7"
        sp rm "$id" </dev/null >/dev/null 2>&1

        say "$rt: an idle timeout pauses, an exec resumes"
        id=$(new_sandbox --template base --runtime "$rt" --snapshot-interval 0 --idle-timeout 3s --auto-resume) &&
                pass "$rt: create with --idle-timeout 3s --auto-resume" || { fail "$rt: create with an idle timeout"; continue; }
        run_in "$id" 'echo kept >/root/kept'
        wait_until 30 state_is "$id" paused && pass "$rt: paused after 3 s without activity" || fail "$rt: not paused: $(field "$id" state)"
        check "$rt: the event log says why" grep -q 'idle' <<<"$(events_json "$id" | grep -i timeout)"
        expect_eq "$rt: an exec on the paused session resumes it and runs" "$(run_in "$id" 'cat /root/kept')" "kept"
        expect_eq "$rt: ... and it is running again" "$(field "$id" state)" "running"
        sp rm "$id" </dev/null >/dev/null 2>&1

        say "$rt: usage metrics"
        id=$(new_sandbox --template base --runtime "$rt" --snapshot-interval 0) || { fail "$rt: create"; continue; }
        sp exec -d "$id" -- python3 -c 'while True: pass' </dev/null >/dev/null
        # rows of TIME CPU% CPU-TIME MEM ...: the newest sample's CPU% and memory, once two samples are in
        row=
        for _ in $(seq 60); do
                row=$(sp top --once -n 5 "$id" </dev/null 2>/dev/null | awk 'NR > 2 && $2 ~ /^[0-9.]+$/ { n++; last = $2 " " $4 } END { if (n >= 2) print last }')
                [ -n "$row" ] && break
                sleep 0.5
        done
        pct=${row%% *}
        check "$rt: space top shows the burner's CPU (${pct:-no samples}% of a CPU; over 20)" \
                awk -v p="${pct:-0}" 'BEGIN { exit !(p > 20) }'
        check "$rt: ... and its memory (${row#* })" test -n "${row#* }" -a "${row#* }" != "0" -a "${row#* }" != "-"
        sp rm "$id" </dev/null >/dev/null 2>&1
done
finish
