/* Unit tests of the pure parts of durable sessions (src/daemon/session_rules.c): session
 * tokens, which request each session state allows, the change check of rolling snapshots
 * on a real directory (file writes, removals, renames, chmod, nested dirs, the slack for
 * coarse timestamps), and the event payloads. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/json.h"
#include "daemon/session_rules.h"

static void test_token(void **state) {
        (void)state;
        char a[DL_TOKEN_LEN + 1], b[DL_TOKEN_LEN + 1];
        printf("check: tokens are 43 url-safe characters, fresh each time, and the shape check knows them\n");
        assert_int_equal(dl_token_new(a), 0);
        assert_int_equal(dl_token_new(b), 0);
        assert_int_equal(strlen(a), DL_TOKEN_LEN);
        assert_string_not_equal(a, b);
        for (const char *c = a; *c; c++)
                assert_true((*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') ||
                            *c == '-' || *c == '_');
        assert_true(dl_token_well_formed(a));
        printf("check: wrong length, padding, '+', '/' and NULL are refused\n");
        char t[DL_TOKEN_LEN + 2];
        memcpy(t, a, sizeof a);
        t[DL_TOKEN_LEN - 1] = '\0';
        assert_false(dl_token_well_formed(t));
        memcpy(t, a, sizeof a);
        t[0] = '+';
        assert_false(dl_token_well_formed(t));
        t[0] = '/';
        assert_false(dl_token_well_formed(t));
        t[0] = '=';
        assert_false(dl_token_well_formed(t));
        memcpy(t, a, sizeof a);
        t[DL_TOKEN_LEN] = 'A';
        t[DL_TOKEN_LEN + 1] = '\0';
        assert_false(dl_token_well_formed(t));
        assert_false(dl_token_well_formed(NULL));
        assert_false(dl_token_well_formed(""));
}

static void test_states(void **state) {
        (void)state;
        const char *why;
        printf("check: exec needs running; paused and creating are 409, recovering 503\n");
        assert_int_equal(dl_action_check(DL_EXEC, META_SESSION_RUNNING, &why), 0);
        assert_int_equal(dl_action_check(DL_EXEC, META_SESSION_PAUSED, &why), -EBUSY);
        assert_non_null(strstr(why, "paused"));
        assert_int_equal(dl_action_check(DL_EXEC, META_SESSION_CREATING, &why), -EBUSY);
        assert_int_equal(dl_action_check(DL_EXEC, META_SESSION_RECOVERING, &why), -EAGAIN);
        printf("check: resume only from paused; pause only when running (or about to be again)\n");
        assert_int_equal(dl_action_check(DL_RESUME, META_SESSION_PAUSED, &why), 0);
        assert_int_equal(dl_action_check(DL_RESUME, META_SESSION_RUNNING, &why), -EBUSY);
        assert_int_equal(dl_action_check(DL_RESUME, META_SESSION_RECOVERING, &why), -EBUSY);
        assert_int_equal(dl_action_check(DL_PAUSE, META_SESSION_RUNNING, &why), 0);
        assert_int_equal(dl_action_check(DL_PAUSE, META_SESSION_PAUSED, &why), -EBUSY);
        assert_int_equal(dl_action_check(DL_SNAPSHOT, META_SESSION_PAUSED, &why), -EBUSY);
        printf("check: restore and fork work running or paused, not while creating\n");
        assert_int_equal(dl_action_check(DL_RESTORE, META_SESSION_PAUSED, &why), 0);
        assert_int_equal(dl_action_check(DL_FORK, META_SESSION_RUNNING, &why), 0);
        assert_int_equal(dl_action_check(DL_FORK, META_SESSION_CREATING, &why), -EBUSY);
        printf("check: a terminated session refuses everything but delete and the log\n");
        for (int a = DL_EXEC; a <= DL_EVENTS; a++) {
                int st = dl_action_check((enum dl_action)a, META_SESSION_TERMINATED, &why);
                assert_int_equal(st, a == DL_DELETE || a == DL_EVENTS ? 0 : -EBUSY);
        }
        printf("check: every state allows delete and reading the log\n");
        for (int s = 0; s < _META_SESSION_STATE_MAX; s++) {
                assert_int_equal(dl_action_check(DL_DELETE, (enum meta_session_state)s, &why), 0);
                assert_int_equal(dl_action_check(DL_EVENTS, (enum meta_session_state)s, &why), 0);
        }
}

static int64_t wall_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

/* The reference time of a "clean" state: after the slack has passed since setup. */
static int64_t settle(void) {
        struct timespec d = { 0, (DL_DIRTY_SLACK_NS + 30000000ll) };
        nanosleep(&d, NULL);
        return wall_ns();
}

static void put(const char *dir, const char *rel, const char *text) {
        char p[512];
        snprintf(p, sizeof p, "%s/%s", dir, rel);
        FILE *f = fopen(p, "we");
        assert_non_null(f);
        fputs(text, f);
        fclose(f);
}

static bool dirty(const char *dir, int64_t since) {
        bool d = false;
        assert_int_equal(dl_dirty(dir, since, &d), 0);
        return d;
}

static void test_dirty(void **state) {
        (void)state;
        char dir[] = "/tmp/test_session_rules.XXXXXX", p[512], q[512];
        assert_non_null(mkdtemp(dir));
        snprintf(p, sizeof p, "%s/a/b/c", dir);
        char mk[600];
        snprintf(mk, sizeof mk, "mkdir -p %s", p);
        assert_int_equal(system(mk), 0);
        put(dir, "a/b/c/deep.txt", "one");
        put(dir, "top.txt", "top");
        int64_t t = settle();
        printf("check: nothing changed since the reference: clean\n");
        assert_false(dirty(dir, t));
        printf("check: a change in a file three levels down: dirty\n");
        put(dir, "a/b/c/deep.txt", "two");
        assert_true(dirty(dir, t));
        t = settle();
        assert_false(dirty(dir, t));
        printf("check: a removed file (only its directory changes): dirty\n");
        snprintf(p, sizeof p, "%s/a/b/c/deep.txt", dir);
        assert_int_equal(unlink(p), 0);
        assert_true(dirty(dir, t));
        t = settle();
        printf("check: a rename at the top, and a chmod: dirty\n");
        snprintf(p, sizeof p, "%s/top.txt", dir);
        snprintf(q, sizeof q, "%s/top2.txt", dir);
        assert_int_equal(rename(p, q), 0);
        assert_true(dirty(dir, t));
        t = settle();
        assert_int_equal(chmod(q, 0600), 0);
        assert_true(dirty(dir, t));
        t = settle();
        printf("check: a change just before the reference (inside the slack) still counts\n");
        /* The reference is taken before the write, so a scheduling delay between the two
         * can't push the write out of the slack (file times lag the clock by a tick). */
        int64_t before = wall_ns();
        put(dir, "top2.txt", "late");
        assert_true(dirty(dir, before + DL_DIRTY_SLACK_NS / 2));
        printf("check: a missing directory is an error, not clean\n");
        bool d = false;
        assert_int_equal(dl_dirty("/nonexistent/dir", t, &d), -ENOENT);
        snprintf(mk, sizeof mk, "rm -rf %s", dir);
        assert_int_equal(system(mk), 0);
}

static void test_events(void **state) {
        (void)state;
        struct buf b = BUF_INIT(0);
        printf("check: lifecycle payloads are JSON with null for no snapshot\n");
        assert_int_equal(dl_lifecycle_json(&b, "paused", "snap_1", NULL), 0);
        buf_putc(&b, '\0');
        assert_string_equal(b.data, "{\"event\":\"paused\",\"snapshot\":\"snap_1\"}");
        buf_reset(&b);
        assert_int_equal(dl_lifecycle_json(&b, "created", "", "template"), 0);
        buf_putc(&b, '\0');
        assert_string_equal(b.data, "{\"event\":\"created\",\"snapshot\":null,\"reason\":\"template\"}");
        buf_reset(&b);
        printf("check: a recovery names the lost sandbox, the reason (escaped) and where it came back from\n");
        assert_int_equal(dl_recovery_json(&b, "sbx_1", "killed \"9\"", NULL, "sbx_2", NULL), 0);
        struct json *j = NULL;
        assert_int_equal(json_parse(b.data, b.len, &j, NULL, 0), 0);
        assert_string_equal(json_get_str(j, "reason"), "killed \"9\"");
        assert_int_equal(json_type(json_get(j, "from_snapshot")), JSON_NULL);
        assert_string_equal(json_get_str(j, "new_sandbox"), "sbx_2");
        assert_null(json_get(j, "error"));
        json_free(j);
        buf_reset(&b);
        printf("check: a recovery that stopped says why, with no new sandbox\n");
        assert_int_equal(dl_recovery_json(&b, "sbx_1", "killed", "snap_1", NULL, "snapshot snap_1 is damaged"), 0);
        j = NULL;
        assert_int_equal(json_parse(b.data, b.len, &j, NULL, 0), 0);
        assert_int_equal(json_type(json_get(j, "new_sandbox")), JSON_NULL);
        assert_string_equal(json_get_str(j, "error"), "snapshot snap_1 is damaged");
        json_free(j);
        buf_reset(&b);
        printf("check: a snapshot event carries bytes_added, and freeze_ms only when frozen\n");
        assert_int_equal(dl_snapshot_event_json(&b, "snap_2", "rolling", 1234, NULL, 2.5), 0);
        assert_int_equal(json_parse(b.data, b.len, &j, NULL, 0), 0);
        int64_t v = 0;
        assert_int_equal(json_get_int(j, "bytes_added", &v), 0);
        assert_int_equal(v, 1234);
        assert_true(json_num(json_get(j, "freeze_ms")) == 2.5);
        json_free(j);
        buf_reset(&b);
        assert_int_equal(dl_snapshot_event_json(&b, "snap_3", "manual", 0, "x", -1), 0);
        assert_int_equal(json_parse(b.data, b.len, &j, NULL, 0), 0);
        assert_null(json_get(j, "freeze_ms"));
        json_free(j);
        buf_free(&b);
        printf("check: only agent, tool_call and note may be appended by clients\n");
        assert_true(dl_agent_kind("agent"));
        assert_true(dl_agent_kind("tool_call"));
        assert_true(dl_agent_kind("note"));
        assert_false(dl_agent_kind("lifecycle"));
        assert_false(dl_agent_kind("recovery"));
        assert_false(dl_agent_kind(NULL));
        printf("check: times carry milliseconds\n");
        char ts[40];
        dl_rfc3339_ms(1700000000123ll, ts, sizeof ts);
        assert_string_equal(ts, "2023-11-14T22:13:20.123Z");
}

/* The rate limit of POST .../events: a burst, then rate a second, Retry-After rounded up. */
static void test_bucket(void **state) {
        (void)state;
        struct dl_bucket b = { 0 };
        unsigned retry = 0;
        printf("# a fresh bucket holds the burst (3), then refuses with retry 1 s at 1/s\n");
        for (int i = 0; i < 3; i++)
                assert_true(dl_bucket_take(&b, 1000, 1, 3, &retry));
        assert_false(dl_bucket_take(&b, 1000, 1, 3, &retry));
        assert_int_equal(retry, 1);
        printf("# half a second later still none; a second later one\n");
        assert_false(dl_bucket_take(&b, 1500, 1, 3, &retry));
        assert_int_equal(retry, 1);
        assert_true(dl_bucket_take(&b, 2000, 1, 3, &retry));
        assert_false(dl_bucket_take(&b, 2000, 1, 3, &retry));
        printf("# an hour idle refills to the burst, not past it\n");
        for (int i = 0; i < 3; i++)
                assert_true(dl_bucket_take(&b, 3600000, 1, 3, &retry));
        assert_false(dl_bucket_take(&b, 3600000, 1, 3, &retry));
        printf("# at 50/s a refused take waits 1 s (whole seconds, at least 1)\n");
        struct dl_bucket c = { 0 };
        assert_true(dl_bucket_take(&c, 5, 50, 1, &retry));
        assert_false(dl_bucket_take(&c, 5, 50, 1, &retry));
        assert_int_equal(retry, 1);
        assert_true(dl_bucket_take(&c, 25, 50, 1, &retry));
}

static void test_snapshot_limit(void **state) {
        (void)state;
        printf("check: a session's snapshot limit is the factor times its disk limit, or the default's\n");
        assert_true(dl_snapshot_limit(4, 16ull << 20, 10ull << 30) == 64ull << 20);
        assert_true(dl_snapshot_limit(4, 0, 1ull << 30) == 4ull << 30);
        assert_true(dl_snapshot_limit(0, 16ull << 20, 1ull << 30) == 0);
        assert_true(dl_snapshot_limit(4, 0, 0) == 0);
        assert_true(dl_snapshot_limit(1000, UINT64_MAX / 2, 0) == UINT64_MAX);
        printf("check: fits up to the limit exactly, never past it, without overflow\n");
        assert_true(dl_snapshot_fits(60, 4, 64));
        assert_false(dl_snapshot_fits(60, 5, 64));
        assert_false(dl_snapshot_fits(70, 0, 64));
        assert_true(dl_snapshot_fits(UINT64_MAX, UINT64_MAX, 0));
        assert_false(dl_snapshot_fits(10, UINT64_MAX, 64));
        struct buf b = BUF_INIT(0);
        assert_int_equal(dl_snapshot_limit_json(&b, "snap_1", 70, 64, 100, 0), 0);
        struct json *j = NULL;
        assert_int_equal(json_parse(b.data, b.len, &j, NULL, 0), 0);
        int64_t v;
        assert_int_equal(json_int(json_get(j, "bytes"), &v), 0);
        assert_int_equal(v, 70);
        assert_int_equal(json_int(json_get(j, "limit"), &v), 0);
        assert_int_equal(v, 64);
        json_free(j);
        buf_free(&b);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_token),
                cmocka_unit_test(test_states),
                cmocka_unit_test(test_dirty),
                cmocka_unit_test(test_events),
                cmocka_unit_test(test_bucket),
                cmocka_unit_test(test_snapshot_limit),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
