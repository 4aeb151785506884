/* Unit tests of the `space` CLI's argument parsers (src/cli/args.c): sizes, numbers,
 * signals, K=V entries, `ID:/path` specs, list splitting and JSON indenting. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"

static void test_size(void **state) {
        (void)state;
        printf("checks: sizes with binary units parse; junk, zero and overflow are refused\n");
        uint64_t v;
        assert_int_equal(cli_parse_size("64M", &v), 0);
        assert_int_equal(v, 64ull << 20);
        assert_int_equal(cli_parse_size("512m", &v), 0);
        assert_int_equal(v, 512ull << 20);
        assert_int_equal(cli_parse_size("1.5G", &v), 0);
        assert_int_equal(v, 3ull << 29);
        assert_int_equal(cli_parse_size("64MiB", &v), 0);
        assert_int_equal(v, 64ull << 20);
        assert_int_equal(cli_parse_size("2gb", &v), 0);
        assert_int_equal(v, 2ull << 30);
        assert_int_equal(cli_parse_size("1048576", &v), 0);
        assert_int_equal(v, 1048576);
        assert_int_equal(cli_parse_size("100B", &v), 0);
        assert_int_equal(v, 100);
        assert_int_equal(cli_parse_size("1K", &v), 0);
        assert_int_equal(v, 1024);
        v = 7;
        assert_int_equal(cli_parse_size("", &v), -EINVAL);
        assert_int_equal(cli_parse_size("M", &v), -EINVAL);
        assert_int_equal(cli_parse_size("12X", &v), -EINVAL);
        assert_int_equal(cli_parse_size("-1M", &v), -EINVAL);
        assert_int_equal(cli_parse_size("1MM", &v), -EINVAL);
        assert_int_equal(cli_parse_size("1e9", &v), -EINVAL);
        assert_int_equal(cli_parse_size("0x10", &v), -EINVAL);
        assert_int_equal(cli_parse_size("1Bi", &v), -EINVAL);
        assert_int_equal(cli_parse_size("0", &v), -ERANGE);
        assert_int_equal(cli_parse_size("2048T", &v), -ERANGE);
        assert_int_equal(cli_parse_size("99999999999999999999999999999", &v), -ERANGE);
        assert_int_equal(v, 7); /* untouched on failure */
}

static void test_numbers(void **state) {
        (void)state;
        printf("checks: integer and positive decimal parsing with bounds\n");
        uint64_t u = 3;
        assert_int_equal(cli_parse_uint("128", 1, 1000, &u), 0);
        assert_int_equal(u, 128);
        assert_int_equal(cli_parse_uint("0", 1, 1000, &u), -ERANGE);
        assert_int_equal(cli_parse_uint("1001", 1, 1000, &u), -ERANGE);
        assert_int_equal(cli_parse_uint("+5", 1, 1000, &u), -EINVAL);
        assert_int_equal(cli_parse_uint("5 ", 1, 1000, &u), -EINVAL);
        assert_int_equal(cli_parse_uint("", 0, 1000, &u), -EINVAL);
        assert_int_equal(cli_parse_uint("99999999999999999999999", 0, UINT64_MAX, &u), -ERANGE);
        assert_int_equal(u, 128);
        double d = 0;
        assert_int_equal(cli_parse_positive("1.5", 64, &d), 0);
        assert_true(d > 1.49 && d < 1.51);
        assert_int_equal(cli_parse_positive(".5", 64, &d), 0);
        assert_int_equal(cli_parse_positive("0", 64, &d), -ERANGE);
        assert_int_equal(cli_parse_positive("65", 64, &d), -ERANGE);
        assert_int_equal(cli_parse_positive("nan", 64, &d), -EINVAL);
        assert_int_equal(cli_parse_positive("inf", 64, &d), -EINVAL);
        assert_int_equal(cli_parse_positive("1.2.3", 64, &d), -EINVAL);
        assert_int_equal(cli_parse_positive("-1", 64, &d), -EINVAL);
}

static void test_durations(void **state) {
        (void)state;
        printf("checks: --snapshot-interval durations: units, 0 = off, bounds, junk refused\n");
        uint64_t ms = 7;
        assert_int_equal(cli_parse_duration_ms("30s", &ms), 0);
        assert_int_equal(ms, 30000);
        assert_int_equal(cli_parse_duration_ms("30", &ms), 0);
        assert_int_equal(ms, 30000);
        assert_int_equal(cli_parse_duration_ms("500ms", &ms), 0);
        assert_int_equal(ms, 500);
        assert_int_equal(cli_parse_duration_ms("1.5m", &ms), 0);
        assert_int_equal(ms, 90000);
        assert_int_equal(cli_parse_duration_ms("2h", &ms), 0);
        assert_int_equal(ms, 7200000);
        assert_int_equal(cli_parse_duration_ms("0", &ms), 0);
        assert_int_equal(ms, 0);
        assert_int_equal(cli_parse_duration_ms("0.1ms", &ms), -ERANGE);
        assert_int_equal(cli_parse_duration_ms("9999h", &ms), -ERANGE);
        assert_int_equal(cli_parse_duration_ms("5x", &ms), -EINVAL);
        assert_int_equal(cli_parse_duration_ms("-5s", &ms), -EINVAL);
        assert_int_equal(cli_parse_duration_ms("", &ms), -EINVAL);
        assert_int_equal(cli_parse_duration_ms("s", &ms), -EINVAL);
        assert_int_equal(ms, 0);
}

static void test_signals(void **state) {
        (void)state;
        printf("checks: signal names and numbers\n");
        int s = 0;
        assert_int_equal(cli_parse_signal("TERM", &s), 0);
        assert_int_equal(s, SIGTERM);
        assert_int_equal(cli_parse_signal("sigkill", &s), 0);
        assert_int_equal(s, SIGKILL);
        assert_int_equal(cli_parse_signal("SIGUSR1", &s), 0);
        assert_int_equal(s, SIGUSR1);
        assert_int_equal(cli_parse_signal("9", &s), 0);
        assert_int_equal(s, 9);
        assert_int_equal(cli_parse_signal("0", &s), -EINVAL);
        assert_int_equal(cli_parse_signal("65", &s), -EINVAL);
        assert_int_equal(cli_parse_signal("SIG", &s), -EINVAL);
        assert_int_equal(cli_parse_signal("FOO", &s), -EINVAL);
        assert_int_equal(cli_parse_signal("", &s), -EINVAL);
        assert_string_equal(cli_signal_name(SIGKILL), "KILL");
        assert_null(cli_signal_name(200));
}

static void test_env(void **state) {
        (void)state;
        printf("checks: K=V environment entries\n");
        assert_true(cli_env_ok("A=1"));
        assert_true(cli_env_ok("_X9=a=b"));
        assert_true(cli_env_ok("EMPTY="));
        assert_false(cli_env_ok("=1"));
        assert_false(cli_env_ok("A"));
        assert_false(cli_env_ok("1A=x"));
        assert_false(cli_env_ok("A-B=x"));
        assert_false(cli_env_ok(NULL));
}

static void test_cp_args(void **state) {
        (void)state;
        printf("checks: ID:/path is a sandbox path; local paths (with or without ':') stay local\n");
        struct cli_cp_arg a;
        assert_int_equal(cli_parse_cp_arg("ses_0123:/root/a.txt", &a), 0);
        assert_true(a.remote);
        assert_string_equal(a.id, "ses_0123");
        assert_string_equal(a.path, "/root/a.txt");
        assert_int_equal(cli_parse_cp_arg("./x:y", &a), 0);
        assert_false(a.remote);
        assert_string_equal(a.path, "./x:y");
        assert_int_equal(cli_parse_cp_arg("/tmp/a:b", &a), 0);
        assert_false(a.remote);
        assert_int_equal(cli_parse_cp_arg("file.txt", &a), 0);
        assert_false(a.remote);
        assert_int_equal(cli_parse_cp_arg("-", &a), 0);
        assert_false(a.remote);
        assert_int_equal(cli_parse_cp_arg("we ird:x", &a), 0);
        assert_false(a.remote);
        assert_int_equal(cli_parse_cp_arg("ses_1:relative", &a), -EINVAL);
        assert_int_equal(cli_parse_cp_arg("ses_1:", &a), -EINVAL);
        assert_int_equal(cli_parse_cp_arg("", &a), -EINVAL);
        char longid[100];
        memset(longid, 'a', 80);
        strcpy(longid + 80, ":/x");
        assert_int_equal(cli_parse_cp_arg(longid, &a), -EINVAL);
}

static void test_format_and_lists(void **state) {
        (void)state;
        printf("checks: size formatting, comma lists, JSON indenting\n");
        char out[32];
        cli_format_size(800, out, sizeof out);
        assert_string_equal(out, "800 B");
        cli_format_size(64ull << 20, out, sizeof out);
        assert_string_equal(out, "64 MiB");
        cli_format_size(3ull << 29, out, sizeof out);
        assert_string_equal(out, "1.5 GiB");
        char **v = NULL;
        assert_int_equal(cli_split_list("python3,,curl,", &v), 0);
        assert_string_equal(v[0], "python3");
        assert_string_equal(v[1], "curl");
        assert_null(v[2]);
        free(v);
        assert_int_equal(cli_split_list("", &v), 0);
        assert_null(v[0]);
        free(v);
        struct buf b = BUF_INIT(0);
        const char *j = "{\"a\":[1,\"x\\\"y\"],\"b\":{},\"c\":[]}";
        assert_int_equal(cli_json_pretty(&b, j, strlen(j)), 0);
        buf_cstr(&b);
        assert_string_equal(b.data, "{\n  \"a\": [\n    1,\n    \"x\\\"y\"\n  ],\n  \"b\": {},\n  \"c\": []\n}\n");
        buf_reset(&b);
        assert_int_equal(cli_json_pretty(&b, "{", 1), -EINVAL);
        buf_free(&b);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_size),    cmocka_unit_test(test_numbers), cmocka_unit_test(test_durations), cmocka_unit_test(test_signals),
                cmocka_unit_test(test_env),     cmocka_unit_test(test_cp_args), cmocka_unit_test(test_format_and_lists),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
