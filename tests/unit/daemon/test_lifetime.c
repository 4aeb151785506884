/* Unit tests of the pure parts of lifecycle timeouts (src/daemon/lifetime.c): RFC 3339
 * times, the request members and their limits (what is kept, what is refused and why),
 * and meta's text of them, round trip and damaged. */
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
#include "daemon/lifetime.h"

#define NOW 1796292000000ll /* 2026-12-03T10:00:00Z */

static struct json *parse(const char *text) {
        struct json *j = NULL;
        char err[80];
        assert_int_equal(json_parse(text, strlen(text), &j, err, sizeof err), 0);
        return j;
}

/* lt_apply of text on *l at NOW: its return; why gets the message. */
static int apply(struct ses_lifetime *l, const char *text, bool strict, char *why, size_t why_size) {
        struct json *j = parse(text);
        int r = lt_apply(l, j, NOW, strict, why, why_size);
        json_free(j);
        return r;
}

static void test_time(void **state) {
        (void)state;
        int64_t ms = 0;
        printf("check: RFC 3339 times in UTC, with fractions and with offsets\n");
        assert_int_equal(lt_parse_time("2026-12-03T10:00:00Z", &ms), 0);
        assert_int_equal(ms, NOW);
        assert_int_equal(lt_parse_time("2026-12-03t10:00:00.250z", &ms), 0);
        assert_int_equal(ms, NOW + 250);
        assert_int_equal(lt_parse_time("2026-12-03T12:30:00+02:30", &ms), 0);
        assert_int_equal(ms, NOW);
        assert_int_equal(lt_parse_time("2026-12-03T09:00:00-01:00", &ms), 0);
        assert_int_equal(ms, NOW);
        assert_int_equal(lt_parse_time("2028-02-29T00:00:00Z", &ms), 0);
        printf("check: malformed times and impossible dates are refused, *ret untouched\n");
        static const char *const bad[] = {
                "", "2026-12-03", "2026-12-03T10:00:00", "2026-12-03T10:00Z", "2026-13-01T00:00:00Z",
                "2026-02-29T00:00:00Z", "2026-04-31T00:00:00Z", "2026-12-03T24:00:00Z", "2026-12-03T10:00:00.Z",
                "2026-12-03T10:00:00+0200", "2026-12-03T10:00:00Z ", "tomorrow", "1h",
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
                ms = 7;
                assert_int_equal(lt_parse_time(bad[i], &ms), -EINVAL);
                assert_int_equal(ms, 7);
        }
        assert_int_equal(lt_parse_time(NULL, &ms), -EINVAL);
}

static void test_apply(void **state) {
        (void)state;
        char why[256];
        struct ses_lifetime l = { 0 };
        printf("check: nothing given keeps nothing but the activity time\n");
        assert_int_equal(apply(&l, "{\"template\":\"x\"}", false, why, sizeof why), 0);
        assert_false(lt_any(&l));
        assert_int_equal(l.active_ms, NOW);
        printf("check: seconds from now, actions, idle_timeout and auto_resume are kept\n");
        assert_int_equal(apply(&l, "{\"timeout\":3600,\"timeout_action\":\"delete\",\"idle_timeout\":600,"
                                   "\"idle_action\":\"pause\",\"auto_resume\":true}", true, why, sizeof why), 0);
        assert_int_equal(l.deadline_ms, NOW + 3600000);
        assert_int_equal(l.timeout_action, LT_DELETE);
        assert_int_equal(l.idle_s, 600);
        assert_int_equal(l.idle_action, LT_PAUSE);
        assert_true(l.auto_resume);
        printf("check: an RFC 3339 time sets the deadline; absent members keep theirs\n");
        assert_int_equal(apply(&l, "{\"timeout\":\"2026-12-03T11:00:00.500Z\"}", true, why, sizeof why), 0);
        assert_int_equal(l.deadline_ms, NOW + 3600500);
        assert_int_equal(l.idle_s, 600);
        assert_true(l.auto_resume);
        printf("check: null clears a timeout and the idle_timeout\n");
        assert_int_equal(apply(&l, "{\"timeout\":null,\"idle_timeout\":null}", true, why, sizeof why), 0);
        assert_int_equal(l.deadline_ms, 0);
        assert_int_equal(l.idle_s, 0);
        printf("check: setting an idle_timeout counts it from now\n");
        l.active_ms = NOW - 99000;
        assert_int_equal(apply(&l, "{\"idle_timeout\":1}", true, why, sizeof why), 0);
        assert_int_equal(l.active_ms, NOW);
        printf("check: the limits: idle 1 s .. 30 days, timeout 1 s .. a year, in the future\n");
        assert_int_equal(apply(&l, "{\"idle_timeout\":2592000,\"timeout\":31536000}", true, why, sizeof why), 0);
        struct ses_lifetime keep = l;
        static const char *const bad[] = {
                "{\"idle_timeout\":0}", "{\"idle_timeout\":2592001}", "{\"idle_timeout\":1.5}", "{\"idle_timeout\":\"10m\"}",
                "{\"idle_timeout\":-1}", "{\"timeout\":0}", "{\"timeout\":31536001}", "{\"timeout\":true}",
                "{\"timeout\":\"2026-12-03T10:00:00Z\"}", "{\"timeout\":\"2027-12-04T10:00:00Z\"}", "{\"timeout\":\"soon\"}",
                "{\"timeout_action\":\"stop\"}", "{\"idle_action\":1}", "{\"auto_resume\":\"yes\"}",
                "{\"auto_resume\":1}",
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
                why[0] = '\0';
                assert_int_equal(apply(&l, bad[i], false, why, sizeof why), -EINVAL);
                assert_true(why[0] != '\0');
                assert_memory_equal(&l, &keep, sizeof l);
        }
        printf("check: a message names the member\n");
        assert_int_equal(apply(&l, "{\"idle_timeout\":0,\"timeout\":5}", false, why, sizeof why), -EINVAL);
        assert_non_null(strstr(why, "idle_timeout"));
        assert_int_equal(l.deadline_ms, keep.deadline_ms); /* the good member is not applied either */
        printf("check: strict (PUT) refuses another member; a create body may have them\n");
        assert_int_equal(apply(&l, "{\"idle\":5}", true, why, sizeof why), -EINVAL);
        assert_non_null(strstr(why, "idle"));
        assert_int_equal(apply(&l, "{\"idle\":5}", false, why, sizeof why), 0);
}

static void test_text(void **state) {
        (void)state;
        printf("check: nothing to keep is no text\n");
        struct ses_lifetime l = { .active_ms = NOW }, back;
        char *text = (char *)1;
        assert_int_equal(lt_to_text(&l, &text), 0);
        assert_null(text);
        assert_int_equal(lt_from_text(NULL, &back), 0);
        assert_false(lt_any(&back));
        printf("check: meta's text reads back as it was written\n");
        l = (struct ses_lifetime){ .deadline_ms = NOW + 5, .timeout_action = LT_DELETE, .idle_s = 30,
                                   .idle_action = LT_DELETE, .auto_resume = true, .active_ms = NOW - 1000 };
        assert_int_equal(lt_to_text(&l, &text), 0);
        assert_non_null(text);
        assert_int_equal(lt_from_text(text, &back), 0);
        assert_int_equal(back.deadline_ms, l.deadline_ms);
        assert_int_equal(back.timeout_action, LT_DELETE);
        assert_int_equal(back.idle_s, 30);
        assert_int_equal(back.idle_action, LT_DELETE);
        assert_true(back.auto_resume);
        assert_int_equal(back.active_ms, NOW - 1000);
        assert_int_equal(back.saved_active_ms, NOW - 1000);
        free(text);
        printf("check: a damaged text is -EINVAL and leaves none\n");
        static const char *const bad[] = {
                "", "[]", "{", "{\"deadline_ms\":1}",
                "{\"deadline_ms\":0,\"idle_timeout_s\":-5,\"active_ms\":0}",
                "{\"deadline_ms\":0,\"idle_timeout_s\":5,\"active_ms\":0,\"idle_action\":\"nap\"}",
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
                back.idle_s = 77;
                assert_int_equal(lt_from_text(bad[i], &back), -EINVAL);
                assert_false(lt_any(&back));
        }
        printf("check: the API's JSON: RFC 3339 times, null for none\n");
        struct buf b = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&b);
        l = (struct ses_lifetime){ .idle_s = 5, .active_ms = NOW };
        lt_write_json(&w, &l);
        assert_int_equal(buf_putc(&b, '\0'), 0);
        assert_string_equal(b.data, "{\"timeout\":null,\"timeout_action\":\"pause\",\"idle_timeout\":5,\"idle_action\":"
                                    "\"pause\",\"auto_resume\":false,\"last_activity\":\"2026-12-03T10:00:00.000Z\"}");
        buf_free(&b);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_time),
                cmocka_unit_test(test_apply),
                cmocka_unit_test(test_text),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
