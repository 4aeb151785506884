/* Unit tests of session metadata (src/daemon/metadata.c): what create accepts and refuses
 * (the limits, each named in the message), its text, and the list filters, SPACE's and
 * the E2B SDK's triple encoding (docs/e2b-wire.md §2.4) decoded to the same pairs. */
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
#include "common/json.h"
#include "daemon/metadata.h"

/* metadata_parse of text: its return; *ret its text, why the message. */
static int parse_md(const char *text, char **ret, char *why, size_t why_size) {
        struct json *j = NULL;
        assert_int_equal(json_parse(text, strlen(text), &j, NULL, 0), 0);
        int r = metadata_parse(j, ret, why, why_size);
        json_free(j);
        return r;
}

static void test_parse(void **state) {
        (void)state;
        char why[200] = "", *t = NULL;
        printf("check: an object of strings is kept as its JSON text; {} and null are none\n");
        assert_int_equal(parse_md("{\"a\":\"b c\",\"k&\":\"v=\"}", &t, why, sizeof why), 0);
        assert_string_equal(t, "{\"a\":\"b c\",\"k&\":\"v=\"}");
        free(t);
        assert_int_equal(parse_md("{}", &t, why, sizeof why), 0);
        assert_null(t);
        assert_int_equal(parse_md("null", &t, why, sizeof why), 0);
        assert_null(t);
        assert_int_equal(metadata_parse(NULL, &t, why, sizeof why), 0);
        assert_null(t);

        printf("check: each limit is refused and named\n");
        assert_int_equal(parse_md("[\"a\"]", &t, why, sizeof why), -EINVAL);
        assert_non_null(strstr(why, "must be an object"));
        assert_int_equal(parse_md("{\"n\":1}", &t, why, sizeof why), -EINVAL);
        assert_non_null(strstr(why, "\"n\": the value must be a string"));
        assert_int_equal(parse_md("{\"\":\"x\"}", &t, why, sizeof why), -EINVAL);
        assert_non_null(strstr(why, "1 to 64 bytes"));
        assert_int_equal(parse_md("{\"a\":\"1\",\"a\":\"2\"}", &t, why, sizeof why), -EINVAL);
        assert_non_null(strstr(why, "\"a\" is given twice"));
        struct buf b = BUF_INIT(0);
        /* a key of 64 bytes passes, of 65 does not */
        buf_puts(&b, "{\"");
        for (int i = 0; i < 64; i++)
                buf_putc(&b, 'k');
        buf_puts(&b, "\":\"v\"}");
        buf_putc(&b, '\0');
        assert_int_equal(parse_md(b.data, &t, why, sizeof why), 0);
        free(t);
        buf_reset(&b);
        buf_puts(&b, "{\"");
        for (int i = 0; i < 65; i++)
                buf_putc(&b, 'k');
        buf_puts(&b, "\":\"v\"}");
        buf_putc(&b, '\0');
        assert_int_equal(parse_md(b.data, &t, why, sizeof why), -EINVAL);
        assert_non_null(strstr(why, "must be 1 to 64 bytes"));
        /* a value of 512 bytes passes, of 513 does not */
        for (int n = 512; n <= 513; n++) {
                buf_reset(&b);
                buf_puts(&b, "{\"big\":\"");
                for (int i = 0; i < n; i++)
                        buf_putc(&b, 'v');
                buf_puts(&b, "\"}");
                buf_putc(&b, '\0');
                int r = parse_md(b.data, &t, why, sizeof why);
                if (n == 512) {
                        assert_int_equal(r, 0);
                        free(t);
                } else {
                        assert_int_equal(r, -EINVAL);
                        assert_non_null(strstr(why, "\"big\": the value is 513 bytes"));
                }
        }
        /* 64 keys pass, 65 do not */
        for (int n = 64; n <= 65; n++) {
                buf_reset(&b);
                buf_putc(&b, '{');
                for (int i = 0; i < n; i++) {
                        char kv[32];
                        snprintf(kv, sizeof kv, "%s\"k%d\":\"v\"", i ? "," : "", i);
                        buf_puts(&b, kv);
                }
                buf_puts(&b, "}");
                buf_putc(&b, '\0');
                int r = parse_md(b.data, &t, why, sizeof why);
                if (n == 64) {
                        assert_int_equal(r, 0);
                        free(t);
                } else {
                        assert_int_equal(r, -EINVAL);
                        assert_non_null(strstr(why, "65 keys"));
                }
        }
        buf_free(&b);
}

static void test_filter(void **state) {
        (void)state;
        const char *md = "{\"a\":\"b c\",\"k&\":\"v=\",\"x\":\"+\"}";
        struct md_filter f;
        char why[200];
        printf("check: SPACE's filter, k=v with each side form-encoded once\n");
        assert_int_equal(metadata_filter_parse("a=b+c&k%26=v%3D", false, &f, why, sizeof why), 0);
        assert_int_equal(f.n, 2);
        assert_string_equal(f.keys[1], "k&");
        assert_string_equal(f.values[1], "v=");
        assert_true(metadata_matches(md, &f));
        metadata_filter_clear(&f);
        printf("check: the E2B SDK's, as the query parser leaves it (decoded once of three)\n");
        /* GET /v2/sandboxes?metadata=a%3Db%252520c%26k%252526%3Dv%25253D */
        assert_int_equal(metadata_filter_parse("a=b%2520c&k%2526=v%253D&x=%252B", true, &f, why, sizeof why), 0);
        assert_int_equal(f.n, 3);
        assert_string_equal(f.values[0], "b c");
        assert_string_equal(f.keys[1], "k&");
        assert_string_equal(f.values[1], "v=");
        assert_string_equal(f.values[2], "+");
        assert_true(metadata_matches(md, &f));
        printf("check: AND of the pairs: one that differs, or metadata without it, fails\n");
        assert_false(metadata_matches("{\"a\":\"b c\",\"k&\":\"v=\"}", &f));
        assert_false(metadata_matches(NULL, &f));
        metadata_filter_clear(&f);
        assert_int_equal(metadata_filter_parse("a=other", false, &f, why, sizeof why), 0);
        assert_false(metadata_matches(md, &f));
        metadata_filter_clear(&f);
        printf("check: an empty filter matches everything; a bad one is refused\n");
        assert_int_equal(metadata_filter_parse("", false, &f, why, sizeof why), 0);
        assert_true(metadata_matches(NULL, &f));
        assert_int_equal(metadata_filter_parse("a=%zz", false, &f, why, sizeof why), -EINVAL);
        assert_non_null(strstr(why, "a=%zz"));
        assert_int_equal(f.n, 0);
        assert_int_equal(metadata_filter_parse("=v", false, &f, why, sizeof why), -EINVAL);
        struct buf b = BUF_INIT(0);
        for (int i = 0; i < 65; i++)
                buf_puts(&b, "a=b&");
        buf_putc(&b, '\0');
        assert_int_equal(metadata_filter_parse(b.data, false, &f, why, sizeof why), -EINVAL);
        assert_non_null(strstr(why, "more than 64 pairs"));
        buf_free(&b);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_parse),
                cmocka_unit_test(test_filter),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
