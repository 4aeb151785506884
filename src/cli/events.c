/* space events, event: read (or follow) a session's event log, and append to it. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "cli/commands.h"
#include "common/buf.h"
#include "common/json.h"

#define EVENTS_FOLLOW_POLL_MS 500

/* ---- events ---------------------------------------------------------------------- */

static int print_event(const struct space_event *ev, bool json) {
        if (!json)
                return printf("%-6" PRIu64 " %-24s %-10s %s\n", ev->seq, ev->time, ev->kind, ev->data) < 0 ? -EIO : 0;
        _cleanup_buf_ struct buf b = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        json_w_key(&w, "seq");
        json_w_uint(&w, ev->seq);
        json_w_kstr(&w, "time", ev->time);
        json_w_kstr(&w, "kind", ev->kind);
        json_w_key(&w, "data");
        json_w_raw(&w, ev->data, strlen(ev->data));
        json_w_obj_end(&w);
        if (w.err || !buf_cstr(&b))
                return w.err ? w.err : -ENOMEM;
        return printf("%s\n", b.data) < 0 ? -EIO : 0;
}

struct events_args {
        bool follow;
        uint64_t after, limit;
};

static int events_option(struct cli_call *call, int opt, const char *arg) {
        struct events_args *a = call->args;
        switch (opt) {
        case 'a':
                if (cli_parse_uint(arg, 0, UINT64_MAX - 1, &a->after) < 0)
                        return cli_usage(call->cmd, "invalid sequence number '%s'", arg);
                break;
        case 'n':
                if (cli_parse_uint(arg, 1, UINT32_MAX, &a->limit) < 0)
                        return cli_usage(call->cmd, "invalid limit '%s'", arg);
                break;
        case 'f': a->follow = true; break;
        }
        return 0;
}

static int events_check(struct cli_call *call) {
        struct events_args *a = call->args;
        if (a->follow && a->limit)
                return cli_usage(call->cmd, "--follow and --limit don't go together");
        return 0;
}

static int events_run(struct cli_call *call) {
        struct events_args *a = call->args;
        uint64_t printed = 0, after = a->after, limit = a->limit;
        int r = 0;
        for (;;) {
                unsigned want = SPACE_MAX_EVENT_PAGE;
                if (limit && limit - printed < want)
                        want = (unsigned)(limit - printed);
                struct space_event_page p;
                int e = space_event_list(call->session, after, want, &p);
                if (e < 0)
                        return cli_api_fail(call, e);
                for (size_t i = 0; i < p.n && !r; i++) {
                        int pe = print_event(&p.events[i], call->json);
                        if (pe < 0)
                                r = cli_error("writing the events: %s", strerror(-pe));
                }
                printed += p.n;
                bool more = p.more && p.n > 0;
                after = p.next; /* the library never moves it back */
                space_event_page_free(&p);
                if (r || (limit && printed >= limit))
                        return r;
                if (more)
                        continue;
                if (!a->follow)
                        return r;
                fflush(stdout);
                usleep(EVENTS_FOLLOW_POLL_MS * 1000);
        }
}

const struct cli_cmd cli_events = {
        .name = "events",
        .summary = "print (or follow) a session's event log",
        .usage = "[OPTIONS] ID",
        .about = "Print a session's event log, oldest first: every exec, lifecycle change (created,\n"
                "paused, resumed, restored, forked), snapshot, recovery, and the events an agent\n"
                "appended. One line per event: SEQ TIME KIND DATA (DATA is JSON).\n",
        .options = "      --after SEQ       only events after sequence number SEQ\n"
                "  -n, --limit N         at most N events (default: all)\n"
                "  -f, --follow          keep printing new events as they come (polls twice a\n"
                "                        second) until interrupted or the session is deleted\n"
                "      --json            one JSON object per line: {\"seq\",\"time\",\"kind\",\"data\"}\n",
        .flags = CLI_JSON | CLI_SESSION | CLI_CHECK_FIRST,
        .short_opts = "n:f",
        .long_opts = (const struct option[]){
                { "after", required_argument, NULL, 'a' }, { "limit", required_argument, NULL, 'n' },
                { "follow", no_argument, NULL, 'f' }, { 0 } },
        .min_args = 1, .max_args = 1, .missing = "session id",
        .args_size = sizeof(struct events_args),
        .option = events_option,
        .check = events_check,
        .run = events_run,
};

/* ---- event ----------------------------------------------------------------------- */

struct event_args {
        const char *kind, *data;
};

static int event_option(struct cli_call *call, int opt, const char *arg) {
        struct event_args *a = call->args;
        switch (opt) {
        case 'k': a->kind = arg; break;
        case 'd': a->data = arg; break;
        }
        return 0;
}

static int event_check(struct cli_call *call) {
        struct event_args *a = call->args;
        if (!a->data)
                return cli_usage(call->cmd, "missing --data JSON");
        if (strlen(a->data) > SPACE_MAX_EVENT_DATA)
                return cli_usage(call->cmd, "--data is larger than %u KiB", SPACE_MAX_EVENT_DATA >> 10);
        _cleanup_buf_ struct buf pretty = BUF_INIT(0);
        if (cli_json_pretty(&pretty, a->data, strlen(a->data)) < 0)
                return cli_usage(call->cmd, "--data is not valid JSON");
        return 0;
}

static int event_run(struct cli_call *call) {
        struct event_args *a = call->args;
        uint64_t seq = 0;
        int e = space_event_append(call->session, a->kind, a->data, &seq);
        if (e < 0)
                return cli_api_fail(call, e);
        printf("%" PRIu64 "\n", seq);
        return EXIT_SUCCESS;
}

const struct cli_cmd cli_event = {
        .name = "event",
        .summary = "append an event of your own to the log",
        .usage = "[OPTIONS] ID --data JSON",
        .about = "Append an event of your own to a session's event log (an agent's tool call or\n"
                "note) and print its sequence number.\n",
        .options = "  -k, --kind KIND       agent, tool_call or note (default: note)\n"
                "  -d, --data JSON       the event's data: a JSON object, at most 64 KiB\n",
        .flags = CLI_SESSION,
        .short_opts = "k:d:",
        .long_opts = (const struct option[]){
                { "kind", required_argument, NULL, 'k' }, { "data", required_argument, NULL, 'd' }, { 0 } },
        .min_args = 1, .max_args = 1, .missing = "session id",
        CLI_ARGS(struct event_args, { .kind = "note" }),
        .option = event_option,
        .check = event_check,
        .run = event_run,
};
