/* Unit tests for the JSON reader and writer: valid documents, every refusal, limits,
 * and a write-parse-write round trip. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

#include "common/json.h"

static struct json *parse_ok(const char *s) {
        struct json *j = NULL;
        char err[128] = "";
        int r = json_parse(s, strlen(s), &j, err, sizeof err);
        if (r < 0)
                fail_msg("parse of '%s' failed: %s", s, err);
        return j;
}

static int parse_err(const char *s) {
        struct json *j = (struct json *)0x1;
        int r = json_parse(s, strlen(s), &j, NULL, 0);
        assert_true(r < 0);
        assert_ptr_equal(j, (struct json *)0x1); /* untouched on failure */
        return r;
}

static void test_object_access(void **state) {
        _cleanup_json_ struct json *j =
                parse_ok(" {\"argv\":[\"python3\",\"-c\",\"print(6*7)\"],\"timeout_ms\":1500,\"bg\":true,\"x\":null,\"f\":1.5} ");
        assert_int_equal(json_type(j), JSON_OBJECT);
        assert_int_equal(json_len(j), 5);
        const struct json *argv = json_get(j, "argv");
        assert_int_equal(json_len(argv), 3);
        assert_string_equal(json_str(json_at(argv, 2)), "print(6*7)");
        int64_t v = 0;
        assert_int_equal(json_get_int(j, "timeout_ms", &v), 0);
        assert_int_equal(v, 1500);
        assert_int_equal(json_get_int(j, "missing", &v), -ENOENT);
        assert_int_equal(json_get_int(j, "f", &v), -EINVAL);
        assert_int_equal(v, 1500);
        assert_true(json_get_bool(j, "bg", false));
        assert_false(json_get_bool(j, "x", false));
        assert_null(json_get_str(j, "timeout_ms"));
        assert_string_equal(json_key_at(j, 4), "f");
        assert_true(json_num(json_get(j, "f")) == 1.5);
}

static void test_escapes_and_utf8(void **state) {
        _cleanup_json_ struct json *j = parse_ok("\"a\\n\\t\\\"\\\\\\/\\u00e9\\ud83d\\ude00\xc3\xa9\"");
        assert_string_equal(json_str(j), "a\n\t\"\\/\xc3\xa9\xf0\x9f\x98\x80\xc3\xa9");
}

static void test_refusals(void **state) {
        const char *bad[] = {
                "", "   ", "{", "[1,2", "{\"a\"}", "{\"a\":1,}", "[1,]", "01", "1.", "-", "1e", "tru", "nul",
                "\"abc", "\"\\x\"", "\"\\u12\"", "\"\\ud800\"", "\"\\udc00\"", "\"\\u0000\"", "\"\x01\"",
                "\"\xff\"", "\"\xc0\xaf\"", "\"\xed\xa0\x80\"", "{1:2}", "[1] x", "{\"a\":1}}", "1e999", "-1e400",
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
                print_message("refuse: %s\n", bad[i]);
                assert_int_equal(parse_err(bad[i]), -EINVAL);
        }
}

static void test_depth_limit(void **state) {
        char deep[JSON_MAX_DEPTH * 2 + 3];
        size_t n = 0;
        for (int i = 0; i < JSON_MAX_DEPTH + 1; i++)
                deep[n++] = '[';
        for (int i = 0; i < JSON_MAX_DEPTH + 1; i++)
                deep[n++] = ']';
        deep[n] = '\0';
        assert_int_equal(parse_err(deep), -E2BIG);
        /* exactly the limit parses */
        struct json *j = NULL;
        assert_int_equal(json_parse(deep + 1, n - 2, &j, NULL, 0), 0);
        json_free(j);
}

static void test_integers(void **state) {
        _cleanup_json_ struct json *j = parse_ok("[9223372036854775807,-9223372036854775808,1e3,2.5,99999999999999999999]");
        int64_t v;
        assert_int_equal(json_int(json_at(j, 0), &v), 0);
        assert_true(v == INT64_MAX);
        assert_int_equal(json_int(json_at(j, 1), &v), 0);
        assert_true(v == INT64_MIN);
        assert_int_equal(json_int(json_at(j, 2), &v), 0);
        assert_int_equal(v, 1000);
        assert_int_equal(json_int(json_at(j, 3), &v), -EINVAL);
        assert_int_equal(json_int(json_at(j, 4), &v), -ERANGE);
}

static void test_writer_round_trip(void **state) {
        _cleanup_buf_ struct buf b = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        json_w_kstr(&w, "s", "quote\" back\\ nl\n ctl\x01 \xc3\xa9");
        json_w_kint(&w, "n", -42);
        json_w_key(&w, "a");
        json_w_arr_begin(&w);
        json_w_bool(&w, true);
        json_w_null(&w);
        json_w_double(&w, 0.1);
        json_w_double(&w, -0.0);
        json_w_strn(&w, "bad\xff", 4);
        json_w_arr_end(&w);
        json_w_kbool(&w, "b", false);
        json_w_obj_end(&w);
        assert_int_equal(w.err, 0);
        const char *expect = "{\"s\":\"quote\\\" back\\\\ nl\\n ctl\\u0001 \xc3\xa9\",\"n\":-42,"
                             "\"a\":[true,null,0.1,-0.0,\"bad\xef\xbf\xbd\"],\"b\":false}";
        assert_string_equal(buf_cstr(&b), expect);

        _cleanup_json_ struct json *j = parse_ok(buf_cstr(&b));
        _cleanup_buf_ struct buf b2 = BUF_INIT(0);
        struct json_writer w2 = JSON_WRITER_INIT(&b2);
        json_w_value(&w2, j);
        assert_int_equal(w2.err, 0);
        assert_string_equal(buf_cstr(&b2), expect);
}

static void test_writer_cap_sticks(void **state) {
        _cleanup_buf_ struct buf b = BUF_INIT(8);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_arr_begin(&w);
        json_w_str(&w, "this is longer than eight bytes");
        json_w_arr_end(&w);
        assert_int_equal(w.err, -E2BIG);
}

static void test_duplicate_keys_last_wins(void **state) {
        _cleanup_json_ struct json *j = parse_ok("{\"a\":1,\"a\":2}");
        int64_t v;
        assert_int_equal(json_get_int(j, "a", &v), 0);
        assert_int_equal(v, 2);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_object_access),   cmocka_unit_test(test_escapes_and_utf8),
                cmocka_unit_test(test_refusals),        cmocka_unit_test(test_depth_limit),
                cmocka_unit_test(test_integers),        cmocka_unit_test(test_writer_round_trip),
                cmocka_unit_test(test_writer_cap_sticks), cmocka_unit_test(test_duplicate_keys_last_wins),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
