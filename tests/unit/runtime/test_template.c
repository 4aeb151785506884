/* Templates: name validation, id shifting, cache keys, and (as root) building from a
 * directory and from a tar file: ownership shifted, modes/links/xattrs/ACLs kept, device
 * nodes dropped, nothing half-built left behind, list and remove. */
#include "fake.h"
#include <errno.h>
#include <fcntl.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include "runtime/runtime.h"
#include "runtime/template.h"

static void test_names(void **state) {
        printf("# template names: [a-z0-9][a-z0-9._-]{0,63}, nothing that leaves the templates dir\n");
        static const char *const good[] = { "base", "py3.11", "a", "0", "my_tpl-2", "a..b" };
        for (size_t i = 0; i < ELEMENTSOF(good); i++)
                assert_true(template_name_valid(good[i]));
        char max[TEMPLATE_MAX_NAME + 2];
        memset(max, 'a', TEMPLATE_MAX_NAME);
        max[TEMPLATE_MAX_NAME] = 0;
        assert_true(template_name_valid(max));
        max[TEMPLATE_MAX_NAME] = 'a';
        max[TEMPLATE_MAX_NAME + 1] = 0;
        assert_false(template_name_valid(max));
        static const char *const bad[] = { "", ".", "..", "../etc", "a/b", "/abs", ".hidden", "-x",
                                           "_x", "Base", "sp ace", "a\nb", "tab\t", "ü" };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++)
                assert_false(template_name_valid(bad[i]));
        assert_false(template_name_valid(NULL));
        char *p = NULL;
        assert_int_equal(template_rootfs_path("/data", "../x", &p), -EINVAL);
        assert_null(p);
        assert_int_equal(template_rootfs_path("/data", "base", &p), 0);
        assert_string_equal(p, "/data/templates/base/rootfs");
        free(p);
}

static void test_shift_id(void **state) {
        printf("# id shift: 0..65535 -> +100000, already shifted kept, others -> shifted nobody\n");
        assert_int_equal(template_shift_id(0), RT_ID_BASE);
        assert_int_equal(template_shift_id(1000), RT_ID_BASE + 1000);
        assert_int_equal(template_shift_id(RT_ID_COUNT - 1), RT_ID_BASE + RT_ID_COUNT - 1);
        assert_int_equal(template_shift_id(RT_ID_BASE + 5), RT_ID_BASE + 5);
        assert_int_equal(template_shift_id(70000), RT_ID_BASE + 65534);
        assert_int_equal(template_shift_id(4294967295u), RT_ID_BASE + 65534);
}

static void test_cache_name(void **state) {
        printf("# debootstrap cache key: suite + sorted, de-duplicated packages; bad input refused\n");
        char a[128], b[128], c[128], d[128];
        assert_int_equal(template_cache_name("bookworm", "python3,git", a, sizeof a), 0);
        assert_int_equal(template_cache_name("bookworm", "git,python3,git", b, sizeof b), 0);
        assert_string_equal(a, b);
        assert_int_equal(strncmp(a, "debootstrap-bookworm-", 21), 0);
        assert_int_equal(template_cache_name("bookworm", "python3", c, sizeof c), 0);
        assert_string_not_equal(a, c);
        assert_int_equal(template_cache_name("trixie", "python3", d, sizeof d), 0);
        assert_string_not_equal(c, d);
        assert_int_equal(template_cache_name("bookworm", NULL, d, sizeof d), 0);
        assert_string_not_equal(c, d);

        assert_int_equal(template_cache_name("../x", "python3", d, sizeof d), -EINVAL);
        assert_int_equal(template_cache_name("Bookworm", NULL, d, sizeof d), -EINVAL);
        assert_int_equal(template_cache_name("bookworm", "Python3", d, sizeof d), -EINVAL);
        assert_int_equal(template_cache_name("bookworm", "a;rm -rf", d, sizeof d), -EINVAL);
        assert_int_equal(template_cache_name("bookworm", "--force", d, sizeof d), -EINVAL);
        assert_int_equal(template_cache_name("bookworm", "python3", d, 8), -ENOSPC);

        /* over TEMPLATE_MAX_PACKAGES entries */
        char many[(TEMPLATE_MAX_PACKAGES + 1) * 4 + 1] = "";
        for (int i = 0; i <= TEMPLATE_MAX_PACKAGES; i++)
                sprintf(many + strlen(many), "%s%03d", i ? "," : "", i);
        assert_int_equal(template_cache_name("bookworm", many, d, sizeof d), -E2BIG);
}

static bool is_root(void) {
        return geteuid() == 0;
}

/* A source tree with every kind of entry a template meets. */
static char *make_source(void) {
        char *src = fake_mkdtemp();
        char p[4096];
        fake_put(src, "bin/tool", "#!/bin/sh\necho hi\n");
        PJ(p, "%s/bin/tool", src);
        assert_int_equal(chown(p, 0, 0), 0);
        assert_int_equal(chmod(p, 04755), 0); /* setuid survives the chown */
        fake_put(src, "home/user/notes", "mine\n");
        PJ(p, "%s/home/user/notes", src);
        assert_int_equal(chown(p, 1000, 1000), 0);
        assert_int_equal(setxattr(p, "user.tag", "v1", 2, 0), 0);
        /* ACL with a named user 1000 and a named group 1000 */
        struct {
                uint32_t ver;
                struct {
                        uint16_t tag, perm;
                        uint32_t id;
                } e[6];
        } acl = { 2,
                  { { 0x01, 6, 0xffffffff }, { 0x02, 4, 1000 }, { 0x04, 4, 0xffffffff },
                    { 0x08, 4, 1000 }, { 0x10, 6, 0xffffffff }, { 0x20, 4, 0xffffffff } } };
        assert_int_equal(setxattr(p, "system.posix_acl_access", &acl, sizeof acl, 0), 0);
        PJ(p, "%s/home/user", src);
        assert_int_equal(chown(p, 1000, 1000), 0);
        assert_int_equal(chmod(p, 0750), 0);
        char q[4096];
        PJ(p, "%s/bin/tool", src);
        PJ(q, "%s/bin/tool-hardlink", src);
        assert_int_equal(link(p, q), 0);
        PJ(p, "%s/bin/sh", src);
        assert_int_equal(symlink("tool", p), 0);
        PJ(p, "%s/fifo", src);
        assert_int_equal(mkfifo(p, 0644), 0);
        PJ(p, "%s/devnull", src);
        assert_int_equal(mknod(p, S_IFCHR | 0666, makedev(1, 3)), 0);
        return src;
}

static void check_built(const char *data, const char *name) {
        char root[4096], p[4096];
        PJ(root, "%s/templates/%s/rootfs", data, name);
        struct stat st;
        PJ(p, "%s/bin/tool", root);
        assert_int_equal(lstat(p, &st), 0);
        assert_int_equal(st.st_uid, RT_ID_BASE);
        assert_int_equal(st.st_gid, RT_ID_BASE);
        assert_int_equal(st.st_mode & 07777, 04755);
        ino_t ino = st.st_ino;
        PJ(p, "%s/bin/tool-hardlink", root);
        assert_int_equal(lstat(p, &st), 0);
        assert_int_equal(st.st_ino, ino);
        assert_int_equal(st.st_nlink, 2);
        PJ(p, "%s/bin/sh", root);
        char t[64] = "";
        assert_int_equal(readlink(p, t, sizeof t - 1), 4);
        assert_string_equal(t, "tool");
        assert_int_equal(lstat(p, &st), 0);
        assert_int_equal(st.st_uid, RT_ID_BASE);
        PJ(p, "%s/home/user", root);
        assert_int_equal(lstat(p, &st), 0);
        assert_int_equal(st.st_uid, RT_ID_BASE + 1000);
        assert_int_equal(st.st_mode & 07777, 0750);
        PJ(p, "%s/home/user/notes", root);
        assert_int_equal(lstat(p, &st), 0);
        assert_int_equal(st.st_uid, RT_ID_BASE + 1000);
        assert_int_equal(st.st_gid, RT_ID_BASE + 1000);
        assert_string_equal(fake_get(root, "home/user/notes"), "mine\n");
        char v[16] = "";
        assert_int_equal(getxattr(p, "user.tag", v, sizeof v), 2);
        assert_memory_equal(v, "v1", 2);
        uint32_t acl[13];
        assert_int_equal(getxattr(p, "system.posix_acl_access", acl, sizeof acl), 52);
        assert_int_equal(acl[1 + 2 + 1], RT_ID_BASE + 1000); /* named user entry */
        assert_int_equal(acl[1 + 6 + 1], RT_ID_BASE + 1000); /* named group entry */
        PJ(p, "%s/fifo", root);
        assert_int_equal(lstat(p, &st), 0);
        assert_true(S_ISFIFO(st.st_mode));
        assert_false(fake_exists(root, "devnull"));
        /* mount points the sandbox needs are part of the template */
        static const char *const mps[] = { "proc", "sys", "dev", "tmp" };
        for (size_t i = 0; i < ELEMENTSOF(mps); i++) {
                PJ(p, "%s/%s", root, mps[i]);
                assert_int_equal(lstat(p, &st), 0);
                assert_true(S_ISDIR(st.st_mode));
                assert_int_equal(st.st_uid, RT_ID_BASE);
        }
        PJ(p, "%s/templates/%s/info", data, name);
        assert_int_equal(access(p, R_OK), 0);
}

static bool leftovers(const char *data) {
        char p[4096];
        PJ(p, "%s/templates", data);
        DIR *d = opendir(p);
        if (!d)
                return false;
        bool found = false;
        struct dirent *de;
        while ((de = readdir(d)))
                if (de->d_name[0] == '.' && strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
                        found = true;
        closedir(d);
        return found;
}

static int lines;
static void count_lines(const char *line, void *ud) {
        lines++;
        (void)ud;
}

static void test_build_from_dir(void **state) {
        if (!is_root()) {
                printf("# build from dir: skipped (needs root to own files as other users)\n");
                skip();
        }
        printf("# build from dir: shifted owners, setuid, hardlink, symlink, xattr, ACL, fifo kept; devices dropped\n");
        _cleanup_free_ char *src = make_source();
        _cleanup_free_ char *data = fake_mkdtemp();
        struct template_source s = { .kind = TEMPLATE_FROM_DIR, .path = src };
        lines = 0;
        assert_int_equal(template_build(data, "tiny", &s, count_lines, NULL), 0);
        assert_true(lines > 0);
        assert_true(template_exists(data, "tiny"));
        check_built(data, "tiny");
        assert_false(leftovers(data));

        assert_int_equal(template_build(data, "tiny", &s, NULL, NULL), -EEXIST);
        s.path = "/nonexistent/space-test";
        assert_int_equal(template_build(data, "other", &s, NULL, NULL), -ENOENT);
        assert_true(strlen(runtime_last_error()) > 0);
        assert_false(template_exists(data, "other"));
        assert_false(leftovers(data));
        assert_int_equal(template_build(data, "../escape", &s, NULL, NULL), -EINVAL);

        char **list = NULL;
        assert_int_equal(template_list(data, &list), 0);
        assert_non_null(list[0]);
        assert_string_equal(list[0], "tiny");
        assert_null(list[1]);
        template_list_free(list);

        assert_int_equal(template_remove(data, "tiny"), 0);
        assert_false(template_exists(data, "tiny"));
        assert_int_equal(template_remove(data, "tiny"), -ENOENT);
        assert_int_equal(template_remove(data, "../x"), -EINVAL);
        assert_false(leftovers(data));
        assert_int_equal(template_list(data, &list), 0);
        assert_null(list[0]);
        template_list_free(list);
        rt_rm_rf(src);
        rt_rm_rf(data);
}

static void test_build_from_tar(void **state) {
        if (!is_root()) {
                printf("# build from tar: skipped (needs root)\n");
                skip();
        }
        printf("# build from tar: extracted with owners, xattrs and ACLs, then shifted in place\n");
        _cleanup_free_ char *src = make_source();
        _cleanup_free_ char *data = fake_mkdtemp();
        char tar[4096], cmd[8192];
        PJ(tar, "%s.tar", src);
        PJ(cmd, "tar --xattrs --xattrs-include='*' --acls --numeric-owner -C %s -cf %s . 2>&1",
                 src, tar);
        assert_int_equal(system(cmd), 0);
        struct template_source s = { .kind = TEMPLATE_FROM_TAR, .path = tar };
        assert_int_equal(template_build(data, "fromtar", &s, NULL, NULL), 0);
        check_built(data, "fromtar");
        assert_false(leftovers(data));

        /* not a tar: the error says what tar said, nothing is left */
        s.path = src; /* a directory */
        assert_true(template_build(data, "broken", &s, NULL, NULL) < 0);
        assert_true(strstr(runtime_last_error(), "tar") != NULL);
        assert_false(template_exists(data, "broken"));
        assert_false(leftovers(data));
        unlink(tar);
        rt_rm_rf(src);
        rt_rm_rf(data);
}

/* A debootstrap template from a cached tarball (no network): the cache predates the
 * default user, which the build adds after extracting it. */
static void test_default_user(void **state) {
        if (!is_root()) {
                printf("# default user: skipped (needs root)\n");
                skip();
        }
        printf("# debootstrap from an old cache: user (uid 1000) in passwd/group/shadow, /home/user owned by it\n");
        _cleanup_free_ char *src = fake_mkdtemp();
        _cleanup_free_ char *cache = fake_mkdtemp();
        _cleanup_free_ char *data = fake_mkdtemp();
        fake_put(src, "etc/passwd", "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534::/nonexistent:/usr/sbin/nologin");
        fake_put(src, "etc/group", "root:x:0:\n");
        fake_put(src, "etc/shadow", "root:*:19000:0:99999:7:::\n");
        fake_put(src, "etc/skel/.bashrc", "# bashrc\n");
        fake_put(src, "usr/bin/bash", "not really bash\n");
        char p[4096], cmd[8192], name[128];
        PJ(p, "%s/bin", src);
        assert_int_equal(symlink("usr/bin", p), 0);
        assert_int_equal(template_cache_name("bookworm", NULL, name, sizeof name), 0);
        PJ(cmd, "tar -c --zstd --numeric-owner -f %s/%s -C %s . 2>&1", cache, name, src);
        assert_int_equal(system(cmd), 0);
        assert_int_equal(setenv("SPACE_CACHE", cache, 1), 0);
        struct template_source s = { .kind = TEMPLATE_FROM_DEBOOTSTRAP, .suite = "bookworm" };
        int r = template_build(data, "deb", &s, NULL, NULL);
        unsetenv("SPACE_CACHE");
        if (r < 0)
                fail_msg("build: %s", runtime_last_error());
        char root[4096];
        PJ(root, "%s/templates/deb/rootfs", data);
        assert_non_null(strstr(fake_get(root, "etc/passwd"),
                               "/usr/sbin/nologin\nuser:x:1000:1000::/home/user:/bin/bash\n"));
        assert_non_null(strstr(fake_get(root, "etc/group"), "root:x:0:\nuser:x:1000:\n"));
        assert_non_null(strstr(fake_get(root, "etc/shadow"), "\nuser:!:"));
        struct stat st;
        PJ(p, "%s/home/user", root);
        assert_int_equal(lstat(p, &st), 0);
        assert_true(S_ISDIR(st.st_mode));
        assert_int_equal(st.st_mode & 07777, 0755);
        assert_int_equal(st.st_uid, RT_ID_BASE + 1000);
        assert_int_equal(st.st_gid, RT_ID_BASE + 1000);
        PJ(p, "%s/home", root);
        assert_int_equal(lstat(p, &st), 0);
        assert_int_equal(st.st_uid, RT_ID_BASE);
        PJ(p, "%s/home/user/.bashrc", root);
        assert_int_equal(lstat(p, &st), 0);
        assert_int_equal(st.st_uid, RT_ID_BASE + 1000);
        PJ(p, "%s/etc/passwd", root);
        assert_int_equal(lstat(p, &st), 0);
        assert_int_equal(st.st_uid, RT_ID_BASE); /* still root's, shifted */

        printf("# a tree that has a uid 1000 already is left alone; no bash: /bin/sh\n");
        assert_int_equal(template_add_user(root), 0);
        const char *pw = fake_get(root, "etc/passwd");
        assert_ptr_equal(strstr(pw, "user:x:1000"), strrchr(pw, '\n') - strlen("user:x:1000:1000::/home/user:/bin/bash"));
        _cleanup_free_ char *t2 = fake_mkdtemp();
        fake_put(t2, "etc/passwd", "root:x:0:0:root:/root:/bin/sh\ndev:x:1000:1000::/home/dev:/bin/sh\n");
        assert_int_equal(template_add_user(t2), 0);
        assert_null(strstr(fake_get(t2, "etc/passwd"), "user:"));
        assert_false(fake_exists(t2, "home/user"));
        _cleanup_free_ char *t3 = fake_mkdtemp();
        fake_put(t3, "etc/passwd", "root:x:0:0:root:/root:/bin/sh\n");
        assert_int_equal(template_add_user(t3), 0);
        assert_non_null(strstr(fake_get(t3, "etc/passwd"), "\nuser:x:1000:1000::/home/user:/bin/sh\n"));
        assert_false(fake_exists(t3, "etc/group")); /* absent files stay absent */
        assert_true(fake_exists(t3, "home/user"));
        _cleanup_free_ char *t4 = fake_mkdtemp();
        assert_int_equal(template_add_user(t4), 0); /* no /etc at all */
        rt_rm_rf(src);
        rt_rm_rf(cache);
        rt_rm_rf(data);
        rt_rm_rf(t2);
        rt_rm_rf(t3);
        rt_rm_rf(t4);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_names),
                cmocka_unit_test(test_shift_id),
                cmocka_unit_test(test_cache_name),
                cmocka_unit_test(test_build_from_dir),
                cmocka_unit_test(test_build_from_tar),
                cmocka_unit_test(test_default_user),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
