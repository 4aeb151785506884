# Shared helpers of the end-to-end tests (sourced, POSIX sh + bash features used: none).
# Every test script gets BIN (dir with space/spaced) and STATE (written by fixture.sh
# setup: the daemon's address and data dir), and reports each check as it goes.
# Host-side helpers here and in ../integration/daemon/lib.sh read JSON with jq, once per
# response: never an interpreter started per field.
set -u

BIN=${1:?usage: $0 BIN_DIR STATE_DIR}
STATE=${2:?usage: $0 BIN_DIR STATE_DIR}
SPACE=$BIN/space
FAILS=0
CHECKS=0

if [ "$(id -u)" -ne 0 ]; then
        echo "SKIP: end-to-end tests need root (namespaces, cgroups, mounts)"
        exit 77
fi
command -v jq >/dev/null || { echo "FAIL: jq is missing (scripts/install-deps installs it)"; exit 1; }
if [ ! -f "$STATE/host" ]; then
        echo "FAIL: no daemon state in $STATE (did the e2e.setup fixture run?)"
        exit 1
fi
SPACE_HOST=$(cat "$STATE/host")
DATA=$(cat "$STATE/data")
# where writable layers live: the quota volume DATA/vol if spaced mounted one, else DATA
LAYERS=$DATA
mountpoint -q "$DATA/vol" 2>/dev/null && LAYERS=$DATA/vol
export SPACE_HOST
TMPD=$(mktemp -d /tmp/space-e2e-t.XXXXXX)
trap 'rm -rf "$TMPD"' EXIT

say() { echo "--- $*"; }
pass() { CHECKS=$((CHECKS + 1)); echo "ok: $*"; }
fail() { CHECKS=$((CHECKS + 1)); FAILS=$((FAILS + 1)); echo "FAIL: $*"; }
# check DESCRIPTION COMMAND...: passes when the command succeeds
check() {
        d=$1; shift
        if "$@"; then pass "$d"; else fail "$d"; fi
}
# expect_eq DESCRIPTION GOT WANT
expect_eq() {
        if [ "$2" = "$3" ]; then pass "$1 (got '$2')"; else fail "$1: got '$2', wanted '$3'"; fi
}
finish() {
        echo "== $CHECKS checks, $FAILS failed"
        [ "$FAILS" -eq 0 ]
        exit $?
}

now_ms() { date +%s%3N; }

# space ARGS...: the CLI with no stdin unless the caller redirects one
sp() { "$SPACE" "$@"; }

# What json_get and json_fields share (an interpreter start per field cost seconds on a
# loaded host; jq costs milliseconds): $d, the document (null when there is none: a
# daemon that is down); jpath(KEY.PATH), numeric parts index lists, a step that does not
# apply gives null; jfield, a value as printed: "" for null, objects and arrays as
# compact JSON, strings bare, true/false, numbers.
_JQ_DOC='def jpath($p): try (reduce ($p | split("."))[] as $k (.;
                if type == "array" then .[$k | tonumber] elif type == "object" then .[$k] else null end))
        catch null;
def jfield: if . == null then "" elif type == "object" or type == "array" then tojson else tostring end;
(try fromjson catch null) as $d'

# json_get JSON KEY.PATH: prints a field of a JSON document (nothing for null, a missing
# field or no document)
json_get() {
        printf '%s' "$1" | jq -Rrs --arg p "$2" "$_JQ_DOC"' | if $d == null then empty else $d | jpath($p) | jfield end'
}

# json_fields JSON KEY.PATH...: those fields of one document in one jq run, as json_get
# prints them, on one line one space apart (for values without spaces: ids, pids, states)
json_fields() {
        _doc=$1
        shift
        printf '%s' "$_doc" | jq -Rrs --args "$_JQ_DOC"' | [$ARGS.positional[] as $p | $d | jpath($p) | jfield] | join(" ")' "$@"
}

# new_sandbox [create options]: prints the session id; records it with its sandbox id
# and init pid so the fixture's cleanup can prove nothing of it is left.
new_sandbox() {
        _id=$(sp create "$@" </dev/null) || return 1
        _js=$(sp inspect --json "$_id" </dev/null) || return 1
        echo "$_id $(json_fields "$_js" sandbox_id init_pid)" >>"$STATE/created"
        echo "$_id"
}

# sandbox_of SESSION_ID: the sbx_ id recorded for it
sandbox_of() { awk -v s="$1" '$1 == s { print $2 }' "$STATE/created" | tail -n 1; }
init_pid_of() { awk -v s="$1" '$1 == s { print $3 }' "$STATE/created" | tail -n 1; }

# leftovers SBX_ID PID: prints what is left of a deleted sandbox (mounts, cgroups, init)
leftovers() {
        _sbx=$1 _pid=$2
        [ -n "$_sbx" ] || return 0
        grep -F "$_sbx" /proc/self/mountinfo | awk '{ print "mount " $5 }'
        for _cg in /sys/fs/cgroup/*/space/"$_sbx" /sys/fs/cgroup/space/"$_sbx"; do
                [ -d "$_cg" ] && echo "cgroup $_cg"
        done
        if [ -n "$_pid" ] && [ "$_pid" -gt 0 ] 2>/dev/null && [ -e "/proc/$_pid" ]; then
                _comm=$(cat "/proc/$_pid/comm" 2>/dev/null)
                case $_comm in *init*) echo "process $_pid ($_comm)" ;; esac
        fi
        return 0
}

# wait_until SECONDS COMMAND...: polls every 0.2 s
wait_until() {
        _end=$(( $(date +%s) + $1 )); shift
        while ! "$@"; do
                [ "$(date +%s)" -ge "$_end" ] && return 1
                sleep 0.2
        done
        return 0
}

# free_port: a TCP port no socket on the host uses (listening or connected, v4 or v6),
# from the range the kernel picks a port 0 bind from; the caller's bind may still lose a
# race, as after any such choice
free_port() {
        read -r _lo _hi </proc/sys/net/ipv4/ip_local_port_range
        for _i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
                _p=$(shuf -i "$_lo-$_hi" -n 1)
                [ -z "$(ss -Htan "sport = :$_p")" ] && { echo "$_p"; return 0; }
        done
        return 1
}

# ---- durable sessions (issue 4) ----------------------------------------------------

# field ID KEY.PATH: a field of the session object as the daemon has it now
field() { json_get "$(sp inspect --json "$1" </dev/null 2>/dev/null)" "$2"; }

# record_sandbox ID: notes the session's current sandbox (after a resume, restore or
# recovery it has a new one) so the fixture's cleanup checks it too
record_sandbox() {
        _js=$(sp inspect --json "$1" </dev/null) || return 1
        _f=$(json_fields "$_js" sandbox_id init_pid)
        _sbx=${_f%% *}
        [ -n "$_sbx" ] || return 0
        grep -q " $_sbx " "$STATE/created" 2>/dev/null ||
                echo "$1 $_sbx ${_f#* }" >>"$STATE/created"
}

# state_is ID STATE: true when the session is in that state
state_is() { [ "$(field "$1" state)" = "$2" ]; }

# host_pids SBX: the host pids in the sandbox's cgroups (any controller, v1 or v2)
host_pids() {
        cat /sys/fs/cgroup/*/space/"$1"/cgroup.procs /sys/fs/cgroup/space/"$1"/cgroup.procs 2>/dev/null | sort -u
}

# alive_of PIDS...: those of the pids that still exist
alive_of() {
        for _p in "$@"; do [ -e "/proc/$_p" ] && echo "$_p"; done
        return 0
}

# snap_ids ID: the session's snapshot ids, oldest first
snap_ids() { sp snapshots -q "$1" </dev/null; }

# events_json ID: the whole event log, one JSON object per line
events_json() { sp events --json "$1" </dev/null; }

# own_spaced DATA LOG [ARGS...]: starts a spaced of the test's own on DATA (tests that
# kill or restart it), waits until it answers on $SPACE_HOST; its pid in SPACED_PID.
own_spaced() {
        _data=$1 _log=$2
        shift 2
        "$BIN/spaced" --data "$_data" "$@" </dev/null >>"$_log" 2>&1 &
        SPACED_PID=$!
        _i=0
        until sp health >/dev/null 2>&1; do
                kill -0 "$SPACED_PID" 2>/dev/null || { echo "spaced exited at start:"; tail -n 20 "$_log"; return 1; }
                _i=$((_i + 1))
                [ $_i -gt 600 ] && { echo "spaced did not answer within 60 s"; return 1; }
                sleep 0.1
        done
}

# own_spaced_stop: deletes every session of the daemon own_spaced started, stops it with
# SIGTERM (SIGKILL after 20 s) and forgets SPACED_PID.
own_spaced_stop() {
        if [ -n "${SPACED_PID:-}" ] && kill -0 "$SPACED_PID" 2>/dev/null; then
                for _s in $(sp ls --quiet 2>/dev/null); do sp rm "$_s" >/dev/null 2>&1; done
                kill -TERM "$SPACED_PID"
                for _i in $(seq 1 200); do kill -0 "$SPACED_PID" 2>/dev/null || break; sleep 0.1; done
                kill -0 "$SPACED_PID" 2>/dev/null && { echo "spaced ignored SIGTERM for 20 s"; kill -KILL "$SPACED_PID"; }
        fi
        SPACED_PID=
}
