/* Pack files: a torn tail (what a disk that lost the end of a committed pack leaves) and a
 * damaged index are detected on open, the intact part stays readable, verify reports it
 * and gc rewrites it; crafted trailers, indexes and block headers past every limit, and
 * thousands of random corruptions, are refused without reading out of bounds. */
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

static uint8_t *slurp(const char *path, size_t *ret_n) {
        struct stat st;
        assert_int_equal(stat(path, &st), 0);
        uint8_t *b = malloc((size_t)st.st_size + 1);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        assert_true(fd >= 0);
        assert_int_equal(read(fd, b, (size_t)st.st_size), st.st_size);
        close(fd);
        *ret_n = (size_t)st.st_size;
        return b;
}

static void spit(const char *path, const void *b, size_t n) {
        unlink(path);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, b, n), (ssize_t)n);
        close(fd);
}

/* The newest pack in sdir/packs (by mtime), as a path. */
static void newest_pack(const char *sdir, char *out, size_t n) {
        char d[4200];
        snprintf(d, sizeof d, "%s/packs", sdir);
        DIR *dir = opendir(d);
        assert_non_null(dir);
        struct dirent *de;
        struct timespec best = { 0 };
        out[0] = 0;
        while ((de = readdir(dir))) {
                if (!strstr(de->d_name, ".pack") || de->d_name[0] == '.')
                        continue;
                char p[4600];
                struct stat st;
                snprintf(p, sizeof p, "%s/%s", d, de->d_name);
                assert_int_equal(stat(p, &st), 0);
                if (st.st_mtim.tv_sec > best.tv_sec || (st.st_mtim.tv_sec == best.tv_sec && st.st_mtim.tv_nsec > best.tv_nsec)) {
                        best = st.st_mtim;
                        snprintf(out, n, "%s", p);
                }
        }
        closedir(dir);
        assert_true(out[0]);
}

struct count {
        unsigned corrupt, missing;
        bool pack_named;
        const char *pack;
};

static void on_problem(void *ud, const struct store_problem *p) {
        struct count *c = ud;
        printf("  verify: %s\n", p->message);
        if (p->kind == STORE_PROBLEM_MISSING)
                c->missing++;
        else
                c->corrupt++;
        if (c->pack && strstr(p->message, c->pack))
                c->pack_named = true;
}

static void test_torn_tail(void **state) {
        (void)state;
        printf("checking a committed pack that lost its tail is detected on open, its intact part kept, gc repairs\n");
        char *base = th_tmpdir("torn");
        char sdir[4200], src[4200], p[4400], pack[4800], out[4400];
        snprintf(sdir, sizeof sdir, "%s/store", base);
        snprintf(src, sizeof src, "%s/src", base);
        mkdir(src, 0755);
        struct rng r = { 31 };
        for (int i = 0; i < 8; i++) {
                snprintf(p, sizeof p, "%s/f%d", src, i);
                th_write_file(p, &r, 10000 + rng_below(&r, 400000));
        }
        struct store *s;
        assert_int_equal(store_open(sdir, &(struct store_opts){ STORE_OPTS_INIT, .create = true }, &s), 0);
        struct store_hash a, b;
        assert_int_equal(store_capture(s, src, NULL, NULL, &a), 0);
        char copy[4400];
        snprintf(copy, sizeof copy, "%s/copy-a", base);
        assert_int_equal(store_materialize(s, &a, copy, &(struct store_materialize_opts){ .no_stat_cache = true }), 0);
        snprintf(p, sizeof p, "%s/f3", src);
        th_write_file(p, &r, 900000);
        usleep(30000);
        assert_int_equal(store_capture(s, src, &a, NULL, &b), 0);
        store_free(s);

        newest_pack(sdir, pack, sizeof pack);
        struct stat st;
        assert_int_equal(stat(pack, &st), 0);
        size_t n = (size_t)st.st_size;
        assert_int_equal(truncate(pack, (off_t)(n / 2)), 0);
        printf("  cut %s from %zu to %zu bytes\n", strrchr(pack, '/') + 1, n, n / 2);

        assert_int_equal(store_open(sdir, NULL, &s), 0);
        snprintf(out, sizeof out, "%s/out-a", base);
        assert_int_equal(store_materialize(s, &a, out, NULL), 0);
        char why[2048];
        if (th_compare_trees(copy, out, why, sizeof why))
                fail_msg("snapshot a after the tear: %s", why);
        th_rm_rf(out);
        snprintf(out, sizeof out, "%s/out-b", base);
        assert_true(store_materialize(s, &b, out, NULL) < 0);
        printf("  get b: %s\n", store_error_detail());
        th_rm_rf(out);

        struct count c = { .pack = strrchr(pack, '/') + 1 };
        struct store_verify_result vr;
        assert_int_equal(store_verify(s, on_problem, &c, NULL, NULL, &vr), 0);
        assert_true(c.pack_named);
        assert_true(vr.problems >= 2); /* the damaged pack, and b's record (written last) */

        usleep(60000);
        struct store_gc_result gr;
        assert_int_equal(store_gc(s, &a, 1, NULL, &gr), 0);
        printf("  gc: %llu objects removed, %llu kept, %llu records removed\n", (unsigned long long)gr.objects_removed,
               (unsigned long long)gr.objects_kept, (unsigned long long)gr.snapshots_removed);
        assert_int_equal(access(pack, F_OK), -1);
        assert_int_equal(store_verify(s, NULL, NULL, NULL, NULL, &vr), 0);
        assert_int_equal(vr.problems, 0);
        assert_int_equal(store_materialize(s, &a, out, NULL), 0);
        if (th_compare_trees(copy, out, why, sizeof why))
                fail_msg("snapshot a after gc: %s", why);
        store_free(s);
        th_rm_rf(base);
        free(base);
}

static void test_index_damage(void **state) {
        (void)state;
        printf("checking a pack whose index fails its checksum is rebuilt from its blocks: nothing lost\n");
        char *base = th_tmpdir("idx");
        char sdir[4200], src[4200], pack[4800], out[4400];
        snprintf(sdir, sizeof sdir, "%s/store", base);
        snprintf(src, sizeof src, "%s/src", base);
        mkdir(src, 0755);
        struct rng r = { 41 };
        struct gen_opts go = { .max_depth = 3, .max_entries = 12, .max_file = 600000 };
        assert_int_equal(th_gen_tree(src, &r, &go), 0);
        struct store *s;
        assert_int_equal(store_open(sdir, &(struct store_opts){ STORE_OPTS_INIT, .create = true }, &s), 0);
        struct store_hash a;
        assert_int_equal(store_capture(s, src, NULL, NULL, &a), 0);
        store_free(s);
        newest_pack(sdir, pack, sizeof pack);
        size_t n;
        _cleanup_free_ uint8_t *b = slurp(pack, &n);
        b[n - PACK_TRAILER - 7] ^= 0x10; /* inside the last index entry */
        spit(pack, b, n);

        assert_int_equal(store_open(sdir, NULL, &s), 0);
        snprintf(out, sizeof out, "%s/out", base);
        assert_int_equal(store_materialize(s, &a, out, NULL), 0);
        char why[2048];
        if (th_compare_trees(src, out, why, sizeof why))
                fail_msg("%s", why);
        th_rm_rf(out);
        struct count c = { .pack = strrchr(pack, '/') + 1 };
        struct store_verify_result vr;
        assert_int_equal(store_verify(s, on_problem, &c, NULL, NULL, &vr), 0);
        assert_int_equal(vr.problems, 1); /* the pack, not a single object */
        assert_true(c.pack_named);
        usleep(60000);
        struct store_gc_result gr;
        assert_int_equal(store_gc(s, &a, 1, NULL, &gr), 0);
        assert_int_equal(gr.objects_removed, 0);
        assert_int_equal(store_verify(s, NULL, NULL, NULL, NULL, &vr), 0);
        assert_int_equal(vr.problems, 0);
        store_free(s);
        th_rm_rf(base);
        free(base);
}

/* ---- crafted packs ---- */

static struct store *cs;
static char csdir[4200];
static struct store_hash objs[3];
static uint8_t *good;
static size_t good_n;

static void fix_index_sum(uint8_t *b, size_t n) {
        uint64_t idx_off = get_le64(b + n - PACK_TRAILER + 8);
        uint32_t cnt = get_le32(b + n - PACK_TRAILER + 16);
        if (idx_off > n || (uint64_t)cnt * PACK_IDX_ENTRY > n - idx_off)
                return;
        struct store_hash h;
        store_sha256(b + idx_off, (size_t)cnt * PACK_IDX_ENTRY, &h);
        memcpy(b + n - PACK_TRAILER + 24, h.b, STORE_HASH_LEN);
}

/* Installs b as a pack, reads every object of the good pack back through it: each read
 * either returns the right bytes (hash-checked) or fails. Returns how many reads worked. */
static int try_pack(const uint8_t *b, size_t n, bool *loaded, uint64_t *problems) {
        char p[4400];
        snprintf(p, sizeof p, "%s/packs/00000000000000aa.pack", csdir);
        spit(p, b, n);
        assert_int_equal(packs_refresh(cs, true, NULL, NULL), 0);
        struct pack **v;
        size_t np;
        assert_int_equal(packs_snapshot(cs, false, &v, &np), 0);
        *loaded = np == 1;
        packs_release(v, np);
        int ok = 0;
        for (int i = 0; i < 3; i++) {
                void *d = NULL;
                size_t len;
                if (obj_read(cs, &objs[i], -1, &d, &len, NULL) == 0) {
                        struct store_hash h;
                        store_sha256(d, len, &h);
                        assert_true(store_hash_eq(&h, &objs[i]));
                        ok++;
                }
                free(d);
        }
        struct store_verify_result vr;
        assert_int_equal(store_verify(cs, NULL, NULL, NULL, NULL, &vr), 0);
        if (problems)
                *problems = vr.problems;
        unlink(p);
        assert_int_equal(packs_refresh(cs, false, NULL, NULL), 0);
        return ok;
}

static int crafted_setup(void **state) {
        (void)state;
        char *base = th_tmpdir("crafted");
        snprintf(csdir, sizeof csdir, "%s/store", base);
        free(base);
        if (store_open(csdir, &(struct store_opts){ STORE_OPTS_INIT, .create = true }, &cs) < 0)
                return -1;
        /* three objects: two small ones sharing a block, one big one alone */
        static uint8_t big[200000];
        struct rng r = { 51 };
        rng_fill(&r, big, sizeof big);
        const char *a = "first small object, compressible compressible compressible compressible";
        const char *b2 = "second small object";
        store_sha256(a, strlen(a), &objs[0]);
        store_sha256(b2, strlen(b2), &objs[1]);
        store_sha256(big, sizeof big, &objs[2]);
        struct pack_writer *w;
        if (pw_new(cs, "crafted", &w) < 0 || pw_add_small(w, a, (uint32_t)strlen(a), OBJ_CHUNK, &objs[0]) < 0 ||
            pw_add_small(w, b2, (uint32_t)strlen(b2), OBJ_CHUNK, &objs[1]) < 0)
                return -1;
        struct blk_obj o = { .data = big, .len = sizeof big, .kind = OBJ_CHUNK, .hash = objs[2] };
        if (pw_add_block(w, &o, 1, false) < 0 || pw_seal(w) < 0 || pw_publish(w) < 0)
                return -1;
        pw_free(w);
        char p[4800];
        newest_pack(csdir, p, sizeof p);
        good = slurp(p, &good_n);
        unlink(p);
        return packs_refresh(cs, false, NULL, NULL);
}

static int crafted_teardown(void **state) {
        (void)state;
        store_free(cs);
        char *slash = strrchr(csdir, '/');
        *slash = 0;
        th_rm_rf(csdir);
        free(good);
        return 0;
}

static void test_crafted(void **state) {
        (void)state;
        bool loaded;
        printf("checking the untouched pack reads back whole\n");
        uint64_t problems;
        assert_int_equal(try_pack(good, good_n, &loaded, &problems), 3);
        assert_true(loaded);
        assert_int_equal(problems, 0);
        _cleanup_free_ uint8_t *b = malloc(good_n);
        size_t t = good_n - PACK_TRAILER;
        uint64_t idx_off = get_le64(good + t + 8);

        struct {
                const char *what;
                size_t off;
                int width; /* bytes to write at off: 1, 2, 4 or 8 */
                uint64_t val;
                bool fix_sum;
                int max_ok; /* reads that may still succeed */
        } cases[] = {
                { "pack version 9 (a future format: left alone)", 4, 1, 9, false, 0 },
                { "trailer claims 2^24+1 objects", t + 16, 4, PACK_MAX_OBJECTS + 1, false, 3 },
                { "trailer claims 2^32-1 objects", t + 16, 4, UINT32_MAX, false, 3 },
                { "index offset past the end", t + 8, 8, UINT64_MAX - 5, false, 3 },
                { "index offset before the header", t + 8, 8, 3, false, 3 },
                { "trailer version 2", t + 4, 1, 2, false, 3 },
                { "end magic gone", t + 60, 1, 'X', false, 3 },
                { "index entry with reserved bits", idx_off + 32 + 6, 1, 1, true, 3 },
                { "index entry with kind 200", idx_off + 32 + 7, 1, 200, true, 3 },
                { "index entry pointing past the blocks", idx_off + 32, 8, idx_off + 1000, true, 3 },
                { "index entry of 2^31 bytes", idx_off + 44, 4, 1u << 31, true, 3 },
                { "index entries out of order", idx_off, 1, 0xff, true, 3 },
                { "first block with 0 objects", PACK_HEADER + 6, 2, 0, false, 2 },
                { "first block with 65535 objects", PACK_HEADER + 6, 2, 65535, false, 2 },
                { "first block of 2^31 plain bytes", PACK_HEADER + 8, 4, 1u << 31, false, 2 },
                { "first block stored length past the file", PACK_HEADER + 12, 4, 1u << 30, false, 2 },
                { "first block with codec 7", PACK_HEADER + 4, 1, 7, false, 2 },
                { "first block's table sums wrong", PACK_HEADER + BLOCK_HEADER, 4, 3, false, 3 },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                memcpy(b, good, good_n);
                uint8_t *q = b + cases[i].off;
                switch (cases[i].width) {
                case 1: q[0] = (uint8_t)cases[i].val; break;
                case 2: put_le16(q, (uint16_t)cases[i].val); break;
                case 4: put_le32(q, (uint32_t)cases[i].val); break;
                default: put_le64(q, cases[i].val); break;
                }
                if (cases[i].fix_sum)
                        fix_index_sum(b, good_n);
                int ok = try_pack(b, good_n, &loaded, &problems);
                printf("  %s: %s, %d of 3 objects read back, verify reports %llu problems\n", cases[i].what,
                       loaded ? "loaded (index checked or rebuilt)" : "not loaded", ok, (unsigned long long)problems);
                assert_true(ok <= cases[i].max_ok);
                assert_true(problems >= 1);
        }
        printf("checking a pack cut at every length up to the trailer never reads past its end\n");
        for (size_t n = 0; n < good_n; n += n < 64 ? 1 : 997) {
                int ok = try_pack(good, n, &loaded, NULL);
                assert_true(ok <= 3);
        }
        printf("checking 3000 random corruptions: every read is right or refused\n");
        struct rng r = { 77 };
        unsigned worked = 0;
        for (int i = 0; i < 3000; i++) {
                memcpy(b, good, good_n);
                int flips = 1 + (int)rng_below(&r, 4);
                for (int k = 0; k < flips; k++) {
                        /* aim at the structure: header, block headers, index, trailer */
                        size_t at;
                        switch (rng_below(&r, 4)) {
                        case 0: at = rng_below(&r, 64); break;
                        case 1: at = (size_t)idx_off + rng_below(&r, good_n - idx_off); break;
                        default: at = rng_below(&r, good_n); break;
                        }
                        b[at] ^= (uint8_t)(1u << rng_below(&r, 8));
                }
                if (rng_below(&r, 2))
                        fix_index_sum(b, good_n);
                worked += (unsigned)try_pack(b, good_n, &loaded, NULL);
        }
        printf("  %u of 9000 reads returned (correct) data\n", worked);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_torn_tail),
                cmocka_unit_test(test_index_damage),
                cmocka_unit_test_setup_teardown(test_crafted, crafted_setup, crafted_teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
