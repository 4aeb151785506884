/* The gvisor checkpoint image unpacked for the store and put back together
 * (src/runtime/gvisor/image.c), on synthetic state files of runsc's layout: the data
 * survives split + join exactly, the head is kept byte for byte, and what is not a state
 * file (bad magic, truncated, a chunk that inflates past the chunk size) is refused. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <cmocka.h>

#include "runtime/fsutil.h"
#include "runtime/gvisor/image.h"

#define CHUNK (1u << 16)

static char dir[64];

static int setup(void **state) {
        (void)state;
        snprintf(dir, sizeof dir, "/tmp/test-gvimage-XXXXXX");
        return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
        (void)state;
        return rt_rm_rf(dir);
}

static void put32(FILE *f, uint32_t v) {
        uint8_t b[4] = { (uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v };
        fwrite(b, 1, 4, f);
}

/* A state file: magic, metadata, a fake 32-byte MAC, chunk size, data in deflate chunks
 * (compressed with zlib at `level`, raw deflate like Go's compress/flate). */
static void make_image(const char *path, const uint8_t *data, size_t n, uint32_t chunk, int level) {
        FILE *f = fopen(path, "we");
        assert_non_null(f);
        const char *meta = "{\"_timestamp\":\"now\"}";
        fwrite("gVisorSF", 1, 8, f);
        uint8_t ml[8] = { 0 };
        ml[7] = (uint8_t)strlen(meta);
        fwrite(ml, 1, 8, f);
        fwrite(meta, 1, strlen(meta), f);
        uint8_t mac[32];
        for (int i = 0; i < 32; i++)
                mac[i] = (uint8_t)(i * 7);
        fwrite(mac, 1, 32, f);
        put32(f, chunk);
        uint8_t *out = malloc(chunk * 2 + 1024);
        assert_non_null(out);
        for (size_t o = 0; o < n; o += chunk) {
                size_t len = n - o < chunk ? n - o : chunk;
                z_stream z = { 0 };
                assert_int_equal(deflateInit2(&z, level, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY), Z_OK);
                z.next_in = (uint8_t *)data + o;
                z.avail_in = (uInt)len;
                z.next_out = out;
                z.avail_out = chunk * 2 + 1024;
                assert_int_equal(deflate(&z, Z_FINISH), Z_STREAM_END);
                put32(f, (uint32_t)z.total_out);
                fwrite(out, 1, z.total_out, f);
                deflateEnd(&z);
        }
        free(out);
        fclose(f);
}

static uint8_t *slurp(const char *path, size_t *n) {
        FILE *f = fopen(path, "re");
        if (!f)
                return NULL;
        fseek(f, 0, SEEK_END);
        long len = ftell(f);
        fseek(f, 0, SEEK_SET);
        uint8_t *b = malloc((size_t)len + 1);
        *n = fread(b, 1, (size_t)len, f);
        fclose(f);
        return b;
}

/* Inflates every chunk of a (joined) state file: the data it holds. */
static uint8_t *inflate_image(const char *path, size_t *ret_n, size_t *ret_head) {
        size_t n;
        uint8_t *f = slurp(path, &n);
        assert_non_null(f);
        size_t ml = f[15];
        size_t o = 16 + ml + 32;
        uint32_t chunk = (uint32_t)f[o] << 24 | (uint32_t)f[o + 1] << 16 | (uint32_t)f[o + 2] << 8 | f[o + 3];
        o += 4;
        *ret_head = o;
        uint8_t *data = malloc(n * 4 + 16);
        size_t got = 0;
        while (o < n) {
                uint32_t clen = (uint32_t)f[o] << 24 | (uint32_t)f[o + 1] << 16 | (uint32_t)f[o + 2] << 8 | f[o + 3];
                o += 4;
                uLongf dl = chunk;
                z_stream z = { 0 };
                assert_int_equal(inflateInit2(&z, -15), Z_OK);
                z.next_in = f + o;
                z.avail_in = clen;
                z.next_out = data + got;
                z.avail_out = (uInt)dl;
                assert_int_equal(inflate(&z, Z_FINISH), Z_STREAM_END);
                got += z.total_out;
                inflateEnd(&z);
                o += clen;
        }
        free(f);
        *ret_n = got;
        return data;
}

static void roundtrip(size_t n, int level) {
        char img[128], raw[128], head[128];
        snprintf(img, sizeof img, "%s/" GV_IMAGE_FILE, dir);
        snprintf(raw, sizeof raw, "%s/" GV_IMAGE_RAW, dir);
        snprintf(head, sizeof head, "%s/" GV_IMAGE_HEAD, dir);
        uint8_t *data = malloc(n + 1);
        /* half text-like (compresses), half pseudo-random (does not) */
        uint32_t x = 12345;
        for (size_t i = 0; i < n; i++) {
                x = x * 1103515245 + 12345;
                data[i] = i < n / 2 ? (uint8_t)('a' + i % 7) : (uint8_t)(x >> 16);
        }
        make_image(img, data, n, CHUNK, level);
        size_t orig_n;
        uint8_t *orig = slurp(img, &orig_n);
        assert_int_equal(gv_image_split(dir), 0);
        assert_int_equal(access(img, F_OK), -1);
        size_t raw_n;
        uint8_t *r = slurp(raw, &raw_n);
        assert_int_equal(raw_n, n);
        assert_memory_equal(r, data, n);
        free(r);
        size_t head_n;
        uint8_t *h = slurp(head, &head_n);
        assert_memory_equal(h, orig, head_n); /* the head, verbatim */
        free(h);
        assert_int_equal(gv_image_join(dir), 0);
        assert_int_equal(access(raw, F_OK), -1);
        size_t back_n, back_head;
        uint8_t *back = inflate_image(img, &back_n, &back_head);
        assert_int_equal(back_head, head_n);
        assert_int_equal(back_n, n);
        assert_memory_equal(back, data, n);
        free(back);
        free(orig);
        free(data);
        unlink(img);
}

static void test_roundtrip(void **state) {
        (void)state;
        printf("# split + join keeps the data and the head: sizes 0, 1, a chunk, 3.5 chunks; levels 1 and 9\n");
        roundtrip(0, 1);
        roundtrip(1, 1);
        roundtrip(CHUNK, 1);
        roundtrip(CHUNK * 3 + CHUNK / 2, 1);
        roundtrip(CHUNK * 3 + CHUNK / 2, 9);
        printf("# a stored block holds at most 65535 bytes: a chunk of 64 KiB needs two\n");
        roundtrip(CHUNK * 2, 0);
}

static void test_bad(void **state) {
        (void)state;
        char img[128];
        snprintf(img, sizeof img, "%s/" GV_IMAGE_FILE, dir);
        printf("# not a state file: -EBADMSG, nothing removed\n");
        FILE *f = fopen(img, "we");
        fputs("notgvisorSF at all, just text long enough to read a header", f);
        fclose(f);
        assert_int_equal(gv_image_split(dir), -EBADMSG);
        assert_int_equal(access(img, F_OK), 0);
        printf("# truncated in the middle of a chunk: -EBADMSG\n");
        uint8_t data[5000];
        for (size_t i = 0; i < sizeof data; i++)
                data[i] = (uint8_t)(i * 31 + 7);
        make_image(img, data, sizeof data, CHUNK, 1);
        struct stat st;
        assert_int_equal(stat(img, &st), 0);
        assert_int_equal(truncate(img, st.st_size - 10), 0);
        assert_int_equal(gv_image_split(dir), -EBADMSG);
        printf("# a chunk that inflates past the chunk size: -EBADMSG\n");
        uint8_t big[3 * 1024];
        memset(big, 'z', sizeof big);
        make_image(img, big, sizeof big, sizeof big, 1);
        /* claim a smaller chunk size than the data inflates to */
        FILE *g = fopen(img, "r+e");
        fseek(g, 16 + 20 + 32, SEEK_SET);
        put32(g, 1024);
        fclose(g);
        assert_int_equal(gv_image_split(dir), -EBADMSG);
        unlink(img);
        printf("# join without the parts: -EINVAL\n");
        assert_int_equal(gv_image_join(dir), -EINVAL);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_roundtrip, setup, teardown),
                cmocka_unit_test_setup_teardown(test_bad, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
