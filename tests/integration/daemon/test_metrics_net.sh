#!/bin/bash
# Usage metrics' network bytes (issue #15 item 4, docs/api.md "Metrics"): with egress on, a
# session that sends to its gateway (the host end of its veth) shows net_tx_bytes growing,
# counted per session. Re-runs itself under `unshare -n`: the room's
# veths, nftables table and sysctls stay in that namespace, off the machine's network.
# Root only; ~15 s.
# Usage: test_metrics_net.sh SPACED_BINARY
set -u
if [ -z "${SPACE_METRICS_TEST_NETNS:-}" ]; then
        [ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root"; exit 77; }
        for t in unshare nft; do
                command -v $t >/dev/null || { echo "FAIL: $t is missing (scripts/install-deps)"; exit 1; }
        done
        exec env SPACE_METRICS_TEST_NETNS=1 unshare -n "$0" "$@"
fi
. "$(dirname "$0")/lib.sh" metrics-net "${1:-}"
ip link set lo up

start_daemon --egress on --dns-upstream 127.0.0.1:1 --metrics-interval 1 || exit 1
ROOT=$T/rootfs
make_rootfs "$ROOT"
ln -sf busybox "$ROOT/bin/nc"
api -X POST http://x/v1/templates -d "{\"name\":\"mini\",\"from_dir\":\"$ROOT\"}" >/dev/null
A=$(api -X POST http://x/v1/sessions -d '{"template":"mini","memory":"64M","snapshot_interval_ms":0,"network":true}' | jget id)
check "a session with egress" test "${A:0:4}" = ses_
N=$(api -X POST http://x/v1/sessions -d '{"template":"mini","memory":"64M","snapshot_interval_ms":0}' | jget id)
check "a session without" test "${N:0:4}" = ses_
sleep 1.5
TX0=$(api "http://x/v1/sessions/$A/metrics" | jget samples -1 net_tx_bytes)
# 64 KiB towards the gateway's discard port: whatever the policy does with them, they
# cross the veth
sh_in "$A" 'gw=$(grep -m1 nameserver /etc/resolv.conf | cut -d" " -f2); for i in 1 2 3 4; do head -c 16384 /dev/zero | nc -w 1 "$gw" 9; done; true' >/dev/null
TX1=$TX0
for _ in $(seq 20); do
        TX1=$(api "http://x/v1/sessions/$A/metrics" | jget samples -1 net_tx_bytes)
        [ "$TX1" -gt "$TX0" ] && break
        sleep 0.5
done
check "net_tx_bytes grows when the sandbox sends ($TX0 -> $TX1)" test "$TX1" -gt "$TX0"
check "... and net_rx_bytes is a number" test "$(api "http://x/v1/sessions/$A/metrics" | jget samples -1 net_rx_bytes)" -ge 0
RXN=$(api "http://x/v1/sessions/$N/metrics" | jget samples -1 net_tx_bytes)
# with --egress on every ns sandbox has a veth of its own, egress or not: its own counters
check "the other session's counters are its own (not the sender's $TX1)" test "$RXN" -lt "$TX1"
finish metrics-net
