/* Delta chunks: a chunk rewritten in place with a few changed words is stored as its XOR
 * with the parent's chunk (docs/store.md, "Delta chunks"). Round trips bit-exact, chains
 * stay one deep, big rewrites stay plain, verify checks the plain hash, GC keeps the base
 * of a live delta whose own snapshot is gone, damage and over-deep chains are refused. */
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
#include <time.h>
#include <unistd.h>
#include <cmocka.h>
#include <zstd.h>

#include "helpers.h"
#include "store/store-internal.h"

#define CH (16u << 10)
#define SIZE (1u << 20)

struct fx {
        char *base;
        char src[4096], file[4096], out[4096], sdir[4096];
        struct store *s;
        uint8_t *data;
};

static void fx_open(struct fx *f, const char *tag) {
        f->base = th_tmpdir(tag);
        assert_non_null(f->base);
        snprintf(f->src, sizeof f->src, "%s/src", f->base);
        snprintf(f->file, sizeof f->file, "%s/src/ram", f->base);
        snprintf(f->out, sizeof f->out, "%s/out", f->base);
        snprintf(f->sdir, sizeof f->sdir, "%s/store", f->base);
        assert_int_equal(mkdir(f->src, 0755), 0);
        assert_int_equal(store_open(f->sdir, &(struct store_opts){ STORE_OPTS_INIT, .create = true }, &f->s), 0);
        /* like guest RAM: half of each chunk compressible, half not */
        struct rng r = { 42 };
        f->data = malloc(SIZE);
        assert_non_null(f->data);
        rng_fill(&r, f->data, SIZE);
        for (size_t off = 0; off < SIZE; off += CH)
                memset(f->data + off, 'x', CH / 2);
}

static void verify_clean(struct fx *f) {
        struct store_verify_result vr;
        assert_int_equal(store_verify(f->s, NULL, NULL, NULL, NULL, &vr), 0);
        assert_int_equal(vr.problems, 0);
}

static void fx_close(struct fx *f) {
        verify_clean(f);
        store_free(f->s);
        th_rm_rf(f->base);
        free(f->base);
        free(f->data);
}

static void write_file(struct fx *f) {
        int fd = open(f->file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, f->data, SIZE), (ssize_t)SIZE);
        assert_int_equal(close(fd), 0);
}

/* A few words of chunk i change, as a counter or a list pointer in a RAM page would. */
static void poke(struct fx *f, unsigned i, uint32_t v) {
        for (unsigned w = 0; w < 4; w++)
                memcpy(f->data + (size_t)i * CH + CH / 2 + 100 + w * 1000, &v, sizeof v);
}

static void capture(struct fx *f, const struct store_hash *parent, bool no_delta, struct store_op_stats *st,
                    struct store_hash *ret) {
        struct store_capture_opts o = { .fixed_chunk = CH, .no_delta = no_delta, .stats = st };
        int r = store_capture(f->s, f->src, parent, &o, ret);
        if (r < 0)
                fail_msg("capture: %s: %s", strerror(-r), store_error_detail());
}

/* Snapshot snap restores exactly the bytes in f->data. */
static void check_restore(struct fx *f, const struct store_hash *snap) {
        th_rm_rf(f->out);
        int r = store_materialize(f->s, snap, f->out, &(struct store_materialize_opts){ .no_owner = true });
        if (r < 0)
                fail_msg("materialize: %s: %s", strerror(-r), store_error_detail());
        char p[4200];
        snprintf(p, sizeof p, "%s/ram", f->out);
        int fd = open(p, O_RDONLY | O_CLOEXEC);
        assert_true(fd >= 0);
        uint8_t *got = malloc(SIZE + 1);
        assert_non_null(got);
        assert_int_equal(read(fd, got, SIZE + 1), (ssize_t)SIZE);
        close(fd);
        assert_memory_equal(got, f->data, SIZE);
        free(got);
}

/* The hash of chunk i of the file in snapshot snap. */
static struct store_hash chunk_hash(struct fx *f, const struct store_hash *snap, unsigned i) {
        struct snap_record rec = { 0 };
        struct tree t;
        assert_int_equal(snap_load(f->s, snap, &rec), 0);
        assert_int_equal(tree_load(f->s, &rec.root.tree, &t, NULL), 0);
        assert_int_equal(t.n, 1);
        assert_true(i < t.e[0].nchunks);
        assert_int_equal(t.e[0].chunks[i].off, (uint64_t)i * CH);
        struct store_hash h = t.e[0].chunks[i].hash;
        tree_free(&t);
        snap_record_free(&rec);
        return h;
}

static void test_roundtrip_and_chain(void **state) {
        (void)state;
        struct fx f = { 0 };
        fx_open(&f, "delta-rt");
        write_file(&f);
        struct store_hash s1, s2, s3;
        struct store_op_stats st1 = { 0 }, st2 = { 0 }, st3 = { 0 };
        capture(&f, NULL, false, &st1, &s1);
        printf("check: a first capture stores no deltas (no parent): %llu\n", (unsigned long long)st1.deltas_written);
        assert_int_equal(st1.deltas_written, 0);

        poke(&f, 3, 0x11111111);
        poke(&f, 17, 0x22222222);
        poke(&f, 40, 0x33333333);
        write_file(&f);
        capture(&f, &s1, false, &st2, &s2);
        printf("check: three chunks with a few changed words are stored as 3 deltas (got %llu), %llu bytes "
               "written against %u per plain chunk half\n",
               (unsigned long long)st2.deltas_written, (unsigned long long)st2.bytes_written, CH / 2);
        assert_int_equal(st2.deltas_written, 3);
        assert_true(st2.bytes_written < CH); /* three plain chunks would be > 3 x 8 KiB */
        check_restore(&f, &s2);
        printf("check: the second snapshot restores bit-exact, the first too\n");
        struct store_hash c1 = chunk_hash(&f, &s1, 3), c2 = chunk_hash(&f, &s2, 3), base;
        assert_int_equal(obj_delta_base(f.s, &c2, &base), 1);
        assert_true(store_hash_eq(&base, &c1));
        assert_int_equal(obj_delta_base(f.s, &c1, &base), 0);
        char name[64];
        uint64_t blk, blen;
        assert_int_equal(obj_locate(f.s, &c2, name, &blk, &blen), 0);
        char pp[4200];
        snprintf(pp, sizeof pp, "%s/packs/%s", f.sdir, name);
        int fd = open(pp, O_RDONLY | O_CLOEXEC);
        uint8_t hdr[PACK_HEADER];
        assert_int_equal(pread(fd, hdr, sizeof hdr, 0), (ssize_t)sizeof hdr);
        close(fd);
        printf("check: the pack holding a delta says version %u (got %u)\n", PACK_VERSION_DELTA, hdr[4]);
        assert_int_equal(hdr[4], PACK_VERSION_DELTA);

        /* the same chunk changes again: its new delta is against the plain chunk, not the delta */
        poke(&f, 3, 0x44444444);
        write_file(&f);
        capture(&f, &s2, false, &st3, &s3);
        struct store_hash c3 = chunk_hash(&f, &s3, 3);
        printf("check: a chunk changed again is a delta against the first plain version (depth %u)\n",
               STORE_DELTA_DEPTH);
        assert_int_equal(st3.deltas_written, 1);
        assert_int_equal(obj_delta_base(f.s, &c3, &base), 1);
        assert_true(store_hash_eq(&base, &c1));
        check_restore(&f, &s3);
        fx_close(&f);
}

static void test_plain_when_not_worth(void **state) {
        (void)state;
        struct fx f = { 0 };
        fx_open(&f, "delta-plain");
        write_file(&f);
        struct store_hash s1, s2, s3;
        struct store_op_stats st = { 0 };
        capture(&f, NULL, false, NULL, &s1);
        /* chunk 5 rewritten whole: its XOR is as random as it is */
        struct rng r = { 7 };
        rng_fill(&r, f.data + 5 * CH, CH);
        write_file(&f);
        capture(&f, &s1, false, &st, &s2);
        printf("check: a chunk rewritten whole is stored plain (deltas %llu, objects %llu)\n",
               (unsigned long long)st.deltas_written, (unsigned long long)st.objects_written);
        assert_int_equal(st.deltas_written, 0);
        check_restore(&f, &s2);
        poke(&f, 9, 0x55555555);
        write_file(&f);
        st = (struct store_op_stats){ 0 };
        capture(&f, &s2, true, &st, &s3);
        printf("check: no_delta stores a small change plain (deltas %llu)\n", (unsigned long long)st.deltas_written);
        assert_int_equal(st.deltas_written, 0);
        check_restore(&f, &s3);
        fx_close(&f);
}

static void test_gc_keeps_base(void **state) {
        (void)state;
        struct fx f = { 0 };
        fx_open(&f, "delta-gc");
        write_file(&f);
        struct store_hash s1, s2;
        capture(&f, NULL, false, NULL, &s1);
        struct store_hash c1 = chunk_hash(&f, &s1, 8);
        poke(&f, 8, 0x66666666);
        write_file(&f);
        struct store_op_stats st = { 0 };
        capture(&f, &s1, false, &st, &s2);
        assert_int_equal(st.deltas_written, 1);
        /* s1 goes: chunk 8's old version is reachable from no live snapshot, but s2's delta needs it */
        assert_int_equal(store_snapshot_forget(f.s, &s1), 0);
        struct timespec ts = { 0, 120 * 1000000 };
        nanosleep(&ts, NULL);
        struct store_gc_result gr = { 0 };
        assert_int_equal(store_gc(f.s, &s2, 1, NULL, &gr), 0);
        printf("check: gc with only the delta's snapshot live removed %llu object(s), the first record among "
               "them, and kept the base chunk\n", (unsigned long long)gr.objects_removed);
        assert_int_equal(obj_exists(f.s, &s1, true), 0);
        assert_int_equal(obj_exists(f.s, &c1, true), 1);
        check_restore(&f, &s2);
        verify_clean(&f);
        /* a store reopened (indexes loaded from disk, delta flags included) still knows */
        store_free(f.s);
        assert_int_equal(store_open(f.sdir, &(struct store_opts){ STORE_OPTS_INIT }, &f.s), 0);
        nanosleep(&ts, NULL);
        assert_int_equal(store_gc(f.s, &s2, 1, NULL, &gr), 0);
        assert_int_equal(obj_exists(f.s, &c1, true), 1);
        check_restore(&f, &s2);
        /* s3 keeps s2's delta of chunk 8; when s2 goes, the delta's pack (which also held
         * s2's record and tree) is rewritten with the delta copied: its flag must survive */
        struct store_hash s3, c2 = chunk_hash(&f, &s2, 8);
        poke(&f, 30, 0x12345678);
        write_file(&f);
        capture(&f, &s2, false, NULL, &s3);
        assert_int_equal(store_snapshot_forget(f.s, &s2), 0);
        nanosleep(&ts, NULL);
        assert_int_equal(store_gc(f.s, &s3, 1, NULL, &gr), 0);
        store_free(f.s);
        assert_int_equal(store_open(f.sdir, &(struct store_opts){ STORE_OPTS_INIT }, &f.s), 0);
        nanosleep(&ts, NULL);
        assert_int_equal(store_gc(f.s, &s3, 1, NULL, &gr), 0);
        struct store_hash c3 = chunk_hash(&f, &s3, 8), base;
        printf("check: a delta copied by a GC rewrite stays a delta and its base stays kept\n");
        assert_true(store_hash_eq(&c3, &c2));
        assert_int_equal(obj_delta_base(f.s, &c2, &base), 1);
        assert_true(store_hash_eq(&base, &c1));
        assert_int_equal(obj_exists(f.s, &c1, true), 1);
        check_restore(&f, &s3);
        /* nothing live: base and delta both go */
        assert_int_equal(store_snapshot_forget(f.s, &s3), 0);
        nanosleep(&ts, NULL);
        assert_int_equal(store_gc(f.s, NULL, 0, NULL, &gr), 0);
        printf("check: with nothing live, the delta and its base are collected\n");
        assert_int_equal(obj_exists(f.s, &c1, true), 0);
        assert_int_equal(obj_exists(f.s, &c2, true), 0);
        fx_close(&f);
}

static void test_damage(void **state) {
        (void)state;
        struct fx f = { 0 };
        fx_open(&f, "delta-bad");
        write_file(&f);
        struct store_hash s1, s2;
        capture(&f, NULL, false, NULL, &s1);
        poke(&f, 2, 0x77777777);
        write_file(&f);
        capture(&f, &s1, false, NULL, &s2);
        struct store_hash c2 = chunk_hash(&f, &s2, 2);
        char name[64], pp[4200];
        uint64_t blk, blen;
        assert_int_equal(obj_locate(f.s, &c2, name, &blk, &blen), 0);
        snprintf(pp, sizeof pp, "%s/packs/%s", f.sdir, name);
        /* flip a byte of the XOR frame's content (the frame's last bytes) */
        int fd = open(pp, O_RDWR | O_CLOEXEC);
        assert_true(fd >= 0);
        uint8_t b;
        off_t at = (off_t)(blk + blen - 4);
        assert_int_equal(pread(fd, &b, 1, at), 1);
        b ^= 0x5a;
        assert_int_equal(pwrite(fd, &b, 1, at), 1);
        close(fd);
        void *p = NULL;
        size_t n;
        int r = obj_read(f.s, &c2, OBJ_CHUNK, &p, &n, NULL);
        printf("check: a damaged delta is refused (%d: %s)\n", r, store_error_detail());
        assert_int_equal(r, -EBADMSG);
        struct store_verify_result vr;
        assert_int_equal(store_verify(f.s, NULL, NULL, NULL, NULL, &vr), 0);
        printf("check: verify reports it (%llu problems)\n", (unsigned long long)vr.problems);
        assert_true(vr.problems > 0);
        store_free(f.s);
        th_rm_rf(f.base);
        free(f.base);
        free(f.data);
}

/* A pack written by hand: plain A, delta B on A, delta C on B (which no writer makes). */
static void test_depth_limit(void **state) {
        (void)state;
        struct fx f = { 0 };
        fx_open(&f, "delta-depth");
        uint8_t *a = f.data, *b = malloc(CH), *c = malloc(CH), *x = malloc(CH), *frame = malloc(ZSTD_COMPRESSBOUND(CH));
        assert_true(b && c && x && frame);
        memcpy(b, a, CH);
        b[CH - 1] ^= 1;
        memcpy(c, b, CH);
        c[CH - 2] ^= 1;
        struct store_hash ha, hb, hc;
        store_sha256(a, CH, &ha);
        store_sha256(b, CH, &hb);
        store_sha256(c, CH, &hc);
        struct pack_writer *w;
        assert_int_equal(pw_new(f.s, "depth", &w), 0);
        struct blk_obj o = { .data = a, .len = CH, .kind = OBJ_CHUNK, .hash = ha };
        assert_int_equal(pw_add_block(w, &o, 1, true), 0);
        size_t k;
        for (unsigned i = 0; i < CH; i++)
                x[i] = a[i] ^ b[i];
        assert_int_equal(z_compress(x, CH, frame, ZSTD_COMPRESSBOUND(CH), 3, &k), 0);
        assert_int_equal(pw_add_delta(w, &hb, &ha, frame, k, CH), 0);
        for (unsigned i = 0; i < CH; i++)
                x[i] = b[i] ^ c[i];
        assert_int_equal(z_compress(x, CH, frame, ZSTD_COMPRESSBOUND(CH), 3, &k), 0);
        assert_int_equal(pw_add_delta(w, &hc, &hb, frame, k, CH), 0);
        assert_int_equal(pw_seal(w), 0);
        assert_int_equal(pw_publish(w), 0);
        pw_free(w);
        void *p = NULL;
        size_t n = 0;
        assert_int_equal(obj_read(f.s, &hb, OBJ_CHUNK, &p, &n, NULL), 0);
        printf("check: a delta on a plain base reads back exactly\n");
        assert_int_equal(n, CH);
        assert_memory_equal(p, b, CH);
        free(p);
        p = NULL;
        int r = obj_read(f.s, &hc, OBJ_CHUNK, &p, &n, NULL);
        printf("check: a delta on a delta is refused (%d: %s)\n", r, store_error_detail());
        assert_int_equal(r, -EBADMSG);
        assert_non_null(strstr(store_error_detail(), "itself a delta"));
        free(b);
        free(c);
        free(x);
        free(frame);
        store_free(f.s);
        th_rm_rf(f.base);
        free(f.base);
        free(f.data);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_roundtrip_and_chain),
                cmocka_unit_test(test_plain_when_not_worth),
                cmocka_unit_test(test_gc_keeps_base),
                cmocka_unit_test(test_damage),
                cmocka_unit_test(test_depth_limit),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
