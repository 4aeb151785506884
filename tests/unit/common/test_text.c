/* Unit tests for base64 and the UTF-8 checks shared by spaced, libspace and the JSON codec. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "common/text.h"

static void test_b64_utf8(void **state) {
        printf("checks: base64 round trips and refuses junk; the UTF-8 check refuses overlongs, surrogates, NUL\n");
        struct buf b = BUF_INIT(0), d = BUF_INIT(0);
        const char *in[] = { "", "f", "fo", "foo", "foob", "fooba", "foobar" };
        const char *out[] = { "", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy" };
        for (size_t i = 0; i < 7; i++) {
                buf_reset(&b);
                buf_reset(&d);
                assert_int_equal(text_b64_encode(&b, in[i], strlen(in[i])), 0);
                assert_int_equal(b.len, strlen(out[i]));
                assert_memory_equal(b.data ? b.data : "", out[i], b.len);
                assert_int_equal(text_b64_decode(&d, out[i], strlen(out[i])), 0);
                assert_int_equal(d.len, strlen(in[i]));
                assert_memory_equal(d.data ? d.data : "", in[i], d.len);
        }
        assert_int_equal(text_b64_decode(&d, "Zm9", 3), -EINVAL);
        assert_int_equal(text_b64_decode(&d, "Zm=v", 4), -EINVAL);
        assert_int_equal(text_b64_decode(&d, "Z!9v", 4), -EINVAL);
        assert_int_equal(text_b64_decode(&d, "Zg==Zg==", 8), -EINVAL);
        buf_free(&b);
        buf_free(&d);
        assert_true(text_utf8_valid("h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80", 15));
        assert_false(text_utf8_valid("\xc0\xaf", 2));
        assert_false(text_utf8_valid("\xed\xa0\x80", 3));
        assert_false(text_utf8_valid("a\0b", 3));
        assert_false(text_utf8_valid("\xe2\x82", 2));
        assert_false(text_utf8_valid("\xff", 1));
}


static void test_b64_decode_failure_leaves_nothing(void **state) {
        _cleanup_buf_ struct buf d = BUF_INIT(0);
        assert_int_equal(buf_puts(&d, "kept"), 0);
        assert_int_equal(text_b64_decode(&d, "Zm9vZ!==", 8), -EINVAL);
        assert_int_equal(d.len, 4);
}

static void test_utf8_pieces(void **state) {
        const uint8_t euro[] = { 0xe2, 0x82, 0xac };
        assert_int_equal(text_utf8_seq(euro, 3), 3);
        assert_int_equal(text_utf8_seq(euro, 2), -1);
        assert_true(text_utf8_incomplete_tail(euro, 2));
        const uint8_t bad_cut[] = { 0xed, 0xa0 }; /* a surrogate's start: invalid, not "cut short" */
        assert_int_equal(text_utf8_seq(bad_cut, 2), 0);
        assert_false(text_utf8_incomplete_tail(bad_cut, 2));
        const uint8_t mixed[] = { 'a', 0xc3, 0xa9, 0xff, 'b' };
        assert_int_equal(text_utf8_valid_prefix(mixed, 5), 3);
}

static void test_list_has_token(void **state) {
        (void)state;
        printf("checks: a token is found in an HTTP comma list whatever its case and the blanks around it\n");
        static const struct {
                const char *list, *token;
                bool has;
        } cases[] = {
                { "keep-alive, Upgrade", "upgrade", true }, { " close ", "close", true },
                { "gzip,\tchunked", "chunked", true },     { ",,chunked,,", "chunked", true },
                { "chunkedx, xchunked", "chunked", false }, { "", "close", false },
                { "keep-alive", "keep", false },
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
                assert_int_equal(text_list_has_token(cases[i].list, cases[i].token), cases[i].has);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_b64_utf8),
                cmocka_unit_test(test_b64_decode_failure_leaves_nothing),
                cmocka_unit_test(test_utf8_pieces),
                cmocka_unit_test(test_list_has_token),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
