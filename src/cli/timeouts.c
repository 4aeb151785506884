/* space timeout, and the timeout options of space create (--timeout, --idle-timeout,
 * --on-timeout, --on-idle, --auto-resume): a session's lifecycle timeouts (docs/sessions.md
 * "Timeouts") as options in, as lines or JSON out. The daemon checks the limits; this
 * turns durations into seconds and builds the object. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "common/buf.h"
#include "common/json.h"

static bool action_ok(const char *a) { return !strcmp(a, "pause") || !strcmp(a, "delete"); }

/* A duration option in whole seconds (rounded up); 0 when not given. */
static int64_t secs_of(const struct cli_call *call, const char *name) {
        return (int64_t)((cli_opt_u64(call, name) + 999) / 1000);
}

int cli_create_timeouts_check(struct cli_call *call) {
        static const char *const actions[] = { "on-timeout", "on-idle" };
        for (size_t i = 0; i < 2; i++)
                if (cli_opt_set(call, actions[i]) && !action_ok(cli_opt_str(call, actions[i])))
                        return cli_usage(call->cmd, "--%s must be pause or delete, not '%s'", actions[i],
                                         cli_opt_str(call, actions[i]));
        static const char *const durs[] = { "timeout", "idle-timeout" };
        for (size_t i = 0; i < 2; i++)
                if (cli_opt_set(call, durs[i]) && cli_opt_u64(call, durs[i]) == 0)
                        return cli_usage(call->cmd, "--%s must be at least 1s", durs[i]);
        return 0;
}

void cli_create_timeouts(const struct cli_call *call, struct space_session_opts *so) {
        so->timeout_s = secs_of(call, "timeout");
        so->idle_timeout_s = secs_of(call, "idle-timeout");
        so->timeout_delete = cli_opt_set(call, "on-timeout") && !strcmp(cli_opt_str(call, "on-timeout"), "delete");
        so->idle_delete = cli_opt_set(call, "on-idle") && !strcmp(cli_opt_str(call, "on-idle"), "delete");
        so->auto_resume = cli_opt_set(call, "auto-resume");
}

int cli_timeout_check(struct cli_call *call) {
        static const char *const pairs[][2] = {
                { "timeout", "no-timeout" }, { "timeout", "at" }, { "at", "no-timeout" },
                { "idle-timeout", "no-idle-timeout" }, { "auto-resume", "no-auto-resume" },
        };
        for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
                if (cli_opt_set(call, pairs[i][0]) && cli_opt_set(call, pairs[i][1]))
                        return cli_usage(call->cmd, "--%s and --%s together", pairs[i][0], pairs[i][1]);
        return cli_create_timeouts_check(call);
}

/* The timeouts object for people: one "field  value" line each. */
static int print_timeouts(const struct json *t) {
        if (json_type(t) != JSON_OBJECT)
                return cli_error("spaced answered timeouts that are not a JSON object");
        const char *at = json_get_str(t, "timeout"), *ta = json_get_str(t, "timeout_action");
        const char *ia = json_get_str(t, "idle_action"), *last = json_get_str(t, "last_activity");
        int64_t idle = 0;
        if (at)
                printf("%-14s %s (then %s)\n", "timeout", at, ta ? ta : "pause");
        else
                printf("%-14s %s\n", "timeout", "none");
        if (json_get_int(t, "idle_timeout", &idle) == 0 && idle > 0)
                printf("%-14s %" PRId64 "s (then %s)\n", "idle-timeout", idle, ia ? ia : "pause");
        else
                printf("%-14s %s\n", "idle-timeout", "none");
        printf("%-14s %s\n", "auto-resume", json_get_bool(t, "auto_resume", false) ? "on" : "off");
        if (last)
                printf("%-14s %s\n", "last-activity", last);
        return EXIT_SUCCESS;
}

int cli_timeout(struct cli_call *call) {
        struct buf b = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        if (cli_opt_set(call, "timeout"))
                json_w_kint(&w, "timeout", secs_of(call, "timeout"));
        else if (cli_opt_set(call, "at"))
                json_w_kstr(&w, "timeout", cli_opt_str(call, "at"));
        else if (cli_opt_set(call, "no-timeout"))
                json_w_kstr(&w, "timeout", NULL);
        if (cli_opt_set(call, "on-timeout"))
                json_w_kstr(&w, "timeout_action", cli_opt_str(call, "on-timeout"));
        if (cli_opt_set(call, "idle-timeout"))
                json_w_kint(&w, "idle_timeout", secs_of(call, "idle-timeout"));
        else if (cli_opt_set(call, "no-idle-timeout"))
                json_w_kstr(&w, "idle_timeout", NULL);
        if (cli_opt_set(call, "on-idle"))
                json_w_kstr(&w, "idle_action", cli_opt_str(call, "on-idle"));
        if (cli_opt_set(call, "auto-resume") || cli_opt_set(call, "no-auto-resume"))
                json_w_kbool(&w, "auto_resume", cli_opt_set(call, "auto-resume"));
        json_w_obj_end(&w);
        if (w.err || buf_putc(&b, '\0') < 0) {
                buf_free(&b);
                return cli_error("out of memory");
        }
        _cleanup_free_ char *answer = NULL;
        _cleanup_json_ struct json *j = NULL;
        const struct json *t = NULL;
        if (strcmp(b.data, "{}") != 0) {
                int r = space_session_timeouts_set(call->session, b.data, &answer);
                buf_free(&b);
                if (r < 0)
                        return cli_api_fail(call, r);
                if (call->json)
                        return cli_print_raw_json(answer);
                if (json_parse(answer, strlen(answer), &j, NULL, 0) < 0)
                        return cli_error("spaced answered timeouts that are not JSON");
                t = j;
        } else {
                buf_free(&b);
                /* Nothing to change: what the session object (fetched on open) says. */
                const char *s = space_session_json(call->session);
                if (json_parse(s, strlen(s), &j, NULL, 0) < 0 || !(t = json_get(j, "timeouts")))
                        return cli_error("spaced's session object has no timeouts (a spaced older than them?)");
                if (call->json) {
                        struct buf o = BUF_INIT(0);
                        struct json_writer ow = JSON_WRITER_INIT(&o);
                        json_w_value(&ow, t);
                        int r = ow.err || buf_putc(&o, '\0') < 0 ? cli_error("out of memory") : cli_print_raw_json(o.data);
                        buf_free(&o);
                        return r;
                }
        }
        return print_timeouts(t);
}
