#!/bin/bash
# `space shell` as a person uses it (#15 item 1): tmux runs it in a detached 120x40 pane,
# send-keys types and capture-pane reads the screen. The shell computes what is typed,
# stty size is the pane's size and follows a resize of the window, Ctrl-C stops a sleep
# inside the sandbox (not space), and `exit 3` ends the pane's command with status 3; our
# terminal is in raw mode meanwhile and its modes are back afterwards.
# A private tmux server (socket under the test's directory) is killed at the end.
# Root and tmux (scripts/install-deps); ~15 s.
# Usage: test_shell_tmux.sh SPACED_BINARY   (space-init and space next to it)
. "$(dirname "$0")/lib.sh" shell_tmux "${1:-}"
SPACE=$BIN/space
command -v tmux >/dev/null || { echo "FAIL: tmux is missing (scripts/install-deps installs it)"; exit 1; }
[ -x "$SPACE" ] || { echo "FAIL: $SPACE is not built"; exit 1; }

ROOT=$T/rootfs
make_rootfs "$ROOT"
for c in stty; do
        if [ -L "$ROOT/bin/sh" ]; then ln -s busybox "$ROOT/bin/$c"; else cp -L "$(command -v $c)" "$ROOT/bin/$c"; fi
done

TM=$T/tmux.sock
tm() { timeout 10 tmux -S "$TM" "$@"; }
stop_tmux() { tmux -S "$TM" kill-server 2>/dev/null; cleanup; }
trap stop_tmux EXIT
printf 'set -g status off\nset -g remain-on-exit on\nset -g history-limit 2000\n' >"$T/tmux.conf"
# modes FILE: the terminal modes of `stty -a` output that raw mode changes, sorted
modes() { tr ' ;' '\n\n' <"$1" | grep -E '^-?(icanon|echo|isig|icrnl|opost)$' | sort | tr '\n' ' '; }
# dead_wait PANE: until tmux has its command's status (pane_dead comes first, at the
# pty's end, and the status once tmux reaped it); 5 s
dead_wait() {
        for _ in $(seq 50); do
                [ -n "$(tm display -p -t "$1" '#{pane_dead_status}#{pane_dead_signal}')" ] && return 0
                sleep 0.1
        done
}
# status_of PANE FILE: the exit status of the pane's space shell, "N (tmux)" from
# #{pane_dead_status}; tmux 3.3 sometimes marks a pane dead at its pty's end and never
# records the status, and then the pane's wrapper shell's record in FILE: "N (wrapper)"
status_of() {
        local st
        dead_wait "$1"
        st=$(tm display -p -t "$1" '#{pane_dead_status}')
        if [ -n "$st" ]; then echo "$st (tmux)"; else echo "$(cat "$2" 2>/dev/null) (wrapper)"; fi
}
# screen_has REGEX [SECONDS]: the pane shows a line matching REGEX within SECONDS (5)
screen_has() {
        for _ in $(seq $((${2:-5} * 10))); do
                tm capture-pane -p -t sh | grep -Eq "$1" && return 0
                sleep 0.1
        done
        echo "# the pane shows:"
        tm capture-pane -p -t sh | sed 's/^/#   /' | grep -v '^#   $' | tail -n 15
        return 1
}

start_daemon || exit 1
api -X POST http://x/v1/templates -d "{\"name\":\"mini\",\"from_dir\":\"$ROOT\"}" >/dev/null
A=$(api -X POST http://x/v1/sessions -d '{"template":"mini","memory":"64M","snapshot_interval_ms":0}' | jget id)
check "a session" test "${A:0:4}" = ses_

# the pane's shell notes its terminal's modes before and after space shell (raw mode undone)
tmux -S "$TM" -f "$T/tmux.conf" new-session -d -s sh -x 120 -y 40 \
        "stty -a >$T/stty.before; $SPACE --host $S shell $A; st=\$?; stty -a >$T/stty.after; echo \$st >$T/st1; exit \$st"
check "tmux runs space shell; a prompt comes" screen_has '[#$] *$'
PTY=$(tm display -p -t sh '#{pane_tty}')
stty -a -F "$PTY" >"$T/stty.during"
echo "# the pane's terminal ($PTY) while space shell runs: $(modes "$T/stty.during")"
check "space shell put our terminal in raw mode (no echo, icanon, isig: keys go to the sandbox)" \
        test "$(modes "$T/stty.during")" = "-echo -icanon -icrnl -isig -opost "
tm send-keys -t sh 'echo $((6*7))' Enter
check "typed keys reach the sandbox's shell: echo \$((6*7)) shows 42" screen_has '^42$'
tm send-keys -t sh 'stty size' Enter
check "stty size is the pane's size (40 120)" screen_has '^40 120$'
tm resize-window -t sh -x 100 -y 30
sleep 0.3
tm send-keys -t sh 'stty size' Enter
check "a resize of the window reaches the sandbox's terminal (30 100)" screen_has '^30 100$'
tm send-keys -t sh 'sleep 100; echo AFTER_$((5+5))' Enter
sleep 0.5
tm send-keys -t sh C-c
sleep 0.3
tm send-keys -t sh 'echo INT_$((2+3))' Enter
check "Ctrl-C stops the sleep in the sandbox, the shell goes on" screen_has '^INT_5$'
check "... the rest of the interrupted line did not run" sh -c "! tmux -S '$TM' capture-pane -p -t sh | grep -q '^AFTER_10'"
check "... and space itself was not interrupted" test "$(tm display -p -t sh '#{pane_dead}')" = 0
tm send-keys -t sh 'exit 3' Enter
ST1=$(status_of sh "$T/st1")
check "exit 3 ends the pane's command (space shell) with status 3 ($ST1)" test "${ST1%% *}" = 3
echo "# local terminal modes before: $(modes "$T/stty.before"); after: $(modes "$T/stty.after")"
check "space restored our terminal's modes (raw mode undone) when it ended" \
        test -s "$T/stty.after" -a "$(modes "$T/stty.before")" = "$(modes "$T/stty.after")"
check "... which were cooked (echo icanon isig) to begin with" test "$(modes "$T/stty.before")" = "echo icanon icrnl isig opost "

# SIGTERM to space: our terminal's modes come back all the same, and it dies of the signal
tm new-session -d -s sh2 -x 80 -y 24 "$SPACE --host $S shell $A; st=\$?; stty -a >$T/stty.term; echo \$st >$T/st2; exit \$st"
tm set -t sh2 remain-on-exit on
for _ in $(seq 50); do tm capture-pane -p -t sh2 | grep -Eq '[#$] *$' && break; sleep 0.1; done
SP=$(pgrep -P "$(tm display -p -t sh2 '#{pane_pid}')" -x space)
check "a second space shell runs (pid ${SP:-none})" test -n "$SP"
[ -n "$SP" ] && kill -TERM "$SP"
ST2=$(status_of sh2 "$T/st2")
check "space killed by SIGTERM exits as killed by it (143; $ST2)" test "${ST2%% *}" = 143
check "... and restored our terminal's modes first" test "$(modes "$T/stty.term")" = "echo icanon icrnl isig opost "
tmux -S "$TM" kill-server
finish shell_tmux
