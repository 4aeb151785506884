/* Unit tests for struct buf: growth, the cap, consume. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

#include "common/buf.h"

static void test_append_and_cstr(void **state) {
        _cleanup_buf_ struct buf b = BUF_INIT(0);
        for (int i = 0; i < 1000; i++)
                assert_int_equal(buf_printf(&b, "%03d", i % 1000), 0);
        assert_int_equal(b.len, 3000);
        assert_memory_equal(buf_cstr(&b) + 2997, "999", 4);
}

static void test_cap_refuses_growth(void **state) {
        _cleanup_buf_ struct buf b = BUF_INIT(10);
        assert_int_equal(buf_append(&b, "0123456789", 10), 0);
        assert_int_equal(buf_putc(&b, 'x'), -E2BIG);
        assert_int_equal(b.len, 10);
        assert_int_equal(buf_printf(&b, "%s", "y"), -E2BIG);
}

static void test_consume(void **state) {
        _cleanup_buf_ struct buf b = BUF_INIT(0);
        assert_int_equal(buf_puts(&b, "hello world"), 0);
        buf_consume(&b, 6);
        assert_string_equal(buf_cstr(&b), "world");
        buf_consume(&b, 100);
        assert_int_equal(b.len, 0);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_append_and_cstr),
                cmocka_unit_test(test_cap_refuses_growth),
                cmocka_unit_test(test_consume),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
