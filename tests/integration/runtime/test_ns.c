/* The ns runtime for real (root, cgroup v1 on the build machine, v2 where the host has
 * it): builds a tiny busybox template, creates sandboxes whose PID 1 is test-init, and
 * checks isolation, limits, freeze/thaw, failure reporting and a clean teardown. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include "common/macros.h"
#include "common/proto.h"
#include "runtime/cgroup.h"
#include "runtime/fsutil.h"
#include "runtime/runtime.h"
#include "runtime/template.h"

#define PJ(buf, ...) assert_true(snprintf(buf, sizeof buf, __VA_ARGS__) < (int)sizeof buf)
#define OUT_MAX (64 * 1024)

static char data[256];      /* test data dir */
static char lower[512];     /* the tiny template's rootfs */
static const struct runtime_ops *ops;
static int seq;
/* Sandboxes a failed assertion left alive; destroyed by the group teardown. */
static struct rt_sandbox *live[32];

struct box {
        struct rt_sandbox *sb;
        char id[64];
        char dir[512];
        char run[600];
        char upper[600];
};

/* ---------------- helpers ---------------- */

static void make_template(void) {
        char src[512], p[1024];
        PJ(src, "%s/src", data);
        PJ(p, "%s/bin", src);
        assert_int_equal(rt_mkdir_p(p, 0755), 0);
        PJ(p, "cp /bin/busybox %s/bin/busybox && cp %s %s/bin/test-init", src, TEST_INIT_PATH, src);
        assert_int_equal(system(p), 0);
        static const char *const applets[] = { "sh", "cat", "ls", "id", "hostname", "echo", "ip", "ps", "touch",
                                               "grep", "wc", "tr", "test", "mount", "unshare", "sleep", "stat", "head" };
        for (size_t i = 0; i < ELEMENTSOF(applets); i++) {
                PJ(p, "%s/bin/%s", src, applets[i]);
                assert_int_equal(symlink("busybox", p), 0);
        }
        PJ(p, "%s/etc", src);
        assert_int_equal(rt_mkdir_p(p, 0755), 0);
        PJ(p, "%s/root", src);
        assert_int_equal(rt_mkdir_p(p, 0700), 0);
        struct template_source s = { .kind = TEMPLATE_FROM_DIR, .path = src };
        assert_int_equal(template_build(data, "tiny", &s, NULL, NULL), 0);
        PJ(lower, "%s/templates/tiny/rootfs", data);
}

static int group_setup(void **state) {
        if (geteuid() != 0) {
                printf("# skipped: the ns runtime needs root\n");
                exit(77);
        }
        if (access("/bin/busybox", X_OK) != 0) {
                printf("# skipped: /bin/busybox missing (Debian package busybox-static)\n");
                exit(77);
        }
        PJ(data, "/tmp/space-rt-int-XXXXXX");
        assert_non_null(mkdtemp(data));
        ops = runtime_find("ns");
        assert_non_null(ops);
        assert_null(runtime_find("nope"));
        assert_int_equal(ops->host_init(data), 0);
        make_template();
        return 0;
}

static int group_teardown(void **state) {
        for (size_t i = 0; i < ELEMENTSOF(live); i++)
                if (live[i] && ops->destroy(live[i]) < 0)
                        printf("# leftover sandbox could not be destroyed: %s\n", runtime_last_error());
        rt_rm_rf(data);
        return 0;
}

static void box_spec(struct box *b, struct rt_spec *s, const char *lowerdir) {
        PJ(b->id, "sbx_rt%d_%d", (int)getpid(), ++seq);
        PJ(b->dir, "%s/sandboxes/%s", data, b->id);
        char work[700];
        PJ(b->upper, "%s/upper", b->dir);
        PJ(work, "%s/work", b->dir);
        PJ(b->run, "%s/run", b->dir);
        assert_int_equal(rt_mkdir_p(b->upper, 0755), 0);
        assert_int_equal(rt_mkdir_p(work, 0700), 0);
        assert_int_equal(rt_mkdir_p(b->run, 0700), 0);
        static char workbuf[8][700];
        char *w = workbuf[seq % 8];
        strcpy(w, work);
        *s = (struct rt_spec){
                .id = b->id,
                .lower_dirs = lowerdir ? lowerdir : lower,
                .upper_dir = b->upper,
                .work_dir = w,
                .run_dir = b->run,
                .init_path = TEST_INIT_PATH,
        };
}

static void track(struct rt_sandbox *sb) {
        for (size_t i = 0; i < ELEMENTSOF(live); i++)
                if (!live[i]) {
                        live[i] = sb;
                        return;
                }
}

static void box_create(struct box *b, const struct rt_limits *l) {
        struct rt_spec s;
        box_spec(b, &s, NULL);
        if (l)
                s.limits = *l;
        int r = ops->create(&s, &b->sb);
        if (r < 0)
                printf("# create failed: %s\n", runtime_last_error());
        assert_int_equal(r, 0);
        track(b->sb);
}

static int read_full(int fd, void *buf, size_t n, int timeout_ms) {
        size_t got = 0;
        while (got < n) {
                struct pollfd p = { .fd = fd, .events = POLLIN };
                int r = poll(&p, 1, timeout_ms);
                if (r <= 0)
                        return -ETIMEDOUT;
                ssize_t k = read(fd, (char *)buf + got, n - got);
                if (k <= 0)
                        return -EIO;
                got += (size_t)k;
        }
        return 0;
}

static void send_cmd(struct box *b, const char *cmd) {
        int fd = ops->init_fd(b->sb);
        uint32_t n = (uint32_t)strlen(cmd);
        assert_int_equal(write(fd, &n, 4), 4);
        assert_int_equal(write(fd, cmd, n), (ssize_t)n);
}

static int recv_result(struct box *b, char *out, int timeout_ms) {
        int fd = ops->init_fd(b->sb);
        int32_t st;
        uint32_t len;
        int r = read_full(fd, &st, 4, timeout_ms);
        if (r < 0)
                return r;
        assert_int_equal(read_full(fd, &len, 4, timeout_ms), 0);
        assert_true(len < OUT_MAX);
        assert_int_equal(read_full(fd, out, len, timeout_ms), 0);
        out[len] = 0;
        return st;
}

/* Runs cmd with /bin/sh inside; returns its wait status, output in out (OUT_MAX). */
static int run(struct box *b, const char *cmd, char *out) {
        send_cmd(b, cmd);
        int st = recv_result(b, out, 30000);
        assert_true(st >= 0);
        return st;
}

/* Runs cmd, expects exit 0 and returns the output without the trailing newline. */
static const char *run_ok(struct box *b, const char *cmd) {
        static char out[OUT_MAX];
        int st = run(b, cmd, out);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                printf("# '%s' -> status 0x%x: %s\n", cmd, st, out);
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        size_t n = strlen(out);
        if (n && out[n - 1] == '\n')
                out[n - 1] = 0;
        return out;
}

static bool mounted_under(const char *prefix) {
        FILE *f = fopen("/proc/self/mountinfo", "re");
        assert_non_null(f);
        char line[4096];
        bool found = false;
        while (fgets(line, sizeof line, f))
                if (strstr(line, prefix))
                        found = true;
        fclose(f);
        return found;
}

static bool cgroup_left(const char *id) {
        static const char *const v1[] = { "memory", "cpu", "pids", "freezer" };
        char p[512];
        PJ(p, "/sys/fs/cgroup/space/%s", id);
        if (access(p, F_OK) == 0)
                return true;
        for (size_t i = 0; i < ELEMENTSOF(v1); i++) {
                PJ(p, "/sys/fs/cgroup/%s/space/%s", v1[i], id);
                if (access(p, F_OK) == 0)
                        return true;
        }
        return false;
}

/* destroy, then: no mount, no cgroup, no process left. */
static void box_destroy(struct box *b) {
        pid_t pid = ops->init_pid(b->sb);
        for (size_t i = 0; i < ELEMENTSOF(live); i++)
                if (live[i] == b->sb)
                        live[i] = NULL;
        assert_int_equal(ops->destroy(b->sb), 0);
        b->sb = NULL;
        assert_false(mounted_under(b->run));
        assert_false(cgroup_left(b->id));
        assert_int_equal(kill(pid, 0), -1);
        assert_int_equal(errno, ESRCH);
}

static void read_host(const char *path, char *buf, size_t n) {
        assert_true(rt_read_file(path, buf, n) >= 0);
        buf[strcspn(buf, "\n")] = 0;
}

static enum rt_cgroup_version cg_version(void) {
        enum rt_cgroup_version v;
        assert_int_equal(rt_cgroup_detect(NULL, &v), 0);
        return v;
}

/* ---------------- tests ---------------- */

static void test_isolation(void **state) {
        printf("# sandbox: pid 1, hostname = id, only lo (up), uid 0 -> %u outside, no host files,\n"
               "#          no caps beyond the kept set, no_new_privs, seccomp, private /tmp, limits on the host\n",
               RT_ID_BASE);
        struct box b = { 0 };
        box_create(&b, &(struct rt_limits){ .memory_bytes = 128u << 20, .cpu_millis = 500, .pids = 64 });
        char out[OUT_MAX], p[512], v[256];

        assert_string_equal(run_ok(&b, "echo $PPID"), "1");
        assert_string_equal(run_ok(&b, "cat /proc/1/cmdline"), "space-init");
        assert_string_equal(run_ok(&b, "hostname"), b.id);
        assert_string_equal(run_ok(&b, "grep -c : /proc/net/dev"), "1");
        assert_string_equal(run_ok(&b, "grep : /proc/net/dev | grep -c '^ *lo:'"), "1");
        assert_non_null(strstr(run_ok(&b, "ip link show lo"), "UP"));

        assert_string_equal(run_ok(&b, "id -u; id -g"), "0\n0");
        PJ(p, "/proc/%d/status", (int)ops->init_pid(b.sb));
        FILE *f = fopen(p, "re");
        assert_non_null(f);
        bool uid_ok = false;
        char line[256];
        while (fgets(line, sizeof line, f))
                if (!strncmp(line, "Uid:", 4))
                        uid_ok = strtoul(line + 4, NULL, 10) == RT_ID_BASE;
        fclose(f);
        assert_true(uid_ok);
        run_ok(&b, "echo hello > /owned-by-root-inside");
        struct stat st;
        PJ(p, "%s/owned-by-root-inside", b.upper);
        assert_int_equal(stat(p, &st), 0);
        assert_int_equal(st.st_uid, RT_ID_BASE);
        assert_int_equal(st.st_gid, RT_ID_BASE);

        /* the host's files: a marker made now, and well-known host paths */
        char marker[128];
        PJ(marker, "/tmp/space-host-marker-%d", (int)getpid());
        fclose(fopen(marker, "we"));
        PJ(p, "test -e %s || test -e /work || test -e /usr/bin/gcc || test -e /etc/shadow", marker);
        int s = run(&b, p, out);
        assert_true(WIFEXITED(s) && WEXITSTATUS(s) == 1);
        unlink(marker);
        assert_string_equal(run_ok(&b, "ls / | tr '\\n' ' '"), "bin dev etc owned-by-root-inside proc root sys tmp ");

        const char *mounts = run_ok(&b, "cat /proc/mounts");
        assert_non_null(strstr(mounts, " /tmp tmpfs "));
        assert_non_null(strstr(mounts, " /dev/pts devpts "));
        assert_non_null(strstr(mounts, " /proc/sys proc ro,"));
        assert_string_equal(run_ok(&b, "grep NoNewPrivs /proc/self/status | grep -c 1"), "1");
        assert_string_equal(run_ok(&b, "grep Seccomp: /proc/self/status"), "Seccomp:\t2");
        const char *capb = run_ok(&b, "grep CapBnd /proc/self/status");
        unsigned long long bnd = strtoull(capb + strlen("CapBnd:"), NULL, 16);
        assert_int_equal(bnd & (1ull << 21), 0); /* CAP_SYS_ADMIN */
        assert_int_equal(bnd & (1ull << 12), 0); /* CAP_NET_ADMIN */
        assert_int_not_equal(bnd & (1ull << 0), 0); /* CAP_CHOWN kept */
        s = run(&b, "mount -t tmpfs none /tmp 2>&1", out);
        assert_false(WIFEXITED(s) && WEXITSTATUS(s) == 0);
        assert_non_null(strstr(out, "permission denied"));
        /* a nested user namespace would give the capabilities back: seccomp refuses it */
        s = run(&b, "unshare -U -r true 2>&1", out);
        assert_false(WIFEXITED(s) && WEXITSTATUS(s) == 0);
        assert_non_null(strstr(out, "Operation not permitted"));
        s = run(&b, "echo 1 > /proc/sys/kernel/hostname", out);
        assert_false(WIFEXITED(s) && WEXITSTATUS(s) == 0);
        assert_string_equal(run_ok(&b, "echo x > /dev/null && head -c 4 /dev/zero | wc -c"), "4");

        /* limits as the kernel sees them */
        if (cg_version() == RT_CGROUP_V1) {
                PJ(p, "/sys/fs/cgroup/memory/space/%s/memory.limit_in_bytes", b.id);
                read_host(p, v, sizeof v);
                assert_string_equal(v, "134217728");
                PJ(p, "/sys/fs/cgroup/cpu/space/%s/cpu.cfs_quota_us", b.id);
                read_host(p, v, sizeof v);
                assert_string_equal(v, "50000");
                PJ(p, "/sys/fs/cgroup/pids/space/%s/pids.max", b.id);
        } else {
                PJ(p, "/sys/fs/cgroup/space/%s/pids.max", b.id);
        }
        read_host(p, v, sizeof v);
        assert_string_equal(v, "64");

        struct rt_health h;
        assert_int_equal(ops->health(b.sb, &h), 0);
        assert_true(h.alive);
        assert_false(h.oom_killed);
        assert_true(h.pids >= 1);
        assert_true(h.memory_bytes > 0);
        box_destroy(&b);
}

static void test_memory_limit(void **state) {
        printf("# a memory hog is killed at the limit; init survives and health reports the OOM kill\n");
        struct box b = { 0 };
        box_create(&b, &(struct rt_limits){ .memory_bytes = 48u << 20 });
        char out[OUT_MAX];
        int st = run(&b, "exec test-init hog 200", out);
        assert_true(WIFSIGNALED(st));
        assert_int_equal(WTERMSIG(st), SIGKILL);
        assert_string_equal(run_ok(&b, "echo still here"), "still here");
        struct rt_health h;
        assert_int_equal(ops->health(b.sb, &h), 0);
        assert_true(h.alive);
        assert_true(h.oom_killed);
        /* under the limit nothing is killed */
        assert_string_equal(run_ok(&b, "test-init hog 8"), "survived 8 MiB");
        box_destroy(&b);
}

static void test_pids_limit(void **state) {
        printf("# a fork bomb stops at the pids limit; the sandbox stays usable\n");
        struct box b = { 0 };
        box_create(&b, &(struct rt_limits){ .pids = 24 });
        const char *o = run_ok(&b, "exec test-init forkbomb");
        int n = atoi(o);
        printf("# fork bomb made %d children under pids.max 24\n", n);
        assert_true(n > 0 && n < 24);
        assert_string_equal(run_ok(&b, "echo alive"), "alive");
        struct rt_health h;
        assert_int_equal(ops->health(b.sb, &h), 0);
        assert_true(h.alive);
        assert_true(h.pids <= 24);
        box_destroy(&b);
}

static void test_set_limits(void **state) {
        printf("# set_limits gives a sandbox made with the defaults what create would have given it\n");
        struct box b = { 0 };
        box_create(&b, NULL);
        assert_string_equal(run_ok(&b, "echo before"), "before");
        struct rt_limits l = { .memory_bytes = 48u << 20, .pids = 24, .nofile = 512, .cpu_millis = 500 };
        assert_int_equal(ops->set_limits(b.sb, &l), 0);
        char root[64];
        struct statfs sf;
        PJ(root, "/proc/%d/root/tmp", (int)ops->init_pid(b.sb));
        assert_int_equal(statfs(root, &sf), 0);
        printf("# /tmp is %llu bytes\n", (unsigned long long)sf.f_blocks * (unsigned long long)sf.f_bsize);
        assert_int_equal((uint64_t)sf.f_blocks * (uint64_t)sf.f_bsize, 48u << 20);
        assert_string_equal(run_ok(&b, "ulimit -n"), "512");
        char out[OUT_MAX];
        int st = run(&b, "exec test-init hog 200", out);
        assert_true(WIFSIGNALED(st));
        assert_int_equal(WTERMSIG(st), SIGKILL);
        int n = atoi(run_ok(&b, "exec test-init forkbomb"));
        printf("# fork bomb made %d children under the new pids.max 24\n", n);
        assert_true(n > 0 && n < 24);
        printf("# a disk limit can't be added afterwards: refused, nothing changed\n");
        l.disk_bytes = 64u << 20;
        assert_int_equal(ops->set_limits(b.sb, &l), -EOPNOTSUPP);
        assert_string_equal(run_ok(&b, "echo after"), "after");
        box_destroy(&b);
}

static void test_freeze_thaw(void **state) {
        printf("# freeze stops the sandbox (no answer while frozen), thaw resumes it\n");
        struct box b = { 0 };
        box_create(&b, NULL);
        run_ok(&b, "true");
        assert_int_equal(ops->freeze(b.sb), 0);
        char p[512], v[64], out[OUT_MAX];
        if (cg_version() == RT_CGROUP_V1) {
                PJ(p, "/sys/fs/cgroup/freezer/space/%s/freezer.state", b.id);
                read_host(p, v, sizeof v);
                assert_string_equal(v, "FROZEN");
        }
        send_cmd(&b, "echo thawed");
        assert_int_equal(recv_result(&b, out, 300), -ETIMEDOUT);
        assert_int_equal(ops->thaw(b.sb), 0);
        int st = recv_result(&b, out, 5000);
        assert_int_equal(st, 0);
        assert_string_equal(out, "thawed\n");
        /* destroy of a frozen sandbox works too */
        assert_int_equal(ops->freeze(b.sb), 0);
        box_destroy(&b);
}

static void test_init_death(void **state) {
        printf("# init killed from outside: pidfd readable, health says dead with the signal\n");
        struct box b = { 0 };
        box_create(&b, NULL);
        run_ok(&b, "sleep 1000 </dev/null >/dev/null 2>&1 & echo started");
        assert_int_equal(kill(ops->init_pid(b.sb), SIGKILL), 0);
        struct pollfd pf = { .fd = ops->pid_fd(b.sb), .events = POLLIN };
        assert_int_equal(poll(&pf, 1, 5000), 1);
        struct rt_health h;
        assert_int_equal(ops->health(b.sb, &h), 0);
        assert_false(h.alive);
        assert_true(WIFSIGNALED(h.init_status));
        assert_int_equal(WTERMSIG(h.init_status), SIGKILL);
        box_destroy(&b);
}

static void test_create_failures(void **state) {
        printf("# failed creates say why and leave nothing: bad spec, missing init, child-side step\n");
        struct box b = { 0 };
        struct rt_spec s;
        struct rt_sandbox *sb = NULL;

        box_spec(&b, &s, NULL);
        s.id = "../evil";
        assert_int_equal(ops->create(&s, &sb), -EINVAL);
        box_spec(&b, &s, NULL);
        s.network = true; /* netns_fd 0 (what a caller that sets nothing gives): no netns */
        assert_int_equal(ops->create(&s, &sb), -EINVAL);
        assert_non_null(strstr(runtime_last_error(), "not a network namespace"));
        s.netns_fd = -1;
        assert_int_equal(ops->create(&s, &sb), -EINVAL);
        box_spec(&b, &s, NULL);
        s.limits.memory_bytes = 4096;
        assert_int_equal(ops->create(&s, &sb), -ERANGE);

        box_spec(&b, &s, NULL);
        s.init_path = "/nonexistent/space-init";
        assert_int_equal(ops->create(&s, &sb), -ENOENT);
        printf("# -> %s\n", runtime_last_error());
        assert_non_null(strstr(runtime_last_error(), "init"));
        assert_null(sb);
        assert_false(mounted_under(b.run));
        assert_false(cgroup_left(b.id));

        box_spec(&b, &s, NULL);
        s.lower_dirs = "/nonexistent/lower";
        assert_true(ops->create(&s, &sb) < 0);
        printf("# -> %s\n", runtime_last_error());
        assert_false(mounted_under(b.run));
        assert_false(cgroup_left(b.id));

        /* A template whose /proc is a file: the child fails mounting it and says so. */
        char src[512], p[600];
        PJ(src, "%s/badsrc", data);
        PJ(p, "%s/bin", src);
        assert_int_equal(rt_mkdir_p(p, 0755), 0);
        PJ(p, "%s/proc", src);
        fclose(fopen(p, "we"));
        struct template_source ts = { .kind = TEMPLATE_FROM_DIR, .path = src };
        assert_int_equal(template_build(data, "badproc", &ts, NULL, NULL), 0);
        char badlower[512];
        PJ(badlower, "%s/templates/badproc/rootfs", data);
        box_spec(&b, &s, badlower);
        assert_true(ops->create(&s, &sb) < 0);
        printf("# -> %s\n", runtime_last_error());
        assert_non_null(strstr(runtime_last_error(), "/proc"));
        assert_null(sb);
        assert_false(mounted_under(b.run));
        assert_false(cgroup_left(b.id));
        assert_int_equal(template_remove(data, "badproc"), 0);
}

static void *netns_thread(void *arg) {
        if (unshare(CLONE_NEWNET) == 0)
                *(int *)arg = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
        return NULL;
}

static void test_prepared_netns(void **state) {
        printf("# network = true: the sandbox joins the prepared netns (owned by the host: root inside\n"
               "#   cannot change it), the creating thread stays in its own; resolv_conf bound read-only\n");
        int nsfd = -1;
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, netns_thread, &nsfd), 0);
        pthread_join(t, NULL);
        assert_true(nsfd >= 0);
        struct stat ns_st, own_before, own_after;
        assert_int_equal(fstat(nsfd, &ns_st), 0);
        assert_int_equal(stat("/proc/thread-self/ns/net", &own_before), 0);
        char resolv[512], p[600];
        PJ(resolv, "%s/resolv.test", data);
        FILE *f = fopen(resolv, "we");
        assert_non_null(f);
        fputs("nameserver 192.0.2.53\n", f);
        fclose(f);

        struct box b = { 0 };
        struct rt_spec s;
        box_spec(&b, &s, NULL);
        s.network = true;
        s.netns_fd = nsfd;
        s.resolv_conf = resolv;
        int r = ops->create(&s, &b.sb);
        if (r < 0)
                printf("# create failed: %s\n", runtime_last_error());
        assert_int_equal(r, 0);
        track(b.sb);
        assert_int_equal(stat("/proc/thread-self/ns/net", &own_after), 0);
        assert_int_equal(own_before.st_ino, own_after.st_ino);
        PJ(p, "readlink /proc/self/ns/net");
        char want[64];
        snprintf(want, sizeof want, "net:[%llu]", (unsigned long long)ns_st.st_ino);
        assert_string_equal(run_ok(&b, p), want);
        char out[OUT_MAX];
        int st = run(&b, "ip link set lo up 2>&1", out);
        assert_false(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        st = run(&b, "ip addr add 192.0.2.9/32 dev lo 2>&1", out);
        assert_false(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        assert_string_equal(run_ok(&b, "cat /etc/resolv.conf"), "nameserver 192.0.2.53");
        st = run(&b, "echo x >> /etc/resolv.conf", out);
        assert_false(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        PJ(p, "%s/etc/resolv.conf", b.upper);
        assert_int_equal(access(p, F_OK), 0); /* made (empty) in the layer as the mount point */
        box_destroy(&b);
        close(nsfd);
}

static void test_many(void **state) {
        printf("# 10 sandboxes alive at once, each answering; all gone after destroy\n");
        struct box b[10];
        memset(b, 0, sizeof b);
        for (size_t i = 0; i < ELEMENTSOF(b); i++)
                box_create(&b[i], &(struct rt_limits){ .memory_bytes = 64u << 20 });
        for (size_t i = 0; i < ELEMENTSOF(b); i++)
                assert_string_equal(run_ok(&b[i], "hostname"), b[i].id);
        for (size_t i = 0; i < ELEMENTSOF(b); i++)
                box_destroy(&b[i]);
}

static void test_reclaim(void **state) {
        printf("# reclaim after a daemon crash: the creating process dies without destroy;\n"
               "#   reclaim(id, run_dir) leaves no mount, cgroup or process\n");
        struct box b = { 0 };
        struct rt_spec s;
        box_spec(&b, &s, NULL);
        int p[2];
        assert_int_equal(pipe(p), 0);
        pid_t daemon = fork();
        assert_true(daemon >= 0);
        if (daemon == 0) {
                struct rt_sandbox *sb = NULL;
                pid_t init = ops->create(&s, &sb) == 0 ? ops->init_pid(sb) : -1;
                /* A process holding the socket keeps test-init from seeing EOF, as a
                 * space-init that outlives its daemon would. */
                pid_t holder = fork();
                if (holder == 0) {
                        for (;;)
                                pause();
                }
                ssize_t w _unused_ = write(p[1], &init, sizeof init);
                w = write(p[1], &holder, sizeof holder);
                _exit(0); /* "crash": no destroy */
        }
        pid_t holder = 0;
        pid_t init = 0;
        assert_int_equal(read(p[0], &init, sizeof init), (ssize_t)sizeof init);
        assert_int_equal(read(p[0], &holder, sizeof holder), (ssize_t)sizeof holder);
        close(p[0]);
        close(p[1]);
        assert_int_equal(waitpid(daemon, NULL, 0), daemon);
        assert_true(init > 0);
        usleep(100000);
        assert_int_equal(kill(init, 0), 0); /* the sandbox outlived its creator */
        char st[512], line[256];
        PJ(st, "/proc/%d/stat", (int)init);
        FILE *f = fopen(st, "re");
        assert_non_null(f);
        assert_non_null(fgets(line, sizeof line, f));
        fclose(f);
        assert_null(strstr(line, ") Z ")); /* alive, not a zombie */
        assert_true(mounted_under(b.run));
        assert_true(cgroup_left(b.id));

        assert_int_equal(ops->reclaim(b.id, b.run), 0);
        assert_false(mounted_under(b.run));
        assert_false(cgroup_left(b.id));
        /* init was reparented to the host's init, which reaps it; allow it a moment */
        for (int i = 0; i < 500 && kill(init, 0) == 0; i++)
                usleep(10000);
        assert_int_equal(kill(init, 0), -1);
        kill(holder, SIGKILL);
        assert_int_equal(ops->reclaim(b.id, b.run), 0); /* idempotent */
        assert_int_equal(ops->reclaim("../x", b.run), -EINVAL);
}

static void test_real_space_init(void **state) {
#ifdef SPACE_INIT_PATH
        if (access(SPACE_INIT_PATH, X_OK) != 0) {
                printf("# real space-init: skipped (%s not built)\n", SPACE_INIT_PATH);
                skip();
        }
        printf("# real space-init as PID 1: its HELLO arrives on the socket and says pid 1\n");
        struct box b = { 0 };
        struct rt_spec s;
        box_spec(&b, &s, NULL);
        s.init_path = SPACE_INIT_PATH;
        int r = ops->create(&s, &b.sb);
        if (r < 0)
                printf("# create failed: %s\n", runtime_last_error());
        assert_int_equal(r, 0);
        track(b.sb);
        uint8_t hdr[PROTO_HDR_SIZE];
        int fd = ops->init_fd(b.sb);
        assert_int_equal(read_full(fd, hdr, sizeof hdr, 10000), 0);
        struct proto_hdr h;
        assert_int_equal(proto_hdr_decode(hdr, &h), 0);
        assert_int_equal(h.type, PROTO_HELLO);
        assert_true(h.len > 0 && h.len < 4096);
        char json[4096];
        assert_int_equal(read_full(fd, json, h.len, 10000), 0);
        json[h.len] = 0;
        printf("# hello: %s\n", json);
        assert_non_null(strstr(json, "\"pid\":1"));
        box_destroy(&b);
#else
        skip();
#endif
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_isolation),
                cmocka_unit_test(test_memory_limit),
                cmocka_unit_test(test_pids_limit),
                cmocka_unit_test(test_set_limits),
                cmocka_unit_test(test_freeze_thaw),
                cmocka_unit_test(test_init_death),
                cmocka_unit_test(test_create_failures),
                cmocka_unit_test(test_prepared_netns),
                cmocka_unit_test(test_many),
                cmocka_unit_test(test_reclaim),
                cmocka_unit_test(test_real_space_init),
        };
        return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
