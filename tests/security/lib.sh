# Shared helpers of the escape suite (sourced). Builds on the end-to-end helpers
# (tests/e2e/lib.sh: BIN, STATE, sp, new_sandbox, json_get, leftovers …) and adds what an
# escape attempt reports: what it tried, what stopped it, or that it got through.
# Arguments of every attempt script: BIN_DIR STATE_DIR PROBE [ATTEMPT]
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../e2e/lib.sh"
PROBE_HOST=${3:?usage: $0 BIN_DIR STATE_DIR PROBE [ATTEMPT]}
ATTEMPT=${4:-}
PROBE=/usr/local/bin/sec-probe # where the fixture installed it inside the main sandbox
MAIN=$(cat "$STATE/main" 2>/dev/null)
TOKEN_PATH=$(cat "$STATE/token.path" 2>/dev/null)
TOKEN=$(cat "$STATE/token.value" 2>/dev/null)
SPACED_PID=$(cat "$STATE/pid" 2>/dev/null)
STOPS=0
LEAKS=0
DEFECTS=0

if [ -z "$MAIN" ] || [ -z "$TOKEN_PATH" ]; then
        echo "FAIL: no main sandbox or host token in $STATE (did security.setup run?)"
        exit 1
fi

# tried TEXT: one line naming the attempt as an attacker would make it
tried() { echo "tried: $*"; }
# stopped MECHANISM: the attempt failed, and this is what stopped it
stopped() { STOPS=$((STOPS + 1)); echo "  -> stopped by: $*"; }
# leak TEXT: the attempt got through (an escape or a leak): the test fails
leak() { LEAKS=$((LEAKS + 1)); echo "  -> ESCAPE: $*"; }
# defect TEXT: not an escape, but a bug the attempt exposed (the sandbox's own service
# broke, a resource was not bounded as documented): the test fails
defect() { DEFECTS=$((DEFECTS + 1)); echo "  -> DEFECT (not an escape): $*"; }
# broken TEXT: the attempt could not be made at all (a harness problem, not a pass)
broken() { echo "  -> ERROR (attempt could not be made): $*"; echo "error $ATTEMPT" >>"$STATE/results"; exit 1; }

# conclude: records the outcome in $STATE/results and exits. An attempt that neither
# saw itself stopped nor got through proved nothing: that is an error too.
conclude() {
        if [ "$LEAKS" -gt 0 ]; then
                echo "== $ATTEMPT: ESCAPED ($LEAKS leaks, $STOPS stops)"
                echo "escaped $ATTEMPT" >>"$STATE/results"
                exit 1
        fi
        if [ "$DEFECTS" -gt 0 ]; then
                echo "== $ATTEMPT: blocked, but $DEFECTS defects found"
                echo "defect $ATTEMPT" >>"$STATE/results"
                exit 1
        fi
        if [ "$STOPS" -eq 0 ]; then
                echo "== $ATTEMPT: checked nothing (harness error)"
                echo "error $ATTEMPT" >>"$STATE/results"
                exit 1
        fi
        echo "== $ATTEMPT: blocked ($STOPS checks)"
        echo "blocked $ATTEMPT" >>"$STATE/results"
        exit 0
}

# skip_attempt WHY: the platform does not offer what the attempt needs yet (exit 77)
skip_attempt() {
        echo "SKIP: $ATTEMPT: $*"
        echo "skipped $ATTEMPT $*" >>"$STATE/results"
        exit 77
}

# inside [SESSION] -- CMD...: runs CMD in the main sandbox (or SESSION), output merged
inside() {
        _s=$MAIN
        if [ "$1" != "--" ]; then _s=$1; shift; fi
        shift
        timeout 120 "$SPACE" exec "$_s" -- "$@" </dev/null 2>&1
}

# insh [SESSION] SCRIPT: sh -c SCRIPT in the main sandbox (or SESSION)
insh() {
        if [ $# -ge 2 ]; then inside "$1" -- sh -c "$2"; else inside -- sh -c "$1"; fi
}

# probe_refused MECHANISM ERRNO PROBE-ARGS...: the probe makes one syscall attempt in the
# main sandbox; refused with ERRNO (what MECHANISM answers) = stopped by MECHANISM, done =
# escape, refused with another errno = something else stopped it: MECHANISM is unproven.
probe_refused() {
        _mech=$1 _errno=$2; shift 2
        _out=$(inside -- "$PROBE" --expect "$_errno" "$@")
        _rc=$?
        echo "  $_out"
        case $_rc in
        1) stopped "$_mech ($_errno)" ;;
        0) leak "sec-probe $* succeeded: $_out" ;;
        3) defect "sec-probe $* was refused, but not with $_errno: not by $_mech" ;;
        *) broken "sec-probe $* exited $_rc" ;;
        esac
}

# not_token TEXT DESCRIPTION: the host token must not appear in TEXT
not_token() {
        case $1 in
        *"$TOKEN"*) leak "$2: the host file's content came through" ;;
        *) return 0 ;;
        esac
        return 1
}

# spaced_rss_kb: the daemon's resident set now
spaced_rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$SPACED_PID/status" 2>/dev/null; }

# daemon_alive: spaced still runs and answers
daemon_alive() { kill -0 "$SPACED_PID" 2>/dev/null && sp health >/dev/null 2>&1; }

# main_works: the main sandbox still runs commands
main_works() { [ "$(timeout 20 "$SPACE" exec "$MAIN" -- echo alive </dev/null 2>/dev/null)" = "alive" ]; }
