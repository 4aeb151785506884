/* Deep trees (issue 20, item 7): a workspace nested 300 and 1000 directories deep captures,
 * restores, captures again incrementally, diffs and verifies, with the file at the bottom
 * intact; one level past STORE_MAX_DEPTH (and PATH_MAX) fails the capture with an error
 * that names the limit (not "Too many levels of symbolic links"). The chains are made and removed through
 * directory fds, so no path is ever longer than one name. */
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
#include <unistd.h>
#include <cmocka.h>

#include "helpers.h"
#include "store/store-internal.h"

#define DEEP_FILE "bottom.txt"
#define DEEP_TEXT "the deepest file\n"

/* Makes root/d/d/.../d (levels directories) with DEEP_FILE at the bottom. */
static void make_chain(const char *root, unsigned levels, const char *text) {
        int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        assert_true(fd >= 0);
        for (unsigned i = 0; i < levels; i++) {
                if (mkdirat(fd, "d", 0755) < 0 && errno != EEXIST)
                        fail_msg("mkdir at level %u: %s", i, strerror(errno));
                int next = openat(fd, "d", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                assert_true(next >= 0);
                close(fd);
                fd = next;
        }
        int f = openat(fd, DEEP_FILE, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        assert_true(f >= 0);
        assert_int_equal(write(f, text, strlen(text)), (ssize_t)strlen(text));
        close(f);
        close(fd);
}

/* Reads DEEP_FILE at the bottom of the chain of levels under root into buf. */
static void read_bottom(const char *root, unsigned levels, char *buf, size_t n) {
        int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        assert_true(fd >= 0);
        for (unsigned i = 0; i < levels; i++) {
                int next = openat(fd, "d", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (next < 0)
                        fail_msg("%s: level %u is missing: %s", root, i, strerror(errno));
                close(fd);
                fd = next;
        }
        int f = openat(fd, DEEP_FILE, O_RDONLY | O_CLOEXEC);
        if (f < 0)
                fail_msg("%s: the file at depth %u is missing: %s", root, levels, strerror(errno));
        ssize_t k = read(f, buf, n - 1);
        assert_true(k >= 0);
        buf[k] = 0;
        close(f);
        close(fd);
}

/* Removes the chain (and the file at its bottom) under root, deepest first. */
static void rm_chain(const char *root, unsigned levels) {
        int *fds = calloc(levels + 1, sizeof *fds);
        assert_non_null(fds);
        fds[0] = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        unsigned n = 0;
        while (n < levels && fds[n] >= 0) {
                fds[n + 1] = openat(fds[n], "d", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (fds[n + 1] < 0)
                        break;
                n++;
        }
        if (fds[n] >= 0)
                (void)unlinkat(fds[n], DEEP_FILE, 0);
        for (; n > 0; n--) {
                close(fds[n]);
                (void)unlinkat(fds[n - 1], "d", AT_REMOVEDIR);
        }
        if (fds[0] >= 0)
                close(fds[0]);
        free(fds);
}

static int count_change(void *ud, enum store_change c, const char *path) {
        (void)c;
        (void)path;
        (*(unsigned *)ud)++;
        return 0;
}

static void deep_round(unsigned levels) {
        printf("checking a tree %u directories deep: capture, restore, incremental capture, diff, verify\n", levels);
        char *base = th_tmpdir("deep");
        assert_non_null(base);
        char src[4096], out[4096], out2[4096], sdir[4096], buf[256];
        snprintf(src, sizeof src, "%s/src", base);
        snprintf(out, sizeof out, "%s/out", base);
        snprintf(out2, sizeof out2, "%s/out2", base);
        snprintf(sdir, sizeof sdir, "%s/store", base);
        assert_int_equal(mkdir(src, 0755), 0);
        make_chain(src, levels, DEEP_TEXT);

        struct store *s = NULL;
        assert_int_equal(store_open(sdir, &(struct store_opts){ STORE_OPTS_INIT, .create = true }, &s), 0);
        struct store_hash h1, h2;
        if (store_capture(s, src, NULL, NULL, &h1) < 0)
                fail_msg("capture of %u levels: %s", levels, store_error_detail());
        struct store_materialize_opts mo = { .no_owner = geteuid() != 0 };
        if (store_materialize(s, &h1, out, &mo) < 0)
                fail_msg("restore of %u levels: %s", levels, store_error_detail());
        read_bottom(out, levels, buf, sizeof buf);
        assert_string_equal(buf, DEEP_TEXT);

        /* a change at the bottom: the incremental capture walks down to it */
        usleep(30000);
        make_chain(src, levels, "changed at the bottom\n");
        if (store_capture(s, src, &h1, NULL, &h2) < 0)
                fail_msg("incremental capture of %u levels: %s", levels, store_error_detail());
        unsigned changes = 0;
        if (store_diff(s, &h1, &h2, count_change, &changes) < 0)
                fail_msg("diff of %u levels: %s", levels, store_error_detail());
        assert_int_equal(changes, 1);
        if (store_materialize(s, &h2, out2, &mo) < 0)
                fail_msg("restore of the second snapshot: %s", store_error_detail());
        read_bottom(out2, levels, buf, sizeof buf);
        assert_string_equal(buf, "changed at the bottom\n");

        struct store_verify_result vr;
        if (store_verify(s, NULL, NULL, NULL, NULL, &vr) < 0)
                fail_msg("verify: %s", store_error_detail());
        assert_int_equal(vr.problems, 0);
        store_free(s);
        rm_chain(src, levels);
        rm_chain(out, levels);
        rm_chain(out2, levels);
        th_rm_rf(base);
        free(base);
}

static void test_300_deep(void **state) {
        (void)state;
        deep_round(300);
}

static void test_1000_deep(void **state) {
        (void)state;
        deep_round(1000);
}

static void test_past_the_limit(void **state) {
        (void)state;
        printf("checking a tree %u directories deep is refused with a clear error\n", STORE_MAX_DEPTH + 1);
        char *base = th_tmpdir("deeper");
        assert_non_null(base);
        char src[4096], sdir[4096];
        snprintf(src, sizeof src, "%s/src", base);
        snprintf(sdir, sizeof sdir, "%s/store", base);
        assert_int_equal(mkdir(src, 0755), 0);
        make_chain(src, STORE_MAX_DEPTH + 1, DEEP_TEXT);
        struct store *s = NULL;
        assert_int_equal(store_open(sdir, &(struct store_opts){ STORE_OPTS_INIT, .create = true }, &s), 0);
        struct store_hash h;
        int r = store_capture(s, src, NULL, NULL, &h);
        printf("  capture: %d (%s)\n", r, store_error_detail());
        /* with one-byte names a path one level past the limit is past PATH_MAX too: that
         * limit is met first (either names the store's limit) */
        assert_true(r == -ENAMETOOLONG || r == -E2BIG);
        assert_non_null(strstr(store_error_detail(), "the store's limit"));
        store_free(s);
        rm_chain(src, STORE_MAX_DEPTH + 1);
        th_rm_rf(base);
        free(base);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_300_deep),
                cmocka_unit_test(test_1000_deep),
                cmocka_unit_test(test_past_the_limit),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
