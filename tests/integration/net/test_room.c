/* The network room (net/net.h) against the real kernel, inside a network namespace of
 * its own (CMakeLists runs it under `unshare -n`): leases (netns, veth, addresses, the
 * lease file, resolv.conf), policies as nft rules, DNS-learned addresses with their
 * timeouts, the closed check, release, and a restart's adopt and orphan removal. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include <sched.h>

#include "daemon/net/net.h"
#include "daemon/net/netlink.h"
#include "daemon/net/nft.h"
#include "runtime/fsutil.h"

static char dir0[256], dir1[256], dir2[256];

/* The output of a shell command (nft, ip), at most 64 KiB. */
static char *sh(const char *fmt, ...) {
        static char out[65536];
        char cmd[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(cmd, sizeof cmd, fmt, ap);
        va_end(ap);
        FILE *p = popen(cmd, "r");
        assert_non_null(p);
        size_t n = fread(out, 1, sizeof out - 1, p);
        out[n] = '\0';
        pclose(p);
        return out;
}

static bool link_exists(const char *name) {
        struct nl *n = NULL;
        assert_int_equal(nl_open(-1, &n, NULL, 0), 0);
        int idx;
        bool ok = nl_link_index(n, name, &idx, NULL, 0) == 0;
        nl_close(n);
        return ok;
}

static void test_off(void **state) {
        (void)state;
        struct net_cfg c;
        net_cfg_init(&c);
        struct net_room *r = (struct net_room *)1;
        char err[NET_ERR_MAX];
        assert_int_equal(net_open(&c, &r, err, sizeof err), 0);
        assert_null(r);
        assert_null(strstr(sh("nft list tables 2>&1"), "space"));
        assert_string_equal(sh("cat /proc/sys/net/ipv4/ip_forward"), "0\n");
}

static void test_room(void **state) {
        (void)state;
        struct net_cfg c;
        net_cfg_init(&c);
        c.egress = true;
        char err[NET_ERR_MAX] = "";
        assert_int_equal(net_cfg_open(&c, "192.168.7.0/24", err, sizeof err), 0);
        struct net_room *r = NULL;
        int k = net_open(&c, &r, err, sizeof err);
        if (k < 0)
                printf("# net_open: %s\n", err);
        assert_int_equal(k, 0);
        assert_non_null(r);
        assert_string_equal(sh("cat /proc/sys/net/ipv4/ip_forward"), "1\n");
        assert_non_null(strstr(sh("nft list table inet space"), "chain forward"));

        struct net_lease *l0 = NULL, *l1 = NULL, *l2 = NULL;
        assert_int_equal(net_lease_new(r, "sbx_a", dir0, &l0, err, sizeof err), 0);
        assert_int_equal(net_lease_new(r, "sbx_b", dir1, &l1, err, sizeof err), 0);
        assert_int_equal(net_lease_new(r, "sbx_c", dir2, &l2, err, sizeof err), 0);
        assert_int_equal(net_lease_slot(l0), 0);
        assert_int_equal(net_lease_slot(l1), 1);
        assert_true(link_exists("sp00000") && link_exists("sp00001"));
        assert_string_equal(sh("cat %s/net", dir0), "slot 0\n");
        assert_non_null(strstr(sh("cat %s/resolv.conf", dir1), "nameserver 10.231.0.5\n"));
        /* the sandbox's side: eth0 with its address and a default route, lo up */
        assert_non_null(strstr(sh("nsenter --net=/proc/%d/fd/%d ip -4 addr show eth0", (int)getpid(), net_lease_netns_fd(l1)),
                               "inet 10.231.0.6/30"));
        assert_non_null(strstr(sh("nsenter --net=/proc/%d/fd/%d ip -6 route", (int)getpid(), net_lease_netns_fd(l1)),
                               "default via fd53:7061:6365:1::1"));
        assert_string_equal(sh("nsenter --net=/proc/%d/fd/%d cat /proc/sys/net/ipv4/ip_unprivileged_port_start",
                               (int)getpid(), net_lease_netns_fd(l1)),
                            "0\n");
        assert_non_null(strstr(sh("nsenter --net=/proc/%d/fd/%d ip link show lo", (int)getpid(), net_lease_netns_fd(l1)), "UP"));
        assert_ptr_equal(net_lease_find(r, "sbx_b"), l1);
        assert_null(net_lease_find(r, "sbx_x"));
        /* closed until a policy comes */
        char *t = sh("nft list chain inet space s00000");
        assert_non_null(strstr(t, "reject"));
        assert_null(strstr(t, "jump closed"));

        struct net_policy p = { .egress = true, .bandwidth_bps = 8000000 };
        struct net_rule allow = { 0 };
        assert_int_equal(net_rule_parse("203.0.113.0/24:443", &allow, err, sizeof err), 0);
        p.allow = &allow;
        p.n_allow = 1;
        assert_int_equal(net_lease_apply(r, l0, &p, err, sizeof err), 0);
        t = sh("nft list chain inet space s00000");
        assert_non_null(strstr(t, "ip daddr 203.0.113.0/24 meta l4proto { tcp, udp } th dport 443 accept"));
        assert_non_null(strstr(t, "limit rate over 1000000 bytes/second"));
        assert_non_null(strstr(t, "jump closed"));
        assert_non_null(strstr(sh("nft list chain inet space closed"), "ip daddr 192.168.7.0/24 return"));

        /* learned addresses: the resolver's calls, with the TTL clamped */
        uint8_t a[16];
        inet_pton(AF_INET, "198.51.100.7", a);
        assert_int_equal(net_learn(r, 0, AF_INET, a, 0, 1, false), 0);
        assert_int_equal(net_learn(r, 0, AF_INET, a, 0, 1, false), 0); /* again: refreshed, no error */
        assert_int_equal(net_learn(r, 0, AF_INET, a, 8443, 100000, false), 0);
        inet_pton(AF_INET6, "2001:db8::66", a);
        assert_int_equal(net_learn(r, 0, AF_INET6, a, 0, 60, true), 0);
        assert_int_equal(net_learn(r, 9, AF_INET6, a, 0, 60, true), -ENOENT);
        t = sh("nft list set inet space d400000");
        assert_non_null(strstr(t, "198.51.100.7 timeout 5s"));
        assert_non_null(strstr(sh("nft list set inet space p400000"), "198.51.100.7 . 8443 timeout 1h"));
        assert_non_null(strstr(sh("nft list set inet space x600000"), "2001:db8::66 timeout 1m"));
        /* a new policy starts with no learned addresses */
        assert_int_equal(net_lease_apply(r, l0, &p, err, sizeof err), 0);
        assert_null(strstr(sh("nft list set inet space d400000"), "198.51.100.7"));

        /* what may never be learned */
        uint8_t v4[4];
        inet_pton(AF_INET, "10.1.2.3", v4);
        assert_true(net_room_closed(r, AF_INET, v4));
        inet_pton(AF_INET, "10.231.0.6", v4);
        assert_true(net_room_closed(r, AF_INET, v4));
        inet_pton(AF_INET, "203.0.113.5", v4);
        assert_false(net_room_closed(r, AF_INET, v4));
        inet_pton(AF_INET, "192.168.7.9", v4); /* opened by the operator */
        assert_false(net_room_closed(r, AF_INET, v4));
        assert_int_equal(system("ip addr add 203.0.113.77/32 dev lo"), 0);
        inet_pton(AF_INET, "203.0.113.77", v4); /* the host's own */
        assert_true(net_room_closed(r, AF_INET, v4));

        /* release: link, chain, anti-spoof entries and lease file go */
        net_lease_release(r, l1);
        assert_false(link_exists("sp00001"));
        assert_null(strstr(sh("nft list table inet space"), "s00001"));
        assert_null(strstr(sh("nft list set inet space src4"), "sp00001"));
        char f[300];
        snprintf(f, sizeof f, "%s/net", dir1);
        assert_int_equal(access(f, F_OK), -1);

        /* a restart: a process keeps slot 0's netns alive (the sandbox), slot 2's is held by
         * nobody; the new room adopts 0 and removes what is left of 2 */
        pid_t child = fork();
        assert_true(child >= 0);
        if (child == 0) {
                if (setns(net_lease_netns_fd(l0), CLONE_NEWNET) < 0)
                        _exit(1);
                /* slot 2's namespace stays alive (an fd without close-on-exec: a process
                 * that is not the sandbox), so its veth is still there for the orphan check */
                if (dup(net_lease_netns_fd(l2)) < 0)
                        _exit(1);
                /* exec: the room's sockets (the resolver's listeners) are close-on-exec,
                 * as in a sandbox's init, and must not hold its port */
                execlp("sleep", "sleep", "100", (char *)NULL);
                _exit(1);
        }
        usleep(100000);
        r = net_close(r); /* leaves everything as it is */
        assert_true(link_exists("sp00000") && link_exists("sp00002"));
        assert_int_equal(net_open(&c, &r, err, sizeof err), 0);
        assert_non_null(strstr(sh("nft list table inet space"), "s00002"));
        assert_int_equal(net_lease_adopt(r, "sbx_a", dir0, child, &l0, err, sizeof err), 0);
        assert_int_equal(net_lease_slot(l0), 0);
        assert_int_equal(net_lease_adopt(r, "sbx_b", dir1, child, &l1, err, sizeof err), -ENOENT);
        assert_int_equal(net_orphans_remove(r, err, sizeof err), 0);
        t = sh("nft list table inet space");
        assert_non_null(strstr(t, "s00000"));
        assert_null(strstr(t, "s00002"));
        assert_false(link_exists("sp00002"));
        assert_true(link_exists("sp00000"));
        /* no bandwidth of its own: the operator's maximum */
        net_close(r);
        c.op.max_bandwidth_bps = 16000000;
        assert_int_equal(net_open(&c, &r, err, sizeof err), 0);
        assert_int_equal(net_lease_adopt(r, "sbx_a", dir0, child, &l0, err, sizeof err), 0);
        struct net_policy nolimit = { .egress = true };
        assert_int_equal(net_lease_apply(r, l0, &nolimit, err, sizeof err), 0);
        assert_non_null(strstr(sh("nft list chain inet space s00000"), "limit rate over 2000000 bytes/second"));
        /* the adopted lease takes a policy again */
        assert_int_equal(net_lease_apply(r, l0, NULL, err, sizeof err), 0);
        assert_null(strstr(sh("nft list chain inet space s00000"), "jump closed"));
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        net_lease_release(r, l0);
        r = net_close(r);
        net_rule_format(&allow, f, sizeof f); /* the rule stays valid: nothing freed twice */
        net_cfg_clear(&c);
}

static void test_cfg(void **state) {
        (void)state;
        struct net_cfg c;
        net_cfg_init(&c);
        char err[NET_ERR_MAX];
        assert_int_equal(net_cfg_net4(&c, "10.231.0.1/16", err, sizeof err), -EINVAL);
        assert_non_null(strstr(err, "host bits"));
        assert_int_equal(net_cfg_net4(&c, "10.0.0.0/30", err, sizeof err), -EINVAL);
        assert_int_equal(net_cfg_net4(&c, "100.80.0.0/20", err, sizeof err), 0);
        assert_int_equal(net_cfg_net6(&c, "2001:db8::/64", err, sizeof err), -EINVAL);
        assert_int_equal(net_cfg_dns_port(&c, "53", err, sizeof err), -EINVAL);
        assert_int_equal(net_cfg_dns_port(&c, "5353", err, sizeof err), 0);
        assert_int_equal(c.dns_port, 5353);
        assert_int_equal(net_cfg_upstream(&c, "192.0.2.1", err, sizeof err), 0);
        assert_int_equal(net_cfg_upstream(&c, "[2001:db8::1]:5300", err, sizeof err), 0);
        assert_int_equal(net_cfg_upstream(&c, "2001:db8::2", err, sizeof err), 0);
        assert_int_equal(net_cfg_upstream(&c, "192.0.2.1:70000", err, sizeof err), -EINVAL);
        assert_int_equal(c.upstream[1].port, 5300);
        assert_int_equal(c.upstream[2].port, 53);
        for (int i = 3; i < NET_UPSTREAMS_MAX; i++)
                assert_int_equal(net_cfg_upstream(&c, "192.0.2.1", err, sizeof err), 0);
        assert_int_equal(net_cfg_upstream(&c, "192.0.2.1", err, sizeof err), -E2BIG);
        for (int i = 0; i < NET_OPEN_MAX; i++)
                assert_int_equal(net_cfg_open(&c, "10.9.0.0/16", err, sizeof err), 0);
        assert_int_equal(net_cfg_open(&c, "10.9.0.0/16", err, sizeof err), -E2BIG);
        net_cfg_clear(&c);
}

int main(void) {
        if (geteuid() != 0) {
                printf("SKIP: needs root (and runs in a netns of its own)\n");
                return 77;
        }
        char tmpl[] = "/tmp/net-room.XXXXXX";
        const char *base = mkdtemp(tmpl);
        if (!base)
                return 1;
        snprintf(dir0, sizeof dir0, "%s/a", base);
        snprintf(dir1, sizeof dir1, "%s/b", base);
        snprintf(dir2, sizeof dir2, "%s/c", base);
        mkdir(dir0, 0700);
        mkdir(dir1, 0700);
        mkdir(dir2, 0700);
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_cfg),
                cmocka_unit_test(test_off),
                cmocka_unit_test(test_room),
        };
        int r = cmocka_run_group_tests(tests, NULL, NULL);
        rt_rm_rf(base);
        return r;
}
