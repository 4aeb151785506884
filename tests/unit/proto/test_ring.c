/* Unit tests of space-init's output ring (src/init/ring.c): growth, wrap-around, eviction
 * of the oldest records, seeking by output offset, and readers that fall behind. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include <errno.h>

#include "init/ring.h"

static void test_small_ring_evicts(void **state) {
        print_message("a 40-byte ring keeps the newest records and counts offsets over all output\n");
        struct ring r;
        ring_init(&r, 40, 100);
        assert_int_equal(ring_append(&r, 5, "aaaaaaaaaa", 10), 0); /* 15 bytes */
        assert_int_equal(ring_append(&r, 6, "bbbbbbbbbb", 10), 0); /* 30 */
        assert_int_equal(r.start_off, 100);
        assert_int_equal(r.end_off, 120);
        assert_int_equal(ring_append(&r, 5, "cccccccccc", 10), 0); /* 45 > 40: drops "a" */
        assert_int_equal(r.start_off, 110);
        assert_int_equal(r.end_off, 130);
        assert_int_equal(ring_append(&r, 5, "", 0), 0);
        assert_int_equal(r.end_off, 130);
        assert_int_equal(ring_append(&r, 5, "x", 36), -EMSGSIZE); /* can never fit */

        uint8_t out[RING_MAX_REC], st = 0;
        struct ring_cursor c;
        ring_seek(&r, 0, &c); /* before the oldest kept byte */
        assert_int_equal(ring_cursor_off(&c), 110);
        assert_int_equal(ring_next(&r, &c, &st, out, RING_MAX_REC), 10);
        assert_int_equal(st, 6);
        assert_memory_equal(out, "bbbbbbbbbb", 10);
        ring_seek(&r, 125, &c); /* in the middle of a record */
        assert_int_equal(ring_cursor_off(&c), 125);
        assert_int_equal(ring_next(&r, &c, &st, out, RING_MAX_REC), 5);
        assert_int_equal(st, 5);
        assert_memory_equal(out, "ccccc", 5);
        assert_int_equal(ring_cursor_off(&c), 130);
        assert_int_equal(ring_next(&r, &c, &st, out, RING_MAX_REC), 0);
        ring_seek(&r, 1000, &c); /* past the end: at the end */
        assert_int_equal(ring_cursor_off(&c), 130);

        print_message("a reader whose record was dropped jumps to the oldest kept one\n");
        ring_seek(&r, 110, &c);
        assert_int_equal(ring_append(&r, 6, "dddddddddd", 10), 0); /* drops "b" */
        assert_int_equal(ring_append(&r, 6, "eeeeeeeeee", 10), 0); /* drops "c" */
        assert_int_equal(ring_next(&r, &c, &st, out, RING_MAX_REC), 10);
        assert_memory_equal(out, "dddddddddd", 10);
        assert_int_equal(ring_cursor_off(&c), 140);
        ring_free(&r);
}

static void test_next_bounded(void **state) {
        print_message("ring_next with a max reads a record in pieces (a stream window), in order\n");
        struct ring r;
        ring_init(&r, 1000, 50);
        assert_int_equal(ring_append(&r, 5, "0123456789", 10), 0);
        assert_int_equal(ring_append(&r, 6, "abcdef", 6), 0);
        uint8_t out[RING_MAX_REC], st = 0;
        struct ring_cursor c;
        ring_seek(&r, 52, &c);
        assert_int_equal(ring_next(&r, &c, &st, out, 0), 0); /* no window: nothing, no move */
        assert_int_equal(ring_cursor_off(&c), 52);
        assert_int_equal(ring_next(&r, &c, &st, out, 3), 3);
        assert_int_equal(st, 5);
        assert_memory_equal(out, "234", 3);
        assert_int_equal(ring_cursor_off(&c), 55);
        assert_int_equal(ring_next(&r, &c, &st, out, 1), 1);
        assert_memory_equal(out, "5", 1);
        assert_int_equal(ring_next(&r, &c, &st, out, 100), 4); /* the rest of the record only */
        assert_memory_equal(out, "6789", 4);
        assert_int_equal(ring_cursor_off(&c), 60);
        assert_int_equal(ring_next(&r, &c, &st, out, 6), 6); /* exactly a whole record */
        assert_int_equal(st, 6);
        assert_memory_equal(out, "abcdef", 6);
        assert_int_equal(ring_cursor_off(&c), 66);
        assert_int_equal(ring_next(&r, &c, &st, out, 6), 0);

        print_message("a cursor inside a record that gets dropped jumps to the oldest kept one\n");
        ring_seek(&r, 50, &c);
        assert_int_equal(ring_next(&r, &c, &st, out, 4), 4);
        for (int i = 0; i < 100; i++)
                assert_int_equal(ring_append(&r, 5, "zzzzzzzzzz", 10), 0);
        assert_int_equal(ring_next(&r, &c, &st, out, 100), 10);
        assert_memory_equal(out, "zzzzzzzzzz", 10);
        assert_int_equal(ring_cursor_off(&c) - 10, r.start_off);
        ring_free(&r);
}

static void test_growth_and_wrap(void **state) {
        print_message("100k records of varied sizes through a growing, wrapping 1 MiB ring read back exactly\n");
        const size_t max = 1u << 20;
        struct ring r;
        ring_init(&r, max, 0);
        /* The output stream is a known function of its offset, so any window can be checked. */
        static uint8_t rec[4096];
        uint64_t off = 0;
        for (unsigned i = 0; i < 100000; i++) {
                size_t n = 1 + (i * 7919u) % 700;
                for (size_t k = 0; k < n; k++)
                        rec[k] = (uint8_t)((off + k) * 31 + 7);
                assert_int_equal(ring_append(&r, (uint8_t)(5 + i % 2), rec, n), 0);
                off += n;
                assert_true(r.cap <= max);
                if (i == 10) /* quiet so far: the ring has not grown to its max */
                        assert_true(r.cap < 16384);
        }
        assert_int_equal(r.end_off, off);
        /* nearly full: only record headers (~1.5% here) and one record of slack are lost */
        assert_true(r.end_off - r.start_off > max - max / 50 - 705);
        struct ring_cursor c;
        ring_seek(&r, r.start_off + 12345, &c);
        uint64_t pos = ring_cursor_off(&c);
        assert_int_equal(pos, r.start_off + 12345);
        static uint8_t out[RING_MAX_REC];
        uint8_t st;
        size_t n;
        while ((n = ring_next(&r, &c, &st, out, RING_MAX_REC)) > 0) {
                for (size_t k = 0; k < n; k++)
                        if (out[k] != (uint8_t)((pos + k) * 31 + 7))
                                fail_msg("byte at offset %llu differs", (unsigned long long)(pos + k));
                pos += n;
        }
        assert_int_equal(pos, off);
        ring_free(&r);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_small_ring_evicts),
                cmocka_unit_test(test_next_bounded),
                cmocka_unit_test(test_growth_and_wrap),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
