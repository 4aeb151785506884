/* The microvm driver end to end, without spaced: rt_microvm_ops boots the base template
 * in QEMU (TCG here), space-init answers over the virtio-serial port, then checkpoint /
 * restore / fork of a VM running a background counter, the session files exported to
 * upper_dir, the image stored twice in a snapshot store (dedup), and a clean destroy.
 * Root, qemu-system-x86_64 and the guest kernel (scripts/build-guest) are needed. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <stdbool.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/macros.h"
#include "runtime/fsutil.h"
#include "runtime/microvm/microvm.h"
#include "runtime/runtime.h"
#include "runtime/template.h"
#include "store/store.h"
#include "mvclient.h"

#define PJ(buf, ...) assert_true(snprintf(buf, sizeof buf, __VA_ARGS__) < (int)sizeof buf)
#define VM_TIMEOUT_MS 120000
/* Persistent, so that the template image the driver caches per template is reused. */
#define TEST_DATA_DEFAULT "/var/tmp/space-microvm-test"

static const struct runtime_ops *ops;
static char data[256], work[256];
static struct rt_sandbox *live[4];
/* A snapshot layer the daemon stacks over the template (lower_dirs "layer:template"). */
static const char *extra_layer;

struct vm {
        char id[64], upper[512], run[512];
        struct rt_sandbox *sb;
        int fd;
};

static void track(struct rt_sandbox *sb) {
        for (size_t i = 0; i < ELEMENTSOF(live); i++)
                if (!live[i]) {
                        live[i] = sb;
                        return;
                }
}

static void untrack(struct rt_sandbox *sb) {
        for (size_t i = 0; i < ELEMENTSOF(live); i++)
                if (live[i] == sb)
                        live[i] = NULL;
}

static int64_t vm_start(struct vm *v, const char *name, const char *restore_dir) {
        PJ(v->id, "sbx_mv%s%d", name, (int)getpid());
        PJ(v->upper, "%s/%s/upper", work, name);
        PJ(v->run, "%s/%s/run", work, name);
        char lower[1100], wd[512];
        if (extra_layer)
                PJ(lower, "%s:%s/templates/base/rootfs", extra_layer, data);
        else
                PJ(lower, "%s/templates/base/rootfs", data);
        PJ(wd, "%s/%s/work", work, name);
        assert_int_equal(rt_mkdir_p(v->upper, 0755), 0);
        assert_int_equal(rt_mkdir_p(wd, 0700), 0);
        assert_int_equal(rt_mkdir_p(v->run, 0700), 0);
        struct rt_spec s = { .id = v->id, .lower_dirs = lower, .upper_dir = v->upper, .work_dir = wd,
                             .run_dir = v->run, .init_path = SPACE_INIT_PATH, .restore_dir = restore_dir };
        int64_t t0 = mvc_now_ms();
        int r = ops->create(&s, &v->sb);
        if (r < 0)
                printf("# create %s: %s\n", name, runtime_last_error());
        assert_int_equal(r, 0);
        track(v->sb);
        v->fd = ops->init_fd(v->sb);
        assert_int_equal(mvc_hello(v->fd, VM_TIMEOUT_MS), 0);
        return mvc_now_ms() - t0;
}

static void vm_destroy(struct vm *v) {
        untrack(v->sb);
        assert_int_equal(ops->destroy(v->sb), 0);
        v->sb = NULL;
}

static const char *sh(struct vm *v, const char *cmd) {
        static char out[65536];
        int code = -1;
        assert_int_equal(mvc_sh(v->fd, cmd, false, out, sizeof out, &code, VM_TIMEOUT_MS), 0);
        if (code != 0)
                printf("# '%s' exited %d: %s\n", cmd, code, out);
        assert_int_equal(code, 0);
        out[strcspn(out, "\n")] = 0;
        return out;
}

static bool cgroup_exists(const char *id) {
        char p[512];
        PJ(p, "/sys/fs/cgroup/memory/space/%s", id);
        if (access(p, F_OK) == 0)
                return true;
        PJ(p, "/sys/fs/cgroup/space/%s", id);
        return access(p, F_OK) == 0;
}

static void test_boot_exec_isolation(void **state) {
        (void)state;
        struct rt_accel_info ai;
        assert_int_equal(rt_microvm_accel_info(&ai), 0);
        printf("# accelerator: %s%s, because: %s\n", ai.name,
               strcmp(ai.name, "tcg") == 0 ? " (software emulation: slow, same code path)" : "", ai.reason);
        printf("# cold boot of the base template (warm start off), python3 prints 42\n");
        setenv("SPACE_MICROVM_WARM", "0", 1);
        struct vm v;
        int64_t ms = vm_start(&v, "boot", NULL);
        unsetenv("SPACE_MICROVM_WARM");
        printf("# booted to HELLO in %lld ms\n", (long long)ms);
        assert_string_equal(sh(&v, "python3 -c 'print(6*7)'"), "42");

        printf("# the guest sees its own kernel, its own processes, not the host's files\n");
        char marker[512];
        PJ(marker, "/tmp/space-microvm-host-marker-%d", (int)getpid());
        int mfd = open(marker, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        assert_true(mfd >= 0);
        close(mfd);
        char cmd[700];
        PJ(cmd, "test -e %s && echo visible || echo absent", marker);
        assert_string_equal(sh(&v, cmd), "absent");
        unlink(marker);
        assert_string_equal(sh(&v, "cat /proc/1/comm"), "init");
        char hostpid[64];
        PJ(hostpid, "test -e /proc/%d && echo visible || echo absent", (int)getpid());
        /* our pid may exist in the guest by chance; the guest's process count says more */
        int nprocs = atoi(sh(&v, "ls -d /proc/[0-9]* | wc -l"));
        printf("# %d processes in the guest\n", nprocs);
        assert_true(nprocs > 0 && nprocs < 100);
        const char *kver = sh(&v, "uname -r");
        printf("# guest kernel %s\n", kver);
        assert_non_null(strstr(kver, "cloud-amd64"));

        printf("# QEMU runs in the sandbox's own cgroup, not as root\n");
        pid_t qpid = ops->init_pid(v.sb);
        char p[128], buf[4096];
        PJ(p, "/proc/%d/cgroup", (int)qpid);
        assert_true(rt_read_file(p, buf, sizeof buf) > 0);
        assert_non_null(strstr(buf, v.id));
        PJ(p, "/proc/%d/status", (int)qpid);
        assert_true(rt_read_file(p, buf, sizeof buf) > 0);
        const char *uid = strstr(buf, "\nUid:");
        assert_non_null(uid);
        printf("# QEMU %.*s\n", (int)strcspn(uid + 1, "\n"), uid + 1);
        assert_true(strtoul(uid + 5, NULL, 10) != 0);
        struct rt_health h;
        assert_int_equal(ops->health(v.sb, &h), 0);
        assert_true(h.alive);
        printf("# QEMU uses %llu MiB, %u tasks\n", (unsigned long long)(h.memory_bytes >> 20), h.pids);

        printf("# destroy leaves no process, cgroup or file\n");
        vm_destroy(&v);
        assert_int_equal(kill(qpid, 0), -1);
        assert_false(cgroup_exists(v.id));
        DIR *d = opendir(v.run);
        assert_non_null(d);
        struct dirent *de;
        int left = 0;
        while ((de = readdir(d)))
                if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
                        printf("# left in run_dir: %s\n", de->d_name), left++;
        closedir(d);
        assert_int_equal(left, 0);
}

static void wait_counter_grows(struct vm *v, const char *label) {
        /* the loop may not have renamed its first file into place yet: that counts as 0 */
        int a = atoi(sh(v, "cat /root/counter 2>/dev/null || echo 0"));
        usleep(1500 * 1000);
        int b = atoi(sh(v, "cat /root/counter"));
        printf("# %s: counter %d -> %d\n", label, a, b);
        assert_true(b > a);
}

static uint64_t store_image(struct store *st, const char *dir, const struct store_hash *parent,
                            struct store_hash *ret) {
        struct store_op_stats stats = { 0 };
        struct store_capture_opts o = { .session = "microvm-test", .reason = STORE_REASON_MANUAL, .stats = &stats };
        int r = store_capture(st, dir, parent, &o, ret);
        if (r < 0)
                printf("# store_capture: %s\n", strerror(-r));
        assert_int_equal(r, 0);
        return stats.bytes_written;
}

static void test_checkpoint_restore_fork(void **state) {
        (void)state;
        printf("# a background counter survives checkpoint -> restore, and two forks go on independently\n");
        struct vm v;
        int64_t ms = vm_start(&v, "snap", NULL);
        printf("# create (warm start when the template has one) to HELLO in %lld ms\n", (long long)ms);
        int code = -1;
        assert_int_equal(mvc_sh(v.fd, "i=0; while :; do i=$((i+1)); echo $i > /root/counter.new; mv /root/counter.new /root/counter; sleep 0.2; done",
                                true, NULL, 0, &code, VM_TIMEOUT_MS),
                         0);
        sh(&v, "echo hello from the guest > /root/hello.txt");
        wait_counter_grows(&v, "before checkpoint");

        char img1[512], img2[512];
        PJ(img1, "%s/img1", work);
        PJ(img2, "%s/img2", work);
        assert_int_equal(rt_mkdir_p(img1, 0755), 0);
        assert_int_equal(rt_mkdir_p(img2, 0755), 0);
        printf("# checkpoint of a frozen VM, leave running: the session files appear in upper_dir\n");
        assert_int_equal(ops->freeze(v.sb), 0);
        int64_t t0 = mvc_now_ms();
        int r = ops->checkpoint(v.sb, img1, true);
        if (r < 0)
                printf("# checkpoint: %s\n", runtime_last_error());
        assert_int_equal(r, 0);
        printf("# checkpoint (leave running) took %lld ms\n", (long long)(mvc_now_ms() - t0));
        printf("# the same connection goes on (no new HELLO), the VM frozen again until thawed\n");
        assert_int_equal(ops->init_fd(v.sb), v.fd);
        assert_int_equal(ops->thaw(v.sb), 0);
        char p[700], buf[256];
        PJ(p, "%s/root/hello.txt", v.upper);
        assert_true(rt_read_file(p, buf, sizeof buf) > 0);
        assert_string_equal(buf, "hello from the guest\n");
        wait_counter_grows(&v, "after checkpoint, same VM");

        printf("# a 1 MiB change, then a second checkpoint (stopping the VM)\n");
        sh(&v, "head -c 1048576 /dev/urandom > /root/blob");
        r = ops->checkpoint(v.sb, img2, false);
        if (r < 0)
                printf("# checkpoint: %s\n", runtime_last_error());
        assert_int_equal(r, 0);
        PJ(p, "%s/root/blob", v.upper);
        struct stat st;
        assert_int_equal(stat(p, &st), 0);
        assert_int_equal(st.st_size, 1048576);
        vm_destroy(&v);

        printf("# both images into a snapshot store: the second adds little\n");
        char sdir[512];
        PJ(sdir, "%s/store", work);
        struct store *store = NULL;
        struct store_opts so = { STORE_OPTS_INIT, .create = true };
        assert_int_equal(store_open(sdir, &so, &store), 0);
        struct store_hash h1, h2;
        uint64_t b1 = store_image(store, img1, NULL, &h1);
        uint64_t b2 = store_image(store, img2, &h1, &h2);
        printf("# first image stored %llu bytes, second %llu bytes (%.1f %%)\n", (unsigned long long)b1,
               (unsigned long long)b2, 100.0 * (double)b2 / (double)(b1 ? b1 : 1));
        assert_true(b2 < b1);
        store_free(store);

        printf("# two forks from the second image: the counter goes on in each, separately\n");
        struct vm f1, f2;
        ms = vm_start(&f1, "fork1", img2);
        printf("# restore to HELLO in %lld ms\n", (long long)ms);
        vm_start(&f2, "fork2", img2);
        assert_string_equal(sh(&f1, "cat /root/hello.txt"), "hello from the guest");
        int c1 = atoi(sh(&f1, "cat /root/counter"));
        assert_true(c1 > 0);
        wait_counter_grows(&f1, "fork 1");
        wait_counter_grows(&f2, "fork 2");
        sh(&f1, "echo one > /root/who");
        sh(&f2, "echo two > /root/who");
        assert_string_equal(sh(&f1, "cat /root/who"), "one");
        assert_string_equal(sh(&f2, "cat /root/who"), "two");
        assert_string_equal(sh(&f1, "stat -c %s /root/blob"), "1048576");
        vm_destroy(&f1);
        vm_destroy(&f2);

        printf("# a broken image is refused with EINVAL\n");
        struct rt_spec bad = { .id = "sbx_mvbad", .lower_dirs = "/", .upper_dir = f1.upper, .run_dir = f1.run,
                               .init_path = SPACE_INIT_PATH, .restore_dir = work };
        struct rt_sandbox *sb = NULL;
        assert_int_equal(ops->create(&bad, &sb), -EINVAL);
        printf("# %s\n", runtime_last_error());
}

static void test_upper_into_guest(void **state) {
        (void)state;
        printf("# booting with files in upper_dir and in a layer over the template (no memory image): the guest sees them\n");
        char p[600];
        PJ(p, "%s/seed/upper/root", work);
        assert_int_equal(rt_mkdir_p(p, 0755), 0);
        PJ(p, "%s/seed/upper/root/seeded.txt", work);
        FILE *f = fopen(p, "we");
        assert_non_null(f);
        fputs("seeded\n", f);
        fclose(f);
        assert_int_equal(chown(p, RT_ID_BASE, RT_ID_BASE), 0);
        char layer[512];
        PJ(layer, "%s/layer", work);
        PJ(p, "%s/root", layer);
        assert_int_equal(rt_mkdir_p(p, 0755), 0);
        PJ(p, "%s/root/layered.txt", layer);
        f = fopen(p, "we");
        assert_non_null(f);
        fputs("from the layer\n", f);
        fclose(f);
        PJ(p, "%s/root/seeded.txt", layer); /* upper_dir's copy must win */
        f = fopen(p, "we");
        assert_non_null(f);
        fputs("older\n", f);
        fclose(f);
        extra_layer = layer;
        struct vm v;
        vm_start(&v, "seed", NULL);
        extra_layer = NULL;
        assert_string_equal(sh(&v, "cat /root/seeded.txt"), "seeded");
        assert_string_equal(sh(&v, "cat /root/layered.txt"), "from the layer");
        assert_string_equal(sh(&v, "stat -c %u /root/seeded.txt"), "0");
        assert_string_equal(sh(&v, "python3 -c 'print(6*7)'"), "42");
        vm_destroy(&v);
}

/* Where KVM cannot boot the guest (ARCHITECTURE.md §6; this machine's PVM), forcing the
 * probe's threshold down makes auto say kvm, and the create must still come back, under
 * TCG, in bounded time. Where KVM boots it (another PVM host), a masked /dev/kvm fails it. */
static void test_kvm_fallback(void **state) {
        (void)state;
        struct rt_accel_info ai;
        assert_int_equal(mv_accel_probe(MV_KVM_MIN_IPS, &ai), 0);
        if ((ai.kernel_ips == 0 && ai.user_ips == 0) || strcmp(ai.name, "kvm") == 0) {
                printf("# SKIP: needs a /dev/kvm that runs the probe but not at hardware speed (here: %s)\n",
                       ai.reason);
                skip();
        }
        printf("# auto with the threshold forced to 1/s says kvm; the KVM boot fails, TCG boots instead\n");
        setenv("SPACE_MICROVM_KVM_MIN_IPS", "1", 1);
        setenv("SPACE_MICROVM_PRIVILEGED", "1", 1); /* /dev/kvm is root's here */
        setenv("SPACE_MICROVM_WARM", "0", 1);
        assert_string_equal(rt_microvm_accel(), "kvm");
        struct vm v;
        int64_t ms = vm_start(&v, "kvmfb", NULL);
        assert_int_equal(rt_microvm_accel_info(&ai), 0);
        bool masked = false;
        if (strcmp(ai.name, "kvm") == 0) {
                /* this host's KVM runs the guest, only slowly (a PVM host can): the boot
                 * is fine, and the fallback is made to happen by giving QEMU, in a mount
                 * namespace of this process, a /dev/kvm that is not one */
                printf("# this host's KVM boots the guest (%lld ms); again with /dev/kvm masked for QEMU\n",
                       (long long)ms);
                assert_string_equal(sh(&v, "python3 -c 'print(6*7)'"), "42");
                vm_destroy(&v);
                assert_int_equal(unshare(CLONE_NEWNS), 0);
                assert_int_equal(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL), 0);
                assert_int_equal(mount("/dev/null", "/dev/kvm", NULL, MS_BIND, NULL), 0);
                masked = true;
                ms = vm_start(&v, "kvmfb2", NULL);
                assert_int_equal(rt_microvm_accel_info(&ai), 0);
        }
        printf("# KVM attempt + TCG boot to HELLO: %lld ms\n", (long long)ms);
        printf("# now: %s (%s)\n", ai.name, ai.reason);
        assert_string_equal(ai.name, "tcg");
        assert_true(ai.cached);
        assert_non_null(strstr(ai.reason, "did not reach HELLO"));
        printf("# the guest runs on TCG's CPU model: %s\n", sh(&v, "grep -m1 'model name' /proc/cpuinfo"));
        assert_non_null(strstr(sh(&v, "grep -m1 'model name' /proc/cpuinfo"), "QEMU"));
        assert_string_equal(sh(&v, "python3 -c 'print(6*7)'"), "42");
        vm_destroy(&v);
        if (masked)
                assert_int_equal(umount2("/dev/kvm", 0), 0);
        unsetenv("SPACE_MICROVM_KVM_MIN_IPS");
        unsetenv("SPACE_MICROVM_PRIVILEGED");
        unsetenv("SPACE_MICROVM_WARM");
        printf("# the default threshold decides tcg again: %s\n", rt_microvm_accel());
        assert_string_equal(rt_microvm_accel(), "tcg");
}

static int setup(void **state) {
        (void)state;
        if (geteuid() != 0) {
                printf("# SKIP: needs root\n");
                exit(77);
        }
        if (system("command -v " "qemu-system-x86_64 >/dev/null && command -v qemu-img >/dev/null") != 0) {
                printf("# FAIL: qemu-system-x86_64 / qemu-img not installed (scripts/install-deps installs them)\n");
                exit(1);
        }
        /* build-guest exits 3 when the machine cannot fetch the kernel package (a tool
         * missing, apt unable to download): a skip. Any other failure is ours. */
        int st = system(BUILD_GUEST " >/dev/null");
        if (WIFEXITED(st) && WEXITSTATUS(st) == 3) {
                printf("# SKIP: no guest kernel and this machine cannot fetch one (scripts/build-guest)\n");
                exit(77);
        }
        if (st != 0)
                printf("# scripts/build-guest failed (wait status 0x%x)\n", st);
        assert_int_equal(st, 0);
        ops = runtime_find("microvm");
        assert_non_null(ops);
        const char *d = getenv("SPACE_TEST_DATA");
        PJ(data, "%s", d ? d : TEST_DATA_DEFAULT);
        assert_int_equal(rt_mkdir_p(data, 0755), 0);
        /* base comes from the debootstrap cache, or from debootstrap itself: without
         * either the machine lacks it (a skip); otherwise a failure of
         * template_ensure_base is ours. */
        char cname[128], cache[512];
        assert_int_equal(template_cache_name(TEMPLATE_BASE_SUITE, TEMPLATE_BASE_PACKAGES, cname, sizeof cname), 0);
        const char *cdir = getenv("SPACE_CACHE");
        PJ(cache, "%s/%s", cdir && *cdir == '/' ? cdir : TEMPLATE_DEFAULT_CACHE, cname);
        if (!template_exists(data, TEMPLATE_BASE) && access(cache, R_OK) != 0 &&
            system("command -v debootstrap >/dev/null") != 0) {
                printf("# SKIP: no base template, no cached debootstrap (%s) and no debootstrap to make one\n", cache);
                exit(77);
        }
        int r = template_ensure_base(data, NULL, NULL);
        if (r < 0)
                printf("# base template: %s\n", runtime_last_error());
        assert_int_equal(r, 0);
        PJ(work, "/var/tmp/space-mv-XXXXXX");
        assert_non_null(mkdtemp(work));
        return 0;
}

static int teardown(void **state) {
        (void)state;
        for (size_t i = 0; i < ELEMENTSOF(live); i++)
                if (live[i])
                        ops->destroy(live[i]);
        rt_rm_rf(work);
        return 0;
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_boot_exec_isolation),
                cmocka_unit_test(test_checkpoint_restore_fork),
                cmocka_unit_test(test_upper_into_guest),
                cmocka_unit_test(test_kvm_fallback),
        };
        /* e.g. SPACE_TEST_FILTER=test_kvm_fallback: one test by hand */
        if (getenv("SPACE_TEST_FILTER"))
                cmocka_set_test_filter(getenv("SPACE_TEST_FILTER"));
        return cmocka_run_group_tests(tests, setup, teardown);
}
