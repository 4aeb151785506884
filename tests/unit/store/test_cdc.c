/* Content-defined chunking: sizes stay within bounds, cuts are deterministic, and an insert
 * in the middle of a file changes only the chunks around it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "helpers.h"
#include "store/store-internal.h"

#define DATA (16u << 20)

/* Cuts data into chunks, returns their hashes. */
static size_t cut_all(const uint8_t *d, size_t n, struct store_hash *out, size_t max, size_t *sizes) {
        size_t k = 0, off = 0;
        while (off < n && k < max) {
                size_t c = cdc_cut(d + off, n - off, true);
                assert_true(c > 0);
                if (sizes)
                        sizes[k] = c;
                store_sha256(d + off, c, &out[k++]);
                off += c;
        }
        return k;
}

static void test_bounds(void **state) {
        (void)state;
        printf("checking chunk sizes lie in [min, max] and average near %u KiB on random data\n", STORE_CHUNK_AVG >> 10);
        struct rng r = { 1 };
        uint8_t *d = malloc(DATA);
        rng_fill(&r, d, DATA);
        static struct store_hash h[4096];
        static size_t sz[4096];
        size_t n = cut_all(d, DATA, h, 4096, sz);
        for (size_t i = 0; i + 1 < n; i++) {
                assert_true(sz[i] >= STORE_CHUNK_MIN);
                assert_true(sz[i] <= STORE_CHUNK_MAX);
        }
        double avg = (double)DATA / (double)n;
        printf("  %zu chunks, average %.0f bytes\n", n, avg);
        assert_true(avg > STORE_CHUNK_AVG / 2 && avg < STORE_CHUNK_AVG * 2);
        /* without eof and less than a window, it asks for more */
        assert_int_equal(cdc_cut(d, STORE_CHUNK_MAX - 1, false), 0);
        /* zeros never hit a cut point: max-size chunks */
        memset(d, 0, 2 * STORE_CHUNK_MAX);
        assert_int_equal(cdc_cut(d, 2 * STORE_CHUNK_MAX, false), STORE_CHUNK_MAX);
        free(d);
}

static void test_insert_locality(void **state) {
        (void)state;
        printf("checking a 100-byte insert in the middle of 16 MiB changes at most 3 chunks\n");
        struct rng r = { 2 };
        uint8_t *a = malloc(DATA), *b = malloc(DATA + 100);
        rng_fill(&r, a, DATA);
        memcpy(b, a, DATA / 2);
        rng_fill(&r, b + DATA / 2, 100);
        memcpy(b + DATA / 2 + 100, a + DATA / 2, DATA / 2);
        static struct store_hash ha[4096], hb[4096];
        size_t na = cut_all(a, DATA, ha, 4096, NULL), nb = cut_all(b, DATA + 100, hb, 4096, NULL);
        struct hset set = { 0 };
        for (size_t i = 0; i < na; i++)
                hset_add(&set, &ha[i], 1);
        size_t fresh = 0;
        for (size_t i = 0; i < nb; i++)
                if (!hset_get(&set, &hb[i]))
                        fresh++;
        printf("  %zu of %zu chunks are new\n", fresh, nb);
        assert_true(fresh >= 1 && fresh <= 3);
        hset_free(&set);
        free(a);
        free(b);
}

static void test_deterministic(void **state) {
        (void)state;
        printf("checking the cut does not depend on how much data follows the window\n");
        struct rng r = { 3 };
        uint8_t *d = malloc(4 * STORE_CHUNK_MAX);
        rng_fill(&r, d, 4 * STORE_CHUNK_MAX);
        size_t c1 = cdc_cut(d, STORE_CHUNK_MAX, false), c2 = cdc_cut(d, 4 * STORE_CHUNK_MAX, false);
        assert_int_equal(c1, c2);
        free(d);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_bounds),
                cmocka_unit_test(test_insert_locality),
                cmocka_unit_test(test_deterministic),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
