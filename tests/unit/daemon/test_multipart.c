/* The multipart/form-data parser of POST /files (src/daemon/e2b/multipart.c): parts and
 * their bytes however the body is cut, the escapes of filenames, the limits, and garbage
 * fed in random pieces (it must end in an error or a result, never a crash). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "daemon/e2b/multipart.h"

#define B "----formdata-undici-010216420250"

struct got {
        unsigned parts, ends;
        char names[8][64], files[8][MP_FILENAME_MAX + 1];
        struct buf data[8];
        bool done;
        const char *error;
};

static void got_free(struct got *g) {
        for (int i = 0; i < 8; i++)
                buf_free(&g->data[i]);
}

/* Feeds body in pieces of at most step bytes (0: whole) and records the events. */
static void run(const char *body, size_t n, size_t step, struct got *g) {
        struct mp_parser p;
        memset(g, 0, sizeof *g);
        for (int i = 0; i < 8; i++)
                g->data[i] = BUF_INIT(0);
        assert_int_equal(mp_init(&p, B), 0);
        size_t off = 0;
        while (off < n && !g->error) {
                size_t len = step && step < n - off ? step : n - off;
                const char *in = body + off;
                for (;;) {
                        size_t used = 0;
                        struct mp_event ev;
                        mp_feed(&p, in, len, &used, &ev);
                        assert_true(used <= len);
                        in += used;
                        len -= used;
                        off += used;
                        if (ev.type == MP_NEED_MORE)
                                break;
                        if (ev.type == MP_ERROR) {
                                g->error = ev.error;
                                break;
                        }
                        if (ev.type == MP_PART_BEGIN) {
                                assert_true(g->parts < 8);
                                snprintf(g->names[g->parts], sizeof g->names[0], "%s", ev.name);
                                snprintf(g->files[g->parts], sizeof g->files[0], "%s", ev.filename ? ev.filename : "(none)");
                                g->parts++;
                        } else if (ev.type == MP_DATA) {
                                assert_true(g->parts > 0);
                                assert_int_equal(buf_append(&g->data[g->parts - 1], ev.data, ev.len), 0);
                        } else if (ev.type == MP_PART_END) {
                                g->ends++;
                        } else if (ev.type == MP_DONE) {
                                g->done = true;
                        }
                }
        }
        if (!g->error)
                g->done = mp_finish(&p) == 0;
}

static const char two[] = "--" B "\r\n"
                          "Content-Disposition: form-data; name=\"file\"; filename=\"x/a\"\r\n"
                          "Content-Type: application/octet-stream\r\n\r\n"
                          "A\r\n--" "----formdata-undici-0102" "\r\n\r--" B "\r\r\n"
                          "\r\n--" B "\r\n"
                          "Content-Disposition: form-data; name=\"file\"; filename=\"a%22b%0Ac/\xc3\xa9.txt%41\"\r\n\r\n"
                          "\r\n--" B "--\r\nepilogue";
static const char a_data[] = "A\r\n--" "----formdata-undici-0102" "\r\n\r--" B "\r\r\n";

static void check_two(const struct got *g) {
        assert_null(g->error);
        assert_true(g->done);
        assert_int_equal(g->parts, 2);
        assert_int_equal(g->ends, 2);
        assert_string_equal(g->names[0], "file");
        assert_string_equal(g->files[0], "x/a");
        assert_int_equal(g->data[0].len, strlen(a_data));
        assert_memory_equal(g->data[0].data, a_data, strlen(a_data));
        /* only %22 %0D %0A are undone; UTF-8 is kept as it came */
        assert_string_equal(g->files[1], "a\"b\nc/\xc3\xa9.txt%41");
        assert_int_equal(g->data[1].len, 0);
}

static void test_two_parts_any_cut(void **state) {
        (void)state;
        struct got g;
        for (size_t step = 0; step <= 80; step++) {
                run(two, sizeof two - 1, step, &g);
                check_two(&g);
                got_free(&g);
        }
}

static void test_preamble_and_binary(void **state) {
        (void)state;
        /* a preamble, every byte value in the data, and a boundary-like run at the end */
        struct buf body = BUF_INIT(0);
        assert_int_equal(buf_puts(&body, "ignored preamble\r\n--" B "\r\nContent-Disposition: form-data; name=file; filename=bin\r\n\r\n"), 0);
        char all[256 * 2];
        for (int i = 0; i < 512; i++)
                all[i] = (char)(i & 255);
        assert_int_equal(buf_append(&body, all, sizeof all), 0);
        assert_int_equal(buf_puts(&body, "\r\n--" B "--"), 0);
        struct got g;
        for (size_t step = 0; step < 40; step += 3) {
                run(body.data, body.len, step, &g);
                assert_null(g.error);
                assert_true(g.done);
                assert_int_equal(g.parts, 1);
                assert_string_equal(g.files[0], "bin");
                assert_int_equal(g.data[0].len, sizeof all);
                assert_memory_equal(g.data[0].data, all, sizeof all);
                got_free(&g);
        }
        buf_free(&body);
}

static void test_errors_limits(void **state) {
        (void)state;
        struct got g;
        static const char trunc[] = "--" B "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\"\r\n\r\nhalf";
        run(trunc, sizeof trunc - 1, 0, &g);
        assert_null(g.error);
        assert_false(g.done); /* mp_finish: truncated */
        got_free(&g);

        static const char nodisp[] = "--" B "\r\nContent-Type: text/plain\r\n\r\nx\r\n--" B "--";
        run(nodisp, sizeof nodisp - 1, 0, &g);
        assert_non_null(g.error);
        got_free(&g);

        static const char baddelim[] = "--" B "junk\r\n";
        run(baddelim, sizeof baddelim - 1, 0, &g);
        assert_non_null(g.error);
        got_free(&g);

        /* a filename of 4097 bytes */
        struct buf b = BUF_INIT(0);
        assert_int_equal(buf_puts(&b, "--" B "\r\nContent-Disposition: form-data; name=\"file\"; filename=\""), 0);
        for (int i = 0; i < MP_FILENAME_MAX + 1; i++)
                assert_int_equal(buf_append(&b, "a", 1), 0);
        assert_int_equal(buf_puts(&b, "\"\r\n\r\nx\r\n--" B "--"), 0);
        run(b.data, b.len, 0, &g);
        assert_non_null(g.error);
        assert_non_null(strstr(g.error, "filename"));
        got_free(&g);
        buf_reset(&b);

        /* headers past 8192 bytes */
        assert_int_equal(buf_puts(&b, "--" B "\r\nX-Pad: "), 0);
        for (int i = 0; i < MP_HEADERS_MAX; i++)
                assert_int_equal(buf_append(&b, "p", 1), 0);
        run(b.data, b.len, 0, &g);
        assert_non_null(g.error);
        got_free(&g);
        buf_reset(&b);

        /* 1001 parts */
        for (int i = 0; i <= MP_PARTS_MAX; i++)
                assert_int_equal(buf_puts(&b, "--" B "\r\nContent-Disposition: form-data; name=\"o\"\r\n\r\n\r\n"), 0);
        assert_int_equal(buf_puts(&b, "--" B "--"), 0);
        struct mp_parser p;
        assert_int_equal(mp_init(&p, B), 0);
        size_t off = 0, begins = 0;
        const char *err = NULL;
        while (off < b.len && !err) {
                size_t used;
                struct mp_event ev;
                mp_feed(&p, b.data + off, b.len - off, &used, &ev);
                off += used;
                begins += ev.type == MP_PART_BEGIN;
                if (ev.type == MP_ERROR)
                        err = ev.error;
        }
        assert_non_null(err);
        assert_int_equal(begins, MP_PARTS_MAX);
        buf_free(&b);
}

static void test_boundary(void **state) {
        (void)state;
        char out[MP_BOUNDARY_MAX + 1];
        assert_int_equal(mp_boundary("multipart/form-data; boundary=" B, out), 0);
        assert_string_equal(out, B);
        assert_int_equal(mp_boundary("Multipart/Form-Data;charset=x; boundary=\"a b'c\"", out), 0);
        assert_string_equal(out, "a b'c");
        assert_int_equal(mp_boundary("multipart/form-data", out), -EINVAL);
        assert_int_equal(mp_boundary("multipart/form-data; boundary=", out), -EINVAL);
        assert_int_equal(mp_boundary("application/octet-stream; boundary=x", out), -EINVAL);
        assert_int_equal(mp_boundary("multipart/form-data; boundary=\"a\r\nb\"", out), -EINVAL);
        char longb[120] = "multipart/form-data; boundary=";
        memset(longb + strlen(longb), 'x', 71);
        assert_int_equal(mp_boundary(longb, out), -EINVAL);
        assert_int_equal(mp_boundary(NULL, out), -EINVAL);
        struct mp_parser p;
        assert_int_equal(mp_init(&p, ""), -EINVAL);
}

/* Garbage and mutated bodies in random pieces: every call takes what it says it took,
 * and the parse ends. */
static void test_random(void **state) {
        (void)state;
        srand(1234);
        char body[sizeof two];
        for (int round = 0; round < 3000; round++) {
                memcpy(body, two, sizeof two);
                int flips = rand() % 6;
                for (int k = 0; k < flips; k++)
                        body[rand() % (sizeof two - 1)] = (char)(rand() % 256);
                if (round % 3 == 0)
                        for (size_t k = 0; k < sizeof two - 1; k++)
                                body[k] = "\r\n-B"[rand() % 4];
                struct mp_parser p;
                assert_int_equal(mp_init(&p, "B"), 0);
                if (round % 2)
                        assert_int_equal(mp_init(&p, B), 0);
                size_t off = 0, n = sizeof two - 1;
                int guard = 0;
                while (off < n && guard++ < 100000) {
                        size_t len = 1 + (size_t)rand() % 17;
                        if (len > n - off)
                                len = n - off;
                        size_t used;
                        struct mp_event ev;
                        mp_feed(&p, body + off, len, &used, &ev);
                        assert_true(used <= len);
                        if (ev.type == MP_DATA)
                                assert_true(ev.len > 0);
                        off += used;
                        if (ev.type == MP_ERROR || ev.type == MP_DONE)
                                break;
                }
                assert_true(guard < 100000);
        }
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_two_parts_any_cut),
                cmocka_unit_test(test_preamble_and_binary),
                cmocka_unit_test(test_errors_limits),
                cmocka_unit_test(test_boundary),
                cmocka_unit_test(test_random),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
