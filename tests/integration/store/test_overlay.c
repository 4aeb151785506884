/* Layers (root, real overlayfs mounts): a capture of an upper layer over a base snapshot
 * (store_capture_opts.base) must hold exactly what the mounted overlay shows, and a
 * materialization as a difference from a base (store_materialize_opts.base) must show the
 * same files under the same lower layers and capture back to the same tree. The changes go
 * through the overlay, so the kernel makes the whiteouts, opaque directories, copy-ups and
 * rename fallbacks; the reference is a full materialization mounted over the template. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>
#include <cmocka.h>

#include "helpers.h"
#include "store/store.h"

static char *top;

static void path_of(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", top, name); }

static void mount_ovl(const char *lower, const char *upper, const char *work, const char *at) {
        char l[4400], u[4400], w[4400], m[4400], opts[16384];
        path_of(u, sizeof u, upper);
        path_of(w, sizeof w, work);
        path_of(m, sizeof m, at);
        /* lower: ':'-separated names under top */
        size_t o = 0;
        char tmp[4400];
        snprintf(tmp, sizeof tmp, "%s", lower);
        for (char *save = NULL, *t = strtok_r(tmp, ":", &save); t; t = strtok_r(NULL, ":", &save))
                o += (size_t)snprintf(l + o, sizeof l - o, "%s%s/%s", o ? ":" : "", top, t);
        mkdir(u, 0755);
        mkdir(w, 0700);
        mkdir(m, 0755);
        snprintf(opts, sizeof opts, "lowerdir=%s,upperdir=%s,workdir=%s,index=off,metacopy=off,xino=off,redirect_dir=off",
                 l, u, w);
        int r = mount("overlay", m, "overlay", MS_NOSUID | MS_NODEV, opts);
        if (r < 0)
                fprintf(stderr, "mount %s: %s\n", opts, strerror(errno));
        assert_int_equal(r, 0);
}

static void umount_at(const char *at) {
        char m[4400];
        path_of(m, sizeof m, at);
        assert_int_equal(umount2(m, 0), 0);
}

static void compare(const char *a, const char *b) {
        char pa[4400], pb[4400], why[8192] = "";
        path_of(pa, sizeof pa, a);
        path_of(pb, sizeof pb, b);
        int r = th_compare_trees(pa, pb, why, sizeof why);
        if (r != 0)
                fprintf(stderr, "%s vs %s: %s\n", a, b, why);
        assert_int_equal(r, 0);
}

static struct store_hash root_of(struct store *s, const struct store_hash *snap, uint64_t *files) {
        struct store_snapshot_info i;
        assert_int_equal(store_snapshot_get(s, snap, &i), 0);
        if (files)
                *files = i.files;
        return i.root;
}

static void write_text(const char *rel, const char *text) {
        char p[4400];
        path_of(p, sizeof p, rel);
        int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
        close(fd);
}

/* The changes overlayfs has to express with its own devices: removing whole directories of
 * the lower layers (whiteouts), replacing one (opaque), renaming a lower file (copy-up and
 * whiteout), an xattr on a lower directory (copy-up of the directory alone). */
static void special_changes(const char *mnt, int round) {
        char p[4400], q[4500];
        path_of(p, sizeof p, mnt);
        struct rng r = { 900 + (uint64_t)round };
        assert_int_equal(th_mutate_tree(p, &r, 40), 0);
        snprintf(p, sizeof p, "%s/%s/tdir%d", top, mnt, round);
        mkdir(p, 0755);
        snprintf(q, sizeof q, "%s/f", p);
        (void)th_write_file(q, &r, 5000);
        snprintf(p, sizeof p, "%s/%s/gone", top, mnt);
        th_rm_rf(p); /* a directory of the lower layers: a whiteout */
        snprintf(p, sizeof p, "%s/%s/replaced", top, mnt);
        th_rm_rf(p);
        assert_int_equal(mkdir(p, 0750), 0); /* made again: opaque */
        snprintf(q, sizeof q, "%s/only-new-%d", p, round);
        assert_int_equal(th_write_file(q, &r, 3000), 0);
        snprintf(p, sizeof p, "%s/%s/keep/renamed-from", top, mnt);
        snprintf(q, sizeof q, "%s/%s/keep/renamed-to-%d", top, mnt, round);
        if (access(p, F_OK) == 0)
                assert_int_equal(rename(p, q), 0);
        snprintf(p, sizeof p, "%s/%s/keep", top, mnt);
        assert_int_equal(lsetxattr(p, "user.round", &round, sizeof round, 0), 0);
}

static void test_layers(void **state) {
        (void)state;
        char p[4400], q[4400];
        struct store *s = NULL;
        path_of(p, sizeof p, "store");
        assert_int_equal(store_open(p, &(struct store_opts){ STORE_OPTS_INIT, .create = true }, &s), 0);

        /* the template, and a first session's upper layer made through the kernel */
        path_of(p, sizeof p, "T");
        mkdir(p, 0755);
        struct rng r = { 4242 };
        assert_int_equal(th_gen_tree(p, &r, &(struct gen_opts){ .max_depth = 3, .max_entries = 8, .max_file = 100000 }), 0);
        for (const char *d = "T/gone", *e = NULL; d; d = e, e = NULL) {
                path_of(q, sizeof q, d);
                mkdir(q, 0755);
        }
        path_of(q, sizeof q, "T/replaced");
        mkdir(q, 0755);
        path_of(q, sizeof q, "T/keep");
        mkdir(q, 0755);
        write_text("T/gone/a", "a");
        write_text("T/replaced/old", "old");
        write_text("T/keep/renamed-from", "moving");
        mount_ovl("T", "U0", "W0", "M0");
        path_of(p, sizeof p, "M0");
        assert_int_equal(th_mutate_tree(p, &r, 30), 0);
        mkdir(strcat(p, "/gone"), 0755); /* exists already: no-op */
        write_text("M0/gone/b", "b");
        write_text("M0/keep/renamed-from", "moving, changed");
        umount_at("M0");
        struct store_hash s0, s1, s2, back;
        path_of(p, sizeof p, "U0");
        assert_int_equal(store_capture(s, p, NULL, NULL, &s0), 0);
        printf("captured the first upper layer\n");

        /* a new sandbox over the layer of S0: changes through the overlay, captured over S0 */
        path_of(p, sizeof p, "L");
        assert_int_equal(store_materialize(s, &s0, p, NULL), 0);
        mount_ovl("L:T", "U1", "W1", "M1");
        special_changes("M1", 1);
        printf("the kernel made a whiteout and an opaque directory in the upper layer\n");
        struct stat wst;
        path_of(p, sizeof p, "U1/gone");
        assert_int_equal(lstat(p, &wst), 0);
        assert_true(S_ISCHR(wst.st_mode) && wst.st_rdev == 0);
        char ov[4] = "";
        path_of(p, sizeof p, "U1/replaced");
        assert_int_equal(lgetxattr(p, "trusted.overlay.opaque", ov, sizeof ov), 1);
        assert_int_equal(ov[0], 'y');
        path_of(p, sizeof p, "U1");
        struct store_capture_opts co = { .base = &s0 };
        assert_int_equal(store_capture(s, p, &s0, &co, &s1), 0);
        printf("captured the upper layer over the base; comparing with the full snapshot over the template\n");
        path_of(p, sizeof p, "V1");
        assert_int_equal(store_materialize(s, &s1, p, NULL), 0);
        mount_ovl("T", "V1", "WV1", "MV1");
        compare("M1", "MV1");
        umount_at("MV1");

        printf("the capture over the base equals a plain capture of the same files as one layer\n");
        uint64_t files_over = 0, files_plain = 0;
        struct store_hash plain;
        path_of(p, sizeof p, "V1");
        assert_int_equal(store_capture(s, p, NULL, NULL, &plain), 0);
        struct store_hash r1 = root_of(s, &s1, &files_over), rp = root_of(s, &plain, &files_plain);
        assert_true(store_hash_eq(&r1, &rp));
        assert_int_equal(files_over, files_plain);

        printf("a difference from the base, as an upper layer, shows the same files and captures back\n");
        path_of(p, sizeof p, "U2");
        assert_int_equal(store_materialize(s, &s1, p, &(struct store_materialize_opts){ .base = &s0 }), 0);
        mount_ovl("L:T", "U2", "W2", "M2");
        compare("M1", "M2");
        umount_at("M2");
        assert_int_equal(store_capture(s, p, &s1, &co, &back), 0);
        struct store_hash rb = root_of(s, &back, NULL);
        assert_true(store_hash_eq(&rb, &r1));

        printf("more changes and a hard link; incremental capture over the base with the stat cache\n");
        special_changes("M1", 2);
        path_of(p, sizeof p, "M1/keep/linked");
        path_of(q, sizeof q, "M1/keep/renamed-to-1");
        assert_int_equal(link(q, p), 0);
        write_text("M1/tdir1/f", "rewritten");
        path_of(p, sizeof p, "U1");
        struct store_op_stats st = { 0 };
        co.stats = &st;
        assert_int_equal(store_capture(s, p, &s1, &co, &s2), 0);
        printf("  %llu files read of %llu\n", (unsigned long long)st.files_read, (unsigned long long)st.files);
        assert_true(st.files_read < st.files);
        path_of(p, sizeof p, "V2");
        assert_int_equal(store_materialize(s, &s2, p, NULL), 0);
        mount_ovl("T", "V2", "WV2", "MV2");
        compare("M1", "MV2");
        umount_at("MV2");

        printf("a hard link that differs from the base can't be a difference: -EMLINK\n");
        path_of(p, sizeof p, "U3");
        assert_int_equal(store_materialize(s, &s2, p, &(struct store_materialize_opts){ .base = &s0 }), -EMLINK);
        printf("a snapshot that lacks a name of the base can't either (the template may show it)\n");
        path_of(p, sizeof p, "U4");
        assert_int_equal(store_materialize(s, &s0, p, &(struct store_materialize_opts){ .base = &s1 }), -EXDEV);

        printf("two passes (spaced's rolling snapshots): a capture with the sandbox running, changes, then one\n"
               "with the first as parent equals a capture that reads everything\n");
        struct store_hash first, second, full;
        path_of(p, sizeof p, "U1");
        co.stats = NULL;
        assert_int_equal(store_capture(s, p, &s2, &co, &first), 0);
        /* same size, written right after the first pass: only ctime/mtime tell */
        write_text("M1/tdir1/f", "rewrittEn");
        special_changes("M1", 3);
        assert_int_equal(store_capture(s, p, &first, &co, &second), 0);
        struct store_capture_opts full_o = { .base = &s0, .no_stat_cache = true };
        assert_int_equal(store_capture(s, p, NULL, &full_o, &full), 0);
        struct store_hash r2 = root_of(s, &second, NULL), rf = root_of(s, &full, NULL);
        assert_true(store_hash_eq(&r2, &rf));
        struct store_hash r_first = root_of(s, &first, NULL);
        assert_false(store_hash_eq(&r_first, &r2));

        umount_at("M1");
        s = store_free(s);
}

int main(void) {
        if (geteuid() != 0) {
                printf("SKIP: needs root (overlayfs mounts, trusted.* xattrs)\n");
                return 77;
        }
        top = th_tmpdir("ovl");
        const struct CMUnitTest tests[] = { cmocka_unit_test(test_layers) };
        int r = cmocka_run_group_tests(tests, NULL, NULL);
        char p[4400];
        const char *mnts[] = { "M0", "M1", "M2", "MV1", "MV2" };
        for (size_t i = 0; i < sizeof mnts / sizeof *mnts; i++) {
                path_of(p, sizeof p, mnts[i]);
                (void)umount2(p, MNT_DETACH);
        }
        th_rm_rf(top);
        free(top);
        return r;
}
