#!/bin/bash
# The network room (docs/network.md) end to end, in network namespaces of its own (the
# script re-runs itself under `unshare -n`; nothing touches the machine's real network):
# a peer namespace plays the internet (203.0.113.10:80, busybox httpd), spaced runs with
# --egress on, and real ns sandboxes check allow-all, a CIDR deny, a PUT in force within
# a second, root inside without CAP_NET_ADMIN/CAP_NET_RAW, the host end and other
# sandboxes unreachable, the rules surviving kill -9 of spaced and its restart, and
# --egress off touching nothing. Root only; ~1 min.
set -u
if [ -z "${SPACE_NET_TEST_NETNS:-}" ]; then
        [ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root"; exit 77; }
        for t in unshare nsenter ip nft busybox; do
                command -v $t >/dev/null || { echo "FAIL: $t is missing (scripts/install-deps)"; exit 1; }
        done
        exec env SPACE_NET_TEST_NETNS=1 unshare -n "$0" "$@"
fi
. "$(dirname "$0")/../daemon/lib.sh" net "$1"

INET= HTTPD= HOSTSRV=
net_cleanup() {
        for p in $HTTPD $HOSTSRV $INET; do kill "$p" 2>/dev/null; done
        cleanup
}
trap net_cleanup EXIT

# The "internet": a namespace joined by a veth, 203.0.113.10 answering HTTP.
ip link set lo up
unshare -n sleep 600 &
INET=$!
sleep 0.2
ip link add uplink type veth peer name inet0 netns "$INET"
ip addr add 198.51.100.1/24 dev uplink
ip link set uplink up
nsenter -t "$INET" -n sh -c 'ip link set lo up && ip addr add 198.51.100.2/24 dev inet0 &&
        ip addr add 203.0.113.10/32 dev lo && ip link set inet0 up && ip route add default via 198.51.100.1'
ip route add 203.0.113.0/24 via 198.51.100.2
ip addr add 2001:db8:1::1/64 dev uplink nodad
nsenter -t "$INET" -n sh -c 'ip addr add 2001:db8:1::2/64 dev inet0 nodad && ip addr add 2001:db8::10/128 dev lo &&
        ip -6 route add default via 2001:db8:1::1'
ip -6 route add 2001:db8::/64 via 2001:db8:1::2
mkdir -p "$T/www"
echo hello-internet >"$T/www/index.html"
head -c 2000000 /dev/zero >"$T/www/big"
nsenter -t "$INET" -n busybox httpd -f -p 80 -h "$T/www" &
HTTPD=$!
# a service of the host (spaced's namespace) on every address
busybox httpd -f -p 8080 -h "$T/www" &
HOSTSRV=$!

# The template: busybox, and nft with its libraries (root inside tries to flush rules).
ROOT=$T/root
make_rootfs "$ROOT"
for c in nc ip ping httpd; do ln -sf busybox "$ROOT/bin/$c"; done
cp -L "$(command -v nft)" "$ROOT/bin/nft"
for lib in $(ldd "$(command -v nft)" | grep -o '/[^ ]*'); do
        mkdir -p "$ROOT$(dirname "$lib")"
        cp -L "$lib" "$ROOT$lib"
done

# --- bad flags: exit 2 with the reason
for bad in "--egress maybe" "--egress-default on" "--sandbox-net4 10.231.0.1/16" "--sandbox-net6 2001:db8::/64" \
        "--dns-port 53" "--dns-upstream 192.0.2.1:99999" "--egress-open nonsense" "--bandwidth-max 1"; do
        # shellcheck disable=SC2086
        "$SPACED" --data "$DATA" $bad >"$T/bad.out" 2>&1
        rc=$?
        check "spaced $bad: exit 2 ($(head -n 1 "$T/bad.out"))" test "$rc" = 2
done

# --- egress off (the default): nothing on the host's network changes
start_daemon --disk-volume-size 0 || exit 1
api -X POST http://x/v1/templates -d "{\"name\":\"mini\",\"from_dir\":\"$ROOT\"}" >/dev/null
check "egress off: no inet space table" sh -c '! nft list table inet space >/dev/null 2>&1'
C=$(code -X POST http://x/v1/sessions -d '{"template":"mini","network":true}')
check "egress off: a session asking egress is 403 ($C)" test "$C" = 403
OFF=$(api -X POST http://x/v1/sessions -d '{"template":"mini"}' | jget id)
check "egress off: the sandbox has loopback only" test "$(sh_in "$OFF" 'ip -o link | wc -l')" = 1
check "egress off: no veth on the host" sh -c '! ip -o link | grep -q " sp[0-9a-f]"'
check "egress off: forwarding untouched" test "$(cat /proc/sys/net/ipv4/ip_forward)" = 0
api -X DELETE "http://x/v1/sessions/$OFF" >/dev/null
kill -TERM "$PID"
gone "$PID"

# --- egress on
start_daemon --disk-volume-size 0 --egress on --dns-upstream 127.0.0.1:1 || exit 1
check "egress on: the table exists" nft list table inet space
A=$(api -X POST http://x/v1/sessions -d '{"template":"mini","network":true}' | jget id)
B=$(api -X POST http://x/v1/sessions -d '{"template":"mini","network":true}' | jget id)
check "two sessions with egress" test -n "$A" -a -n "$B"
reach() { # session, host, port -> "yes" if a TCP connection gets through within 2 s
        sh_in "$1" "nc -w 2 $2 $3 </dev/null >/dev/null 2>&1 && echo yes || echo no"
}
check "allow-all: 203.0.113.10:80 reachable" test "$(reach "$A" 203.0.113.10 80)" = yes
check "allow-all: IPv6 [2001:db8::10]:80 reachable" test "$(reach "$A" 2001:db8::10 80)" = yes
check "allow-all: HTTP answer from the internet" test "$(sh_in "$A" 'printf "GET / HTTP/1.0\r\n\r\n" | nc -w 3 203.0.113.10 80 | tail -n 1')" = hello-internet
check "the sandbox's eth0 has its slot address" grep -q 'inet 10\.231\.0\.2/30' <<<"$(sh_in "$A" 'ip -4 addr show eth0')"
RESOLV=$(sh_in "$A" 'cat /etc/resolv.conf')
check "resolv.conf names the host end" grep -q '^nameserver 10\.231\.0\.1$' <<<"$RESOLV"
check "resolv.conf is read-only" test "$(sh_in "$A" 'echo x >>/etc/resolv.conf 2>/dev/null && echo rw || echo ro')" = ro

# bandwidth: 2 MB at 4 Mbit/s takes ~4 s, unlimited a blink
get_big() { # session -> milliseconds to fetch 2 MB
        local t0 n
        t0=$(date +%s%N)
        n=$(sh_in "$1" 'printf "GET /big HTTP/1.0\r\n\r\n" | nc -w 10 203.0.113.10 80 | wc -c')
        [ "$n" -ge 2000000 ] || { echo "short: $n bytes" >&2; echo 0; return; }
        echo $(( ($(date +%s%N) - t0) / 1000000 ))
}
MS=$(get_big "$A")
check "unlimited: 2 MB in $MS ms" test "$MS" -gt 0 -a "$MS" -lt 2000
api -X PUT "http://x/v1/sessions/$A/network" -d '{"egress":true,"bandwidth":"4mbit"}' >/dev/null
MS=$(get_big "$A")
check "bandwidth 4mbit: 2 MB in $MS ms (about 4000)" test "$MS" -gt 2500 -a "$MS" -lt 9000
check "  the limit is in the slot's chain" sh -c 'nft list table inet space | grep -q "limit rate over 500000 bytes/second"'

C=$(code -X PUT "http://x/v1/sessions/$A/network" -d '{"egress":true,"deny":["203.0.113.0/24"]}')
check "PUT deny 203.0.113.0/24 ($C)" test "$C" = 200
check "deny: 203.0.113.10 blocked at once" test "$(reach "$A" 203.0.113.10 80)" = no
check "deny: the IPv6 internet still open" test "$(reach "$A" 2001:db8::10 80)" = yes
check "deny: the other sandbox still reaches it" test "$(reach "$B" 203.0.113.10 80)" = yes
t0=$(date +%s%N)
api -X PUT "http://x/v1/sessions/$A/network" -d '{"egress":true}' >/dev/null
check "PUT allow-all again: reachable within 1 s" test "$(reach "$A" 203.0.113.10 80)" = yes
check "  (it took $(( ($(date +%s%N) - t0) / 1000000 )) ms)" test $(( ($(date +%s%N) - t0) / 1000000 )) -lt 2500
api -X PUT "http://x/v1/sessions/$A/network" -d '{"egress":false}' >/dev/null
check "PUT egress false: blocked" test "$(reach "$A" 203.0.113.10 80)" = no
api -X PUT "http://x/v1/sessions/$A/network" -d '{"egress":true,"allow":["198.51.100.0/24"]}' >/dev/null
check "allow list without it: 203.0.113.10 blocked" test "$(reach "$A" 203.0.113.10 80)" = no
api -X PUT "http://x/v1/sessions/$A/network" -d '{"egress":true,"allow":["203.0.113.10:80"]}' >/dev/null
check "allow 203.0.113.10:80: reachable" test "$(reach "$A" 203.0.113.10 80)" = yes

# root inside has no power over its network
check "root inside: ip addr add refused" test "$(sh_in "$A" 'ip addr add 203.0.113.99/32 dev eth0 2>&1; echo rc=$?' | tail -n 1)" != rc=0
check "root inside: ip link set down refused" test "$(sh_in "$A" 'ip link set eth0 down 2>&1; echo rc=$?' | tail -n 1)" != rc=0
check "root inside: nft flush ruleset refused" test "$(sh_in "$A" 'nft flush ruleset 2>&1; echo rc=$?' | tail -n 1)" != rc=0
check "root inside: no raw socket (busybox ping needs one)" grep -qi 'permission denied\|not permitted' <<<"$(sh_in "$A" 'ping -c 1 -W 1 203.0.113.10 2>&1')"
check "the table is whole after those" sh -c 'nft list table inet space | grep -q "chain s0"'

# what the sandbox may never reach
check "the host end's service (10.231.0.1:8080) unreachable" test "$(reach "$A" 10.231.0.1 8080)" = no
check "  which answers from the host itself" sh -c 'busybox nc -w 2 10.231.0.1 8080 </dev/null >/dev/null 2>&1; [ $? -eq 0 ]'
check "the uplink's address (198.51.100.1:8080) unreachable" test "$(reach "$A" 198.51.100.1 8080)" = no
check "the host's loopback via the host end unreachable" test "$(reach "$A" 127.0.0.1 8080)" = no
BADDR=$(sh_in "$B" 'ip -4 -o addr show eth0' | grep -o '10\.231\.[0-9.]*' | head -n 1)
api -X POST "http://x/v1/sessions/$B/exec" -d '{"argv":["httpd","-f","-p","9000","-h","/tmp"],"background":true}' >/dev/null
sleep 0.3
check "another sandbox ($BADDR:9000) unreachable" test "$(reach "$A" "$BADDR" 9000)" = no
check "  which answers inside itself" test "$(reach "$B" 127.0.0.1 9000)" = yes

# kill -9: the rules stay in force; a restart adopts the leases and re-applies
api -X PUT "http://x/v1/sessions/$A/network" -d '{"egress":true,"deny":["203.0.113.10"]}' >/dev/null
SBXA=$(api "http://x/v1/sessions/$A" | jget sandbox_id)
kill -9 "$PID"
gone "$PID"
# spaced is gone: into the sandbox's namespace through its init instead
INITA=
for p in $(pgrep -x space-init); do
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "SPACE_SANDBOX_ID=$SBXA" && INITA=$p
done
check "after kill -9: the table is still there" nft list table inet space
check "after kill -9: sandbox $SBXA still runs (init $INITA)" test -n "$INITA"
check "after kill -9: the deny still holds" sh -c "! nsenter -t '$INITA' -n busybox nc -w 2 203.0.113.10 80 </dev/null >/dev/null 2>&1"
SLOTS=$(nft list table inet space | grep -c 'chain s0')
check "after kill -9: both slots' chains are there ($SLOTS)" test "$SLOTS" = 2
start_daemon --disk-volume-size 0 --egress on --dns-upstream 127.0.0.1:1 || exit 1
wait_state "$A" running 100
check "restart: the session is running again" test "$(state_of "$A")" = running
check "restart: the deny holds" test "$(reach "$A" 203.0.113.10 80)" = no
check "restart: the other one still reaches it" test "$(reach "$B" 203.0.113.10 80)" = yes
api -X PUT "http://x/v1/sessions/$A/network" -d '{"egress":true}' >/dev/null
check "restart: a PUT is in force" test "$(reach "$A" 203.0.113.10 80)" = yes
SLOTS=$(nft list table inet space | grep -c 'chain s0')
check "restart: still two slots ($SLOTS)" test "$SLOTS" = 2

# the warm pool: pooled sandboxes have closed leases, the taker's policy comes at take
api -X PUT http://x/v1/pool/mini -d '{"size":1}' >/dev/null
for _ in $(seq 100); do
        [ "$(api http://x/v1/pool | jx '.templates[] | select(.template == "mini") | .ready')" = 1 ] && break
        sleep 0.1
done
check "pool: one sandbox ready" test "$(api http://x/v1/pool | jx '.templates[] | select(.template == "mini") | .ready')" = 1
SLOTS=$(nft list table inet space | grep -c 'chain s0')
check "pool: it holds a slot ($SLOTS)" test "$SLOTS" = 3
P=$(api -X POST http://x/v1/sessions -d '{"template":"mini","network":{"egress":true,"deny":["203.0.113.10"]}}' | jget id)
check "pool: the session took it" test "$(api http://x/v1/pool | jget taken)" -ge 1
check "pool: the taker's deny holds" test "$(reach "$P" 203.0.113.10 80)" = no
check "pool: the taker's allow-all of the rest" test "$(reach "$P" 2001:db8::10 80)" = yes
api -X PUT http://x/v1/pool/mini -d '{"size":0}' >/dev/null
api -X DELETE "http://x/v1/sessions/$P" >/dev/null

# release: a deleted session's chain and veth go
api -X DELETE "http://x/v1/sessions/$B" >/dev/null
sleep 0.5
SLOTS=$(nft list table inet space | grep -c 'chain s0')
check "delete: its chain is gone ($SLOTS left)" test "$SLOTS" = 1
nft list set inet space src4 >"$T/src4"
check "delete: its anti-spoof entries are gone ($(tr -s ' \t\n' ' ' <"$T/src4"))" test "$(grep -o '"sp[0-9a-f]*"' "$T/src4" | wc -l)" = 1
check "delete: one veth left" test "$(ip -o link | grep -c ' sp[0-9a-f]\{5\}@')" = 1

# a restart with --egress off: the sandbox with a lease is not taken back (no one would
# keep its rules); the recovery gives the session one with loopback only
SBXA=$(api "http://x/v1/sessions/$A" | jget sandbox_id)
kill -9 "$PID"
gone "$PID"
start_daemon --disk-volume-size 0 || exit 1
wait_state "$A" running 100
check "egress off again: the session runs" test "$(state_of "$A")" = running
check "  on a new sandbox" test "$(api "http://x/v1/sessions/$A" | jget sandbox_id)" != "$SBXA"
check "  with loopback only" test "$(sh_in "$A" 'ip -o link | wc -l')" = 1
check "  the old one's veth is gone" sh -c '! ip -o link | grep -q " sp[0-9a-f]"'

finish net.integration
