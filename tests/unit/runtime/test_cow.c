/* Unit test of rt_cow_take_back (src/runtime/fsutil.c): after a fork whose child has
 * gone, writing pages the parent had touched costs a minor fault each (they are
 * write-protected for copy-on-write); after rt_cow_take_back it costs none, and pages
 * never touched are not made resident by it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/fsutil.h"

#define PAGES 2048

static long minflt(void) {
        struct rusage ru;
        assert_int_equal(getrusage(RUSAGE_THREAD, &ru), 0);
        return ru.ru_minflt;
}

static void fork_and_reap(void) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0)
                _exit(0);
        int st;
        assert_int_equal(waitpid(pid, &st, 0), pid);
}

/* Minor faults of writing one byte into each of n pages of p. */
static long write_faults(volatile unsigned char *p, size_t n, long page) {
        long f0 = minflt();
        for (size_t i = 0; i < n; i++)
                p[i * (size_t)page] ^= 1;
        return minflt() - f0;
}

static void test_cow_take_back(void **state) {
        (void)state;
        long page = sysconf(_SC_PAGESIZE);
        unsigned char *buf = mmap(NULL, (size_t)(2 * PAGES) * (size_t)page, PROT_READ | PROT_WRITE,
                                  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        assert_true(buf != MAP_FAILED);
        /* small pages: with transparent huge pages one fault would stand for 512 */
        assert_int_equal(madvise(buf, (size_t)(2 * PAGES) * (size_t)page, MADV_NOHUGEPAGE), 0);
        memset(buf, 1, (size_t)PAGES * (size_t)page); /* the first half resident, the second never touched */

        printf("check: after a fork, each written page faults (the reference)\n");
        fork_and_reap();
        long plain = write_faults(buf, PAGES, page);
        printf("  %ld faults for %d pages\n", plain, PAGES);
        assert_true(plain >= PAGES * 9 / 10);

        printf("check: after a fork and rt_cow_take_back, writing them faults (almost) never\n");
        fork_and_reap();
        rt_cow_take_back();
        long taken = write_faults(buf, PAGES, page);
        printf("  %ld faults for %d pages\n", taken, PAGES);
        assert_true(taken <= PAGES / 20);

        printf("check: pages never touched stay absent\n");
        unsigned char vec[PAGES];
        assert_int_equal(mincore(buf + (size_t)PAGES * (size_t)page, (size_t)PAGES * (size_t)page, vec), 0);
        size_t resident = 0;
        for (size_t i = 0; i < PAGES; i++)
                resident += vec[i] & 1;
        assert_int_equal(resident, 0);
        munmap(buf, (size_t)(2 * PAGES) * (size_t)page);
}

int main(void) {
        const struct CMUnitTest tests[] = { cmocka_unit_test(test_cow_take_back) };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
