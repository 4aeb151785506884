/* A driver's sandbox network (rt_spec.network), without spaced: the test builds its own
 * prepared network namespace (a veth pair between a "host side" namespace holding a web
 * server on 203.0.113.10 and a resolver on 203.0.113.53, and the prepared one holding
 * eth0), creates sandboxes of the driver named by argv[1] (gvisor, microvm) in it and
 * checks from inside, through space-init, that they reach the server and the resolver,
 * that one without spec.network reaches nothing, and that a checkpoint restores into a
 * new prepared namespace. Nothing is added to the root network namespace. Root only. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/macros.h"
#include "runtime/fsutil.h"
#include "runtime/runtime.h"
#include "runtime/template.h"
#include "mvclient.h"

#define PJ(buf, ...) assert_true(snprintf(buf, sizeof buf, __VA_ARGS__) < (int)sizeof buf)
#define TIMEOUT_MS 120000
#define TOKEN "hello-from-the-test-world"

static const struct runtime_ops *ops;
static const char *driver;
static char data[256], lower[512], hostns[64], www[512], resolv[512];
static int seq;
static bool microvm;

struct box {
        char id[64], upper[600], work[600], run[600];
        struct rt_sandbox *sb;
        int fd;
};
static struct box *live[8];

static int sh_quiet(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh_quiet(const char *fmt, ...) {
        char cmd[2048];
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(cmd, sizeof cmd, fmt, ap);
        va_end(ap);
        assert_true(n > 0 && n < (int)sizeof cmd);
        int st = system(cmd);
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* A prepared netns `name` whose eth0 is veth `hostif` (in hostns) with sandbox address
 * 10.231.0.<4k+2>/30 and the default route via <4k+1>; returns an fd of it. */
static int prepared_netns(const char *name, const char *hostif, int k) {
        assert_int_equal(sh_quiet("ip netns add %s && ip -n %s link set lo up && "
                                  "ip -n %s link add %s type veth peer name eth0 netns %s && "
                                  "ip -n %s addr add 10.231.0.%d/30 dev %s && ip -n %s link set %s up && "
                                  "ip -n %s addr add 10.231.0.%d/30 dev eth0 && ip -n %s link set eth0 up && "
                                  "ip -n %s route add default via 10.231.0.%d && "
                                  "ip -n %s addr add fd53:7061:6365:%d::1/64 dev %s nodad && "
                                  "ip -n %s addr add fd53:7061:6365:%d::2/64 dev eth0 nodad && "
                                  "ip -n %s -6 route add default via fd53:7061:6365:%d::1",
                                  name, name, hostns, hostif, name, hostns, 4 * k + 1, hostif, hostns, hostif, name,
                                  4 * k + 2, name, name, 4 * k + 1, hostns, k, hostif, name, k, name, k),
                         0);
        char p[128];
        PJ(p, "/run/netns/%s", name);
        int fd = open(p, O_RDONLY | O_CLOEXEC);
        assert_true(fd >= 0);
        assert_true(rt_is_netns(fd));
        return fd;
}

static void world_up(void) {
        PJ(hostns, "spt%dh", (int)getpid());
        PJ(www, "%s/www", data);
        assert_int_equal(rt_mkdir_p(www, 0755), 0);
        assert_int_equal(sh_quiet("echo %s > %s/index.html", TOKEN, www), 0);
        PJ(resolv, "%s/resolv.conf", data);
        assert_int_equal(sh_quiet("echo 'nameserver 203.0.113.53' > %s", resolv), 0);
        assert_int_equal(sh_quiet("ip netns add %s && ip -n %s link set lo up && "
                                  "ip -n %s addr add 203.0.113.10/32 dev lo && ip -n %s addr add 203.0.113.53/32 dev lo && "
                                  "ip -n %s addr add 2001:db8::10/128 dev lo",
                                  hostns, hostns, hostns, hostns, hostns),
                         0);
        assert_int_equal(sh_quiet("ip netns exec %s busybox httpd -p 203.0.113.10:80 -h %s && "
                                  "ip netns exec %s busybox httpd -p [2001:db8::10]:80 -h %s",
                                  hostns, www, hostns, www),
                         0);
        assert_int_equal(sh_quiet("ip netns exec %s dnsmasq --no-resolv --no-hosts --bind-interfaces "
                                  "--listen-address=203.0.113.53 --address=/web.test/203.0.113.10 "
                                  "--pid-file=%s/dnsmasq.pid --user=root",
                                  hostns, data),
                         0);
}

static void world_down(void) {
        if (!hostns[0])
                return;
        (void)sh_quiet("ip netns pids %s | xargs -r kill -9 2>/dev/null; for n in $(ip netns list | "
                       "grep -o '^spt%d[a-z0-9]*'); do ip netns del $n; done",
                       hostns, (int)getpid());
}

static void make_template(void) {
        char src[512], p[1024];
        PJ(src, "%s/src", data);
        PJ(p, "%s/bin", src);
        assert_int_equal(rt_mkdir_p(p, 0755), 0);
        PJ(p, "cp /bin/busybox %s/bin/busybox", src);
        assert_int_equal(system(p), 0);
        static const char *const applets[] = { "sh", "cat", "echo", "wget", "nslookup", "ip", "sleep", "grep", "ls" };
        for (size_t i = 0; i < ELEMENTSOF(applets); i++) {
                PJ(p, "%s/bin/%s", src, applets[i]);
                assert_int_equal(symlink("busybox", p), 0);
        }
        PJ(p, "%s/etc", src);
        assert_int_equal(rt_mkdir_p(p, 0755), 0);
        PJ(p, "echo 'nameserver 192.0.2.99' > %s/etc/resolv.conf", src);
        assert_int_equal(system(p), 0);
        PJ(p, "%s/root", src);
        assert_int_equal(rt_mkdir_p(p, 0700), 0);
        struct template_source s = { .kind = TEMPLATE_FROM_DIR, .path = src };
        assert_int_equal(template_build(data, "nettiny", &s, NULL, NULL), 0);
        PJ(lower, "%s/templates/nettiny/rootfs", data);
}

static int box_create(struct box *b, int netns_fd, const char *restore_dir) {
        PJ(b->id, "sbx_net%d_%d", (int)getpid(), ++seq);
        char dir[512];
        PJ(dir, "%s/sandboxes/%s", data, b->id);
        PJ(b->upper, "%s/upper", dir);
        PJ(b->work, "%s/work", dir);
        PJ(b->run, "%s/run", dir);
        assert_int_equal(rt_mkdir_p(b->upper, 0755), 0);
        assert_int_equal(rt_mkdir_p(b->work, 0700), 0);
        assert_int_equal(rt_mkdir_p(b->run, 0700), 0);
        struct rt_spec s = { .id = b->id, .lower_dirs = lower, .upper_dir = b->upper, .work_dir = b->work,
                             .run_dir = b->run, .init_path = SPACE_INIT_PATH, .network = netns_fd >= 0,
                             .netns_fd = netns_fd, .resolv_conf = netns_fd >= 0 ? resolv : NULL,
                             .restore_dir = restore_dir };
        int r = ops->create(&s, &b->sb);
        if (r < 0) {
                printf("# create: %s\n", runtime_last_error());
                return r;
        }
        for (size_t i = 0; i < ELEMENTSOF(live); i++)
                if (!live[i]) {
                        live[i] = b;
                        break;
                }
        b->fd = ops->init_fd(b->sb);
        assert_int_equal(mvc_hello(b->fd, TIMEOUT_MS), 0);
        return 0;
}

static void box_destroy(struct box *b) {
        for (size_t i = 0; i < ELEMENTSOF(live); i++)
                if (live[i] == b)
                        live[i] = NULL;
        assert_int_equal(ops->destroy(b->sb), 0);
        b->sb = NULL;
}

/* Output of `sh -c cmd` inside (first line), and its exit code. */
static const char *run(struct box *b, const char *cmd, int *code) {
        static char out[16384];
        assert_int_equal(mvc_sh(b->fd, cmd, false, out, sizeof out, code, TIMEOUT_MS), 0);
        printf("# [%s] %s -> exit %d: %.200s\n", driver, cmd, *code, out);
        out[strcspn(out, "\n")] = 0;
        return out;
}

#define WGET "wget -q -O- http://203.0.113.10/"

static void test_network(void **state) {
        (void)state;
        printf("# a sandbox in the prepared netns reaches the test's server through eth0\n");
        char name[64];
        PJ(name, "spt%ds1", (int)getpid());
        int nfd = prepared_netns(name, "sp1", 0);
        struct box a;
        assert_int_equal(box_create(&a, nfd, NULL), 0);
        int code = -1;
        assert_string_equal(run(&a, WGET, &code), TOKEN);
        assert_int_equal(code, 0);
        printf("# and over IPv6 (gvisor: eth0's own address; microvm: slirp's, from its router advertisement)\n");
        assert_string_equal(run(&a, "for i in 1 2 3 4 5 6 7 8 9 10; do wget -q -O- http://[2001:db8::10]/ && break; "
                                    "sleep 1; done", &code), TOKEN);
        assert_int_equal(code, 0);
        printf("# its DNS goes where the room's resolv.conf says (directly, or through slirp's 10.0.2.3)\n");
        const char *rc = run(&a, "cat /etc/resolv.conf", &code);
        assert_int_equal(code, 0);
        assert_non_null(strstr(rc, microvm ? "10.0.2.3" : "203.0.113.53"));
        run(&a, "nslookup -type=a web.test", &code);
        assert_int_equal(code, 0);
        assert_string_equal(run(&a, "wget -q -O- http://web.test/", &code), TOKEN);
        assert_int_equal(code, 0);

        printf("# without spec.network: loopback only, the server is unreachable\n");
        struct box b;
        assert_int_equal(box_create(&b, -1, NULL), 0);
        run(&b, WGET, &code);
        assert_int_not_equal(code, 0);
        assert_non_null(strstr(run(&b, "cat /etc/resolv.conf", &code), "192.0.2.99"));
        box_destroy(&b);

        printf("# a checkpoint restores into another prepared netns (another address) and reaches it again\n");
        char img[600];
        PJ(img, "%s/img", data);
        assert_int_equal(rt_mkdir_p(img, 0755), 0);
        int r = ops->checkpoint(a.sb, img, false);
        /* Debian's runsc sometimes panics in its checkpoint command (urpc.go:451, seen 2 in 10
         * under load, with or without this suite's changes) and stops the container with it:
         * said here, and tried again on a new sandbox in a new netns, at most twice more.
         * What is checked, the restore into another netns, needs one checkpoint that worked.
         * Not the same netns: runsc --network=sandbox moves eth0's addresses and routes into
         * its own stack, and a sentry that died leaves the interface bare, so a second runsc
         * there has no address (CI, and by hand with a kill -9 of the sentry). spaced gives
         * every sandbox a netns of its own, so only this test reused one. */
        for (int attempt = 2; r < 0 && !microvm && attempt <= 3 && strstr(runtime_last_error(), "runsc failed"); attempt++) {
                printf("# checkpoint: %s (runsc's; attempt %d on a new sandbox in a new netns)\n", runtime_last_error(),
                       attempt);
                box_destroy(&a);
                close(nfd);
                assert_int_equal(sh_quiet("ip netns del %s", name), 0);
                nfd = prepared_netns(name, "sp1", 0);
                assert_int_equal(sh_quiet("rm -rf %s && mkdir -p %s", img, img), 0);
                assert_int_equal(box_create(&a, nfd, NULL), 0);
                assert_string_equal(run(&a, WGET, &code), TOKEN);
                r = ops->checkpoint(a.sb, img, false);
        }
        if (r < 0)
                printf("# checkpoint: %s\n", runtime_last_error());
        assert_int_equal(r, 0);
        box_destroy(&a);
        close(nfd);
        assert_int_equal(sh_quiet("ip netns del %s", name), 0);
        PJ(name, "spt%ds2", (int)getpid());
        nfd = prepared_netns(name, "sp2", 1);
        struct box c;
        assert_int_equal(box_create(&c, nfd, img), 0);
        assert_string_equal(run(&c, WGET, &code), TOKEN);
        assert_int_equal(code, 0);
        box_destroy(&c);
        if (!microvm) {
                printf("# gvisor: a network image restored without one is refused (runsc would hang)\n");
                struct box d;
                assert_int_equal(box_create(&d, -1, img), -EINVAL);
        } else {
                printf("# microvm: the same image without a network: the guest keeps eth0, QEMU has no way out\n");
                struct box d;
                assert_int_equal(box_create(&d, -1, img), 0);
                run(&d, WGET, &code);
                assert_int_not_equal(code, 0);
                box_destroy(&d);
        }
        close(nfd);

        printf("# netns_fd that is not a network namespace: EINVAL\n");
        int notns = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        struct box e;
        assert_int_equal(box_create(&e, notns, NULL), -EINVAL);
        close(notns);
}

static int setup(void **state) {
        (void)state;
        if (geteuid() != 0) {
                printf("# SKIP: needs root\n");
                exit(77);
        }
        microvm = strcmp(driver, "microvm") == 0;
        if (!microvm && access(getenv("SPACE_RUNSC") ? getenv("SPACE_RUNSC") : "/usr/bin/runsc", X_OK) != 0) {
                printf("# SKIP: runsc is not installed (Debian package runsc)\n");
                exit(77);
        }
        if (microvm) {
                int st = system(BUILD_GUEST " >/dev/null");
                if (WIFEXITED(st) && WEXITSTATUS(st) == 3) {
                        printf("# SKIP: no guest kernel and this machine cannot fetch one (scripts/build-guest)\n");
                        exit(77);
                }
                assert_int_equal(st, 0);
        }
        if (access("/bin/busybox", X_OK) != 0 || system("command -v dnsmasq >/dev/null") != 0) {
                printf("# FAIL: needs /bin/busybox (busybox-static) and dnsmasq (dnsmasq-base)\n");
                exit(1);
        }
        ops = runtime_find(driver);
        assert_non_null(ops);
        assert_true(ops->network);
        PJ(data, "/var/tmp/space-net-%s-XXXXXX", driver);
        assert_non_null(mkdtemp(data));
        assert_int_equal(chmod(data, 0755), 0);
        if (ops->host_init)
                assert_int_equal(ops->host_init(data), 0);
        make_template();
        world_up();
        return 0;
}

static int teardown(void **state) {
        (void)state;
        for (size_t i = 0; i < ELEMENTSOF(live); i++)
                if (live[i] && live[i]->sb)
                        ops->destroy(live[i]->sb);
        world_down();
        rt_rm_rf(data);
        return 0;
}

int main(int argc, char **argv) {
        driver = argc > 1 ? argv[1] : "gvisor";
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_network),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
