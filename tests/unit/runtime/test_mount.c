/* Mount option building: the overlay option string and tmpfs size options, including
 * the inputs overlayfs would misparse and the one-page limit of mount(2). */
#include "fake.h"
#include <errno.h>
#include "runtime/mount.h"

static void test_overlay_opts(void **state) {
        printf("# overlay options: layers top first, fixed feature switches\n");
        char *o = NULL;
        assert_int_equal(rt_mount_overlay_opts("/d/t/base/rootfs", "/d/s/up", "/d/s/work", &o), 0);
        assert_string_equal(o, "lowerdir=/d/t/base/rootfs,upperdir=/d/s/up,workdir=/d/s/work,"
                               "index=off,metacopy=off,xino=off");
        free(o);
        o = NULL;
        assert_int_equal(rt_mount_overlay_opts("/a:/b:/c", "/u", "/w", &o), 0);
        assert_string_equal(o, "lowerdir=/a:/b:/c,upperdir=/u,workdir=/w,index=off,metacopy=off,xino=off");
        free(o);
}

static void test_overlay_opts_refused(void **state) {
        printf("# overlay options: relative, empty, ',' ':' '\\\\' and control chars refused; ret untouched\n");
        char *o = (char *)"untouched";
        static const char *const bad[][3] = {
                { "a", "/u", "/w" },       { "/a", "u", "/w" },      { "/a", "/u", "w" },
                { "", "/u", "/w" },        { "/a::/b", "/u", "/w" }, { "/a:", "/u", "/w" },
                { ":/a", "/u", "/w" },     { "/a,x", "/u", "/w" },   { "/a", "/u,lowerdir=/", "/w" },
                { "/a", "/u:x", "/w" },    { "/a\\b", "/u", "/w" },  { "/a", "/u", "/w\n" },
                { "/a:b", "/u", "/w" },
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++)
                assert_int_equal(rt_mount_overlay_opts(bad[i][0], bad[i][1], bad[i][2], &o), -EINVAL);
        assert_int_equal(rt_mount_overlay_opts(NULL, "/u", "/w", &o), -EINVAL);
        assert_int_equal(rt_mount_overlay_opts("/a", NULL, "/w", &o), -EINVAL);
        assert_string_equal(o, "untouched");
}

static void test_overlay_opts_limits(void **state) {
        printf("# overlay options: over one page or over %d layers is -E2BIG\n", RT_MOUNT_MAX_LAYERS);
        char *o = NULL;
        char big[RT_MOUNT_MAX_OPTS + 16];
        big[0] = '/';
        memset(big + 1, 'x', sizeof big - 2);
        big[sizeof big - 1] = 0;
        assert_int_equal(rt_mount_overlay_opts(big, "/u", "/w", &o), -E2BIG);
        assert_null(o);

        char many[RT_MOUNT_MAX_LAYERS * 3 + 8] = "";
        for (int i = 0; i <= RT_MOUNT_MAX_LAYERS; i++)
                strcat(many, i ? ":/l" : "/l");
        assert_int_equal(rt_mount_overlay_opts(many, "/u", "/w", &o), -E2BIG);
        /* exactly the limit is fine */
        many[strlen(many) - 3] = 0;
        assert_int_equal(rt_mount_overlay_opts(many, "/u", "/w", &o), 0);
        assert_non_null(o);
        free(o);
}

static void test_tmpfs_opts(void **state) {
        printf("# tmpfs options: octal mode, byte size, optional inode cap; size 0 and overflow refused\n");
        char b[64];
        assert_int_equal(rt_mount_tmpfs_opts(b, sizeof b, 01777, 1u << 20, 0), 0);
        assert_string_equal(b, "mode=1777,size=1048576");
        assert_int_equal(rt_mount_tmpfs_opts(b, sizeof b, 0755, 262144, 64), 0);
        assert_string_equal(b, "mode=755,size=262144,nr_inodes=64");
        assert_int_equal(rt_mount_tmpfs_opts(b, sizeof b, 0755, 0, 0), -EINVAL);
        assert_int_equal(rt_mount_tmpfs_opts(b, sizeof b, 010000, 1, 0), -EINVAL);
        char small[8];
        assert_int_equal(rt_mount_tmpfs_opts(small, sizeof small, 0755, 1u << 20, 0), -ENOSPC);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_overlay_opts),
                cmocka_unit_test(test_overlay_opts_refused),
                cmocka_unit_test(test_overlay_opts_limits),
                cmocka_unit_test(test_tmpfs_opts),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
