/* Incremental cost: a tree of 10,000 files and ~1 GB (sparse, so it is quick to make),
 * one 1 MiB file changed, captured again with the parent. The capture must read only the
 * changed file's data and write at most that data plus a few KiB of trees. */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "helpers.h"
#include "store/store.h"

#define DIRS 100
#define PER_DIR 100
#define LOGICAL (100u << 10) /* 10,000 x 100 KiB = ~1 GB */
#define CHANGED (1u << 20)
#define TREE_BUDGET (48u << 10)

static double ms_since(const struct timespec *t0) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        return (double)(t.tv_sec - t0->tv_sec) * 1e3 + (double)(t.tv_nsec - t0->tv_nsec) / 1e6;
}

static void test_incremental(void **state) {
        (void)state;
        char *base = th_tmpdir("incr");
        char src[4300], sdir[4300], out[4300], p[4400];
        snprintf(src, sizeof src, "%s/src", base);
        snprintf(sdir, sizeof sdir, "%s/store", base);
        snprintf(out, sizeof out, "%s/out", base);
        mkdir(src, 0755);
        struct rng r = { 77 };
        uint8_t data[4096];
        uint64_t logical = 0;
        for (int d = 0; d < DIRS; d++) {
                snprintf(p, sizeof p, "%s/d%03d", src, d);
                assert_int_equal(mkdir(p, 0755), 0);
                for (int f = 0; f < PER_DIR; f++) {
                        snprintf(p, sizeof p, "%s/d%03d/f%03d", src, d, f);
                        int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
                        assert_true(fd >= 0);
                        size_t n = 512 + rng_below(&r, sizeof data - 512);
                        rng_fill(&r, data, n);
                        assert_int_equal(pwrite(fd, data, n, 0), (ssize_t)n);
                        assert_int_equal(ftruncate(fd, LOGICAL), 0);
                        close(fd);
                        logical += LOGICAL;
                }
        }
        snprintf(p, sizeof p, "%s/d050/changing", src);
        assert_int_equal(th_write_file(p, &r, CHANGED), 0);
        logical += CHANGED;
        printf("generated 10,001 files, %.2f GB logical\n", (double)logical / 1e9);
        usleep(50000); /* out of the stat cache's racy window */

        struct store *s;
        assert_int_equal(store_open(sdir, &(struct store_opts){ STORE_OPTS_INIT, .create = true }, &s), 0);
        struct store_op_stats a = { 0 }, b = { 0 };
        struct store_hash h1, h2;
        struct timespec t0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        assert_int_equal(store_capture(s, src, NULL, &(struct store_capture_opts){ .stats = &a }, &h1), 0);
        printf("full capture: %.0f ms, %llu files read, %llu bytes read, %llu bytes written\n", ms_since(&t0),
               (unsigned long long)a.files_read, (unsigned long long)a.bytes_read, (unsigned long long)a.bytes_written);
        assert_int_equal(a.bytes_logical, logical);

        /* rewrite the 1 MiB file with new data */
        struct rng r2 = { 78 };
        assert_int_equal(th_write_file(p, &r2, CHANGED), 0);
        clock_gettime(CLOCK_MONOTONIC, &t0);
        assert_int_equal(store_capture(s, src, &h1, &(struct store_capture_opts){ .stats = &b }, &h2), 0);
        double ms = ms_since(&t0);
        printf("incremental capture: %.0f ms, %llu of %llu files read, %llu bytes read, %llu bytes written in %llu "
               "objects (%llu trees)\n",
               ms, (unsigned long long)b.files_read, (unsigned long long)b.files, (unsigned long long)b.bytes_read,
               (unsigned long long)b.bytes_written, (unsigned long long)b.objects_written,
               (unsigned long long)b.trees_written);
        printf("checking the capture read only the changed file: %llu == %u\n", (unsigned long long)b.bytes_read, CHANGED);
        assert_int_equal(b.files_read, 1);
        assert_int_equal(b.bytes_read, CHANGED);
        printf("checking bytes written <= changed data + %u KiB of trees\n", TREE_BUDGET >> 10);
        assert_true(b.bytes_written <= CHANGED + TREE_BUDGET);
        assert_true(b.bytes_written >= CHANGED / 2); /* it did write the new data */
        assert_int_equal(b.trees_written, 2);          /* d050 and the root; 99 directories reused */

        printf("checking the new snapshot restores exactly\n");
        assert_int_equal(store_materialize(s, &h2, out, NULL), 0);
        char why[2048];
        if (th_compare_trees(src, out, why, sizeof why))
                fail_msg("%s", why);
        store_free(s);
        th_rm_rf(base);
        free(base);
}

int main(void) {
        const struct CMUnitTest tests[] = { cmocka_unit_test(test_incremental) };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
