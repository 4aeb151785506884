/* space events, event: read (or follow) a session's event log, and append to it (their
 * rows are in commands.c). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
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

int cli_events_check(struct cli_call *call) {
        if (cli_opt_set(call, "follow") && cli_opt_set(call, "limit"))
                return cli_usage(call->cmd, "--follow and --limit don't go together");
        return 0;
}

int cli_events(struct cli_call *call) {
        uint64_t printed = 0, after = cli_opt_u64(call, "after"), limit = cli_opt_u64(call, "limit");
        bool follow = cli_opt_set(call, "follow");
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
                if (!follow)
                        return r;
                fflush(stdout);
                usleep(EVENTS_FOLLOW_POLL_MS * 1000);
        }
}

/* ---- event ----------------------------------------------------------------------- */

int cli_event_check(struct cli_call *call) {
        const char *data = cli_opt_str(call, "data");
        if (!data)
                return cli_usage(call->cmd, "missing --data JSON");
        if (strlen(data) > SPACE_MAX_EVENT_DATA)
                return cli_usage(call->cmd, "--data is larger than %u KiB", SPACE_MAX_EVENT_DATA >> 10);
        _cleanup_buf_ struct buf pretty = BUF_INIT(0);
        if (cli_json_pretty(&pretty, data, strlen(data)) < 0)
                return cli_usage(call->cmd, "--data is not valid JSON");
        return 0;
}

int cli_event(struct cli_call *call) {
        const char *kind = cli_opt_str(call, "kind");
        uint64_t seq = 0;
        int e = space_event_append(call->session, kind ? kind : "note", cli_opt_str(call, "data"), &seq);
        if (e < 0)
                return cli_api_fail(call, e);
        printf("%" PRIu64 "\n", seq);
        return EXIT_SUCCESS;
}
