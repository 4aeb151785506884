/* space top: the newest usage sample of every session, or one session's recent samples,
 * printed once or every TOP_REFRESH_MS until interrupted (its row is in commands.c). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "common/buf.h"
#include "common/json.h"

#define TOP_REFRESH_MS 2000
#define TOP_DEFAULT_SAMPLES 10

static void size_or_dash(uint64_t v, bool known, char *out, size_t n) {
        if (known)
                cli_format_size(v, out, n);
        else
                snprintf(out, n, "-");
}

static void header_all(void) {
        printf("%-22s %-11s %6s %10s %9s %9s %9s %9s %9s\n", "ID", "STATE", "CPU%", "CPU-TIME", "MEM", "MEM-LIMIT",
               "DISK", "NET-RX", "NET-TX");
}

static void row(const char *first, const char *state, const struct space_metrics_sample *x) {
        char mem[32], lim[32], disk[32], rx[32], tx[32], cpu[32] = "-", pct[16] = "-";
        size_or_dash(x ? x->memory_bytes : 0, x, mem, sizeof mem);
        size_or_dash(x ? x->memory_limit_bytes : 0, x && x->memory_limit_bytes, lim, sizeof lim);
        size_or_dash(x ? x->disk_bytes : 0, x, disk, sizeof disk);
        size_or_dash(x ? x->net_rx_bytes : 0, x, rx, sizeof rx);
        size_or_dash(x ? x->net_tx_bytes : 0, x, tx, sizeof tx);
        if (x) {
                snprintf(cpu, sizeof cpu, "%" PRIu64 ".%01" PRIu64 "s", x->cpu_ms / 1000, x->cpu_ms % 1000 / 100);
                snprintf(pct, sizeof pct, "%.1f", x->cpu_pct);
        }
        if (state)
                printf("%-22s %-11s %6s %10s %9s %9s %9s %9s %9s\n", first, state, pct, cpu, mem, lim, disk, rx, tx);
        else
                printf("%-24s %6s %10s %9s %9s %9s %9s %9s\n", first, pct, cpu, mem, lim, disk, rx, tx);
}

/* --json without ID: a line per session, {"id", "state", "metrics"}, where metrics is the
 * API's GET .../metrics?limit=1 as it came, or null when it is not running (or that GET
 * failed: the session went away between the list and its samples). */
static int json_line(space_client *client, const struct space_session_info *v) {
        _cleanup_free_ char *metrics = NULL;
        space_session *s = NULL;
        if (strcmp(v->state, "running") == 0 && space_session_open(&s, client, v->id) == 0)
                (void)space_session_get_json(s, "/metrics?limit=1", &metrics);
        space_session_free(s);
        _cleanup_buf_ struct buf b = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        json_w_kstr(&w, "id", v->id);
        json_w_kstr(&w, "state", v->state);
        json_w_key(&w, "metrics");
        if (metrics)
                json_w_raw(&w, metrics, strcspn(metrics, "\n"));
        else
                json_w_null(&w);
        json_w_obj_end(&w);
        if (w.err || !buf_cstr(&b))
                return w.err ? w.err : -ENOMEM;
        return printf("%s\n", b.data) < 0 ? -EIO : 0;
}

/* One table of every session (with --json, a line each): 0 or the exit status. */
static int top_all(struct cli_call *call) {
        struct space_session_info *v = NULL;
        size_t n = 0;
        int e = space_session_list(call->client, &v, &n);
        if (e < 0)
                return cli_api_fail(call, e);
        if (call->json) {
                for (size_t i = 0; i < n && e >= 0; i++)
                        e = json_line(call->client, &v[i]);
                free(v);
                return e < 0 ? cli_api_fail(call, e) : 0;
        }
        header_all();
        for (size_t i = 0; i < n; i++) {
                struct space_metrics m = { 0 };
                space_session *s = NULL;
                bool have = false;
                /* a session gone between the list and its samples is just shown without */
                if (strcmp(v[i].state, "running") == 0 && space_session_open(&s, call->client, v[i].id) == 0 &&
                    space_session_metrics(s, 0, 0, 1, &m) == 0)
                        have = m.n > 0;
                row(v[i].id, v[i].state, have ? &m.samples[m.n - 1] : NULL);
                space_metrics_free(&m);
                space_session_free(s);
        }
        free(v);
        return 0;
}

/* One session's newest samples, oldest first (with --json, the API's answer as it came). */
static int top_one(struct cli_call *call, space_session *s, unsigned count) {
        if (call->json) {
                char suffix[48];
                snprintf(suffix, sizeof suffix, "/metrics?limit=%u", count);
                _cleanup_free_ char *json = NULL;
                int e = space_session_get_json(s, suffix, &json);
                return e < 0 ? cli_api_fail(call, e) : cli_print_raw_json(json);
        }
        struct space_metrics m = { 0 };
        int e = space_session_metrics(s, 0, 0, count, &m);
        if (e < 0)
                return cli_api_fail(call, e);
        printf("%s: a sample every %" PRId64 " ms\n", space_session_id(s), m.interval_ms);
        printf("%-24s %6s %10s %9s %9s %9s %9s %9s\n", "TIME", "CPU%", "CPU-TIME", "MEM", "MEM-LIMIT", "DISK", "NET-RX",
               "NET-TX");
        for (size_t i = 0; i < m.n; i++)
                row(m.samples[i].t, NULL, &m.samples[i]);
        if (!m.n)
                printf("(no samples yet: the session is not running, or was just started)\n");
        space_metrics_free(&m);
        return 0;
}

int cli_top(struct cli_call *call) {
        bool once = cli_opt_set(call, "once");
        unsigned count = cli_opt_set(call, "samples") ? (unsigned)cli_opt_u64(call, "samples") : TOP_DEFAULT_SAMPLES;
        space_session *s = NULL;
        if (call->argc == 1) {
                int e = space_session_open(&s, call->client, call->argv[0]);
                if (e < 0)
                        return cli_api_fail_on(call, call->argv[0], e);
                if (cli_apply_env_token(s) < 0) {
                        space_session_free(s);
                        return EXIT_FAILURE;
                }
        }
        bool tty = isatty(STDOUT_FILENO);
        int r;
        for (;;) {
                if (!once && tty && !call->json)
                        printf("\033[H\033[2J"); /* a screen that refreshes in place */
                r = s ? top_one(call, s, count) : top_all(call);
                fflush(stdout);
                if (r || once)
                        break;
                if (!tty && !call->json)
                        printf("\n");
                usleep(TOP_REFRESH_MS * 1000);
        }
        space_session_free(s);
        return r ? r : EXIT_SUCCESS;
}
