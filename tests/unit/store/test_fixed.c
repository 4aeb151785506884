/* Fixed-size chunking (store_capture_opts.fixed_chunk): cuts exactly every N bytes of file
 * offset, byte-identical round trips (sparse files too), a one-page change stores one
 * chunk, bad sizes are refused, and captures mixing it with content-defined chunking of
 * the same files (through the stat cache) stay correct. */
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

#define N16 (16u << 10)
#define BIG ((8u << 20) + 1234) /* not a multiple of any chunk size */

struct fx {
        char *base;
        char src[4096], out[4096], sdir[4096];
        struct store *s;
};

static void fx_open(struct fx *f, const char *tag) {
        f->base = th_tmpdir(tag);
        assert_non_null(f->base);
        snprintf(f->src, sizeof f->src, "%s/src", f->base);
        snprintf(f->out, sizeof f->out, "%s/out", f->base);
        snprintf(f->sdir, sizeof f->sdir, "%s/store", f->base);
        assert_int_equal(mkdir(f->src, 0755), 0);
        assert_int_equal(store_open(f->sdir, &(struct store_opts){ STORE_OPTS_INIT, .create = true }, &f->s), 0);
}

static void fx_close(struct fx *f) {
        struct store_verify_result vr;
        assert_int_equal(store_verify(f->s, NULL, NULL, NULL, NULL, &vr), 0);
        assert_int_equal(vr.problems, 0);
        store_free(f->s);
        th_rm_rf(f->base);
        free(f->base);
}

static void write_at(const char *path, const void *data, size_t n, off_t off) {
        int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        assert_true(fd >= 0);
        assert_int_equal(pwrite(fd, data, n, off), (ssize_t)n);
        assert_int_equal(close(fd), 0);
}

/* Random bytes, half of each 64 KiB compressible, like a RAM image. */
static uint8_t *make_data(uint64_t seed, size_t n) {
        struct rng r = { seed };
        uint8_t *d = malloc(n);
        assert_non_null(d);
        rng_fill(&r, d, n);
        for (size_t off = 0; off < n; off += 65536)
                memset(d + off, 'x', MIN((size_t)32768, n - off));
        return d;
}

static void capture(struct fx *f, const struct store_hash *parent, uint32_t chunk, struct store_op_stats *st,
                    struct store_hash *ret) {
        struct store_capture_opts o = { .fixed_chunk = chunk, .stats = st };
        int r = store_capture(f->s, f->src, parent, &o, ret);
        if (r < 0)
                fail_msg("capture (chunk %u): %s: %s", chunk, strerror(-r), store_error_detail());
}

/* The entry `name` in the root of snapshot snap (tree stays owned by the caller). */
static const struct t_entry *entry_of(struct fx *f, const struct store_hash *snap, const char *name, struct tree *t) {
        struct snap_record rec = { 0 };
        assert_int_equal(snap_load(f->s, snap, &rec), 0);
        assert_int_equal(tree_load(f->s, &rec.root.tree, t, NULL), 0);
        snap_record_free(&rec);
        for (size_t i = 0; i < t->n; i++)
                if (!strcmp(t->e[i].name, name))
                        return &t->e[i];
        fail_msg("no %s in the snapshot", name);
        return NULL;
}

/* Every chunk of e is cut at multiples of n: it starts on one or at a region's start after
 * a hole, and never crosses one. Dense files: exactly every n bytes, the last shorter. */
static void check_fixed(const struct t_entry *e, uint32_t n, bool dense) {
        for (uint32_t i = 0; i < e->nchunks; i++) {
                const struct t_chunk *c = &e->chunks[i];
                assert_true(c->len > 0 && c->len <= n);
                assert_true(c->off / n == (c->off + c->len - 1) / n);
                if (dense) {
                        assert_int_equal(c->off, (uint64_t)i * n);
                        assert_int_equal(c->len, MIN((uint64_t)n, e->size - c->off));
                }
        }
        if (dense)
                assert_int_equal(e->nchunks, (e->size + n - 1) / n);
}

static void check_copy(struct fx *f, const struct store_hash *snap) {
        th_rm_rf(f->out);
        struct store_materialize_opts mo = { .no_owner = geteuid() != 0, .no_stat_cache = true };
        int r = store_materialize(f->s, snap, f->out, &mo);
        if (r < 0)
                fail_msg("materialize: %s", store_error_detail());
        char why[4096];
        if (th_compare_trees(f->src, f->out, why, sizeof why))
                fail_msg("copy differs: %s", why);
}

static void test_cut(void **state) {
        (void)state;
        printf("checking fixed_cut stops at the next multiple of the size, and which sizes are valid\n");
        assert_int_equal(fixed_cut(0, 1 << 20, N16), N16);
        assert_int_equal(fixed_cut(N16, 1 << 20, N16), N16);
        assert_int_equal(fixed_cut(5000, 1 << 20, N16), N16 - 5000);
        assert_int_equal(fixed_cut(3 * (uint64_t)N16 + 1, 10, N16), 10);
        assert_int_equal(fixed_cut((UINT64_C(1) << 40) + 4096, 1 << 20, 4096), 4096);
        static const uint32_t good[] = { 0, 4096, 8192, 16384, 32768, 65536 };
        static const uint32_t bad[] = { 1, 2048, 4095, 4097, 12288, 49152, 131072, UINT32_MAX };
        for (size_t i = 0; i < ELEMENTSOF(good); i++)
                assert_int_equal(fixed_chunk_check(good[i]), 0);
        for (size_t i = 0; i < ELEMENTSOF(bad); i++)
                assert_int_equal(fixed_chunk_check(bad[i]), -EINVAL);
}

static void test_invalid(void **state) {
        (void)state;
        printf("checking store_capture refuses fixed chunk sizes that are not powers of two in [4 KiB, 64 KiB]\n");
        struct fx f = { 0 };
        fx_open(&f, "fixbad");
        char p[4200];
        snprintf(p, sizeof p, "%s/a", f.src);
        write_at(p, "abc", 3, 0);
        static const uint32_t bad[] = { 1, 4095, 12288, 131072, 1u << 31 };
        struct store_hash h;
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                struct store_capture_opts o = { .fixed_chunk = bad[i] };
                assert_int_equal(store_capture(f.s, f.src, NULL, &o, &h), -EINVAL);
                printf("  %u: refused (%s)\n", bad[i], store_error_detail());
        }
        struct store_hash *list = NULL;
        size_t n = 1;
        assert_int_equal(store_snapshot_list(f.s, &list, &n), 0);
        assert_int_equal(n, 0); /* nothing recorded by a refused capture */
        free(list);
        fx_close(&f);
}

static void test_boundaries_roundtrip(void **state) {
        (void)state;
        printf("checking chunks lie exactly every N bytes (N = 4, 16, 64 KiB), and capture -> materialize is "
               "byte-identical, sparse files too\n");
        static const uint32_t sizes[] = { 4096, N16, 65536 };
        for (size_t k = 0; k < ELEMENTSOF(sizes); k++) {
                struct fx f = { 0 };
                fx_open(&f, "fixrt");
                char p[4200];
                _cleanup_free_ uint8_t *d = make_data(11 + k, BIG);
                snprintf(p, sizeof p, "%s/big", f.src);
                write_at(p, d, BIG, 0);
                snprintf(p, sizeof p, "%s/small", f.src);
                write_at(p, d, 5000, 0);
                /* data regions that start off the chunk grid, after holes */
                snprintf(p, sizeof p, "%s/sparse", f.src);
                write_at(p, d, 3 * 4096, 5 * 4096);
                write_at(p, d + 100000, 70000, 1 << 20);
                assert_int_equal(truncate(p, 3 << 20), 0);
                struct store_hash h;
                struct store_op_stats st = { 0 };
                capture(&f, NULL, sizes[k], &st, &h);
                struct tree t = { 0 };
                const struct t_entry *e = entry_of(&f, &h, "big", &t);
                check_fixed(e, sizes[k], true);
                printf("  %u: big: %u chunks, last %u bytes\n", sizes[k], e->nchunks, e->chunks[e->nchunks - 1].len);
                tree_free(&t);
                e = entry_of(&f, &h, "small", &t);
                check_fixed(e, sizes[k], true);
                tree_free(&t);
                e = entry_of(&f, &h, "sparse", &t);
                check_fixed(e, sizes[k], false);
                uint64_t covered = 0;
                for (uint32_t i = 0; i < e->nchunks; i++)
                        covered += e->chunks[i].len;
                printf("  %u: sparse: %u chunks cover %llu data bytes\n", sizes[k], e->nchunks,
                       (unsigned long long)covered);
                assert_true(covered >= 3 * 4096 + 70000);
                tree_free(&t);
                check_copy(&f, &h);
                fx_close(&f);
        }
}

/* New chunks of snapshot b's file `name` that snapshot a's does not have. */
static uint32_t new_chunks(struct fx *f, const struct store_hash *a, const struct store_hash *b, const char *name) {
        struct tree ta = { 0 }, tb = { 0 };
        const struct t_entry *ea = entry_of(f, a, name, &ta), *eb = entry_of(f, b, name, &tb);
        uint32_t fresh = 0;
        for (uint32_t i = 0; i < eb->nchunks; i++) {
                bool seen = false;
                for (uint32_t j = 0; j < ea->nchunks && !seen; j++)
                        seen = store_hash_eq(&eb->chunks[i].hash, &ea->chunks[j].hash);
                fresh += !seen;
        }
        tree_free(&ta);
        tree_free(&tb);
        return fresh;
}

static void test_one_page(void **state) {
        (void)state;
        printf("checking a 4 KiB change in an 8 MiB file stores one 16 KiB chunk with fixed chunking "
               "(and more with content-defined)\n");
        uint64_t stored[2] = { 0 };
        for (int mode = 0; mode < 2; mode++) {
                uint32_t chunk = mode ? N16 : 0;
                struct fx f = { 0 };
                fx_open(&f, "fixpage");
                char p[4200];
                _cleanup_free_ uint8_t *d = make_data(21, BIG);
                snprintf(p, sizeof p, "%s/ram", f.src);
                write_at(p, d, BIG, 0);
                struct store_hash h1, h2;
                struct store_op_stats st = { 0 };
                capture(&f, NULL, chunk, &st, &h1);
                uint8_t page[4096];
                struct rng r = { 99 };
                rng_fill(&r, page, sizeof page);
                write_at(p, page, sizeof page, (3 << 20) + 8192);
                st = (struct store_op_stats){ 0 };
                capture(&f, &h1, chunk, &st, &h2);
                uint32_t fresh = new_chunks(&f, &h1, &h2, "ram");
                stored[mode] = st.bytes_written;
                printf("  %s: %u new chunks, %llu bytes stored by the second capture (%llu objects)\n",
                       mode ? "fixed 16 KiB" : "content-defined", fresh, (unsigned long long)st.bytes_written,
                       (unsigned long long)st.objects_written);
                if (mode) {
                        assert_int_equal(fresh, 1);
                        /* the chunk, the root tree and the record */
                        assert_int_equal(st.objects_written, 3);
                } else {
                        assert_true(fresh >= 1);
                }
                check_copy(&f, &h2);
                fx_close(&f);
        }
        assert_true(stored[1] < stored[0]);
}

static void test_mixed(void **state) {
        (void)state;
        printf("checking captures alternating content-defined and fixed chunking of the same files stay correct, "
               "and the stat cache reuses only entries of the same chunking\n");
        struct fx f = { 0 };
        fx_open(&f, "fixmix");
        char p[4200];
        _cleanup_free_ uint8_t *d = make_data(31, BIG);
        snprintf(p, sizeof p, "%s/img", f.src);
        write_at(p, d, BIG, 0);
        snprintf(p, sizeof p, "%s/note", f.src);
        write_at(p, "hello", 5, 0);
        usleep(30000); /* past the stat cache's racy window */
        struct store_hash c1, x1, c2, x2, x3, c3;
        struct store_snapshot_info ic1, ic2, ix1, ix2;
        struct store_op_stats st = { 0 };
        capture(&f, NULL, 0, &st, &c1);
        /* nothing changed, but the cache is of CDC: the fixed capture reads the files again */
        st = (struct store_op_stats){ 0 };
        capture(&f, &c1, N16, &st, &x1);
        printf("  CDC -> fixed, unchanged: %llu files read\n", (unsigned long long)st.files_read);
        assert_int_equal(st.files_read, 2);
        struct tree t = { 0 };
        check_fixed(entry_of(&f, &x1, "img", &t), N16, true);
        tree_free(&t);
        check_copy(&f, &x1);
        /* and back: the same root as the first CDC capture */
        st = (struct store_op_stats){ 0 };
        capture(&f, &x1, 0, &st, &c2);
        assert_int_equal(st.files_read, 2);
        assert_int_equal(store_snapshot_get(f.s, &c1, &ic1), 0);
        assert_int_equal(store_snapshot_get(f.s, &c2, &ic2), 0);
        assert_true(store_hash_eq(&ic1.root, &ic2.root));
        /* same chunking as the parent: the cache is used, nothing is read, same root */
        st = (struct store_op_stats){ 0 };
        capture(&f, &x1, N16, &st, &x2);
        printf("  fixed -> fixed, unchanged: %llu files read\n", (unsigned long long)st.files_read);
        assert_int_equal(st.files_read, 0);
        assert_int_equal(store_snapshot_get(f.s, &x1, &ix1), 0);
        assert_int_equal(store_snapshot_get(f.s, &x2, &ix2), 0);
        assert_true(store_hash_eq(&ix1.root, &ix2.root));
        /* another fixed size is another chunking */
        st = (struct store_op_stats){ 0 };
        capture(&f, &x2, 4096, &st, &x3);
        assert_int_equal(st.files_read, 2);
        check_fixed(entry_of(&f, &x3, "img", &t), 4096, true);
        tree_free(&t);
        /* a change after the mix: the CDC capture with the fixed parent restores exactly */
        usleep(30000);
        write_at(p, "hello, world", 12, 0);
        snprintf(p, sizeof p, "%s/img", f.src);
        write_at(p, "changed", 7, 5 << 20);
        st = (struct store_op_stats){ 0 };
        capture(&f, &x3, 0, &st, &c3);
        check_copy(&f, &c3);
        assert_int_equal(new_chunks(&f, &x3, &c3, "note"), 1);
        fx_close(&f);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_cut),
                cmocka_unit_test(test_invalid),
                cmocka_unit_test(test_boundaries_roundtrip),
                cmocka_unit_test(test_one_page),
                cmocka_unit_test(test_mixed),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
