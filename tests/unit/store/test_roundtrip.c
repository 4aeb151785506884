/* Property test: generated trees with every entry type (files, sparse files, directories,
 * symlinks, hard links, fifos, sockets, device nodes, whiteouts, xattrs incl. the opaque
 * one, odd modes, owners, mtimes) survive capture -> materialize exactly; capturing the
 * copy gives the same root; after random changes an incremental capture with the parent
 * equals a full capture of the same tree. */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "helpers.h"
#include "store/store-internal.h"

#define ROUNDS 8

static void one_round(uint64_t seed) {
        struct rng r = { seed };
        char *base = th_tmpdir("rt");
        assert_non_null(base);
        char src[4096], out[4096], out2[4096], sdir[4096];
        snprintf(src, sizeof src, "%s/src", base);
        snprintf(out, sizeof out, "%s/out", base);
        snprintf(out2, sizeof out2, "%s/out2", base);
        snprintf(sdir, sizeof sdir, "%s/store", base);
        assert_int_equal(mkdir(src, 0755), 0);
        struct gen_opts go = { .max_depth = 4, .max_entries = 14, .devices = geteuid() == 0, .max_file = 1500000 };
        assert_int_equal(th_gen_tree(src, &r, &go), 0);

        struct store *s = NULL;
        assert_int_equal(store_open(sdir, &(struct store_opts){ STORE_OPTS_INIT, .create = true }, &s), 0);
        usleep(30000); /* past the stat cache's racy window, so the incremental run can skip files */
        struct store_hash h1, h2, h3, h4;
        struct store_snapshot_info i1, i2;
        assert_int_equal(store_capture(s, src, NULL, NULL, &h1), 0);
        struct store_materialize_opts mo = { .no_owner = geteuid() != 0 };
        int k = store_materialize(s, &h1, out, &mo);
        if (k < 0)
                fail_msg("materialize: %s", store_error_detail());
        char why[8192];
        if (th_compare_trees(src, out, why, sizeof why) != 0)
                fail_msg("seed %llu: copy differs: %s", (unsigned long long)seed, why);

        /* the copy captures to the same root tree: the encoding is canonical */
        assert_int_equal(store_capture(s, out, NULL, NULL, &h2), 0);
        assert_int_equal(store_snapshot_get(s, &h1, &i1), 0);
        assert_int_equal(store_snapshot_get(s, &h2, &i2), 0);
        assert_true(store_hash_eq(&i1.root, &i2.root));

        /* incremental == full after changes */
        usleep(30000);
        th_mutate_tree(src, &r, 6);
        struct store_op_stats st = { 0 };
        assert_int_equal(store_capture(s, src, &h1, &(struct store_capture_opts){ .stats = &st }, &h3), 0);
        assert_int_equal(store_capture(s, src, NULL, &(struct store_capture_opts){ .no_stat_cache = true }, &h4), 0);
        assert_int_equal(store_snapshot_get(s, &h3, &i1), 0);
        assert_int_equal(store_snapshot_get(s, &h4, &i2), 0);
        assert_true(store_hash_eq(&i1.root, &i2.root));
        assert_int_equal(store_materialize(s, &h3, out2, &mo), 0);
        if (th_compare_trees(src, out2, why, sizeof why) != 0)
                fail_msg("seed %llu: incremental copy differs: %s", (unsigned long long)seed, why);

        struct store_verify_result vr;
        assert_int_equal(store_verify(s, NULL, NULL, NULL, NULL, &vr), 0);
        assert_int_equal(vr.problems, 0);
        printf("seed %llu: %llu entries, %llu files, %llu read again after changes: ok\n", (unsigned long long)seed,
               (unsigned long long)st.entries, (unsigned long long)st.files, (unsigned long long)st.files_read);
        store_free(s);
        th_rm_rf(base);
        free(base);
}

static void test_random_trees(void **state) {
        (void)state;
        printf("checking capture -> materialize -> compare over %d generated trees\n", ROUNDS);
        for (uint64_t seed = 1; seed <= ROUNDS; seed++)
                one_round(seed * 7919);
}

static void test_empty_dir(void **state) {
        (void)state;
        printf("checking an empty directory round-trips\n");
        char *base = th_tmpdir("empty");
        char src[4096], out[4096], sdir[4096];
        snprintf(src, sizeof src, "%s/src", base);
        snprintf(out, sizeof out, "%s/out", base);
        snprintf(sdir, sizeof sdir, "%s/store", base);
        assert_int_equal(mkdir(src, 0711), 0);
        struct store *s;
        assert_int_equal(store_open(sdir, &(struct store_opts){ STORE_OPTS_INIT, .create = true }, &s), 0);
        struct store_hash h;
        assert_int_equal(store_capture(s, src, NULL, NULL, &h), 0);
        assert_int_equal(store_materialize(s, &h, out, NULL), 0);
        char why[1024];
        assert_int_equal(th_compare_trees(src, out, why, sizeof why), 0);
        store_free(s);
        th_rm_rf(base);
        free(base);
}

/* Captures dir with parent (incremental) and without a stat cache (full); both must give
 * the same root, and the incremental one must restore to dir. */
static struct store_hash inc_equals_full(struct store *s, const char *dir, const struct store_hash *parent,
                                         const char *out, struct store_op_stats *st) {
        struct store_hash hi, hf;
        struct store_snapshot_info ii, fi;
        assert_int_equal(store_capture(s, dir, parent, &(struct store_capture_opts){ .stats = st }, &hi), 0);
        assert_int_equal(store_capture(s, dir, NULL, &(struct store_capture_opts){ .no_stat_cache = true }, &hf), 0);
        assert_int_equal(store_snapshot_get(s, &hi, &ii), 0);
        assert_int_equal(store_snapshot_get(s, &hf, &fi), 0);
        assert_true(store_hash_eq(&ii.root, &fi.root));
        assert_int_equal(store_materialize(s, &hi, out, &(struct store_materialize_opts){ .no_stat_cache = true }), 0);
        char why[2048];
        if (th_compare_trees(dir, out, why, sizeof why))
                fail_msg("%s", why);
        th_rm_rf(out);
        return hi;
}

static void test_unlisted_dirs(void **state) {
        (void)state;
        printf("checking directories whose stat is unchanged are not listed again, and every change is still seen\n");
        char *base = th_tmpdir("names");
        char src[4096], out[4096], sdir[4096], p[4400];
        snprintf(src, sizeof src, "%s/src", base);
        snprintf(out, sizeof out, "%s/out", base);
        snprintf(sdir, sizeof sdir, "%s/store", base);
        assert_int_equal(mkdir(src, 0755), 0);
        struct rng r = { 61 };
        for (int d = 0; d < 4; d++) {
                snprintf(p, sizeof p, "%s/d%d", src, d);
                assert_int_equal(mkdir(p, 0755), 0);
                snprintf(p, sizeof p, "%s/d%d/deeper", src, d);
                assert_int_equal(mkdir(p, 0755), 0);
                for (int f = 0; f < 5; f++) {
                        snprintf(p, sizeof p, "%s/d%d/deeper/f%d", src, d, f);
                        assert_int_equal(th_write_file(p, &r, 100 + rng_below(&r, 5000)), 0);
                }
        }
        struct store *s;
        assert_int_equal(store_open(sdir, &(struct store_opts){ STORE_OPTS_INIT, .create = true }, &s), 0);
        usleep(30000);
        struct store_hash h;
        assert_int_equal(store_capture(s, src, NULL, NULL, &h), 0);
        usleep(30000);
        struct store_op_stats st = { 0 };
        h = inc_equals_full(s, src, &h, out, &st);
        printf("  nothing changed: %llu files read, %llu trees written\n", (unsigned long long)st.files_read,
               (unsigned long long)st.trees_written);
        assert_int_equal(st.files_read, 0);
        assert_int_equal(st.trees_written, 0);

        printf("  a file rewritten in place (no directory changes)\n");
        snprintf(p, sizeof p, "%s/d2/deeper/f3", src);
        assert_int_equal(th_write_file(p, &r, 4000), 0);
        usleep(30000);
        st = (struct store_op_stats){ 0 };
        h = inc_equals_full(s, src, &h, out, &st);
        assert_int_equal(st.files_read, 1);
        assert_int_equal(st.trees_written, 3); /* deeper, d2, the root */

        printf("  a file added, its directory's mtime set back (its ctime still moves)\n");
        char dir[4200];
        snprintf(dir, sizeof dir, "%s/d1/deeper", src);
        struct stat before;
        assert_int_equal(stat(dir, &before), 0);
        snprintf(p, sizeof p, "%s/new", dir);
        assert_int_equal(th_write_file(p, &r, 10), 0);
        struct timespec ts[2] = { before.st_atim, before.st_mtim };
        assert_int_equal(utimensat(AT_FDCWD, dir, ts, 0), 0);
        usleep(30000);
        st = (struct store_op_stats){ 0 };
        h = inc_equals_full(s, src, &h, out, &st);
        assert_int_equal(st.files_read, 1);

        printf("  a file removed\n");
        snprintf(p, sizeof p, "%s/d0/deeper/f0", src);
        assert_int_equal(unlink(p), 0);
        usleep(30000);
        h = inc_equals_full(s, src, &h, out, NULL);

        printf("  a materialized copy, changed, captured with its stat cache\n");
        assert_int_equal(store_materialize(s, &h, out, NULL), 0);
        usleep(30000);
        snprintf(p, sizeof p, "%s/d3/deeper/added", out);
        assert_int_equal(th_write_file(p, &r, 20), 0);
        usleep(30000);
        char out2[4200];
        snprintf(out2, sizeof out2, "%s/out2", base);
        st = (struct store_op_stats){ 0 };
        inc_equals_full(s, out, &h, out2, &st);
        assert_int_equal(st.files_read, 1);
        store_free(s);
        th_rm_rf(base);
        free(base);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_empty_dir),
                cmocka_unit_test(test_unlisted_dirs),
                cmocka_unit_test(test_random_trees),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
