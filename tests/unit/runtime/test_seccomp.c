/* The seccomp deny-list, loaded for real in a forked child: denied calls fail with the
 * errno the table says, everything else still works. */
#include "fake.h"
#include <errno.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <linux/sched.h>
#include "runtime/seccomp.h"

/* Each check returns 0 when the call behaved as expected, else a distinct code. */
static int child_checks(const struct rt_seccomp_prog *p) {
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
                return 90;
        if (rt_seccomp_load(p) < 0)
                return 91;
        if (getpid() <= 0)
                return 1;
        errno = 0;
        if (syscall(SYS_bpf, 0, NULL, 0) != -1 || errno != EPERM)
                return 2;
        errno = 0;
        if (unshare(CLONE_NEWUSER) != -1 || errno != EPERM)
                return 3;
        errno = 0;
        if (syscall(SYS_io_uring_setup, 1, NULL) != -1 || errno != ENOSYS)
                return 4;
        struct clone_args ca = { .exit_signal = SIGCHLD };
        errno = 0;
        if (syscall(SYS_clone3, &ca, sizeof ca) != -1 || errno != ENOSYS)
                return 5;
        errno = 0;
        if (syscall(SYS_keyctl, 0, 0, 0, 0, 0) != -1 || errno != EPERM)
                return 6;
        /* unshare without CLONE_NEWUSER is not the filter's business (the kernel decides) */
        errno = 0;
        if (unshare(CLONE_NEWUTS) == -1 && errno != EPERM)
                return 7;
        /* fork (clone without CLONE_NEWUSER) still works */
        pid_t k = fork();
        if (k < 0)
                return 8;
        if (k == 0)
                _exit(0);
        int st;
        if (waitpid(k, &st, 0) != k || !WIFEXITED(st))
                return 9;
        return 0;
}

static void test_denylist(void **state) {
        printf("# seccomp deny-list: bpf/keyctl EPERM, io_uring/clone3 ENOSYS, userns refused, fork fine\n");
        struct rt_seccomp_prog p = { 0 };
        assert_int_equal(rt_seccomp_build(RT_SECCOMP_DENYLIST, &p), 0);
        assert_true(p.len > 10 && p.len <= RT_SECCOMP_MAX_INSNS);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0)
                _exit(child_checks(&p));
        int st;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        assert_true(WIFEXITED(st));
        if (WEXITSTATUS(st))
                printf("# check %d failed in the child\n", WEXITSTATUS(st));
        assert_int_equal(WEXITSTATUS(st), 0);
        rt_seccomp_prog_free(&p);
        assert_null(p.insns);
}

static void test_allowlist_not_yet(void **state) {
        printf("# seccomp allow-list: not implemented yet, says so\n");
        struct rt_seccomp_prog p = { 0 };
        assert_int_equal(rt_seccomp_build(RT_SECCOMP_ALLOWLIST, &p), -ENOTSUP);
        assert_null(p.insns);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_denylist),
                cmocka_unit_test(test_allowlist_not_yet),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
