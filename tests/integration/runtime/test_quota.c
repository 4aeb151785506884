/* Disk limits of sandbox writable layers, for real (root): rt_volume_prepare makes a small
 * quota-capable volume in a temp dir (ext4 + project quota where the kernel has quota
 * formats, else btrfs + qgroups), sandboxes get their upper dirs on it, and:
 * dd fills one sandbox to a disk-full error inside while the volume keeps space, a second
 * sandbox is unaffected, a file bomb stops, an unsupported filesystem is refused with a
 * clear error, the project id cannot be changed from inside, teardown leaves no mount and
 * no loop device, and a prepare while another mount namespace still holds the volume
 * mounts its loop device again instead of a second one. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <setjmp.h>
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
#include <linux/magic.h>
#include <cmocka.h>
#include "common/macros.h"
#include "runtime/fsutil.h"
#include "runtime/quota.h"
#include "runtime/runtime.h"
#include "runtime/template.h"

#define PJ(buf, ...) assert_true(snprintf(buf, sizeof buf, __VA_ARGS__) < (int)sizeof buf)
#define OUT_MAX (64 * 1024)
#define VOL_SIZE (256ull << 20)
#define LIMIT (20ull << 20)

static char data[256], lower[512], vol[512];
static const struct runtime_ops *ops;
static bool is_btrfs;
static int seq;
static struct rt_sandbox *live[8];

struct box {
        struct rt_sandbox *sb;
        char id[64], dir[600], upper[700], work[700], run[700];
};

static void make_template(void) {
        char src[512], p[1024];
        PJ(src, "%s/src", data);
        PJ(p, "%s/bin", src);
        assert_int_equal(rt_mkdir_p(p, 0755), 0);
        PJ(p, "cp /bin/busybox %s/bin/busybox && cp %s %s/bin/test-init", src, TEST_INIT_PATH, src);
        assert_int_equal(system(p), 0);
        static const char *const applets[] = { "sh", "dd", "ls", "echo", "cat", "rm", "df", "wc", "stat", "sync" };
        for (size_t i = 0; i < ELEMENTSOF(applets); i++) {
                PJ(p, "%s/bin/%s", src, applets[i]);
                assert_int_equal(symlink("busybox", p), 0);
        }
        struct template_source s = { .kind = TEMPLATE_FROM_DIR, .path = src };
        assert_int_equal(template_build(data, "tiny", &s, NULL, NULL), 0);
        PJ(lower, "%s/templates/tiny/rootfs", data);
}

/* Sandbox dirs on the volume (parent = vol), or anywhere (parent given). */
static void box_dirs(struct box *b, const char *parent) {
        PJ(b->id, "sbx_q%d_%d", (int)getpid(), ++seq);
        PJ(b->dir, "%s/%s", parent, b->id);
        if (!strcmp(parent, vol))
                assert_int_equal(rt_volume_make_dir(b->dir, 0700), 0);
        else
                assert_int_equal(rt_mkdir_p(b->dir, 0700), 0);
        PJ(b->upper, "%s/upper", b->dir);
        PJ(b->work, "%s/work", b->dir);
        PJ(b->run, "%s/run", b->dir);
        assert_int_equal(rt_mkdir_p(b->upper, 0755), 0);
        assert_int_equal(rt_mkdir_p(b->work, 0700), 0);
        assert_int_equal(rt_mkdir_p(b->run, 0700), 0);
}

static int box_try(struct box *b, const struct rt_limits *l) {
        struct rt_spec s = { .id = b->id, .lower_dirs = lower, .upper_dir = b->upper, .work_dir = b->work,
                             .run_dir = b->run, .init_path = TEST_INIT_PATH, .limits = *l };
        int r = ops->create(&s, &b->sb);
        if (r == 0)
                for (size_t i = 0; i < ELEMENTSOF(live); i++)
                        if (!live[i]) {
                                live[i] = b->sb;
                                break;
                        }
        return r;
}

static void box_create(struct box *b, const struct rt_limits *l) {
        box_dirs(b, vol);
        int r = box_try(b, l);
        if (r < 0)
                printf("# create failed: %s\n", runtime_last_error());
        assert_int_equal(r, 0);
}

static void box_destroy(struct box *b) {
        for (size_t i = 0; i < ELEMENTSOF(live); i++)
                if (live[i] == b->sb)
                        live[i] = NULL;
        assert_int_equal(ops->destroy(b->sb), 0);
        b->sb = NULL;
        assert_int_equal(rt_rm_rf(b->dir), 0);
}

static int read_full(int fd, void *buf, size_t n) {
        size_t got = 0;
        while (got < n) {
                struct pollfd p = { .fd = fd, .events = POLLIN };
                if (poll(&p, 1, 60000) <= 0)
                        return -ETIMEDOUT;
                ssize_t k = read(fd, (char *)buf + got, n - got);
                if (k <= 0)
                        return -EIO;
                got += (size_t)k;
        }
        return 0;
}

/* Runs cmd with /bin/sh inside; returns the wait status, output in a static buffer. */
static int run(struct box *b, const char *cmd, const char **out) {
        static char buf[OUT_MAX];
        int fd = ops->init_fd(b->sb);
        uint32_t n = (uint32_t)strlen(cmd), len;
        int32_t st;
        assert_int_equal(write(fd, &n, 4), 4);
        assert_int_equal(write(fd, cmd, n), (ssize_t)n);
        assert_int_equal(read_full(fd, &st, 4), 0);
        assert_int_equal(read_full(fd, &len, 4), 0);
        assert_true(len < sizeof buf);
        assert_int_equal(read_full(fd, buf, len), 0);
        buf[len] = 0;
        *out = buf;
        return st;
}

static uint64_t vol_free(void) {
        struct statfs sf;
        assert_int_equal(statfs(vol, &sf), 0);
        return (uint64_t)sf.f_bavail * (uint64_t)sf.f_bsize;
}

static uint64_t file_size(const char *dir, const char *name) {
        char p[800];
        PJ(p, "%s/%s", dir, name);
        struct stat st;
        return stat(p, &st) == 0 ? (uint64_t)st.st_size : 0;
}

/* The loop devices whose backing file is our image; the name of the last in name. */
static int loops_of_image_named(char name[static 32]) {
        char img[600];
        PJ(img, "%s/" RT_VOLUME_IMAGE, data);
        DIR *d = opendir("/sys/block");
        assert_non_null(d);
        int n = 0;
        struct dirent *e;
        while ((e = readdir(d))) {
                if (strncmp(e->d_name, "loop", 4))
                        continue;
                char p[300], back[700] = "";
                PJ(p, "/sys/block/%s/loop/backing_file", e->d_name);
                if (rt_read_file(p, back, sizeof back) > 0 && !strncmp(back, img, strlen(img))) {
                        n++;
                        snprintf(name, 32, "%.31s", e->d_name);
                }
        }
        closedir(d);
        return n;
}

static int loops_of_image(void) {
        char name[32];
        return loops_of_image_named(name);
}

/* A process, other than in our mount namespace, that has /dev/NAME mounted; 0 if none. */
static int mount_holder(const char *name) {
        char self_ns[64] = "";
        assert_true(readlink("/proc/self/ns/mnt", self_ns, sizeof self_ns - 1) > 0);
        DIR *d = opendir("/proc");
        assert_non_null(d);
        int holder = 0;
        struct dirent *e;
        while (!holder && (e = readdir(d))) {
                if (e->d_name[0] < '1' || e->d_name[0] > '9')
                        continue;
                char p[300], ns[64] = "";
                PJ(p, "/proc/%s/ns/mnt", e->d_name);
                if (readlink(p, ns, sizeof ns - 1) <= 0 || !strcmp(ns, self_ns))
                        continue;
                PJ(p, "/proc/%s/mountinfo", e->d_name);
                FILE *f = fopen(p, "re");
                if (!f)
                        continue;
                char line[4096], dev[64];
                PJ(dev, " /dev/%s ", name);
                while (fgets(line, sizeof line, f)) {
                        const char *sep = strstr(line, " - ");
                        if (sep && strstr(sep, dev)) {
                                holder = atoi(e->d_name);
                                break;
                        }
                }
                fclose(f);
        }
        closedir(d);
        return holder;
}

/* After teardown the image's loop device goes with the filesystem's last mount. A mount
 * namespace another process made while the volume was mounted (a sandbox of a test running
 * beside this one) holds a copy of that mount until it ends: so the loop device must be
 * gone within 10 s, or be held by such a copy and set to clear itself when that goes. */
static void assert_loops_released(void) {
        char name[32] = "";
        for (int i = 0; i < 100 && loops_of_image_named(name) > 0; i++)
                poll(NULL, 0, 100);
        if (loops_of_image_named(name) == 0)
                return;
        int holder = mount_holder(name);
        printf("#   %s is still attached; held by the mount namespace of pid %d\n", name, holder);
        assert_true(holder > 0);
        char p[300], v[16] = "";
        PJ(p, "/sys/block/%s/loop/autoclear", name);
        assert_true(rt_read_file(p, v, sizeof v) > 0);
        assert_int_equal(atoi(v), 1);
}

static bool disk_full_error(const char *out) {
        return strstr(out, "Disk quota exceeded") || strstr(out, "No space left on device");
}

/* ---------------- tests ---------------- */

static void test_fill(void **state) {
        printf("# dd in a sandbox limited to 20 MiB stops with a disk-full error inside; the volume\n"
               "# keeps its space and a second sandbox still writes\n");
        uint64_t before = vol_free();
        struct box a = { 0 }, b = { 0 };
        box_create(&a, &(struct rt_limits){ .disk_bytes = LIMIT, .disk_inodes = 10000 });
        box_create(&b, &(struct rt_limits){ .disk_bytes = LIMIT, .disk_inodes = 10000 });
        const char *out;
        int st = run(&a, "dd if=/dev/zero of=/big bs=1M count=64 2>&1; sync", &out);
        printf("#   inside: %s", out);
        assert_true(disk_full_error(out));
        uint64_t big = file_size(a.upper, "big");
        printf("#   written before the error: %llu bytes (limit %llu)\n", (unsigned long long)big,
               (unsigned long long)LIMIT);
        assert_true(big <= LIMIT && big >= LIMIT / 2);
        uint64_t used = 0;
        assert_int_equal(rt_quota_usage(a.upper, &used, NULL), 0);
        printf("#   quota usage of the sandbox: %llu bytes\n", (unsigned long long)used);
        assert_true(used >= big && used <= LIMIT + (1u << 20));
        uint64_t after = vol_free();
        printf("#   volume free: %llu MiB before, %llu MiB after\n", (unsigned long long)(before >> 20),
               (unsigned long long)(after >> 20));
        assert_true(after > (64ull << 20));
        /* a writer that hit its limit can still delete and write again */
        st = run(&a, "rm /big && dd if=/dev/zero of=/again bs=1M count=5 2>/dev/null && echo rewrote", &out);
        assert_int_equal(st, 0);
        assert_non_null(strstr(out, "rewrote"));

        st = run(&b, "dd if=/dev/zero of=/ten bs=1M count=10 2>&1 && sync && echo fine", &out);
        if (st != 0)
                printf("#   second sandbox: %s\n", out);
        assert_int_equal(st, 0);
        assert_int_equal(file_size(b.upper, "ten"), 10u << 20);
        printf("#   second sandbox wrote 10 MiB\n");
        box_destroy(&a);
        box_destroy(&b);
}

static void test_filebomb(void **state) {
        printf("# a file bomb stops at the inode limit (ext4/XFS), or at the byte limit its metadata\n"
               "# reaches (btrfs)\n");
        struct box a = { 0 };
        uint64_t inodes = 500;
        box_create(&a, &(struct rt_limits){ .disk_bytes = is_btrfs ? 2ull << 20 : LIMIT, .disk_inodes = inodes });
        const char *out;
        int st = run(&a, "test-init filebomb /", &out);
        assert_int_equal(st, 0);
        int n = 0, err = 0;
        assert_int_equal(sscanf(out, "%d %d", &n, &err), 2);
        printf("#   created %d files, then: %s\n", n, strerror(err));
        assert_true(err == EDQUOT || err == ENOSPC);
        if (!is_btrfs)
                assert_true(n > 0 && (uint64_t)n <= inodes);
        else
                assert_true(n > 0 && n < 200000);
        box_destroy(&a);
}

static void test_projid_fixed(void **state) {
        printf("# root inside cannot move its files to another project (or out of the quota)\n");
        struct box a = { 0 };
        box_create(&a, &(struct rt_limits){ .disk_bytes = LIMIT });
        const char *out;
        assert_int_equal(run(&a, "echo x > /f && test-init setproj /f 4242", &out), 0);
        int err = atoi(out);
        printf("#   FS_IOC_FSSETXATTR from inside: %s\n", err ? strerror(err) : "succeeded");
        assert_true(err != 0);
        box_destroy(&a);
}

static void test_unsupported(void **state) {
        printf("# a limit on a filesystem without quotas is refused with -EOPNOTSUPP and a clear message;\n"
               "# on btrfs, upper dirs outside a subvolume of their own are refused\n");
        struct box a = { 0 };
        box_dirs(&a, data); /* the host's /tmp: no project quota there */
        struct statfs sf;
        assert_int_equal(statfs(a.upper, &sf), 0);
        int r = box_try(&a, &(struct rt_limits){ .disk_bytes = LIMIT });
        printf("#   %s\n", runtime_last_error());
        if (sf.f_type == BTRFS_SUPER_MAGIC) {
                assert_int_equal(r, -EINVAL);
        } else {
                assert_int_equal(r, -EOPNOTSUPP);
                assert_non_null(strstr(runtime_last_error(), "quota"));
        }
        /* no limits asked: the same dirs are fine */
        assert_int_equal(box_try(&a, &(struct rt_limits){ 0 }), 0);
        box_destroy(&a);

        if (is_btrfs) {
                struct box t = { 0 };
                PJ(t.id, "sbx_q%d_top", (int)getpid());
                PJ(t.dir, "%s/%s", vol, t.id);
                assert_int_equal(rt_mkdir_p(t.dir, 0700), 0); /* a plain dir, not a subvolume */
                PJ(t.upper, "%s/upper", t.dir);
                PJ(t.work, "%s/work", t.dir);
                PJ(t.run, "%s/run", t.dir);
                assert_int_equal(rt_mkdir_p(t.upper, 0755), 0);
                assert_int_equal(rt_mkdir_p(t.work, 0700), 0);
                assert_int_equal(rt_mkdir_p(t.run, 0700), 0);
                assert_int_equal(box_try(&t, &(struct rt_limits){ .disk_bytes = LIMIT }), -EINVAL);
                printf("#   %s\n", runtime_last_error());
                assert_int_equal(rt_rm_rf(t.dir), 0);
        }
        struct box s = { 0 };
        box_dirs(&s, vol);
        assert_int_equal(box_try(&s, &(struct rt_limits){ .disk_bytes = 1000 }), -ERANGE);
        assert_int_equal(rt_rm_rf(s.dir), 0);
}

static void test_volume_lifecycle(void **state) {
        printf("# the volume: prepare is idempotent, teardown detaches the loop device, prepare again\n"
               "# reuses the image and its files\n");
        char *p = NULL;
        assert_int_equal(rt_volume_prepare(data, VOL_SIZE, &p), 0);
        assert_string_equal(p, vol);
        free(p);
        char keep[600];
        PJ(keep, "%s/keep", vol);
        assert_int_equal(rt_volume_make_dir(keep, 0700), 0);
        assert_int_equal(rt_volume_make_dir(keep, 0700), -EEXIST);
        assert_int_equal(loops_of_image(), 1);
        assert_int_equal(rt_volume_teardown(data), 0);
        assert_loops_released();
        assert_int_equal(rt_volume_teardown(data), 0);
        assert_int_equal(rt_volume_prepare(data, 0, NULL), 0); /* size only matters for a new image */
        struct stat st;
        assert_int_equal(stat(keep, &st), 0);
        assert_int_equal(loops_of_image(), 1);

        /* A mount namespace made while the volume is mounted keeps the filesystem (and its
         * loop device) after teardown; prepare mounts that same device again, not a second
         * one: one image never carries two filesystems. */
        int ready[2];
        assert_int_equal(pipe(ready), 0);
        pid_t holder = fork();
        assert_true(holder >= 0);
        if (holder == 0) {
                close(ready[0]);
                if (unshare(CLONE_NEWNS) < 0)
                        _exit(1);
                (void)!write(ready[1], "x", 1);
                pause();
                _exit(0);
        }
        close(ready[1]);
        char x;
        assert_int_equal(read(ready[0], &x, 1), 1);
        close(ready[0]);
        char before[32] = "", after[32] = "";
        assert_int_equal(loops_of_image_named(before), 1);
        assert_int_equal(rt_volume_teardown(data), 0);
        assert_int_equal(mount_holder(before) > 0, true);
        assert_int_equal(rt_volume_prepare(data, 0, NULL), 0);
        assert_int_equal(loops_of_image_named(after), 1);
        assert_string_equal(before, after);
        assert_int_equal(stat(keep, &st), 0);
        printf("#   held by pid %d's mount namespace, %s was mounted again, not a second device\n",
               (int)holder, after);
        kill(holder, SIGKILL);
        assert_int_equal(waitpid(holder, NULL, 0), holder);
        assert_int_equal(rt_rm_rf(keep), 0);
        printf("#   ok, one loop device while mounted, released by teardown\n");
}

static int group_setup(void **state) {
        if (geteuid() != 0) {
                printf("# skipped: needs root\n");
                exit(77);
        }
        if (access("/bin/busybox", X_OK) != 0) {
                printf("# skipped: needs /bin/busybox\n");
                exit(77);
        }
        /* What the machine offers is probed apart from the code under test: once it has
         * loop devices, mkfs and a quota filesystem, a volume rt_volume_prepare cannot
         * make is a failure, not a skip. */
        printf("# quota volume: ");
        fflush(stdout);
        if (system(QUOTA_CAPABLE) != 0) {
                printf("# skipped: this machine cannot hold a quota volume\n");
                exit(77);
        }
        PJ(data, "/tmp/space-rt-quota-XXXXXX");
        assert_non_null(mkdtemp(data));
        ops = runtime_find("ns");
        assert_int_equal(ops->host_init(data), 0);
        char *p = NULL;
        int r = rt_volume_prepare(data, VOL_SIZE, &p);
        if (r < 0) {
                printf("# rt_volume_prepare failed on a capable machine: %s\n", runtime_last_error());
                rt_rm_rf(data);
        }
        assert_int_equal(r, 0);
        PJ(vol, "%s", p);
        free(p);
        struct statfs sf;
        assert_int_equal(statfs(vol, &sf), 0);
        is_btrfs = sf.f_type == BTRFS_SUPER_MAGIC;
        printf("# volume %s: %s\n", vol, is_btrfs ? "btrfs with qgroups" : "ext4 with project quota");
        make_template();
        return 0;
}

static int group_teardown(void **state) {
        for (size_t i = 0; i < ELEMENTSOF(live); i++)
                if (live[i] && ops->destroy(live[i]) < 0)
                        printf("# leftover sandbox could not be destroyed: %s\n", runtime_last_error());
        if (rt_volume_teardown(data) < 0)
                printf("# volume teardown: %s\n", runtime_last_error());
        rt_rm_rf(data);
        return 0;
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_fill),
                cmocka_unit_test(test_filebomb),
                cmocka_unit_test(test_projid_fixed),
                cmocka_unit_test(test_unsupported),
                cmocka_unit_test(test_volume_lifecycle),
        };
        return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
