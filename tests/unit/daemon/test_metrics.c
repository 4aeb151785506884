/* The metrics module's pure parts (src/daemon/metrics.c): the histogram and the Prometheus
 * text writer (cumulative buckets, +Inf, _sum and _count, HELP/TYPE, label escaping), the
 * sample ring's order and bound, and ?start=/?end= time parsing. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common/buf.h"
#include "daemon/metrics.h"

static void test_hist_exposition(void **state) {
        (void)state;
        static const double bounds[] = { 0.1, 1, 10 };
        struct metrics_hist h = { .bounds = bounds, .n_bounds = 3 };
        metrics_hist_observe(&h, 0.05);
        metrics_hist_observe(&h, 0.1); /* le is inclusive */
        metrics_hist_observe(&h, 5);
        metrics_hist_observe(&h, 100);
        struct buf b = BUF_INIT(0);
        metrics_w_family(&b, "x_seconds", "histogram", "What x took.");
        metrics_w_hist(&b, "x_seconds", "op=\"a\"", &h);
        assert_non_null(buf_cstr(&b));
        assert_string_equal(b.data, "# HELP x_seconds What x took.\n"
                                    "# TYPE x_seconds histogram\n"
                                    "x_seconds_bucket{op=\"a\",le=\"0.1\"} 2\n"
                                    "x_seconds_bucket{op=\"a\",le=\"1\"} 2\n"
                                    "x_seconds_bucket{op=\"a\",le=\"10\"} 3\n"
                                    "x_seconds_bucket{op=\"a\",le=\"+Inf\"} 4\n"
                                    "x_seconds_sum{op=\"a\"} 105.15\n"
                                    "x_seconds_count{op=\"a\"} 4\n");
        buf_reset(&b);
        struct metrics_hist e = { .bounds = bounds, .n_bounds = 3 };
        metrics_w_hist(&b, "y_bytes", "", &e);
        assert_non_null(buf_cstr(&b));
        assert_string_equal(b.data, "y_bytes_bucket{le=\"0.1\"} 0\n"
                                    "y_bytes_bucket{le=\"1\"} 0\n"
                                    "y_bytes_bucket{le=\"10\"} 0\n"
                                    "y_bytes_bucket{le=\"+Inf\"} 0\n"
                                    "y_bytes_sum 0\n"
                                    "y_bytes_count 0\n");
        buf_reset(&b);
        metrics_w_sample(&b, "z_total", "", 12345678901.0);
        metrics_w_sample(&b, "z_ratio", "k=\"v\"", 0.25);
        assert_non_null(buf_cstr(&b));
        assert_string_equal(b.data, "z_total 12345678901\nz_ratio{k=\"v\"} 0.25\n");
        buf_free(&b);
}

static void test_label_escape(void **state) {
        (void)state;
        char out[64];
        metrics_label_escape("a\"b\\c\nd", out, sizeof out);
        assert_string_equal(out, "a\\\"b\\\\c\\nd");
        metrics_label_escape("\"\"\"\"", out, 6); /* truncated, never half an escape */
        assert_string_equal(out, "\\\"\\\"");
}

static void test_ring(void **state) {
        (void)state;
        struct metrics_ring *r = calloc(1, sizeof *r);
        assert_non_null(r);
        for (int64_t i = 0; i < METRICS_RING_MAX + 5; i++)
                metrics_ring_push(r, &(struct metrics_sample){ .t_ms = i });
        assert_int_equal(r->n, METRICS_RING_MAX);
        assert_int_equal(metrics_ring_at(r, 0)->t_ms, 5);
        assert_int_equal(metrics_ring_at(r, METRICS_RING_MAX - 1)->t_ms, METRICS_RING_MAX + 4);
        r = metrics_ring_free(r);
        assert_null(r);
}

static void test_parse_time(void **state) {
        (void)state;
        int64_t ms = 7;
        assert_int_equal(metrics_parse_time("1764748800", &ms), 0);
        assert_int_equal(ms, 1764748800000ll);
        assert_int_equal(metrics_parse_time("1764748800.25", &ms), 0);
        assert_int_equal(ms, 1764748800250ll);
        assert_int_equal(metrics_parse_time("2025-12-03T08:00:00Z", &ms), 0);
        assert_int_equal(ms, 1764748800000ll);
        assert_int_equal(metrics_parse_time("2025-12-03T09:00:00.5+01:00", &ms), 0);
        assert_int_equal(ms, 1764748800500ll);
        assert_int_equal(metrics_parse_time("2025-12-03T07:30:00-00:30", &ms), 0);
        assert_int_equal(ms, 1764748800000ll);
        ms = 7;
        static const char *const bad[] = { "", "x", "-1", "1.", "12e3", "2025-12-03", "2025-12-03T08:00:00",
                                           "2025-13-03T08:00:00Z", "2025-02-30T08:00:00Z", "2025-12-03T24:00:00Z",
                                           "2025-12-03T08:00:00+1", "2025-12-03T08:00:00Zjunk", "1234567890123",
                                           "00000000000000000000000000000000000000000000000000000000000000000001" };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
                assert_int_equal(metrics_parse_time(bad[i], &ms), -EINVAL);
                assert_int_equal(ms, 7); /* untouched */
        }
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_hist_exposition),
                cmocka_unit_test(test_label_escape),
                cmocka_unit_test(test_ring),
                cmocka_unit_test(test_parse_time),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
