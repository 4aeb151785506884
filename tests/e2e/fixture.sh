#!/bin/sh
# ctest fixture of the end-to-end tests. "setup" starts one spaced on a fresh data dir
# and makes sure it has the base template (debootstrap output is cached per host, so only
# the first run on a machine downloads); "cleanup" deletes what is left, stops spaced,
# and fails if any mount, cgroup or process of a sandbox the tests made is still there.
set -u
action=${1:?usage: fixture.sh setup|cleanup BIN_DIR STATE_DIR}
BIN=${2:?}
STATE=${3:?}
SPACE=$BIN/space

if [ "$(id -u)" -ne 0 ]; then
        echo "SKIP: end-to-end tests need root"
        exit 77
fi

setup() {
        if [ -f "$STATE/pid" ] && kill -0 "$(cat "$STATE/pid")" 2>/dev/null; then
                echo "stopping a spaced left over from an earlier run (pid $(cat "$STATE/pid"))"
                kill "$(cat "$STATE/pid")" 2>/dev/null
                sleep 1
        fi
        rm -rf "$STATE"
        mkdir -p "$STATE"
        data=$(mktemp -d /var/tmp/space-e2e-data.XXXXXX)
        echo "$data" >"$STATE/data"
        echo "unix:$data/spaced.sock" >"$STATE/host"
        : >"$STATE/created"
        export SPACE_HOST="unix:$data/spaced.sock"
        echo "starting $BIN/spaced --data $data (log: $STATE/spaced.log)"
        "$BIN/spaced" --data "$data" </dev/null >"$STATE/spaced.log" 2>&1 &
        echo $! >"$STATE/pid"
        i=0
        until "$SPACE" health >/dev/null 2>&1; do
                if ! kill -0 "$(cat "$STATE/pid")" 2>/dev/null; then
                        echo "FAIL: spaced exited at start:"
                        tail -n 30 "$STATE/spaced.log"
                        exit 1
                fi
                i=$((i + 1))
                if [ $i -gt 300 ]; then
                        echo "FAIL: spaced did not answer on $SPACE_HOST within 30 s"
                        exit 1
                fi
                sleep 0.1
        done
        echo "ok: spaced answers: $("$SPACE" health)"
        if "$SPACE" template ls --quiet | grep -qx base; then
                echo "ok: base template present"
        else
                echo "building the base template (debootstrap bookworm + python3; cached after the first time)"
                start=$(date +%s)
                if ! "$SPACE" template build base --debootstrap bookworm --packages python3; then
                        echo "FAIL: could not build the base template"
                        exit 1
                fi
                echo "ok: base template built in $(( $(date +%s) - start )) s"
        fi
        # what already exists under the cgroup parents, so cleanup reports only ours
        ls -d /sys/fs/cgroup/*/space/*/ /sys/fs/cgroup/space/*/ 2>/dev/null | sort >"$STATE/cgroups.before"
}

cleanup() {
        fails=0
        if [ ! -f "$STATE/host" ]; then
                echo "nothing to clean up (setup did not run)"
                exit 0
        fi
        export SPACE_HOST="$(cat "$STATE/host")"
        data=$(cat "$STATE/data")
        pid=$(cat "$STATE/pid" 2>/dev/null || echo)
        # a deleted session may stay listed as "terminated": only the others are left over
        left=$("$SPACE" ls --json 2>/dev/null | jq -r '.sessions // [] | .[] | select(.state != "terminated") | .id' 2>/dev/null)
        if [ -n "$left" ]; then
                echo "deleting sessions the tests left: $(echo $left)"
                # shellcheck disable=SC2086
                "$SPACE" rm $left >/dev/null || fails=$((fails + 1))
        fi
        if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
                echo "FAIL: spaced (pid $pid) died during the tests; its log ends:"
                tail -n 20 "$STATE/spaced.log"
                fails=$((fails + 1))
        elif [ -n "$pid" ]; then
                kill -TERM "$pid"
                i=0
                while kill -0 "$pid" 2>/dev/null && [ $i -lt 200 ]; do
                        sleep 0.1
                        i=$((i + 1))
                done
                if kill -0 "$pid" 2>/dev/null; then
                        echo "FAIL: spaced did not exit within 20 s of SIGTERM; killing it"
                        kill -KILL "$pid"
                        fails=$((fails + 1))
                else
                        echo "ok: spaced exited on SIGTERM"
                fi
        fi
        if grep -qE "ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:" "$STATE/spaced.log"; then
                echo "FAIL: the sanitizers reported errors in spaced:"
                grep -E -A5 "ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:" "$STATE/spaced.log" | head -40
                fails=$((fails + 1))
        fi
        n=0
        while read -r ses sbx ipid; do
                [ -n "$sbx" ] || continue
                n=$((n + 1))
                m=$(grep -cF "$sbx" /proc/self/mountinfo)
                if [ "$m" -gt 0 ]; then
                        echo "FAIL: $m mounts of $sbx left:"
                        grep -F "$sbx" /proc/self/mountinfo
                        fails=$((fails + 1))
                fi
                for cg in /sys/fs/cgroup/*/space/"$sbx" /sys/fs/cgroup/space/"$sbx"; do
                        if [ -d "$cg" ]; then
                                echo "FAIL: cgroup left: $cg (tasks: $(cat "$cg/cgroup.procs" 2>/dev/null | wc -l))"
                                fails=$((fails + 1))
                        fi
                done
                if [ -n "$ipid" ] && [ -e "/proc/$ipid" ]; then
                        comm=$(cat "/proc/$ipid/comm" 2>/dev/null)
                        case $comm in *init*) echo "FAIL: init of $sbx still runs (pid $ipid)"; fails=$((fails + 1)) ;; esac
                fi
        done <"$STATE/created"
        if grep -qF "$data" /proc/self/mountinfo; then
                echo "FAIL: mounts left under $data:"
                grep -F "$data" /proc/self/mountinfo
                fails=$((fails + 1))
        fi
        ls -d /sys/fs/cgroup/*/space/*/ /sys/fs/cgroup/space/*/ 2>/dev/null | sort >"$STATE/cgroups.after"
        new=$(comm -13 "$STATE/cgroups.before" "$STATE/cgroups.after" 2>/dev/null)
        for cg in $new; do
                # another daemon on this host may have made it meanwhile: only ours count
                b=$(basename "$cg")
                if grep -q " $b " "$STATE/created"; then
                        echo "FAIL: cgroup left: $cg"
                        fails=$((fails + 1))
                fi
        done
        echo "checked $n sandboxes for leftover mounts, cgroups and processes"
        if [ $fails -eq 0 ]; then
                echo "ok: nothing left"
                rm -rf "$data"
        else
                echo "FAIL: $fails leftovers (data dir kept: $data; daemon log: $STATE/spaced.log)"
                tail -n 30 "$STATE/spaced.log"
        fi
        [ $fails -eq 0 ]
}

case $action in
setup) setup ;;
cleanup) cleanup ;;
*) echo "unknown action $action"; exit 2 ;;
esac
