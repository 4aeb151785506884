# A small internet of the tests' own (sourced by tests/net/*.sh and bench/network): two
# network namespaces, neither with a route to the machine's real interfaces.
#
#   WH  "the host": where spaced and its sandboxes run. lo, and wan0 192.0.2.2/24 +
#       2001:db8::2/64 with the default routes via the internet's 192.0.2.1 / 2001:db8::1.
#   WI  "the internet": wan0 192.0.2.1/24 + 2001:db8::1/64, and on a dummy interface the
#       hosts the tests reach or must not reach (addresses of its lo):
#         198.51.100.10  allowed.test     public web host
#         198.51.100.20  denied.test      public web host a policy denies
#         203.0.113.10   other.test       public web host
#         203.0.113.30   *.wild.test      (any name under wild.test)
#         2001:db8:1::10 v6.test (AAAA)   public web host on IPv6
#         10.20.0.5      corp.test        a company network host (private range)
#         rebind.test -> 10.20.0.5        a public name that rebinds into it
#         172.16.5.5 192.168.5.5 100.64.5.5 fc00::5   the other private ranges
#         169.254.169.254  fd00:ec2::254  a fake cloud metadata service
#         192.0.2.53     the internet's DNS server (dnsmasq), the upstream of spaced's resolver
#       nginx answers HTTP on port 80 and 8080 of every one of them with
#       "host ADDRESS port PORT", and /big with WORLD_BIG_MB MiB of zeros.
#
# world_up [NAME]: builds it (names the namespaces after NAME and this shell's pid);
# world_down: removes it (also on EXIT if the caller's trap calls it). in_host CMD and
# in_inet CMD run a command in one of them. Nothing here touches the root namespace's
# network: the namespaces are new and the only link joins them to each other.
set -u

WORLD_BIG_MB=${WORLD_BIG_MB:-64}
W_PUBLIC4="198.51.100.10 198.51.100.20 203.0.113.10 203.0.113.30"
W_PRIVATE4="10.20.0.5 172.16.5.5 192.168.5.5 100.64.5.5 169.254.169.254"
W_ALL6="2001:db8:1::10 fc00::5 fd00:ec2::254"

in_host() { ip netns exec "$WH" "$@"; }
in_inet() { ip netns exec "$WI" "$@"; }

world_down() {
        [ -n "${WI:-}" ] || return 0
        for f in "$WD"/nginx.pid "$WD"/dnsmasq.pid; do
                [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null
        done
        ip netns del "$WH" 2>/dev/null
        ip netns del "$WI" 2>/dev/null
        rm -rf "$WD"
        WI=
}

world_up() {
        local tag=${1:-w}$$
        WH=sph-$tag WI=spi-$tag
        WD=$(mktemp -d "/tmp/space-world.XXXXXX")
        for t in ip dnsmasq nginx; do
                command -v $t >/dev/null || [ -x /usr/sbin/$t ] ||
                        { echo "FAIL: $t is missing (scripts/install-deps installs it)"; return 1; }
        done
        ip netns add "$WH" && ip netns add "$WI" || return 1
        in_host ip link set lo up && in_inet ip link set lo up || return 1
        ip link add wan0 netns "$WH" type veth peer name wan0 netns "$WI" || return 1
        in_host ip addr add 192.0.2.2/24 dev wan0
        in_host ip -6 addr add 2001:db8::2/64 dev wan0 nodad
        in_host ip link set wan0 up
        in_host ip route add default via 192.0.2.1
        in_host ip -6 route add default via 2001:db8::1
        in_inet ip addr add 192.0.2.1/24 dev wan0
        in_inet ip -6 addr add 2001:db8::1/64 dev wan0 nodad
        in_inet ip link set wan0 up
        # The hosts are addresses of the internet's loopback (no dummy module needed).
        for a in $W_PUBLIC4 $W_PRIVATE4 192.0.2.53; do
                in_inet ip addr add "$a/32" dev lo || return 1
        done
        for a in $W_ALL6; do
                in_inet ip -6 addr add "$a/128" dev lo nodad || return 1
        done
        # The internet answers the host's masqueraded traffic on wan0; nothing more to route.
        in_inet sysctl -qw net.ipv4.ip_forward=0
        in_inet sysctl -qw net.ipv6.conf.all.forwarding=0
        # Had every rule of spaced failed open, a packet could still go nowhere but here: the
        # host's only way out is wan0 into the internet, which has no route beyond itself and
        # forwards nothing. Route lookups only (no packet is sent).
        [ "$(in_host ip -o link | grep -vc ': lo:\|: wan0@')" = 0 ] &&
                [ "$(in_inet ip -o link | grep -vc ': lo:\|: wan0@')" = 0 ] &&
                in_host ip route get 8.8.8.8 2>/dev/null | grep -q 'via 192.0.2.1 dev wan0' &&
                ! in_inet ip route get 8.8.8.8 >/dev/null 2>&1 &&
                ! in_inet ip -6 route get 2606:4700::1 >/dev/null 2>&1 ||
                { echo "the test world has a way out of its namespaces"; return 1; }
        chmod 755 "$WD" # nginx's workers run as nobody
        mkdir -p "$WD/www" "$WD/tmp"
        dd if=/dev/zero of="$WD/www/big" bs=1M count="$WORLD_BIG_MB" status=none
        cat >"$WD/nginx.conf" <<NGINX
worker_processes 1;
pid $WD/nginx.pid;
error_log $WD/nginx.err;
events { worker_connections 1024; }
http {
        access_log off;
        client_body_temp_path $WD/tmp/body;
        proxy_temp_path $WD/tmp/proxy;
        fastcgi_temp_path $WD/tmp/fcgi;
        uwsgi_temp_path $WD/tmp/uwsgi;
        scgi_temp_path $WD/tmp/scgi;
        default_type text/plain;
        server {
                listen 80 reuseport; listen [::]:80 ipv6only=on reuseport;
                listen 8080; listen [::]:8080 ipv6only=on;
                location = /big { root $WD/www; }
                location / { return 200 "host \$server_addr port \$server_port\n"; }
        }
}
NGINX
        in_inet nginx -c "$WD/nginx.conf" -p "$WD" 2>"$WD/nginx.start" ||
                { echo "nginx did not start:"; cat "$WD/nginx.start" "$WD/nginx.err" 2>/dev/null; return 1; }
        in_inet dnsmasq --pid-file="$WD/dnsmasq.pid" --user=root --group=root --no-resolv --no-hosts \
                --listen-address=192.0.2.53 --bind-interfaces \
                --local-ttl=30 --log-facility="$WD/dnsmasq.log" \
                --host-record=allowed.test,198.51.100.10,30 \
                --host-record=denied.test,198.51.100.20,30 \
                --host-record=other.test,203.0.113.10,30 \
                --host-record=v6.test,2001:db8:1::10,30 \
                --host-record=corp.test,10.20.0.5,30 \
                --host-record=rebind.test,10.20.0.5,30 \
                --host-record=meta.test,169.254.169.254,30 \
                --local=/test/ --address=/wild.test/203.0.113.30 2>"$WD/dnsmasq.start" ||
                { echo "dnsmasq did not start:"; cat "$WD/dnsmasq.start"; return 1; }
        # Up when the host reaches a web host by address.
        for _ in $(seq 50); do
                in_host curl -s -m 1 -o /dev/null http://198.51.100.10/ && return 0
                sleep 0.1
        done
        echo "the test world does not answer"
        return 1
}
