#!/bin/bash
# microVM sessions through the real spaced (docs/runtime-microvm.md): a session on the
# microvm runtime runs python3 from the Debian base tree, its files go both ways through
# the file API and show in a snapshot diff, QEMU sits in its own cgroup as a non-root
# user, a background counter survives pause -> resume and two forks, killing QEMU brings
# the session back from its newest snapshot, its processes survive a daemon restart, and
# delete leaves nothing behind.
# Usage: test_daemon_microvm.sh SPACED_BINARY   (space-init and space-store next to it)
. "$(dirname "$0")/../daemon/lib.sh" mvd "${1:-}"

command -v qemu-system-x86_64 >/dev/null || { echo "FAIL: qemu-system-x86_64 is missing (scripts/install-deps installs it)"; exit 1; }
GUEST_CACHE=${SPACE_GUEST_DIR:-/var/cache/space/guest}
# build-guest exits 3 when this machine cannot fetch the kernel package: a skip; any
# other failure is ours.
"$(dirname "$0")/../../../scripts/build-guest" >"$T/build-guest.log" 2>&1
rc=$?
[ $rc -eq 3 ] && { echo "SKIP: no guest kernel, and this machine cannot fetch one: $(tail -n 1 "$T/build-guest.log")"; exit $SKIP; }
[ $rc -eq 0 ] || { echo "FAIL: scripts/build-guest exited $rc:"; tail -n 5 "$T/build-guest.log"; exit 1; }
# The Debian base tree comes through spaced's own template build (template_ensure_base:
# the debootstrap cache in ${SPACE_CACHE:-/var/cache/space}, or debootstrap on a fresh
# machine), so this test needs no other test to have run first.
if ! ls "${SPACE_CACHE:-/var/cache/space}"/debootstrap-bookworm-*.tar.zst >/dev/null 2>&1 && ! command -v debootstrap >/dev/null; then
        echo "SKIP: no cached debootstrap in ${SPACE_CACHE:-/var/cache/space} and no debootstrap to make one"
        exit $SKIP
fi

# Template images and warm images go to a private guest dir, removed with $T.
export SPACE_GUEST_DIR=$T/guest
mkdir -p "$SPACE_GUEST_DIR"
ln -s "$GUEST_CACHE/vmlinux" "$SPACE_GUEST_DIR/vmlinux"
ln -s "$GUEST_CACHE/modules" "$SPACE_GUEST_DIR/modules"

grows() { # session: the counter file grows within 2 s
        local a b
        a=$(sh_in "$1" 'cat /root/counter')
        sleep 2
        b=$(sh_in "$1" 'cat /root/counter')
        echo "#   counter $a -> $b"
        [ -n "$a" ] && [ -n "$b" ] && [ "$b" -gt "$a" ]
}

start_daemon || exit 1
ACC=$(api http://x/v1/health | jget microvm_accel name)
WHY=$(api http://x/v1/health | jget microvm_accel reason)
echo "# accelerator: $ACC$([ "$ACC" = tcg ] && echo ' (software emulation: each VM step takes seconds)'), because: $WHY"
check "health says which accelerator microvm sessions get (${SPACE_MICROVM_ACCEL:-auto}), and why" \
        sh -c "[ '$ACC' = kvm ] || [ '$ACC' = tcg ] && [ -n \"\$1\" ]" _ "$WHY"
check "spaced logged the verdict at startup" grep -q "microvm accelerator: $ACC (" "$LOG"
if [ -z "${SPACE_MICROVM_ACCEL:-}" ] || [ "$SPACE_MICROVM_ACCEL" = auto ]; then
        check "auto probed /dev/kvm once and cached the verdict in the guest dir" grep -q "\"accel\":\"$ACC\"" "$SPACE_GUEST_DIR/accel.json"
fi
BUILD=$(api -X POST http://x/v1/templates -d '{"name":"base"}' | tail -n 1)
check "spaced built the base template (from the debootstrap cache, or debootstrap)" \
        test "$(echo "$BUILD" | jget type)" = done
[ "$(echo "$BUILD" | jget type)" = done ] || { echo "# template build answered: $BUILD"; finish "microvm daemon"; exit 1; }

# ---- create, exec, isolation ----
R=$(api -X POST http://x/v1/sessions -d '{"template":"base","runtime":"microvm","memory":"256M","snapshot_interval_ms":0}')
A=$(echo "$R" | jget id)
UA=http://x/v1/sessions/$A
check "a session asking for the microvm runtime (the daemon's default is ns) is running" test "$(echo "$R" | jget state)/$(echo "$R" | jget runtime)" = "running/microvm"
check "... and says it has memory snapshots" test "$(echo "$R" | jget capabilities memory_snapshots)" = true
check "python3 prints 42 inside the VM" test "$(sh_in "$A" "python3 -c 'print(6*7)'")" = 42
KV=$(sh_in "$A" 'uname -r')
check "the guest runs its own kernel ($KV)" test -n "$(echo "$KV" | grep cloud-amd64)"
touch "$T/host-marker"
check "the guest cannot see a host file" test "$(sh_in "$A" "test -e $T/host-marker && echo seen || echo absent")" = absent
check "the guest's PID 1 is space-init, not a host process" test "$(sh_in "$A" 'cat /proc/1/comm')" = init
# Root in the guest runs in a user namespace of the guest's own (guest_userns): still uid 0,
# still binds port 80, but no capability over space-init or the guest's kernel.
api -X PUT --data-binary @"$(dirname "$0")/takeover.py" "$UA/files?path=/root/takeover.py" >/dev/null
TK=$(sh_in "$A" 'python3 /root/takeover.py 2>&1')
echo "# takeover attempts: $TK"
for want in seize:EPERM getfd:EPERM mem:EACCES fd:EACCES fdopen:EACCES module:EPERM uid:0 bind80:ok; do
        check "root in the guest: ${want%%:*} -> ${want#*:}" grep -qw -- "$want" <<<"$TK"
done
QPID=$(api "$UA" | jget init_pid)
SBX=$(api "$UA" | jget sandbox_id)
check "QEMU is in the session's own cgroup" grep -q "$SBX" "/proc/$QPID/cgroup"
check "QEMU does not run as root" test "$(awk '/^Uid:/{print $2}' "/proc/$QPID/status")" != 0

# ---- files both ways, and a snapshot diff ----
check "a file uploaded with the file API is read inside" sh -c "echo from-host | curl -sS --unix-socket '$S' -X PUT --data-binary @- '$UA/files?path=/root/up.txt' >/dev/null && test \"\$(curl -sS --unix-socket '$S' -X POST '$UA/exec' -d '{\"argv\":[\"cat\",\"/root/up.txt\"]}' | grep -c from-host)\" = 1"
S1=$(api -X POST "$UA/snapshots" | jget store_snapshot)
sh_in "$A" 'echo written inside > /root/inside.txt' >/dev/null
check "a file written inside is read with the file API" test "$(api "$UA/files?path=/root/inside.txt")" = "written inside"
S2=$(api -X POST "$UA/snapshots" | jget store_snapshot)
DIFF=$("$BIN/space-store" --store "$DATA/store" diff "$S1" "$S2" 2>&1)
echo "$DIFF" | sed 's/^/#   diff: /' | head -n 5
check "the snapshot diff shows the file written inside" sh -c "echo '$DIFF' | grep -q 'root/inside.txt'"
# the second memory image was stored against the first: its changed RAM chunks as deltas,
# which only packs of the delta version (byte 4 of the header: 2) hold
check "the second memory image stores changed chunks as deltas (a pack of version 2)" sh -c "for p in '$DATA'/store/packs/*.pack; do [ \"\$(od -An -tu1 -j4 -N1 \"\$p\" | tr -d ' ')\" = 2 ] && exit 0; done; exit 1"

# ---- a background counter across pause -> resume and fork x2 ----
api -X POST "$UA/exec" -d '{"argv":["sh","-c","i=0; while :; do i=$((i+1)); echo $i > /root/counter.new; mv /root/counter.new /root/counter; sleep 0.2; done"],"background":true}' >/dev/null
sleep 1
R=$(api -X POST "$UA/pause" -w '\n%{http_code}')
check "pause answers 200, paused" test "$(echo "$R" | tail -n 1)/$(echo "$R" | head -n 1 | jget state)" = "200/paused"
check "nothing of the VM is left while paused" sh -c "! kill -0 $QPID 2>/dev/null"
R=$(api -X POST "$UA/resume" -w '\n%{http_code}')
check "resume answers 200, running" test "$(echo "$R" | tail -n 1)/$(echo "$R" | head -n 1 | jget state)" = "200/running"
check "the counter goes on after resume (same process, restored memory)" grows "$A"
R=$(api -X POST "$UA/fork" -d '{"count":2}')
F1=$(echo "$R" | jget sessions 0 id)
F2=$(echo "$R" | jget sessions 1 id)
check "fork 1 runs the counter on" grows "$F1"
check "fork 2 runs the counter on" grows "$F2"
sh_in "$F1" 'echo one > /root/who' >/dev/null
sh_in "$F2" 'echo two > /root/who' >/dev/null
check "the forks are independent" test "$(sh_in "$F1" 'cat /root/who')/$(sh_in "$F2" 'cat /root/who')/$(sh_in "$A" 'cat /root/who 2>/dev/null || echo none')" = "one/two/none"

# ---- killing QEMU: recovery from the newest snapshot ----
sh_in "$A" 'echo before-crash > /root/crash.txt' >/dev/null
api -X POST "$UA/snapshots" >/dev/null
QPID=$(api "$UA" | jget init_pid)
kill -9 "$QPID"
sleep 1
wait_state "$A" running 600
check "after QEMU was killed the session is running again, recovered once" test "$(api "$UA" | jget recoveries)" = 1
check "... with the newest snapshot's files" test "$(sh_in "$A" 'cat /root/crash.txt')" = before-crash
check "... on a new QEMU" test "$(api "$UA" | jget init_pid)" != "$QPID"

# ---- a daemon restart: the VM is checkpointed at shutdown and restored at start ----
QPIDS="$(api "$UA" | jget init_pid) $(api "http://x/v1/sessions/$F1" | jget init_pid) $(api "http://x/v1/sessions/$F2" | jget init_pid)"
kill -TERM "$PID"
# shutdown checkpoints three VMs: seconds on a loaded host (gone waits 3 s only)
for _ in $(seq 20); do gone "$PID" && break; done # up to 60 s
for q in $QPIDS; do check "spaced stopped: QEMU $q is gone" gone "$q"; done
start_daemon || exit 1
wait_state "$A" running 600
check "after the restart the counter goes on (processes restored from the shutdown checkpoint)" grows "$A"

# ---- delete leaves nothing ----
for s in "$A" "$F1" "$F2"; do
        P=$(api "http://x/v1/sessions/$s" | jget init_pid)
        X=$(api "http://x/v1/sessions/$s" | jget sandbox_id)
        check "delete $s answers 204" test "$(code -X DELETE "http://x/v1/sessions/$s")" = 204
        check "... QEMU is gone" gone "$P"
        check "... its cgroup is gone" test -z "$(find /sys/fs/cgroup -maxdepth 4 -name "$X" 2>/dev/null)"
        check "... its sandbox directory is gone" test ! -e "$DATA/sandboxes/$X"
done

finish "microvm daemon"
