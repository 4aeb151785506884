#!/bin/bash
# Isolation: a sandbox sees only its own processes, none of the host's files, can't
# change the host's or another sandbox's files, and can't reach the host's network.
. "$(dirname "$0")/lib.sh"

a=$(new_sandbox) && pass "created $a" || { fail "create"; finish; }
b=$(new_sandbox) && pass "created $b" || { fail "create"; finish; }

say "processes"
procs=$(sp exec "$a" -- sh -c 'for p in /proc/[0-9]*; do echo "${p#/proc/} $(cat $p/comm 2>/dev/null)"; done' </dev/null)
n=$(echo "$procs" | wc -l)
[ "$n" -le 6 ] && pass "the sandbox sees $n processes (host has $(ls -d /proc/[0-9]* | wc -l))" || fail "the sandbox sees $n processes: $procs"
first=$(echo "$procs" | awk '$1 == 1 { print $2 }')
case $first in *init*) pass "pid 1 inside is $first" ;; *) fail "pid 1 inside is '$first'" ;; esac
echo "$procs" | grep -q spaced && fail "spaced is visible inside" || pass "spaced is not visible inside"
pid=$(sp exec -d "$b" -- sleep 300 </dev/null)
# control: the same look at /proc finds the sleep in its own sandbox
out=$(sp exec "$b" -- sh -c 'cat /proc/[0-9]*/cmdline 2>/dev/null | tr "\0" " "' </dev/null)
case $out in *"sleep 300"*) pass "control: $b sees its own sleep (pid $pid inside)" ;; *) fail "control: $b does not see its own sleep 300: '$out'" ;; esac
out=$(sp exec "$a" -- sh -c 'cat /proc/[0-9]*/cmdline 2>/dev/null | tr "\0" " "' </dev/null)
case $out in *"sleep 300"*) fail "sandbox $a sees $b's sleep" ;; *) pass "another sandbox's processes are invisible" ;; esac
sp kill "$b" "$pid" KILL

say "host files are invisible"
token="space-e2e-$$-$RANDOM"
echo "$token" >"/tmp/$token"
mkdir -p "/var/tmp/$token.d"
# control: the sandbox's own /tmp and /var/tmp, with files of its own (names that do not
# contain the host token), are read, listed and reached through /proc/1/root
inner="inner-$$-$RANDOM"
sp exec "$a" -- sh -c "echo $inner >/tmp/$inner && mkdir -p /var/tmp/$inner.d" </dev/null
expect_eq "control: a file in the sandbox's own /tmp is read inside" "$(sp exec "$a" -- cat "/tmp/$inner" </dev/null 2>&1)" "$inner"
err=$(sp exec "$a" -- cat "/tmp/$token" </dev/null 2>&1 >/dev/null)
case $err in
*"cat: /tmp/$token: No such file or directory"*) pass "a host file in /tmp can't be read inside: $err" ;;
*) fail "reading host /tmp/$token inside did not fail with 'No such file': '$err'" ;;
esac
out=$(sp exec "$a" -- ls -a /tmp /var/tmp </dev/null 2>&1)
case $out in *"$inner"*"$inner.d"*) pass "control: ls lists the sandbox's own /tmp and /var/tmp entries" ;; *) fail "control: ls -a /tmp /var/tmp inside: '$out'" ;; esac
case $out in *"$token"*) fail "host /tmp or /var/tmp entries are listed inside" ;; *) pass "host /tmp and /var/tmp are not listed inside" ;; esac
# /proc/PID/root of a process of the sandbox (the shell itself: init is not dumpable, so its
# /proc/1/root is closed to the sandbox, checked below)
out=$(sp exec "$a" -- sh -c 'grep -l . /proc/$$/root/tmp/* 2>/dev/null; cat /proc/$$/root/tmp/'"$token"' 2>/dev/null; cat /proc/$$/root/tmp/'"$inner" </dev/null)
case $out in *"/root/tmp/$inner"*"$inner") pass "control: /proc/PID/root leads to the sandbox's own /tmp" ;; *) fail "control: /proc/\$\$/root/tmp inside: '$out'" ;; esac
case $out in *"$token"*) fail "host file reachable through /proc/PID/root" ;; *) pass "/proc/PID/root leads nowhere outside" ;; esac
err=$(sp exec "$a" -- ls /proc/1/root/ </dev/null 2>&1 >/dev/null)
case $err in *"Permission denied"*) pass "/proc/1/root is closed to the sandbox (init is not dumpable)" ;; *) fail "ls /proc/1/root inside: '$err'" ;; esac
rm -rf "/tmp/$token" "/var/tmp/$token.d"
out=$(sp exec "$a" -- sh -c 'cat /etc/hostname /etc/machine-id 2>/dev/null; echo "exec ran"' </dev/null)
host_mid=$(cat /etc/machine-id 2>/dev/null)
if [ -z "$host_mid" ]; then
        echo "note: the host has no /etc/machine-id: nothing to look for inside"
elif case $out in *"exec ran") false ;; *) true ;; esac; then
        fail "reading /etc/hostname and /etc/machine-id inside did not run: '$out'"
elif echo "$out" | grep -qF "$host_mid"; then
        fail "the host's machine-id is visible inside"
else
        pass "the host's /etc/machine-id is not inside"
fi

say "writes stay inside"
sp exec "$a" -- sh -c "echo pwned > /$token; echo pwned > /etc/$token; mkdir -p /usr/$token" </dev/null
out=$(sp exec "$a" -- sh -c "cat /$token /etc/$token && test -d /usr/$token && echo dir" </dev/null 2>&1)
expect_eq "control: the writes to /, /etc and /usr happened inside" "$out" "pwned
pwned
dir"
[ ! -e "/$token" ] && [ ! -e "/etc/$token" ] && [ ! -e "/usr/$token" ] &&
        pass "writing /, /etc and /usr inside does not touch the host" || fail "a sandbox write reached the host"
rm -rf "/$token" "/etc/$token" "/usr/$token"
sp exec "$a" -- sh -c 'rm -f /usr/bin/python3*' </dev/null
sp exec "$a" -- python3 -c 1 </dev/null >/dev/null 2>&1
[ $? -ne 0 ] && pass "python3 removed in $a" || fail "python3 still runs in $a after rm"
out=$(sp exec "$b" -- python3 -c 'print("still here")' </dev/null)
expect_eq "the shared template is untouched: python3 runs in $b" "$out" "still here"
c=$(new_sandbox)
out=$(sp exec "$c" -- sh -c "ls /$token /etc/$token 2>/dev/null; python3 -c 'print(1)'" </dev/null)
expect_eq "a new sandbox sees none of $a's changes" "$out" "1"
sp rm "$c" >/dev/null

say "network: loopback only"
port=$(free_port)
timeout 300 socat TCP4-LISTEN:"$port",reuseaddr,fork SYSTEM:'echo host-listener' &
lpid=$!
sleep 0.3
out=$(socat -u -T 2 TCP4:127.0.0.1:"$port",connect-timeout=2 STDOUT 2>&1)
expect_eq "the host listener answers on the host (control)" "$out" "host-listener"
probe='import socket,sys
try:
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3)
    print("connected", s.recv(100))
except Exception as e:
    print("refused", type(e).__name__)'
out=$(sp exec "$b" -- python3 -c "$probe" 127.0.0.1 "$port" </dev/null 2>&1)
case $out in refused*) pass "127.0.0.1:$port from inside: $out" ;; *) fail "127.0.0.1:$port from inside: $out" ;; esac
hostip=$(ip -4 -o route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p')
if [ -n "$hostip" ]; then
        out=$(sp exec "$b" -- python3 -c "$probe" "$hostip" "$port" </dev/null 2>&1)
        case $out in refused*) pass "$hostip:$port (host address) from inside: $out" ;; *) fail "$hostip:$port from inside: $out" ;; esac
fi
out=$(sp exec "$b" -- python3 -c 'import socket; print(sorted(i[1] for i in socket.if_nameindex()))' </dev/null 2>&1)
expect_eq "the only network interface inside is lo" "$out" "['lo']"
kill $lpid 2>/dev/null; wait $lpid 2>/dev/null

say "ids outside"
ipid=$(init_pid_of "$a")
if [ -n "$ipid" ] && [ -r "/proc/$ipid/status" ]; then
        uid=$(awk '/^Uid:/ { print $2 }' "/proc/$ipid/status")
        [ "$uid" != 0 ] && pass "root inside is uid $uid outside" || fail "the sandbox's init runs as host root"
fi

sp rm "$a" "$b" >/dev/null && pass "rm $a $b" || fail "rm"
finish
