/* Bad input: foreign or damaged store directories, corrupted/truncated/foreign object
 * files, crafted trees (".." and "/" in names, chunk lists past the end, missing objects,
 * a tree that refers to itself). Each is an error naming what is wrong; verify reports it;
 * materialize refuses it and never writes outside its target. */
#include <dirent.h>
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

static char *base;
static char sdir[4096], src[4096];
static struct store *s;
static struct store_hash snap;

static int setup(void **state) {
        (void)state;
        base = th_tmpdir("bad");
        snprintf(sdir, sizeof sdir, "%s/store", base);
        snprintf(src, sizeof src, "%s/src", base);
        if (mkdir(src, 0755) < 0)
                return -1;
        char p[4200];
        struct rng r = { 5 };
        snprintf(p, sizeof p, "%s/dir", src);
        mkdir(p, 0755);
        snprintf(p, sizeof p, "%s/dir/big", src);
        th_write_file(p, &r, 1500000);
        snprintf(p, sizeof p, "%s/small", src);
        th_write_file(p, &r, 1000);
        if (store_open(sdir, &(struct store_opts){ STORE_OPTS_INIT, .create = true }, &s) < 0)
                return -1;
        return store_capture(s, src, NULL, NULL, &snap) < 0 ? -1 : 0;
}

static int teardown(void **state) {
        (void)state;
        store_free(s);
        th_rm_rf(base);
        free(base);
        return 0;
}

/* The pack holding h, and where h's block lies in it. */
static void obj_where(const struct store_hash *h, char *out, size_t n, char name[64], uint64_t *blk, uint64_t *blen) {
        assert_int_equal(obj_locate(s, h, name, blk, blen), 0);
        snprintf(out, n, "%s/packs/%s", sdir, name);
}

static void flip(const char *path, off_t off) {
        int fd = open(path, O_RDWR | O_CLOEXEC);
        assert_true(fd >= 0);
        uint8_t c;
        assert_int_equal(pread(fd, &c, 1, off), 1);
        c ^= 0x40;
        assert_int_equal(pwrite(fd, &c, 1, off), 1);
        close(fd);
}

struct found {
        const char *hex;
        bool named;
        unsigned n;
};

static void on_problem(void *ud, const struct store_problem *p) {
        struct found *f = ud;
        f->n++;
        printf("  verify: %s\n", p->message);
        if (strstr(p->message, f->hex))
                f->named = true;
}

/* Damages object h inside its pack (a flipped byte in its block, or the pack cut in the
 * middle of that block as a torn write would), checks verify names it and materialize
 * refuses the snapshot, then repairs the pack. */
static void check_damage(const struct store_hash *h, const char *what, bool truncate_it) {
        char path[4300], hex[STORE_HEX_LEN + 1], out[4200], name[64];
        uint64_t blk, blen;
        obj_where(h, path, sizeof path, name, &blk, &blen);
        store_hash_to_hex(h, hex);
        struct stat st;
        assert_int_equal(stat(path, &st), 0);
        _cleanup_free_ char *saved = malloc((size_t)st.st_size);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        assert_int_equal(read(fd, saved, (size_t)st.st_size), st.st_size);
        close(fd);
        assert_int_equal(chmod(path, 0644), 0);
        if (truncate_it)
                assert_int_equal(truncate(path, (off_t)(blk + blen / 2)), 0);
        else
                flip(path, (off_t)(blk + blen - 3));

        /* A flipped byte: the object is named. A torn tail takes the pack's index with it:
         * the pack is named as damaged, and what its lost part held (here the snapshot's
         * record, which is written last) as missing. */
        struct found f = { .hex = truncate_it ? name : hex };
        struct store_verify_result vr;
        assert_int_equal(store_verify(s, on_problem, &f, NULL, NULL, &vr), 0);
        assert_true(vr.problems >= 1);
        if (!f.named)
                fail_msg("verify did not name the damaged %s %s", what, f.hex);

        snprintf(out, sizeof out, "%s/out-%s", base, what);
        int r = store_materialize(s, &snap, out, NULL);
        printf("  get: %s\n", store_error_detail());
        if (truncate_it) {
                /* the torn part is gone from the rebuilt index: what it held is missing */
                assert_true(r == -ENOENT || r == -EBADMSG);
                assert_true(strstr(store_error_detail(), "missing") || strstr(store_error_detail(), name));
        } else {
                /* the first object read from the damaged block is named, with its pack */
                assert_int_equal(r, -EBADMSG);
                assert_non_null(strstr(store_error_detail(), "is corrupt (pack "));
                assert_non_null(strstr(store_error_detail(), name));
        }
        th_rm_rf(out);

        fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC);
        assert_int_equal(write(fd, saved, (size_t)st.st_size), st.st_size);
        close(fd);
        assert_int_equal(store_verify(s, NULL, NULL, NULL, NULL, &vr), 0);
        assert_int_equal(vr.problems, 0);
        snprintf(out, sizeof out, "%s/out-%s-repaired", base, what);
        assert_int_equal(store_materialize(s, &snap, out, NULL), 0);
        th_rm_rf(out);
}

static void test_corruption(void **state) {
        (void)state;
        struct store_snapshot_info info;
        assert_int_equal(store_snapshot_get(s, &snap, &info), 0);
        struct tree root, dir;
        assert_int_equal(tree_load(s, &info.root, &root, NULL), 0);
        assert_string_equal(root.e[0].name, "dir");
        assert_int_equal(tree_load(s, &root.e[0].tree, &dir, NULL), 0);
        assert_true(dir.e[0].nchunks >= 2);
        printf("checking a flipped byte in a chunk is named by verify and refused by get\n");
        check_damage(&dir.e[0].chunks[1].hash, "chunk", false);
        printf("checking a flipped byte in a tree is named by verify and refused by get\n");
        check_damage(&root.e[0].tree, "tree", false);
        printf("checking a flipped byte in a snapshot record is named by verify and refused by get\n");
        check_damage(&snap, "record", false);
        printf("checking a pack cut in the middle of a chunk's block (a torn tail) is detected and named\n");
        check_damage(&dir.e[0].chunks[0].hash, "truncated", true);
        tree_free(&root);
        tree_free(&dir);
}

static void test_foreign_files(void **state) {
        (void)state;
        printf("checking foreign files in packs/ and snapshots/ are reported and left alone by gc\n");
        char p[4200];
        snprintf(p, sizeof p, "%s/packs/not-a-pack", sdir);
        FILE *f = fopen(p, "w");
        fputs("hello", f);
        fclose(f);
        char q[4200];
        snprintf(q, sizeof q, "%s/packs/0123456789abcdef.pack", sdir); /* a pack's name, foreign bytes */
        f = fopen(q, "w");
        fputs("SPOBxxxxxxxxxxxxxxxxxxxxxxxxxx", f);
        fclose(f);
        char r[4200];
        snprintf(r, sizeof r, "%s/snapshots/not-a-ref", sdir);
        f = fopen(r, "w");
        fclose(f);
        struct found fo = { .hex = "not-a-pack" }, fo2 = { .hex = "0123456789abcdef.pack" };
        struct store_verify_result vr;
        assert_int_equal(store_verify(s, on_problem, &fo, NULL, NULL, &vr), 0);
        assert_true(fo.named);
        assert_int_equal(vr.problems, 3);
        assert_int_equal(store_verify(s, on_problem, &fo2, NULL, NULL, &vr), 0);
        assert_true(fo2.named);
        struct store_gc_result gr;
        assert_int_equal(store_gc(s, &snap, 1, NULL, &gr), 0);
        assert_int_equal(access(p, F_OK), 0);
        assert_int_equal(access(q, F_OK), 0);
        assert_int_equal(access(r, F_OK), 0);
        unlink(p);
        unlink(q);
        unlink(r);
        assert_int_equal(store_verify(s, NULL, NULL, NULL, NULL, &vr), 0);
        assert_int_equal(vr.problems, 0);
}

static void test_store_dirs(void **state) {
        (void)state;
        printf("checking missing, foreign and future-format store directories are refused clearly\n");
        struct store *x = NULL;
        char p[4200];
        snprintf(p, sizeof p, "%s/nothing", base);
        assert_int_equal(store_open(p, NULL, &x), -ENOENT);
        printf("  %s\n", store_error_detail());
        assert_int_equal(store_open(src, NULL, &x), -ENOENT);
        assert_non_null(strstr(store_error_detail(), "not a space store"));
        assert_int_equal(store_open(src, &(struct store_opts){ STORE_OPTS_INIT, .create = true }, &x), -EBADMSG);
        printf("  %s\n", store_error_detail());
        assert_non_null(strstr(store_error_detail(), "not a space store and not empty"));
        snprintf(p, sizeof p, "%s/future", base);
        mkdir(p, 0755);
        char fp[4300];
        snprintf(fp, sizeof fp, "%s/format", p);
        FILE *f = fopen(fp, "w");
        fputs("space-store 9\n", f);
        fclose(f);
        assert_int_equal(store_open(p, NULL, &x), -EBADMSG);
        printf("  %s\n", store_error_detail());
        assert_non_null(strstr(store_error_detail(), "unsupported format"));
        printf("checking store_probe tells the same without opening: future, missing, none yet, a store\n");
        assert_int_equal(store_probe(p), -EBADMSG);
        assert_non_null(strstr(store_error_detail(), "unsupported format (\"space-store 9\")"));
        snprintf(fp, sizeof fp, "%s/nothing", base);
        assert_int_equal(store_probe(fp), -ENOENT);
        assert_int_equal(store_probe(src), -ENOENT);
        assert_int_equal(store_probe(""), -EINVAL);
        snprintf(fp, sizeof fp, "%s/fresh", base);
        assert_int_equal(store_open(fp, &(struct store_opts){ STORE_OPTS_INIT, .create = true }, &x), 0);
        x = store_free(x);
        assert_int_equal(store_probe(fp), 0);
        snprintf(fp, sizeof fp, "%s/format", p);
        f = fopen(fp, "w");
        fputs("space-store 1\n", f); /* one file per object: read no more */
        fclose(f);
        assert_int_equal(store_open(p, NULL, &x), -EBADMSG);
        printf("  %s\n", store_error_detail());
        assert_non_null(strstr(store_error_detail(), "unsupported format"));
        f = fopen(fp, "w");
        fputs("something else\n", f);
        fclose(f);
        assert_int_equal(store_open(p, NULL, &x), -EBADMSG);
        assert_non_null(strstr(store_error_detail(), "foreign"));
        assert_null(x);
}

/* Stores raw tree bytes (hash computed over them) and a record pointing at them. */
static struct store_hash commit_raw_tree(const void *bytes, size_t len) {
        struct txn *t;
        assert_int_equal(txn_begin(s, NULL, 0, &t), 0);
        struct store_hash th, sh;
        assert_int_equal(txn_put(t, OBJ_TREE, bytes, len, NULL, &th), 0);
        struct snap_record rec = { .root = { .name = "", .type = T_DIR, .mode = 0755, .tree = th } };
        assert_int_equal(txn_commit(t, &rec, NULL, &sh), 0);
        txn_free(t);
        return sh;
}

static size_t count_entries(const char *dir) {
        DIR *d = opendir(dir);
        size_t n = 0;
        struct dirent *de;
        while (d && (de = readdir(d)))
                n++;
        if (d)
                closedir(d);
        return n;
}

static void refuse(const struct store_hash *sh, int want, const char *needle) {
        char out[4200];
        snprintf(out, sizeof out, "%s/target/inner", base);
        char parent[4200];
        snprintf(parent, sizeof parent, "%s/target", base);
        mkdir(parent, 0755);
        size_t before = count_entries(parent);
        int r = store_materialize(s, sh, out, NULL);
        printf("  get: %s\n", store_error_detail());
        assert_int_equal(r, want);
        assert_non_null(strstr(store_error_detail(), needle));
        /* only the target itself may exist beside what was there */
        assert_true(count_entries(parent) <= before + 1);
        th_rm_rf(parent);
}

static void test_crafted_trees(void **state) {
        (void)state;
        printf("checking crafted trees with '..' and '/' in names are refused and nothing lands outside\n");
        struct t_entry e = { .name = "xx", .type = T_REG, .mode = 0644 };
        _cleanup_buf_ struct buf b = BUF_INIT(0);
        assert_int_equal(tree_encode(&e, 1, &b), 0);
        memcpy(b.data + 12 + 3, "..", 2);
        struct store_hash sh = commit_raw_tree(b.data, b.len);
        refuse(&sh, -EBADMSG, "invalid entry name");
        memcpy(b.data + 12 + 3, "x/", 2);
        sh = commit_raw_tree(b.data, b.len);
        refuse(&sh, -EBADMSG, "invalid entry name");

        printf("checking a chunk list longer than the file is refused\n");
        struct t_chunk c = { 0, 100, { { 1 } } };
        struct t_entry f = { .name = "f", .type = T_REG, .mode = 0644, .size = 100, .nchunks = 1, .chunks = &c };
        buf_reset(&b);
        assert_int_equal(tree_encode(&f, 1, &b), 0);
        put_le64((uint8_t *)b.data + b.len - 44 - 12, 50);
        sh = commit_raw_tree(b.data, b.len);
        refuse(&sh, -EBADMSG, "outside the file");

        printf("checking a tree that refers to a missing object is refused and reported\n");
        struct t_entry d = { .name = "sub", .type = T_DIR, .mode = 0755 };
        memset(d.tree.b, 0xee, sizeof d.tree.b);
        buf_reset(&b);
        assert_int_equal(tree_encode(&d, 1, &b), 0);
        sh = commit_raw_tree(b.data, b.len);
        refuse(&sh, -ENOENT, "eeeeeeee");
        struct found fo = { .hex = "eeeeeeeeeeee" };
        struct store_verify_result vr;
        assert_int_equal(store_verify(s, on_problem, &fo, NULL, NULL, &vr), 0);
        assert_true(fo.named);
        /* chunk missing too */
        memset(c.hash.b, 0xdd, sizeof c.hash.b);
        buf_reset(&b);
        assert_int_equal(tree_encode(&f, 1, &b), 0);
        sh = commit_raw_tree(b.data, b.len);
        refuse(&sh, -ENOENT, "dddddddd");
        assert_int_equal(store_snapshot_forget(s, &sh), 0);
}

static void test_self_reference(void **state) {
        (void)state;
        printf("checking a tree that refers to itself: hash mismatch first, loop detection behind it\n");
        /* Only a forged file can contain its own name; plant one. */
        struct store_hash h;
        memset(h.b, 0x5a, sizeof h.b);
        struct t_entry d = { .name = "loop", .type = T_DIR, .mode = 0755, .tree = h };
        _cleanup_buf_ struct buf b = BUF_INIT(0);
        assert_int_equal(tree_encode(&d, 1, &b), 0);
        struct pack_writer *w;
        assert_int_equal(pw_new(s, "forged", &w), 0);
        assert_int_equal(pw_add_small(w, b.data, (uint32_t)b.len, OBJ_TREE, &h), 0);
        assert_int_equal(pw_seal(w), 0);
        assert_int_equal(pw_publish(w), 0);
        pw_free(w);
        char path[4300], name[64];
        uint64_t blk, blen;
        obj_where(&h, path, sizeof path, name, &blk, &blen);
        struct txn *t;
        assert_int_equal(txn_begin(s, NULL, 0, &t), 0);
        struct snap_record rec = { .root = { .name = "", .type = T_DIR, .mode = 0755, .tree = h } };
        struct store_hash sh;
        assert_int_equal(txn_commit(t, &rec, NULL, &sh), 0);
        txn_free(t);
        refuse(&sh, -EBADMSG, "does not match its hash");
        s->skip_hash_check = true;
        refuse(&sh, -ELOOP, "refers to itself");
        s->skip_hash_check = false;
        unlink(path);
        assert_int_equal(packs_refresh(s, false, NULL, NULL), 0);
        assert_int_equal(store_snapshot_forget(s, &sh), 0);
}

static void test_targets(void **state) {
        (void)state;
        printf("checking get refuses a non-empty target and a symlink as target\n");
        char out[4200], ln[4200];
        snprintf(out, sizeof out, "%s/full", base);
        mkdir(out, 0755);
        char p[4300];
        snprintf(p, sizeof p, "%s/x", out);
        close(open(p, O_CREAT | O_WRONLY | O_CLOEXEC, 0644));
        assert_int_equal(store_materialize(s, &snap, out, NULL), -ENOTEMPTY);
        printf("  %s\n", store_error_detail());
        snprintf(ln, sizeof ln, "%s/link", base);
        snprintf(out, sizeof out, "%s/empty", base);
        mkdir(out, 0755);
        assert_int_equal(symlink(out, ln), 0);
        assert_true(store_materialize(s, &snap, ln, NULL) < 0);
        printf("  %s\n", store_error_detail());
        assert_int_equal(count_entries(out), 2);
        struct store_hash missing;
        memset(missing.b, 0x11, sizeof missing.b);
        snprintf(out, sizeof out, "%s/never", base);
        assert_int_equal(store_materialize(s, &missing, out, NULL), -ENOENT);
        printf("  %s\n", store_error_detail());
        assert_int_equal(access(out, F_OK), -1);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_corruption),    cmocka_unit_test(test_foreign_files),
                cmocka_unit_test(test_store_dirs),    cmocka_unit_test(test_crafted_trees),
                cmocka_unit_test(test_self_reference), cmocka_unit_test(test_targets),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
