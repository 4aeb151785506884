/* The cgroup v2 code paths against the real kernel where the host has no v2 controllers
 * to spare (a hybrid host like the build machine): the core v2 files (cgroup.procs,
 * cgroup.freeze, cgroup.events, cgroup.kill) work in any cgroup2 mount, so freeze, thaw,
 * kill-all and remove are checked for real; limits are unit-tested on a fake tree. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include "runtime/cgroup.h"

static const char *root;
static bool made_parent;

static int setup(void **state) {
        enum rt_cgroup_version v;
        if (geteuid() != 0) {
                printf("# skipped: needs root\n");
                exit(77);
        }
        if (rt_cgroup_detect(NULL, &v) == 0 && v == RT_CGROUP_V2)
                root = RT_CGROUP_ROOT;
        else if (rt_cgroup_detect("/sys/fs/cgroup/unified", &v) == 0 && v == RT_CGROUP_V2)
                root = "/sys/fs/cgroup/unified";
        else {
                printf("# skipped: no cgroup2 mount\n");
                exit(77);
        }
        char p[256];
        snprintf(p, sizeof p, "%s/%s", root, RT_CGROUP_PARENT);
        if (mkdir(p, 0755) == 0)
                made_parent = true;
        else
                assert_int_equal(errno, EEXIST);
        return 0;
}

static int teardown(void **state) {
        char p[256];
        snprintf(p, sizeof p, "%s/%s", root, RT_CGROUP_PARENT);
        if (made_parent)
                rmdir(p);
        return 0;
}

static void test_v2_freeze_kill_remove(void **state) {
        printf("# real cgroup2 at %s: attach, freeze/thaw, kill-all, remove\n", root);
        char name[64];
        snprintf(name, sizeof name, "v2test%d", (int)getpid());
        struct rt_cgroup *cg = NULL;
        assert_int_equal(rt_cgroup_create(root, name, &cg), 0);
        assert_int_equal(rt_cgroup_get_version(cg), RT_CGROUP_V2);

        pid_t kid = fork();
        assert_true(kid >= 0);
        if (kid == 0) {
                for (;;)
                        pause();
        }
        assert_int_equal(rt_cgroup_attach(cg, kid), 0);
        unsigned n = 0;
        assert_int_equal(rt_cgroup_count_procs(cg, &n), 0);
        assert_int_equal(n, 1);

        assert_int_equal(rt_cgroup_freeze(cg, true), 0);
        bool fr = false;
        assert_int_equal(rt_cgroup_is_frozen(cg, &fr), 0);
        assert_true(fr);
        assert_int_equal(rt_cgroup_freeze(cg, false), 0);
        assert_int_equal(rt_cgroup_is_frozen(cg, &fr), 0);
        assert_false(fr);

        /* kill-all of a frozen group still works (thaws on the way) */
        assert_int_equal(rt_cgroup_freeze(cg, true), 0);
        assert_int_equal(rt_cgroup_kill_all(cg), 0);
        int st;
        assert_int_equal(waitpid(kid, &st, 0), kid);
        assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
        assert_int_equal(rt_cgroup_freeze(cg, false), 0);
        assert_int_equal(rt_cgroup_count_procs(cg, &n), 0);
        assert_int_equal(n, 0);

        char *dir = NULL;
        assert_int_equal(rt_cgroup_path(cg, RT_CG_MEMORY, NULL, &dir), 0);
        assert_int_equal(rt_cgroup_remove(cg), 0);
        assert_int_equal(access(dir, F_OK), -1);
        free(dir);
        rt_cgroup_free(cg);
}

int main(void) {
        const struct CMUnitTest tests[] = { cmocka_unit_test(test_v2_freeze_kill_remove) };
        return cmocka_run_group_tests(tests, setup, teardown);
}
