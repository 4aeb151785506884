/* The default template end to end: template_ensure_base builds "base" (debootstrap
 * bookworm minbase + python3; from the host cache after the first run on a machine),
 * then a sandbox made from it runs python3 and sees a Debian root it owns. */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>
#include "common/macros.h"
#include "runtime/fsutil.h"
#include "runtime/runtime.h"
#include "runtime/template.h"

#define PJ(buf, ...) assert_true(snprintf(buf, sizeof buf, __VA_ARGS__) < (int)sizeof buf)

static char data[256];

static void progress(const char *line, void *ud) {
        int *n = ud;
        /* debootstrap is chatty: show the first lines and every 50th */
        if ((*n)++ < 5 || *n % 50 == 0)
                printf("#   %s\n", line);
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

static const char *run_ok(int fd, const char *cmd) {
        static char out[65536];
        uint32_t n = (uint32_t)strlen(cmd), len;
        int32_t st;
        assert_int_equal(write(fd, &n, 4), 4);
        assert_int_equal(write(fd, cmd, n), (ssize_t)n);
        assert_int_equal(read_full(fd, &st, 4), 0);
        assert_int_equal(read_full(fd, &len, 4), 0);
        assert_true(len < sizeof out);
        assert_int_equal(read_full(fd, out, len), 0);
        out[len] = 0;
        if (st != 0)
                printf("# '%s' -> status 0x%x: %s\n", cmd, st, out);
        assert_int_equal(st, 0);
        out[strcspn(out, "\n")] = 0;
        return out;
}

static void test_base(void **state) {
        printf("# base template: ensure (debootstrap or cache), python3 runs as root inside\n");
        int lines = 0;
        time_t t0 = time(NULL);
        int r = template_ensure_base(data, progress, &lines);
        if (r < 0)
                printf("# ensure_base: %s\n", runtime_last_error());
        assert_int_equal(r, 0);
        printf("# base ready in %lds\n", (long)(time(NULL) - t0));
        assert_true(template_exists(data, TEMPLATE_BASE));
        assert_int_equal(template_ensure_base(data, NULL, NULL), 0); /* second call: nothing to do */

        char lower[512], up[512], work[512], run[512];
        PJ(lower, "%s/templates/base/rootfs", data);
        PJ(up, "%s/sbx/upper", data);
        PJ(work, "%s/sbx/work", data);
        PJ(run, "%s/sbx/run", data);
        assert_int_equal(rt_mkdir_p(up, 0755), 0);
        assert_int_equal(rt_mkdir_p(work, 0700), 0);
        assert_int_equal(rt_mkdir_p(run, 0700), 0);
        char id[64];
        PJ(id, "sbx_base%d", (int)getpid());
        struct rt_spec s = { .id = id, .lower_dirs = lower, .upper_dir = up, .work_dir = work,
                             .run_dir = run, .init_path = TEST_INIT_PATH };
        const struct runtime_ops *ops = runtime_find("ns");
        struct rt_sandbox *sb = NULL;
        r = ops->create(&s, &sb);
        if (r < 0)
                printf("# create: %s\n", runtime_last_error());
        assert_int_equal(r, 0);
        int fd = ops->init_fd(sb);
        assert_string_equal(run_ok(fd, "python3 -c 'print(6*7)'"), "42");
        assert_string_equal(run_ok(fd, "grep VERSION_CODENAME /etc/os-release"), "VERSION_CODENAME=bookworm");
        assert_string_equal(run_ok(fd, "stat -c %u:%g /usr/bin/python3 /etc | sort -u"), "0:0");
        assert_string_equal(run_ok(fd, "whoami"), "root");
        run_ok(fd, "echo data > /root/file && python3 -c 'print(open(\"/root/file\").read())'");
        assert_int_equal(ops->destroy(sb), 0);
        char p[600];
        PJ(p, "%s/root/file", up);
        struct stat st;
        assert_int_equal(stat(p, &st), 0);
        assert_int_equal(st.st_uid, RT_ID_BASE);
}

static int setup(void **state) {
        if (geteuid() != 0) {
                printf("# skipped: needs root\n");
                exit(77);
        }
        PJ(data, "/tmp/space-rt-base-XXXXXX");
        assert_non_null(mkdtemp(data));
        return 0;
}

static int teardown(void **state) {
        rt_rm_rf(data);
        return 0;
}

int main(void) {
        const struct CMUnitTest tests[] = { cmocka_unit_test(test_base) };
        return cmocka_run_group_tests(tests, setup, teardown);
}
