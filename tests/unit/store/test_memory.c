/* Memory images: fixed-offset chunks round-trip, zero pieces and holes cost nothing, an
 * unchanged region reuses its chunks, and a snapshot record can carry the image. */
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

static void test_image(void **state) {
        (void)state;
        printf("checking a 64 MiB sparse memory image round-trips and a one-page change writes one chunk\n");
        char *base = th_tmpdir("mem");
        char sdir[4300], img[4300], back[4300], src[4300];
        snprintf(sdir, sizeof sdir, "%s/store", base);
        snprintf(img, sizeof img, "%s/img", base);
        snprintf(back, sizeof back, "%s/back", base);
        snprintf(src, sizeof src, "%s/src", base);
        mkdir(src, 0755);
        struct store *s;
        assert_int_equal(store_open(sdir, &(struct store_opts){ STORE_OPTS_INIT, .create = true }, &s), 0);
        int fd = open(img, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        assert_true(fd >= 0);
        uint64_t size = 64ull << 20;
        assert_int_equal(ftruncate(fd, (off_t)size), 0);
        struct rng r = { 4 };
        static uint8_t page[1 << 20];
        rng_fill(&r, page, sizeof page);
        assert_int_equal(pwrite(fd, page, sizeof page, 3 << 20), (ssize_t)sizeof page);
        memset(page, 0, sizeof page); /* written zeros: stored as nothing too */
        assert_int_equal(pwrite(fd, page, sizeof page, 10 << 20), (ssize_t)sizeof page);
        rng_fill(&r, page, 4096);
        assert_int_equal(pwrite(fd, page, 4096, (off_t)size - 4096), 4096);

        struct store_op_stats st = { 0 };
        struct store_hash m1, m2;
        assert_int_equal(store_memory_put(s, fd, size, &st, &m1), 0);
        printf("  first image: %llu objects, %llu bytes written\n", (unsigned long long)st.objects_written,
               (unsigned long long)st.bytes_written);
        /* 1 MiB of data = 4 chunks, plus the tail page's chunk, plus the image itself */
        assert_int_equal(st.objects_written, 4 + 1 + 1);

        assert_int_equal(pwrite(fd, "changed", 7, (3 << 20) + 100), 7);
        st = (struct store_op_stats){ 0 };
        assert_int_equal(store_memory_put(s, fd, size, &st, &m2), 0);
        printf("  after a 7-byte change: %llu objects written\n", (unsigned long long)st.objects_written);
        assert_int_equal(st.objects_written, 2); /* the changed chunk and the image */

        int bfd = open(back, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        assert_int_equal(store_memory_get(s, &m2, bfd), 0);
        struct stat sa, sb;
        fstat(fd, &sa);
        fstat(bfd, &sb);
        assert_int_equal(sa.st_size, sb.st_size);
        assert_true(sb.st_blocks <= 2 * 8 * 256 + 64); /* ~1 MiB + one page, not 64 MiB */
        static uint8_t a[1 << 20], b[1 << 20];
        for (uint64_t off = 0; off < size; off += sizeof a) {
                assert_int_equal(pread(fd, a, sizeof a, (off_t)off), (ssize_t)sizeof a);
                assert_int_equal(pread(bfd, b, sizeof b, (off_t)off), (ssize_t)sizeof b);
                assert_memory_equal(a, b, sizeof a);
        }

        /* attached to a snapshot, kept by gc, reported by verify when missing */
        struct store_hash snap;
        assert_int_equal(store_capture(s, src, NULL, &(struct store_capture_opts){ .memory = &m2 }, &snap), 0);
        struct store_snapshot_info info;
        assert_int_equal(store_snapshot_get(s, &snap, &info), 0);
        assert_true(info.has_memory && store_hash_eq(&info.memory, &m2));
        usleep(60000);
        struct store_gc_result gr;
        assert_int_equal(store_gc(s, &snap, 1, NULL, &gr), 0);
        assert_int_equal(gr.objects_removed, 2); /* m1 and its old chunk */
        assert_int_equal(store_memory_get(s, &m2, bfd), 0);
        assert_int_equal(store_memory_get(s, &m1, bfd), -ENOENT);
        /* damage the image object inside its pack: verify names it */
        char name[64], p[4400];
        uint64_t blk, blen;
        assert_int_equal(obj_locate(s, &m2, name, &blk, &blen), 0);
        snprintf(p, sizeof p, "%s/packs/%s", sdir, name);
        int pfd = open(p, O_RDWR | O_CLOEXEC);
        assert_true(pfd >= 0);
        uint8_t c;
        assert_int_equal(pread(pfd, &c, 1, (off_t)(blk + blen - 1)), 1);
        c ^= 1;
        assert_int_equal(pwrite(pfd, &c, 1, (off_t)(blk + blen - 1)), 1);
        close(pfd);
        struct store_verify_result vr;
        assert_int_equal(store_verify(s, NULL, NULL, NULL, NULL, &vr), 0);
        assert_true(vr.problems >= 1);
        assert_int_equal(store_memory_get(s, &m2, bfd), -EBADMSG);
        printf("  %s\n", store_error_detail());
        close(fd);
        close(bfd);
        store_free(s);
        th_rm_rf(base);
        free(base);
}

int main(void) {
        const struct CMUnitTest tests[] = { cmocka_unit_test(test_image) };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
