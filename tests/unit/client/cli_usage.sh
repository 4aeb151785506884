#!/bin/sh
# Runs the `space` binary with bad arguments and checks it answers with a usage error
# (exit 2) before talking to any daemon, --help exits 0, and a missing daemon gives exit 1.
space=$1
fail=0
expect() { # expected-status description command...
        want=$1; what=$2; shift 2
        out=$("$@" 2>&1 </dev/null); got=$?
        if [ "$got" -eq "$want" ]; then
                echo "ok: $what (exit $got)"
        else
                echo "FAIL: $what: exit $got, wanted $want; output: $out"
                fail=1
        fi
}
export SPACE_HOST=unix:/nonexistent/spaced.sock
expect 2 "no command" "$space"
expect 2 "unknown command" "$space" frobnicate
expect 2 "unknown global option" "$space" --bogus ls
expect 2 "create: unknown flag" "$space" create --bogus
expect 2 "create: bad memory size" "$space" create --memory 12X
expect 2 "create: --memory without value" "$space" create --memory
expect 2 "create: bad disk size" "$space" create --disk lots
expect 2 "create: disk size 0" "$space" create --disk 0
expect 2 "create: bad env" "$space" create --env NOEQUALS
expect 2 "create: bad cpus" "$space" create --cpus 0
expect 2 "create: bad --timeout" "$space" create --timeout soon
expect 2 "create: --idle-timeout 0" "$space" create --idle-timeout 0
expect 2 "create: --on-timeout stop" "$space" create --timeout 1h --on-timeout stop
expect 2 "timeout: missing id" "$space" timeout
expect 2 "timeout: --timeout with --no-timeout" "$space" timeout --timeout 1h --no-timeout ses_1
expect 2 "timeout: --auto-resume with --no-auto-resume" "$space" timeout --auto-resume --no-auto-resume ses_1
expect 2 "timeout: --on-idle maybe" "$space" timeout --on-idle maybe ses_1
expect 2 "exec: missing id" "$space" exec
expect 2 "exec: missing command" "$space" exec ses_1 --
expect 2 "exec: bad timeout" "$space" exec --timeout x ses_1 -- true
expect 2 "cp: one argument" "$space" cp a
expect 2 "cp: two local paths" "$space" cp a b
expect 2 "cp: relative sandbox path" "$space" cp a ses_1:rel
expect 2 "ps: missing id" "$space" ps
expect 2 "logs: missing pid" "$space" logs ses_1
expect 2 "logs: bad pid" "$space" logs ses_1 abc
expect 2 "kill: bad signal" "$space" kill ses_1 5 NOSIG
expect 2 "rm: no ids" "$space" rm
expect 2 "inspect: two ids" "$space" inspect a b
expect 2 "template: no subcommand" "$space" template
expect 2 "exec: -d with -i" "$space" exec -d -i ses_1 -- true
expect 2 "template build: two sources" "$space" template build x --from-dir /a --from-tar /b
expect 2 "template build: --packages without --debootstrap" "$space" template build x --from-dir /a --packages p
expect 2 "template rm: no name" "$space" template rm
expect 2 "create: bad --snapshot-interval" "$space" create --snapshot-interval 5x
expect 2 "create: bad --retention" "$space" create --retention 0
expect 2 "snapshot: missing id" "$space" snapshot
expect 2 "snapshot: label too long" "$space" snapshot --label "$(printf '%300s' '' | tr ' ' x)" ses_1
expect 2 "snapshots: two ids" "$space" snapshots a b
expect 2 "pause: no id" "$space" pause
expect 2 "resume: no id" "$space" resume
expect 2 "create: --egress with --no-egress" "$space" create --egress --no-egress
expect 2 "create: --allow rule too long" "$space" create --allow "$(printf '%300s' '' | tr ' ' x)"
expect 2 "create: --allow without value" "$space" create --allow
expect 2 "network: no id" "$space" network
expect 2 "network: two ids" "$space" network a b
expect 2 "network: --allow without --on or --off" "$space" network ses_1 --allow example.com
expect 2 "network: --bandwidth without --on or --off" "$space" network ses_1 --bandwidth 20mbit
expect 2 "network: --on with --off" "$space" network ses_1 --on --off
expect 2 "restore: missing snapshot" "$space" restore ses_1
expect 2 "restore: extra argument" "$space" restore ses_1 snap_1 x
expect 2 "fork: count 0" "$space" fork --count 0 ses_1
expect 2 "fork: count 65" "$space" fork --count 65 ses_1
expect 2 "events: bad --after" "$space" events --after x ses_1
expect 2 "events: --follow with --limit" "$space" events --follow --limit 3 ses_1
expect 2 "event: no --data" "$space" event ses_1
expect 2 "event: --data not JSON" "$space" event --data '{x' ses_1
expect 2 "connect: no token" env -u SPACE_SESSION_TOKEN "$space" connect ses_1
expect 2 "gc: extra argument" "$space" gc x
for c in create exec cp ls ps logs kill inspect rm health template snapshot snapshots pause resume restore fork \
        events event connect gc; do
        expect 0 "$c --help" "$space" $c --help
done
for c in build ls rm; do
        expect 0 "template $c --help" "$space" template $c --help
done
expect 0 "help exec" "$space" help exec
expect 0 "--help" "$space" --help
expect 1 "ls without a daemon" "$space" ls
out=$("$space" ls 2>&1)
case "$out" in
"space: cannot connect to spaced at unix:/nonexistent/spaced.sock"*) echo "ok: error message format: $out" ;;
*) echo "FAIL: unexpected error message: $out"; fail=1 ;;
esac
exit $fail
