#!/bin/bash
# The escape attempts: one function per attempt, one ctest test per function
# (tests/security/CMakeLists.txt lists them). Each makes the attempt from inside a real
# sandbox (or through the API against one), prints what it tried and what stopped it, and
# fails if anything got through. Usage: attempts.sh BIN_DIR STATE_DIR PROBE ATTEMPT
. "$(dirname "$0")/lib.sh"

# ---- host files through /proc --------------------------------------------------------

attempt_proc1_root() {
        tried "cat /proc/1/root$TOKEN_PATH (the host's pid 1 root, as from a container without a pid namespace)"
        out=$(inside -- cat "/proc/1/root$TOKEN_PATH")
        echo "  $out"
        comm=$(inside -- cat /proc/1/comm)
        if not_token "$out" "/proc/1/root"; then
                stopped "pid namespace: /proc/1 is \"$comm\" (the sandbox's space-init), its root is the sandbox's own root (pivot_root, old root detached)"
        fi
        tried "read /proc/1/root/etc/shadow and compare it with the host's"
        in=$(inside -- cat /proc/1/root/etc/shadow | sha256sum)
        host=$(sha256sum </etc/shadow)
        if [ "$in" = "$host" ]; then
                leak "/proc/1/root/etc/shadow inside is the host's /etc/shadow"
        else
                stopped "it is the template's /etc/shadow (different from the host's)"
        fi
}

attempt_proc_self_root() {
        for p in "/proc/self/root$TOKEN_PATH" "/proc/self/cwd/../../../../../..$TOKEN_PATH" \
                "/proc/self/root/../../..$TOKEN_PATH" "/proc/thread-self/root$TOKEN_PATH"; do
                tried "cat $p"
                out=$(inside -- cat "$p")
                echo "  $out"
                not_token "$out" "$p" && stopped "mount namespace: /proc/self/root is the sandbox's root; .. of / is /"
        done
}

attempt_proc_host_pids() {
        host_pids="1 $SPACED_PID $$ $(pgrep -x sshd | head -3 | tr '\n' ' ')"
        tried "guess host pids ($host_pids): read /proc/PID/comm, environ, root$TOKEN_PATH"
        for p in $host_pids; do
                out=$(insh "cat /proc/$p/comm 2>&1; tr '\\0' ' ' </proc/$p/environ 2>&1 | head -c 300; cat /proc/$p/root$TOKEN_PATH 2>&1")
                hostcomm=$(cat "/proc/$p/comm" 2>/dev/null)
                echo "  pid $p (host: $hostcomm) inside: $(echo "$out" | head -1)"
                not_token "$out" "/proc/$p/root" || continue
                first=$(echo "$out" | head -1)
                case $out in
                *"SPACE_HOST="* | *"spaced"* | *"attempts.sh"*) leak "pid $p inside shows the host's process" ;;
                *) case $first in
                   *"No such"*) stopped "pid namespace: there is no pid $p inside" ;;
                   *) stopped "pid namespace: pid $p inside is the sandbox's own \"$first\"" ;;
                   esac ;;
                esac
        done
        tried "list every /proc/PID inside and look for the daemon"
        procs=$(insh 'for p in /proc/[0-9]*; do echo "${p#/proc/}:$(cat $p/comm 2>/dev/null)"; done')
        n=$(echo "$procs" | wc -l)
        echo "  $n processes visible: $(echo $procs)"
        case $procs in
        *spaced* | *systemd* | *sshd*) leak "a host process is visible" ;;
        *) stopped "pid namespace: only the sandbox's $n processes (the host has $(ls -d /proc/[0-9]* | wc -l))" ;;
        esac
}

attempt_mountinfo() {
        parent=$(dirname "$DATA")
        tried "read /proc/self/mountinfo, /proc/1/mountinfo, /proc/mounts and look for host paths ($DATA, $BIN)"
        out=$(insh 'cat /proc/self/mountinfo /proc/1/mountinfo /proc/mounts /proc/self/mountstats')
        echo "$out" | grep -E ' / |overlay' | head -3 | sed 's/^/  /'
        bad=$(echo "$out" | grep -F -e "$DATA" -e "$BIN" -e "/sandboxes/" -e "/templates/")
        if [ -n "$bad" ]; then
                leak "host paths in the sandbox's mount table: $(echo "$bad" | head -2)"
        else
                stopped "overlay layers mounted by fd (lowerdir=/proc/self/fd/N), every other mount made fresh inside"
        fi
        tried "read /proc/self/cgroup and look for the daemon's cgroup path"
        cg=$(inside -- cat /proc/self/cgroup)
        echo "  $(echo $cg)"
        case $cg in
        *space/sbx_*) leak "the sandbox sees its host cgroup path" ;;
        *) stopped "cgroup namespace: the sandbox's cgroup is its root (/)" ;;
        esac
}

attempt_proc_masked() {
        tried "read /proc/kcore, /proc/kmsg, /proc/keys, /proc/timer_list, /proc/sched_debug, /proc/latency_stats"
        out=$(insh 'for f in /proc/kcore /proc/kmsg /proc/keys /proc/timer_list /proc/sched_debug /proc/latency_stats; do
                [ -e $f ] || { echo "$f absent"; continue; }; echo "$f $(timeout 2 head -c 65536 $f 2>/dev/null | wc -c) bytes"; done')
        echo "$out" | sed 's/^/  /'
        if echo "$out" | grep -qE ' [1-9][0-9]* bytes'; then
                leak "a masked /proc file has content"
        else
                stopped "masked: /dev/null bound over them (kcore, kmsg, keys, timer_list, …)"
        fi
}

attempt_sysrq() {
        [ -e /proc/sysrq-trigger ] || skip_attempt "this kernel has no /proc/sysrq-trigger (CONFIG_MAGIC_SYSRQ off): nothing to attack"
        tried "echo h > /proc/sysrq-trigger (h only prints help: harmless if it passed)"
        out=$(insh 'echo h > /proc/sysrq-trigger && echo WROTE')
        echo "  $out"
        case $out in
        *WROTE*) leak "sysrq-trigger accepted a write" ;;
        *) stopped "/proc/sysrq-trigger bound read-only" ;;
        esac
}

attempt_proc_sys_write() {
        for k in kernel/core_pattern kernel/modprobe vm/overcommit_memory kernel/randomize_va_space kernel/hung_task_timeout_secs; do
                [ -e "/proc/sys/$k" ] || continue # not in this kernel
                cur=$(cat "/proc/sys/$k")
                # write back the host's current value: a success is detectable and harmless
                tried "write the current value back to /proc/sys/$k"
                out=$(inside -- sh -c "printf '%s\n' \"\$1\" > /proc/sys/$k && echo WROTE" sh "$cur")
                echo "  $out"
                case $out in
                *WROTE*) leak "/proc/sys/$k is writable from inside" ;;
                *) stopped "/proc/sys bound read-only (and no CAP_SYS_ADMIN over the host's sysctls)" ;;
                esac
        done
}

attempt_sys_write() {
        tried "touch /sys/sec-test; write /sys/kernel/uevent_helper (its current value); mkdir /sys/fs/cgroup/x"
        cur=$(cat /sys/kernel/uevent_helper 2>/dev/null)
        out=$(inside -- sh -c 'touch /sys/sec-test && echo WROTE1; printf "%s\n" "$1" > /sys/kernel/uevent_helper && echo WROTE2; mkdir /sys/fs/cgroup/x && echo WROTE3' sh "$cur")
        echo "$out" | sed 's/^/  /'
        case $out in
        *WROTE*) leak "a write to /sys succeeded" ;;
        *) stopped "sysfs mounted read-only inside; no cgroup filesystem mounted under it" ;;
        esac
}

attempt_cgroup_mount() {
        tried "mount a cgroup v1 hierarchy to set release_agent (CVE-2022-0492 style), and cgroup2"
        probe_refused "seccomp (mount is refused) and no CAP_SYS_ADMIN" EPERM mount cgroup /tmp/cg
        probe_refused "seccomp (mount is refused) and no CAP_SYS_ADMIN" EPERM mount cgroup2 /tmp/cg2
}

# ---- devices ---------------------------------------------------------------------

attempt_mknod_block() {
        tried "mknod a block device for the host's first disk (8:0) and open it"
        probe_refused "no CAP_MKNOD (and /tmp, the overlay are nodev)" EPERM mknod /tmp/sda b 8 0
        probe_refused "no CAP_MKNOD" EPERM mknod /root/vda b 253 0
}

attempt_mknod_mem() {
        tried "mknod /dev/mem (1:1) and /dev/kmsg (1:11) in a writable place"
        probe_refused "no CAP_MKNOD" EPERM mknod /root/mem c 1 1
        probe_refused "no CAP_MKNOD" EPERM mknod /dev/shm/kmsg c 1 11
}

attempt_dev_minimal() {
        tried "list /dev and look for anything beyond the minimal set; find block devices anywhere"
        got=$(inside -- ls -A /dev | tr '\n' ' ')
        echo "  /dev: $got"
        extra=
        for e in $got; do
                case $e in
                fd | full | null | ptmx | pts | random | shm | stderr | stdin | stdout | tty | urandom | zero | mqueue) ;;
                *) extra="$extra $e" ;;
                esac
        done
        [ -z "$extra" ] && stopped "/dev is a small tmpfs with six host nodes bound in" || leak "unexpected /dev entries:$extra"
        blk=$(insh 'find / -xdev -type b 2>/dev/null; find /dev -type b 2>/dev/null' | head -5)
        [ -z "$blk" ] && stopped "templates carry no device nodes; none can be made" || leak "block devices inside: $blk"
}

# ---- processes -------------------------------------------------------------------

attempt_ptrace_daemon() {
        tried "ptrace(PTRACE_ATTACH) the daemon (host pid $SPACED_PID) and the host's pid 1"
        for p in "$SPACED_PID" 1; do
                # a pid the namespace lacks answers ESRCH; another errno is another mechanism.
                # Pid 1 inside is space-init, which is not dumpable: EPERM (attempt_init_ptrace)
                e=ESRCH
                [ "$p" = 1 ] && e=EPERM
                out=$(inside -- "$PROBE" --expect $e ptrace "$p")
                rc=$?
                echo "  $out"
                case $rc/$out in
                1/*) [ $e = ESRCH ] && stopped "pid namespace: no process $p inside (ESRCH)" ||
                        stopped "pid namespace: pid 1 inside is the sandbox's space-init, not dumpable (EPERM)" ;;
                3/*) defect "ptrace($p) was refused, but not with ESRCH: not by the pid namespace" ;;
                0/*space-init* | 0/*"a process of this sandbox"*)
                        case $out in
                        *spaced*) leak "attached to the daemon" ;;
                        *) stopped "pid namespace: pid $p inside is the sandbox's own process" ;;
                        esac ;;
                *) broken "$out" ;;
                esac
        done
        kill -0 "$SPACED_PID" && stopped "spaced is alive and untraced ($(awk '/^TracerPid/ {print "TracerPid " $2}' /proc/$SPACED_PID/status))"
}

# space-init holds the daemon's connection, the listening socket the daemon reconnects
# to (bound in a host directory) and a descriptor of the root: root inside must reach none.
attempt_init_ptrace() {
        tried "ptrace(PTRACE_SEIZE, 1) and ptrace(PTRACE_ATTACH, 1): take over space-init as root inside"
        probe_refused "space-init is not dumpable and root inside has no CAP_SYS_PTRACE" EPERM ptrace_seize 1
        probe_refused "space-init is not dumpable and root inside has no CAP_SYS_PTRACE" EPERM ptrace 1
        tried "pidfd_open(1) + pidfd_getfd of fds 0..64: steal init's daemon connection, listening socket, root fd"
        probe_refused "pidfd_getfd needs ptrace access to space-init (not dumpable)" EPERM pidfd_getfd 1
        tried "open /proc/1/mem and /proc/1/fd/3 (init's daemon connection)"
        probe_refused "ptrace access check of /proc/1/mem (not dumpable)" EACCES read /proc/1/mem
        probe_refused "ptrace access check of /proc/1/fd (not dumpable)" EACCES read /proc/1/fd/3
        # the same attempts work on a process of the sandbox that is dumpable: the check is
        # real, and it is init's dumpable flag that stops them
        pid=$(sp exec -d "$MAIN" -- sleep 60 </dev/null)
        out=$(inside -- "$PROBE" pidfd_getfd "$pid")
        echo "  control, a sleep of the sandbox (pid $pid): $(echo "$out" | tail -1)"
        case $out in
        *"-> ok"*) stopped "only space-init is out of reach: a dumpable process of the sandbox is not" ;;
        *) broken "pidfd_getfd of the sandbox's own sleep failed too: $out" ;;
        esac
        sp kill "$MAIN" "$pid" KILL >/dev/null 2>&1
        main_works || leak "$MAIN no longer runs commands after the attempts"
}

# gvisor: space-init listens inside the sandbox (/dev/.space-init.sock, for the host's
# relay), and the newest connection wins: a process of the sandbox that connected would
# take the daemon's place (the daemon then marks the sandbox lost and recovers it from a
# snapshot: a rollback the sandbox chose).
attempt_init_socket_gvisor() {
        [ -x "${SPACE_RUNSC:-/usr/bin/runsc}" ] || skip_attempt "runsc is not installed: no gvisor sandbox to attack"
        gv=$(new_sandbox --template base --runtime gvisor --snapshot-interval 0) || broken "create a gvisor session"
        sp cp "$PROBE_HOST" "$gv:/root/sec-probe" </dev/null && sp exec "$gv" -- chmod 0755 /root/sec-probe </dev/null ||
                broken "install sec-probe in $gv"
        sbx=$(json_get "$(sp inspect --json "$gv" </dev/null)" sandbox_id)
        tried "in gvisor session $gv: connect to space-init's socket /dev/.space-init.sock twice, as the daemon's relay does, and wait for a HELLO"
        for i in 1 2; do
                out=$(inside "$gv" -- /root/sec-probe connect_unix /dev/.space-init.sock)
                echo "  $out"
                case $out in
                # "?": init asks who is there, and closes without an answer it trusts
                *'read ""'* | *'read "?"'* | *refused*) stopped "space-init speaks only to a relay from outside the sandbox (its credentials checked: no parent inside, as runsc exec gives); it closed this one without a HELLO" ;;
                *) leak "space-init answered a process of the sandbox: $out" ;;
                esac
        done
        tried "run space-init's own relay inside: /dev/.space-init --relay /dev/.space-init.sock (it answers with its real credentials)"
        out=$(insh "$gv" 'timeout 5 /dev/.space-init --relay /dev/.space-init.sock </dev/null | head -c 64 | od -An -c | head -2; echo "relay exit ${PIPESTATUS:-?}"')
        echo "  $(echo $out)"
        case $out in
        *relay\ exit*) stopped "the relay's pid has a parent inside the sandbox: refused" ;;
        *) broken "the relay did not run: $out" ;;
        esac
        sleep 1
        js=$(sp inspect --json "$gv" </dev/null)
        st=$(json_get "$js" state) now=$(json_get "$js" sandbox_id)
        echo "  session: state $st, sandbox $now (was $sbx)"
        if [ "$st" = running ] && [ "$now" = "$sbx" ] && [ "$(inside "$gv" -- echo alive)" = alive ]; then
                stopped "the daemon kept its connection: same sandbox, no recovery"
        else
                leak "the session lost its sandbox (state $st, sandbox $now): the sandbox forced a recovery"
        fi
        sp rm "$gv" >/dev/null </dev/null
}

attempt_init_host_path() {
        bin=$(dirname "$(readlink -f "$BIN/space-init")")
        tried "read /proc/1/environ, /proc/1/maps, readlink /proc/1/exe inside (space-init's host path is under $bin)"
        probe_refused "space-init is not dumpable: /proc/1/environ is closed" EACCES read /proc/1/environ
        probe_refused "space-init is not dumpable: /proc/1/maps is closed" EACCES read /proc/1/maps
        probe_refused "space-init is not dumpable: /proc/1/exe is closed" EACCES readlink /proc/1/exe
        tried "the same through the file API, which space-init serves itself (its own /proc/self)"
        for p in /proc/1/maps /proc/self/maps /proc/1/environ; do
                out=$(dl "$p")
                echo "  $p: $(echo "$out" | grep -m1 -E 'space-init|SPACE|rror' | head -c 160)"
                case $out in
                *"$bin"* | *"$BIN"* | *"$DATA"*) leak "$p through the API shows a host path" ;;
                *space-init*) stopped "space-init runs from a sealed memfd: its maps name /memfd:space-init, no host path" ;;
                *SPACE_INIT_FD=*) stopped "init's own environment holds no host path (its fd numbers, the sandbox id, PATH, HOME, LANG)" ;;
                *) stopped "$(api_why "$out")" ;;
                esac
        done
}

attempt_host_kernel_facts() {
        tried "read /sys/kernel/notes (the host kernel's build id), /sys/kernel/vmcoreinfo, /sys/kernel/btf/vmlinux, /sys/firmware inside and through the API"
        for f in /sys/kernel/notes /sys/kernel/vmcoreinfo /sys/kernel/btf/vmlinux; do
                [ -e "$f" ] || { echo "  $f: not on this host"; continue; }
                n=$(insh "[ -e $f ] || { echo absent; exit; }; head -c 65536 $f 2>/dev/null | wc -c")
                api=$(sp cp "$MAIN:$f" - </dev/null 2>"$TMPD/err" | wc -c)
                [ -s "$TMPD/err" ] && echo "  API: $(head -c 160 "$TMPD/err")"
                echo "  $f: host $(head -c 65536 "$f" | wc -c) bytes, inside $n, through the API $api"
                case $n in
                absent | 0) stopped "masked: /dev/null or an empty tmpfs over it" ;;
                *) leak "$f inside has the host kernel's content" ;;
                esac
                [ "$api" -eq 0 ] && stopped "the file API (space-init, in the sandbox's mounts) meets the same mask: $(head -c 80 "$TMPD/err")" ||
                        leak "$f through the API has $api bytes"
        done
        fw=$(insh 'ls -A /sys/firmware 2>/dev/null | wc -l')
        echo "  /sys/firmware inside: $fw entries (host: $(ls -A /sys/firmware | wc -l))"
        [ "$fw" -eq 0 ] && stopped "/sys/firmware is an empty tmpfs" || leak "the host's firmware tables are visible"
}

attempt_kill_daemon() {
        tried "kill -9 the daemon by its host pid $SPACED_PID, then kill -9 -1 (every process the sandbox may signal)"
        out=$(inside -- "$PROBE" kill "$SPACED_PID" 0)
        echo "  $out"
        case $out in
        *"-> ok"*) echo "  (pid $SPACED_PID exists inside: one of the sandbox's own)" ;;
        esac
        # a victim on the host with the sandbox root's host uid: without a pid namespace a
        # kill(-1) from root inside would reach it
        setpriv --reuid=100000 --regid=100000 --clear-groups sleep 120 &
        victim=$!
        sleep 0.2
        sb=$(new_sandbox) || broken "create"
        insh "$sb" 'kill -9 -1; echo killed-all' | sed 's/^/  /'
        sleep 0.5
        if kill -0 "$SPACED_PID" 2>/dev/null && daemon_alive; then
                stopped "pid namespace: the daemon is out of reach"
        else
                leak "the daemon died"
        fi
        if kill -0 "$victim" 2>/dev/null; then
                stopped "pid namespace: a host process of the same host uid (100000) survived kill -9 -1"
        else
                leak "the host process of uid 100000 was killed"
        fi
        kill "$victim" 2>/dev/null
        wait "$victim" 2>/dev/null
        sp rm "$sb" >/dev/null
}

attempt_other_sandbox_procs() {
        b=$(new_sandbox) || broken "create"
        marker="sec-marker-$$"
        bpid=$(sp exec -d "$b" -- bash -c "exec -a $marker sleep 300" </dev/null)
        sleep 0.3
        hostpid=$(host_pids "$(sandbox_of "$b")" | while read -r p; do grep -q sleep /proc/$p/comm 2>/dev/null && echo $p; done | head -1)
        tried "from $MAIN: find $b's process ($marker, pid $bpid inside it, $hostpid on the host) and kill it"
        out=$(insh 'cat /proc/[0-9]*/cmdline 2>/dev/null | tr "\0" " "')
        case $out in
        *"$marker"*) leak "another sandbox's process is visible" ;;
        *) stopped "pid namespaces: $b's processes are not in $MAIN's /proc" ;;
        esac
        inside -- "$PROBE" kill "${hostpid:-999999}" 9 | sed 's/^/  /'
        inside -- "$PROBE" kill "$bpid" 9 | sed 's/^/  /'
        sleep 0.3
        if [ -n "$hostpid" ] && [ -e "/proc/$hostpid" ]; then
                stopped "pid namespaces: $b's sleep survived kills by its host and inner pid numbers"
        else
                leak "$b's process died"
        fi
        sp rm "$b" >/dev/null
}

attempt_other_sandbox_files() {
        b=$(new_sandbox) || broken "create"
        secret="other-sandbox-secret-$$-$RANDOM"
        insh "$b" "echo $secret > /root/secret; echo $secret > /tmp/secret" >/dev/null
        bsbx=$(sandbox_of "$b")
        tried "from $MAIN: find $b's files (/proc/*/root, a search of /, the host path of its upper dir $LAYERS/sandboxes/$bsbx)"
        out=$(insh "grep -rs $secret /proc/[0-9]*/root/root /proc/[0-9]*/root/tmp 2>/dev/null | head -3;
                find / -xdev -name secret 2>/dev/null | head -3; cat $LAYERS/sandboxes/$bsbx/upper/root/secret 2>&1")
        echo "$out" | head -4 | sed 's/^/  /'
        case $out in
        *"$secret"*) leak "another sandbox's file is readable" ;;
        *) stopped "mount namespaces: each sandbox has its own overlay; the host's paths do not exist inside" ;;
        esac
        sp rm "$b" >/dev/null
}

attempt_setuid_nnp() {
        tried "a setuid-root copy of sec-probe run by uid 1000: does it gain euid 0?"
        insh 'cp /usr/local/bin/sec-probe /usr/local/bin/sec-probe-suid && chmod 4755 /usr/local/bin/sec-probe-suid' >/dev/null
        out=$(inside -- "$PROBE" drop_exec 1000 /usr/local/bin/sec-probe-suid ids)
        echo "  $out"
        nnp=$(inside -- sh -c 'grep NoNewPrivs /proc/self/status' | awk '{print $2}')
        case $out in
        *"euid 1000"*) stopped "no_new_privs (NoNewPrivs: $nnp) and the nosuid overlay: the setuid bit is inert" ;;
        *"euid 0"*) leak "setuid gave euid 0" ;;
        *) broken "$out" ;;
        esac
}

attempt_capabilities() {
        tried "read CapEff/CapBnd inside and look for SYS_ADMIN, NET_ADMIN, SYS_MODULE, SYS_PTRACE, SYS_RAWIO, MKNOD, NET_RAW, SYS_BOOT, SYS_TIME, BPF, PERFMON"
        st=$(inside -- grep -E '^Cap(Eff|Bnd|Amb|Inh)' /proc/self/status)
        echo "$st" | sed 's/^/  /'
        for set in CapEff CapBnd; do
                v=$(echo "$st" | awk -v s="$set:" '$1 == s { print $2 }')
                [ -n "$v" ] || broken "no $set"
                bad=
                for cap in 21:SYS_ADMIN 12:NET_ADMIN 16:SYS_MODULE 19:SYS_PTRACE 17:SYS_RAWIO 27:MKNOD 13:NET_RAW 22:SYS_BOOT 25:SYS_TIME 39:BPF 38:PERFMON 24:SYS_RESOURCE; do
                        bit=${cap%%:*}
                        if [ $(( (0x$v >> bit) & 1 )) -eq 1 ]; then bad="$bad ${cap#*:}"; fi
                done
                [ -z "$bad" ] && stopped "$set $v: capabilities dropped from the bounding set before exec" || leak "$set has$bad"
        done
}

# ---- mounts and namespaces ---------------------------------------------------------

attempt_mount_tmpfs() {
        tried "mount a tmpfs, bind-mount /, remount / read-write"
        probe_refused "seccomp refuses mount and root inside has no CAP_SYS_ADMIN" EPERM mount tmpfs /mnt/sec
        probe_refused "seccomp refuses mount" EPERM bind / /mnt/secbind
        probe_refused "seccomp refuses mount" EPERM remount /proc/sys
}

attempt_umount() {
        tried "umount the masks over /proc/kcore and /proc/sys to uncover them, and /proc itself"
        probe_refused "seccomp refuses umount2; the mounts are locked in the sandbox's mount namespace" EPERM umount /proc/kcore
        probe_refused "seccomp refuses umount2" EPERM umount /proc/sys
        probe_refused "seccomp refuses umount2" EPERM umount /proc
}

attempt_pivot_root() {
        tried "pivot_root into a new root"
        probe_refused "seccomp refuses pivot_root" EPERM pivot_root
}

attempt_unshare_user() {
        tried "unshare(CLONE_NEWUSER) and clone(CLONE_NEWUSER): a nested user namespace with a full capability set"
        probe_refused "seccomp refuses CLONE_NEWUSER (an argument rule on clone/unshare)" EPERM unshare user
        probe_refused "seccomp refuses CLONE_NEWUSER" EPERM clone_newuser
        out=$(inside -- unshare -Ur id 2>&1)
        echo "  unshare -Ur id: $out"
        case $out in
        *"uid=0"*) leak "unshare -Ur worked" ;;
        *) stopped "util-linux unshare -Ur fails the same way" ;;
        esac
}

attempt_unshare_mount() {
        tried "unshare -m (a private mount namespace to mount in)"
        probe_refused "no CAP_SYS_ADMIN in the sandbox's user namespace" EPERM unshare mount
}

attempt_unshare_net() {
        tried "unshare -n, -p, -u, -i, -C, -T"
        for ns in net pid uts ipc cgroup time; do
                probe_refused "no CAP_SYS_ADMIN" EPERM unshare "$ns"
        done
}

attempt_setns() {
        tried "setns into /proc/1/ns/{mnt,net,pid,user,cgroup} (pid 1 = the host's init, if it were visible) and into the sandbox's own /proc/self/ns/*"
        for ns in mnt net pid user cgroup; do
                probe_refused "space-init is not dumpable: its /proc/1/ns links are closed to the sandbox (and /proc/1 is the sandbox's own init anyway)" EACCES setns "/proc/1/ns/$ns"
                probe_refused "seccomp refuses setns" EPERM setns "/proc/self/ns/$ns"
        done
}

attempt_chroot_escape() {
        tried "the classic chroot escape: chroot(subdir) keeping a cwd outside, chdir(..) ×64, chroot(.), then look for $TOKEN_PATH"
        probe_refused "the walk ends at the sandbox's root (pivot_root + detached old root): nothing above it" ENOENT chroot_escape "$TOKEN_PATH"
}

# ---- network -----------------------------------------------------------------------

# start_listener: a TCP listener on every host address (:: dual-stack) that greets with a
# line; sets PORT and LISTENER_PID
start_listener() {
        PORT=$(free_port)
        timeout 300 socat TCP6-LISTEN:"$PORT",ipv6only=0,reuseaddr,fork SYSTEM:'echo host-listener' &
        LISTENER_PID=$!
        # A loaded host may take a while to start socat: wait until it answers.
        for _ in $(seq 1 100); do
                socat -u TCP4:127.0.0.1:"$PORT",connect-timeout=1 STDOUT >/dev/null 2>&1 && return 0
                sleep 0.1
        done
}

attempt_net_loopback() {
        start_listener
        port=$PORT
        ctl=$(socat -u -T 2 TCP4:127.0.0.1:"$port",connect-timeout=2 STDOUT 2>&1)
        [ "$ctl" = "host-listener" ] || broken "the host listener does not answer on the host ($ctl)"
        tried "connect to a host listener on 127.0.0.1:$port and [::1]:$port (it answers on the host: '$ctl')"
        probe_refused "network namespace: the sandbox's loopback is its own" ECONNREFUSED connect 127.0.0.1 "$port"
        probe_refused "network namespace" ECONNREFUSED connect ::1 "$port"
        kill "$LISTENER_PID" 2>/dev/null
}

attempt_net_host_addrs() {
        start_listener
        port=$PORT
        addrs=$(ip -o addr show 2>/dev/null | awk '$3 == "inet" || $3 == "inet6" { sub("/.*", "", $4); print $4 }' | grep -v '^fe80' | grep -vx -e 127.0.0.1 -e ::1)
        [ -n "$addrs" ] || addrs=$(hostname -I 2>/dev/null)
        [ -n "$addrs" ] || skip_attempt "the host has no address besides loopback"
        tried "connect to the host listener on every other host address: $(echo $addrs) (port $port), and to 1.1.1.1:53"
        for a in $addrs; do
                probe_refused "network namespace with loopback only: no route out" ENETUNREACH connect "$a" "$port"
        done
        probe_refused "no route: the only interface is lo" ENETUNREACH connect 1.1.1.1 53
        kill "$LISTENER_PID" 2>/dev/null
}

attempt_net_raw() {
        tried "raw IPv4/IPv6 sockets (ICMP) to forge packets"
        probe_refused "seccomp refuses SOCK_RAW (and no CAP_NET_RAW)" EPERM socket raw
        probe_refused "seccomp refuses SOCK_RAW" EPERM socket raw6
}

attempt_net_packet() {
        tried "AF_PACKET sockets (raw and datagram) and the legacy SOCK_PACKET to sniff"
        probe_refused "seccomp refuses AF_PACKET" EPERM socket packet
        probe_refused "seccomp refuses AF_PACKET" EPERM socket packet-dgram
        probe_refused "seccomp refuses SOCK_PACKET" EPERM socket inet-packet
        probe_refused "seccomp: families other than unix/inet/inet6/netlink (vsock to the hypervisor)" EAFNOSUPPORT socket vsock
}

attempt_net_interfaces() {
        tried "list network interfaces and routes"
        out=$(insh 'cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d " "; cat /proc/net/route | tail -n +2 | wc -l')
        echo "  interfaces: $(echo $out)"
        ifs=$(echo "$out" | head -n -1 | tr '\n' ' ')
        routes=$(echo "$out" | tail -1)
        if [ "$ifs" = "lo " ] && [ "$routes" = 0 ]; then
                stopped "network namespace: only lo, no IPv4 route"
        else
                leak "interfaces '$ifs', $routes IPv4 routes"
        fi
}

attempt_daemon_socket() {
        tried "find a unix socket named spaced.sock (or any socket) anywhere inside; connect to the daemon's host path $DATA/spaced.sock"
        out=$(insh 'find / -xdev \( -type s -o -name "spaced*" \) 2>/dev/null | head; ls /var/lib/space 2>&1')
        echo "  $(echo $out)"
        case $out in
        *spaced.sock*) leak "the daemon's socket is visible" ;;
        *) stopped "mount namespace: the data dir is not mounted inside" ;;
        esac
        probe_refused "the host path does not exist inside" ENOENT connect_unix "$DATA/spaced.sock"
}

attempt_abstract_unix() {
        name="space-sec-abstract-$$"
        timeout 300 socat ABSTRACT-LISTEN:"$name",fork SYSTEM:'echo host-abstract' &
        lp=$!
        sleep 0.3
        ctl=$(socat -u -T 2 ABSTRACT-CONNECT:"$name" STDOUT 2>&1)
        [ "$ctl" = "host-abstract" ] || broken "the host's abstract socket does not answer on the host ($ctl)"
        tried "connect to the abstract unix socket @$name the host listens on (answers '$ctl' on the host)"
        probe_refused "network namespace: abstract unix sockets belong to a network namespace" ECONNREFUSED connect_abstract "$name"
        kill "$lp" 2>/dev/null
}

# ---- resources -------------------------------------------------------------------

attempt_disk_fill() {
        health=$(sp health </dev/null)
        enforced=$(json_get "$health" disk_limits.enforced)
        [ "$enforced" = true ] || skip_attempt "this host has no quota volume (spaced's /v1/health: disk_limits.enforced=$enforced): $(json_get "$health" disk_limits.error)"
        sb=$(new_sandbox --disk 64M) || broken "create --disk 64M"
        limit=$(json_get "$(sp inspect --json "$sb" </dev/null)" limits.disk)
        [ "$limit" = $((64 << 20)) ] || broken "inspect shows disk limit '$limit', not 64M"
        tried "fill the disk from $sb (disk limit 64M): dd /dev/zero into /root until it fails"
        # What the writes cost the host's disk: the growth of the volume's sparse image (the
        # host's free space is printed too, but other programs on the machine move it).
        before=$(df -k --output=avail "$DATA" | tail -1)
        img_before=$(du -k "$DATA/vol.img" | cut -f1)
        out=$(insh "$sb" 'dd if=/dev/zero of=/root/fill bs=1M 2>&1 | head -5; sync; echo "size=$(wc -c </root/fill)"')
        after=$(df -k --output=avail "$DATA" | tail -1)
        img_after=$(du -k "$DATA/vol.img" | cut -f1)
        echo "  $(echo "$out" | tr '\n' ' ')"
        case $out in
        *"Disk quota exceeded"* | *"No space left"*) stopped "the writable layer's disk quota (btrfs qgroup of its subvolume on the quota volume): the write fails inside" ;;
        *) leak "dd ended without ENOSPC/EDQUOT" ;;
        esac
        size=$(echo "$out" | sed -n 's/^size=//p')
        [ -n "$size" ] && [ "$size" -le $((64 << 20)) ] && stopped "the file stopped at $size bytes (limit $((64 << 20)))" ||
                leak "the file grew to '$size' bytes, past the limit"
        used=$((img_after - img_before))
        if [ "$used" -le $((64 * 1024 + 16384)) ]; then
                stopped "the host's disk took $used KiB more (the volume image; at most the limit + 16M; host free ${before} → ${after} KiB)"
        else
                leak "the host's disk took $used KiB more, past the 64M limit (host free ${before} → ${after} KiB)"
        fi
        daemon_alive && stopped "spaced still answers" || defect "spaced stopped answering after the fill"
        main_works && stopped "$MAIN still runs commands" || defect "$MAIN stopped working after the fill"
        [ "$(insh "$MAIN" 'echo ok > /root/after-fill && cat /root/after-fill && rm /root/after-fill')" = ok ] &&
                stopped "$MAIN still writes files" || defect "$MAIN cannot write after another session filled its disk"
        again=$(insh "$sb" 'rm /root/fill && dd if=/dev/zero of=/root/again bs=1M count=8 2>/dev/null && wc -c </root/again')
        [ "$again" = $((8 << 20)) ] && stopped "after deleting the file $sb writes again (8M)" ||
                defect "after deleting the file $sb cannot write again ($again)"
        sp rm "$sb" </dev/null >/dev/null || defect "deleting $sb failed"
}

# pids_file SANDBOX_ID FILE: a file of the sandbox's pids cgroup (v1 or v2)
pids_file() { cat /sys/fs/cgroup/pids/space/"$1"/"$2" /sys/fs/cgroup/space/"$1"/"$2" 2>/dev/null | head -1; }

attempt_fork_bomb() {
        sb=$(new_sandbox --pids 128) || broken "create"
        sbx=$(sandbox_of "$sb")
        tried "a fork bomb in $sb (pids limit 128) for 15 s while $MAIN keeps working"
        # the leader stays: a background command's process group goes when its leader ends
        sp exec -d "$sb" -- sh -c 'b() { b | b & }; b; sleep 60' </dev/null >/dev/null
        sleep 3
        t0=$(now_ms)
        ok=0
        for i in 1 2 3 4 5; do main_works && ok=$((ok + 1)); done
        t1=$(now_ms)
        pc=$(pids_file "$sbx" pids.current)
        hits=$(pids_file "$sbx" pids.events | awk '{ print $2 }')
        echo "  $sb holds $pc pids, pids.max refused $hits forks; 5 commands in $MAIN: $ok succeeded in $((t1 - t0)) ms"
        [ "${hits:-0}" -gt 0 ] || broken "the bomb never reached the limit"
        [ "${pc:-999}" -le 128 ] && stopped "pids cgroup: pids.max 128 refused $hits forks" || leak "$sb holds ${pc:-?} pids"
        [ "$ok" -eq 5 ] && daemon_alive && stopped "the daemon and the other sandbox keep working" || leak "the bomb hurt the daemon or $MAIN"
        sleep 10
        out=$(inside "$sb" -- echo inside-the-bomb)
        echo "  a command in the bombing sandbox itself: $out"
        ipid=$(init_pid_of "$sb")
        sp rm "$sb" >/dev/null || leak "could not delete the bombing sandbox"
        left=$(leftovers "$sbx" "$ipid")
        [ -z "$left" ] && stopped "delete removed every process of the bomb" || leak "left after delete: $left"
}

attempt_memory_bomb() {
        sb=$(new_sandbox -m 64M) || broken "create"
        tried "allocate and touch 2 GiB in $sb (memory limit 64 MiB), twice"
        rss0=$(spaced_rss_kb)
        out=$(inside "$sb" -- python3 -c 'b = bytearray(2 << 30); print("allocated", len(b))')
        rc=$?
        echo "  exit $rc: $(echo "$out" | tail -1)"
        sleep 0.5
        oom=$(json_get "$(sp inspect --json "$sb" </dev/null)" health.oom_killed)
        if [ "$rc" -ne 0 ] && [ "$oom" = true ]; then
                stopped "memory cgroup (64 MiB, no swap): the OOM killer took the process (health.oom_killed=$oom)"
        else
                leak "2 GiB allocated under a 64 MiB limit (rc $rc, oom_killed $oom)"
        fi
        inside "$sb" -- sh -c 'head -c 1G /dev/zero | tail >/dev/null' >/dev/null
        out=$(inside "$sb" -- echo still-here)
        [ "$out" = "still-here" ] && main_works && daemon_alive &&
                stopped "the sandbox, its neighbour and the daemon keep working (daemon RSS $rss0 → $(spaced_rss_kb) KiB)" ||
                leak "after the bomb: '$out'"
        sp rm "$sb" >/dev/null
}

attempt_fd_exhaustion() {
        tried "raise RLIMIT_NOFILE to 2 Mi and open /dev/null until it fails"
        probe_refused "RLIMIT_NOFILE 4096 hard (raising it needs CAP_SYS_RESOURCE on the host)" EMFILE nofile
        main_works && daemon_alive && stopped "the sandbox and daemon keep working afterwards" || leak "fd exhaustion hurt the daemon"
}

# ---- per-user kernel limits (docs/security.md "Per-user kernel limits") ----

attempt_inotify_instances() {
        [ -x "$PROBE_HOST" ] || broken "the host's sec-probe $PROBE_HOST is missing"
        max=$(cat /proc/sys/fs/inotify/max_user_instances)
        sb=$(new_sandbox) || broken "create a sandbox"
        sp cp "$PROBE_HOST" "$sb:/usr/local/bin/sec-probe" </dev/null && sp exec "$sb" -- chmod 0755 /usr/local/bin/sec-probe </dev/null ||
                broken "install sec-probe in $sb"
        tried "take inotify instances in $sb until the kernel refuses (max_user_instances $max), hold them, and meanwhile inotify_init1 in $MAIN and as root on the host"
        out=$TMPD/inotify.out
        timeout 60 "$SPACE" exec "$sb" -- "$PROBE" inotify_hold 65536 20 </dev/null >"$out" 2>&1 &
        holder=$!
        for _ in $(seq 150); do grep -q '^held' "$out" && break; sleep 0.1; done
        held=$(sed -n 's/^held \([0-9]*\) .*/\1/p' "$out")
        echo "  $sb: $(cat "$out")"
        [ -n "$held" ] || { kill "$holder" 2>/dev/null; broken "the holder said nothing in 15 s"; }
        grep -q 'then EMFILE' "$out" && [ "$held" -le "$max" ] &&
                stopped "the sandbox stopped at $held instances with EMFILE (its own budget, at most $max)" ||
                leak "the sandbox took $held instances, not stopped by EMFILE within $max"
        m=$(inside -- "$PROBE" inotify_init)
        echo "  $MAIN: $m"
        case $m in
        *"-> ok"*) stopped "$MAIN still makes an inotify instance: the kernel charges each sandbox's to its own user namespace owner, not to a shared one" ;;
        *) leak "$MAIN cannot make an inotify instance while $sb holds its own: the budget is shared" ;;
        esac
        h=$("$PROBE_HOST" inotify_init 2>&1)
        echo "  host root: $h"
        case $h in
        *"-> ok"*) stopped "root on the host still makes one (the sandbox's are not charged to root)" ;;
        *) leak "root on the host cannot make an inotify instance while $sb holds its own" ;;
        esac
        wait "$holder"
        sp rm "$sb" </dev/null >/dev/null || defect "deleting $sb failed"
}

attempt_tmp_inodes() {
        sb=$(new_sandbox -m 128M) || broken "create"
        tried "create empty files in /dev/shm and /tmp until something stops it ($sb, memory 128 MiB)"
        out=$(inside "$sb" -- python3 -c '
import os, sys
for d, cap in (("/dev/shm", 200000), ("/tmp", 1200000)):
    n = 0
    try:
        while n < cap:
            os.close(os.open("%s/f%d" % (d, n), os.O_CREAT | os.O_WRONLY, 0o600)); n += 1
        print(d, n, "files: no limit hit", flush=True)
    except OSError as e:
        print(d, n, "files, then", e.strerror, flush=True)
')
        rc=$?
        echo "$out" | sed 's/^/  /'
        oom=$(json_get "$(sp inspect --json "$sb" </dev/null)" health.oom_killed)
        shm=$(echo "$out" | grep '^/dev/shm')
        case $shm in
        *"no limit"*) leak "/dev/shm took 200,000 files" ;;
        *then*) stopped "/dev/shm tmpfs bounds (nr_inodes 64 Ki, size): $shm" ;;
        *) broken "no /dev/shm result" ;;
        esac
        case $out in
        *"/tmp"*"no limit hit"*) leak "/tmp took 1.2 M files" ;;
        *"/tmp"*"then"*) stopped "/tmp tmpfs bounds ($(echo "$out" | grep '^/tmp'))" ;;
        *) [ "$rc" -ne 0 ] && stopped "memory cgroup: the tmpfs inodes are charged to the sandbox, the OOM killer stopped it (exit $rc, oom_killed=$oom)" ||
                broken "no /tmp result" ;;
        esac
        daemon_alive && main_works && stopped "the daemon and the other sandbox keep working" || leak "the file bomb hurt the daemon"
        sp rm "$sb" >/dev/null
}

# works_within SECONDS SESSION: a command in SESSION answers within SECONDS
works_within() { [ "$(timeout "$1" "$SPACE" exec "$2" -- echo alive </dev/null 2>/dev/null)" = "alive" ]; }

# flood_pids MARK: host pids of a sandbox's `sh -c '...; echo end' MARK` (the sandbox's
# processes are visible from the host; curl's own argv has MARK only inside JSON quotes)
flood_pids() { pgrep -f "end $1\$" | tr '\n' ' '; }

attempt_output_flood() {
        sb=$(new_sandbox) || broken "create"
        sock=${SPACE_HOST#unix:}
        u=http://x/v1/sessions/$sb
        mark=flood-$$-$RANDOM
        tried "in $sb two commands write 1 GiB each to stdout as fast as they can: one client reads nothing at all, the other reads 64 KiB/s (curl --limit-rate); meanwhile other requests on the same session; both hang up after 8 s; watch spaced's VmRSS"
        rss0=$(spaced_rss_kb)
        mkfifo "$TMPD/nobody"
        sleep 600 <"$TMPD/nobody" &
        hold=$!
        curl -sS -N --unix-socket "$sock" -X POST "$u/exec" -o "$TMPD/nobody" \
                -d "{\"argv\":[\"sh\",\"-c\",\"head -c 1073741824 /dev/zero; echo end\",\"$mark-a\"]}" 2>/dev/null &
        deaf=$!
        curl -sS -N --unix-socket "$sock" --limit-rate 64k -X POST "$u/exec" -o "$TMPD/slow" \
                -d "{\"argv\":[\"sh\",\"-c\",\"head -c 1073741824 /dev/zero; echo end\",\"$mark-b\"]}" 2>/dev/null &
        slow=$!
        peak=$rss0 t0=$(date +%s)
        sample() { r=$(spaced_rss_kb); [ "${r:-0}" -gt "$peak" ] && peak=$r; }
        sleep 2
        sample
        [ -n "$(flood_pids "$mark-a")" ] && [ -n "$(flood_pids "$mark-b")" ] || broken "the flooding commands did not start"
        t=$(date +%s%3N)
        out=$(timeout 5 "$SPACE" exec "$sb" -- echo ok </dev/null 2>&1)
        t=$(($(date +%s%3N) - t))
        if [ "$out" = ok ]; then
                stopped "per-stream windows: with both slow clients connected another exec in $sb answered in $t ms (only the slow streams are held back)"
        else
                defect "with a client that does not read connected, a new command in $sb gets no answer within 5 s: the whole session waits for it ($out)"
        fi
        w=$(timeout 5 curl -sS --unix-socket "$sock" -X PUT "$u/files?path=/root/flood-note" --data-binary 'note' -o /dev/null -w '%{http_code}')
        r=$(timeout 5 curl -sS --unix-socket "$sock" "$u/files?path=/root/flood-note")
        p=$(timeout 5 curl -sS --unix-socket "$sock" "$u/processes" -o /dev/null -w '%{http_code}')
        echo "  upload $w, download '$r', processes $p"
        if [ "$w/$r/$p" = "201/note/200" ]; then
                stopped "file writes, reads and ps on the same session answer meanwhile"
        else
                defect "file or process requests on $sb wait for the slow clients (upload $w, download '$r', processes $p)"
        fi
        while [ $(($(date +%s) - t0)) -lt 8 ]; do sample; sleep 0.5; done
        held=$(flood_pids "$mark-a")
        kill "$deaf" "$slow" 2>/dev/null
        wait "$deaf" "$slow" 2>/dev/null
        kill "$hold" 2>/dev/null
        wait "$hold" 2>/dev/null
        got=$(stat -c %s "$TMPD/slow" 2>/dev/null || echo 0)
        sleep 1
        after=$(spaced_rss_kb)
        echo "  the 64 KiB/s client got $got bytes in 8 s; spaced VmRSS $rss0 KiB before, peak $peak KiB, $after KiB after"
        if [ $((peak - rss0)) -lt 65536 ]; then
                stopped "back-pressure per stream: the daemon holds ≤ 256 KiB + one 128 KiB window per slow stream, then space-init stops reading that command's pipe, which stops the command (RSS grew $((peak - rss0)) KiB)"
        else
                leak "spaced grew by $((peak - rss0)) KiB while clients read slowly"
        fi
        [ -n "$held" ] && stopped "the unread command was held back, not run to its end (pids $held after 8 s)"
        # Once those clients are gone, the sandbox takes commands at once and their
        # commands are killed (docs/api.md: a client that disconnects during a foreground exec).
        if works_within 5 "$sb"; then
                stopped "after the slow clients hung up, the session answers at once"
        else
                defect "the session is wedged: after the slow clients of flooding execs hung up, a new command in $sb gets no answer"
                timeout 20 "$SPACE" rm "$sb" >/dev/null 2>&1
                sb=$(new_sandbox) || broken "create"
        fi
        for _ in $(seq 30); do [ -z "$(flood_pids "$mark-a")$(flood_pids "$mark-b")" ] && break; sleep 0.1; done
        left=$(flood_pids "$mark-a")$(flood_pids "$mark-b")
        [ -z "$left" ] && stopped "the commands of the gone clients were killed" ||
                defect "the flooding commands of the gone clients still run (pids $left)"
        tried "in $sb the same flood in a background process nobody reads (1 GiB), 5 s"
        bp=$(timeout 10 "$SPACE" exec -d "$sb" -- sh -c 'head -c 1073741824 /dev/zero; echo end' </dev/null)
        sleep 5
        r2=$(spaced_rss_kb)
        timeout 10 "$SPACE" kill "$sb" "$bp" KILL >/dev/null 2>&1
        echo "  spaced VmRSS $after → $r2 KiB"
        [ $((r2 - rss0)) -lt 65536 ] && stopped "space-init keeps only the last 1 MiB of a background process's output" ||
                leak "spaced grew by $((r2 - rss0)) KiB for an unread background flood"
        works_within 10 "$sb" && stopped "the sandbox still takes commands" || defect "$sb takes no command after the background flood"
        timeout 20 "$SPACE" rm "$sb" >/dev/null 2>&1
}

# ---- syscalls the seccomp filter refuses -----------------------------------------

attempt_keyctl() {
        tried "the kernel keyring (keyctl, add_key): shared kernel state, a history of bugs"
        probe_refused "seccomp: keyctl refused" EPERM keyctl
        probe_refused "seccomp: add_key refused" EPERM add_key
}
attempt_bpf() {
        tried "load an eBPF program"
        probe_refused "seccomp: bpf refused" EPERM bpf
}
attempt_perf_event_open() {
        tried "perf_event_open on itself"
        probe_refused "seccomp: perf_event_open refused" EPERM perf_event_open
}
attempt_userfaultfd() {
        tried "userfaultfd (used to win kernel races)"
        probe_refused "seccomp: userfaultfd refused" EPERM userfaultfd
}
attempt_io_uring() {
        tried "io_uring_setup (bypasses seccomp for the operations it runs)"
        probe_refused "seccomp: io_uring_* answer ENOSYS" ENOSYS io_uring
}
attempt_kexec() {
        tried "kexec_load and kexec_file_load"
        probe_refused "seccomp: kexec refused" EPERM kexec_load
        probe_refused "seccomp: kexec refused" EPERM kexec_file_load
}
attempt_modules() {
        tried "init_module, finit_module, delete_module"
        probe_refused "seccomp: module calls refused" EPERM init_module
        probe_refused "seccomp: module calls refused" EPERM finit_module
        probe_refused "seccomp: module calls refused" EPERM delete_module
}
attempt_open_by_handle_at() {
        tried "open_by_handle_at on a guessed handle (the 'shocker' escape) and name_to_handle_at"
        probe_refused "seccomp: open_by_handle_at refused" EPERM open_by_handle_at
        probe_refused "seccomp: name_to_handle_at answers EOPNOTSUPP" EOPNOTSUPP name_to_handle_at
}
attempt_privileged_misc() {
        tried "syslog (dmesg), reboot, iopl, swapon, TIOCSTI"
        probe_refused "seccomp: syslog refused" EPERM syslog
        probe_refused "seccomp: reboot refused" EPERM reboot
        probe_refused "seccomp: iopl refused" EPERM iopl
        probe_refused "seccomp: swapon refused" EPERM swapon
        probe_refused "seccomp: ioctl TIOCSTI refused" EPERM tiocsti
}

# ---- host state: hostname, time, core dumps --------------------------------------

attempt_hostname() {
        before=$(hostname)
        tried "sethostname from inside (and hostname(1))"
        probe_refused "no CAP_SYS_ADMIN (the uts namespace is the sandbox's anyway)" EPERM sethostname evil-host
        insh 'hostname evil-host2 2>&1' | sed 's/^/  /'
        after=$(hostname)
        inner=$(inside -- hostname)
        [ "$before" = "$after" ] && stopped "uts namespace: the host is still '$after'; inside it is '$inner'" || leak "the host's hostname changed to $after"
}

attempt_settime() {
        before=$(date +%s)
        tried "clock_settime (+1 year), settimeofday, adjtimex, date -s"
        probe_refused "seccomp: clock setting refused (no CAP_SYS_TIME either)" EPERM clock_settime
        probe_refused "seccomp: settimeofday refused" EPERM settimeofday
        probe_refused "seccomp: adjtimex refused" EPERM adjtimex
        insh 'date -s "2030-01-01" 2>&1' | sed 's/^/  /'
        after=$(date +%s)
        [ $((after - before)) -lt 60 ] && [ $((after - before)) -ge 0 ] && stopped "the host clock moved $((after - before)) s" || leak "the host clock jumped"
}

attempt_core_dump() {
        pat=$(cat /proc/sys/kernel/core_pattern)
        tried "ulimit -c unlimited, then crash (SIGSEGV); host core_pattern is '$pat'"
        out=$(insh 'ulimit -c unlimited 2>&1 || echo "ulimit refused"; cd /root; /usr/local/bin/sec-probe segv; echo "exit $?"; ls /root | grep -c core')
        echo "$out" | sed 's/^/  /'
        case $out in
        *"ulimit refused"* | *"not permitted"*) stopped "RLIMIT_CORE 0 hard: cannot be raised" ;;
        *) leak "RLIMIT_CORE could be raised" ;;
        esac
        n=$(echo "$out" | tail -1)
        [ "$n" = 0 ] && stopped "no core file written" || leak "a core file was written"
        case $pat in
        /*) d=$(dirname "$pat"); new=$(find "$d" -newer "$STATE/main" -name "$(basename "${pat%%%*}")*" 2>/dev/null | head -1)
            [ -z "$new" ] && stopped "no core in the host's $d" || leak "a core landed on the host: $new" ;;
        "|"*) stopped "core_pattern pipes to a helper; with RLIMIT_CORE 0 no dump is made" ;;
        *) stopped "core_pattern is relative: a dump would land in the sandbox's own cwd, and none did" ;;
        esac
}

# ---- the file API ----------------------------------------------------------------

# api_why ANSWER: what stopped a file-API request, from its answer
api_why() {
        case $1 in
        *"Too many levels of symbolic links"*) echo "space-init resolves API paths with openat2 RESOLVE_NO_MAGICLINKS: /proc magic links are refused (ELOOP)" ;;
        *"No such file"*) echo "space-init resolves API paths inside the sandbox's root (RESOLVE_IN_ROOT, in its mount namespace): the host path does not exist there" ;;
        *) echo "space-init resolved it inside the sandbox: the sandbox's own file came back" ;;
        esac
}

# control DESCRIPTION GOT WANT: a request that must work does, so the refusals around it
# come from path resolution and not from a broken client
control() {
        if [ "$2" = "$3" ]; then echo "  control: $1 -> '$2' (works)"; else broken "control $1: got '$2', wanted '$3'"; fi
}

# dl PATH: downloads PATH from the main sandbox through the API (space cp)
dl() { sp cp "$MAIN:$1" - </dev/null 2>&1; }
# ul HOSTFILE PATH: uploads
ul() { sp cp "$1" "$MAIN:$2" </dev/null 2>&1; }

attempt_api_symlink_root() {
        insh "rm -rf /root/l; mkdir -p /root/l; ln -s / /root/l/root; ln -s $TOKEN_PATH /root/l/tok; ln -s /etc/shadow /root/l/shadow; ln -s $DATA /root/l/data" >/dev/null
        tried "download /root/l/root$TOKEN_PATH (a symlink to /), /root/l/tok (-> $TOKEN_PATH), /root/l/data/space-sec-token (-> the data dir)"
        for p in "/root/l/root$TOKEN_PATH" /root/l/tok /root/l/data/space-sec-token; do
                out=$(dl "$p")
                echo "  $p: $(echo "$out" | head -1)"
                not_token "$out" "download $p" && stopped "$(api_why "$out")"
        done
        control "download /root/l/root/etc/hostname (through the symlink to /)" "$(dl /root/l/root/etc/hostname)" "$(inside -- cat /etc/hostname)"
        tried "download /root/l/shadow (-> /etc/shadow) and compare with the host's"
        got=$(dl /root/l/shadow | sha256sum)
        [ "$got" != "$(sha256sum </etc/shadow)" ] && stopped "it is the sandbox's /etc/shadow" || leak "the host's /etc/shadow came through"
}

attempt_api_symlink_upload() {
        insh "rm -rf /root/u; mkdir -p /root/u; ln -s /etc /root/u/etc; ln -s $DATA /root/u/data; ln -s /tmp /root/u/tmp" >/dev/null
        f=$TMPD/up
        echo "uploaded-$$" >"$f"
        name=sec-upload-$$
        tried "upload through symlinks: /root/u/etc/$name (-> /etc), /root/u/data/$name (-> $DATA), /root/u/tmp/$name"
        for p in "/root/u/etc/$name" "/root/u/data/$name" "/root/u/tmp/$name"; do
                echo "  $p: $(ul "$f" "$p" | head -1)"
        done
        if [ -e "/etc/$name" ] || [ -e "$DATA/$name" ] || [ -e "/tmp/$name" ]; then
                leak "an upload landed on the host: $(ls -d /etc/$name $DATA/$name /tmp/$name 2>/dev/null)"
                rm -f "/etc/$name" "$DATA/$name" "/tmp/$name"
        else
                where=$(insh "ls -d /etc/$name $DATA/$name /tmp/$name 2>/dev/null" | tr '\n' ' ')
                stopped "the files were written inside the sandbox (${where:-nowhere}), not on the host"
        fi
}

attempt_api_dotdot() {
        f=$TMPD/up
        echo "dotdot-$$" >"$f"
        name=sec-dotdot-$$
        tried "upload to /../../../../../tmp/$name and /root/../../../../etc/$name; download /../../../..$TOKEN_PATH"
        ul "$f" "/../../../../../tmp/$name" | sed 's/^/  /'
        ul "$f" "/root/../../../../etc/$name" | sed 's/^/  /'
        out=$(dl "/../../../..$TOKEN_PATH")
        echo "  download: $(echo "$out" | head -1)"
        not_token "$out" "download with .." && stopped "'..' of the sandbox's / is / (RESOLVE_IN_ROOT): $(echo "$out" | head -1)"
        control "download /../../../etc/hostname" "$(dl /../../../etc/hostname)" "$(inside -- cat /etc/hostname)"
        if [ -e "/tmp/$name" ] || [ -e "/etc/$name" ]; then
                leak "an upload with .. landed on the host"
                rm -f "/tmp/$name" "/etc/$name"
        else
                stopped "uploads with .. stayed inside"
        fi
        tried "the same with percent-encoded dots and slashes, through raw HTTP"
        sock=${SPACE_HOST#unix:}
        for q in "%2e%2e%2f%2e%2e%2f%2e%2e%2f%2e%2e${TOKEN_PATH//\//%2f}" "..%2f..%2f..%2f..${TOKEN_PATH}" "%2F..%2F..%2F..${TOKEN_PATH}"; do
                out=$(curl -s --unix-socket "$sock" "http://x/v1/sessions/$MAIN/files?path=$q" 2>&1)
                echo "  GET files?path=$q: $(echo "$out" | head -c 150)"
                not_token "$out" "raw GET $q" && stopped "percent-decoded by the daemon, then $(api_why "$out")"
        done
}

attempt_api_symlink_race() {
        insh 'rm -rf /root/race; mkdir -p /root/race; echo harmless > /root/race/f' >/dev/null
        tried "swap /root/race/f between a file and a symlink to $TOKEN_PATH (and to /etc) in a tight loop inside, while downloading and uploading it 100 times"
        rp=$(sp exec -d "$MAIN" -- sh -c "cd /root/race; end=\$((\$(date +%s) + 40)); while [ \$(date +%s) -lt \$end ]; do
                echo harmless > f.n; mv -Tf f.n f; ln -sfn $TOKEN_PATH f.l; mv -Tf f.l f; ln -sfn /etc f.l; mv -Tf f.l f; done" </dev/null)
        f=$TMPD/up
        echo "race-$$" >"$f"
        hits=0 ok=0
        for i in $(seq 1 100); do
                out=$(dl /root/race/f)
                case $out in *"$TOKEN"*) hits=$((hits + 1)) ;; harmless) ok=$((ok + 1)) ;; esac
                ul "$f" "/root/race/f/sec-race-$$" >/dev/null
        done
        sp kill "$MAIN" "$rp" KILL >/dev/null 2>&1
        echo "  100 downloads: $ok got the harmless file, $hits got the host secret"
        [ "$hits" -eq 0 ] && stopped "whatever the link points at is resolved in the sandbox's own root" || leak "the race read the host secret $hits times"
        if [ -e "/etc/sec-race-$$" ]; then
                leak "a racing upload landed in the host's /etc"
                rm -f "/etc/sec-race-$$"
        else
                stopped "no racing upload reached the host's /etc"
        fi
}

attempt_api_proc_magic() {
        tried "download through /proc magic links: /proc/1/root$TOKEN_PATH, /proc/self/root$TOKEN_PATH, /proc/$SPACED_PID/root$TOKEN_PATH, /proc/self/cwd/..$TOKEN_PATH"
        for p in "/proc/1/root$TOKEN_PATH" "/proc/self/root$TOKEN_PATH" "/proc/$SPACED_PID/root$TOKEN_PATH" "/proc/self/cwd/..$TOKEN_PATH" \
                "/proc/1/cwd/../../..$TOKEN_PATH"; do
                out=$(dl "$p")
                echo "  $p: $(echo "$out" | head -1)"
                not_token "$out" "download $p" && stopped "$(api_why "$out")"
        done
        tried "upload to /proc/1/root/tmp/sec-magic-$$"
        echo x >"$TMPD/m"
        out=$(ul "$TMPD/m" "/proc/1/root/tmp/sec-magic-$$")
        echo "  $out"
        [ -e "/tmp/sec-magic-$$" ] && leak "the upload reached the host's /tmp" || stopped "$(api_why "$out")"
}

attempt_api_other_session() {
        b=$(new_sandbox) || broken "create"
        insh "$b" "echo other-$$ > /root/b-file" >/dev/null
        insh "echo main-$$ > /root/main-file" >/dev/null
        # the same download works where it is allowed: b's file with b's id, a file of
        # MAIN's with MAIN's
        control "download /root/b-file with $b's own id" "$(sp cp "$b:/root/b-file" - </dev/null 2>&1)" "other-$$"
        control "download /root/main-file with $MAIN's id" "$(dl /root/main-file)" "main-$$"
        tried "read $b's file with $MAIN's id and a path guess; reach $b's files through /proc in $MAIN"
        out=$(dl "/root/b-file")
        echo "  /root/b-file: $(echo "$out" | head -c 200)"
        case $out in
        *"other-$$"*) leak "$MAIN's file API reached $b's file" ;;
        *) stopped "each session's file API is served by its own space-init: $(api_why "$out")" ;;
        esac
        out=$(dl "/proc/1/root/../$b/root/b-file")
        echo "  /proc/1/root/../$b/root/b-file: $(echo "$out" | head -c 200)"
        case $out in
        *"other-$$"*) leak "$MAIN's file API reached $b's file through /proc" ;;
        *) stopped "$(api_why "$out")" ;;
        esac
        insh "rm -f /root/main-file" >/dev/null
        sp rm "$b" >/dev/null
}

# ---- an API client holding another tenant's token ---------------------------------

attempt_cross_tenant() {
        sock=${SPACE_HOST#unix:}
        tb=$("$BIN/spaced" token add --data "$DATA" --tenant sec-intruder --name cross_tenant 2>/dev/null) ||
                broken "spaced token add failed"
        as_b() { curl -s --unix-socket "$sock" -H "Authorization: Bearer $tb" -w '\n%{http_code}' "$@"; }
        snap=$(sp snapshots -q "$MAIN" </dev/null 2>/dev/null | tail -n 1)
        [ -n "$snap" ] || snap=$(sp snapshot -l cross_tenant "$MAIN" </dev/null 2>/dev/null)
        [ -n "$snap" ] || broken "no snapshot of $MAIN to aim at"
        missing=ses_00000000deadbeef
        ref=$(as_b "http://x/v1/sessions/$missing" | head -n 1 | sed "s/$missing/ID/g")
        control "tenant sec-intruder's health (its token works)" "$(as_b http://x/v1/health | tail -n 1)" 200
        tried "list sessions as tenant sec-intruder, looking for $MAIN (the operator's)"
        case $(as_b http://x/v1/sessions) in
        *"$MAIN"*) leak "another tenant's list shows $MAIN" ;;
        *) stopped "lists hold only the caller's tenant's sessions" ;;
        esac
        tried "GET, exec, files, processes, events, snapshots, connect, fork, restore, pause and delete on $MAIN with sec-intruder's token"
        while IFS='|' read -r m p body; do
                out=$(as_b -X "$m" "http://x/v1/sessions/$MAIN$p" ${body:+-d "$body"})
                st=$(echo "$out" | tail -n 1)
                shape=$(echo "$out" | head -n 1 | sed "s/$MAIN/ID/g")
                if [ "$st" = 404 ] && [ "$shape" = "$ref" ]; then
                        stopped "$m $p: 404 with the body of an unknown id (api_session's tenant check)"
                else
                        leak "$m $p answered $st: $(echo "$out" | head -c 160)"
                fi
        done <<EOT
GET||
POST|/exec|{"argv":["cat","$TOKEN_PATH"]}
GET|/files?path=/etc/hostname|
PUT|/files?path=/root/cross-tenant|x
GET|/files/list?path=/|
GET|/processes|
GET|/events|
POST|/events|{"kind":"note","data":"cross"}
GET|/snapshots|
POST|/snapshots|
POST|/connect|{}
POST|/fork|
POST|/restore|{"snapshot":"$snap"}
POST|/pause|
DELETE||
EOT
        tried "start a session of sec-intruder from $MAIN's snapshot $snap"
        out=$(as_b -X POST http://x/v1/sessions -d "{\"snapshot\":\"$snap\"}")
        case $(echo "$out" | tail -n 1) in
        404) stopped "another tenant's snapshot is 404 like a missing one" ;;
        *) leak "create from another tenant's snapshot answered: $(echo "$out" | head -c 160)"
           id=$(json_get "$(echo "$out" | head -n 1)" id); [ -n "$id" ] && sp rm "$id" >/dev/null 2>&1 ;;
        esac
        "$BIN/spaced" token revoke --data "$DATA" "$tb" 2>/dev/null
        main_works || leak "$MAIN no longer runs commands after the attempts"
}

name=${ATTEMPT:?usage: $0 BIN_DIR STATE_DIR PROBE ATTEMPT}
if ! declare -F "attempt_$name" >/dev/null; then
        echo "no attempt named $name"
        exit 2
fi
echo "=== attempt $name (in $MAIN; daemon pid $SPACED_PID)"
"attempt_$name"
conclude
