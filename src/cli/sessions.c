/* space create, ls, inspect, rm, connect, pause, resume: the commands that make, find,
 * reconnect to and delete sessions, and move them between running and paused. Their rows
 * (options, --help, arguments) are in commands.c. */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "common/buf.h"

int cli_create(struct cli_call *call) {
        _cleanup_buf_ struct buf net = BUF_INIT(0);
        bool net_given;
        if (cli_create_network(call, &net, &net_given))
                return EXIT_FAILURE;
        struct space_session_opts so = {
                SPACE_SESSION_OPTS_INIT,
                .template = cli_opt_str(call, "template"),
                .runtime = cli_opt_str(call, "runtime"),
                .snapshot = cli_opt_str(call, "from-snapshot"),
                .snapshot_interval_ms = cli_opt_u64(call, "snapshot-interval"),
                .no_rolling_snapshots = cli_opt_set(call, "snapshot-interval") && !cli_opt_u64(call, "snapshot-interval"),
                .retention = (unsigned)cli_opt_u64(call, "retention"),
                .memory = cli_opt_u64(call, "memory"),
                .disk = cli_opt_u64(call, "disk"),
                .cpus = cli_opt_num(call, "cpus"),
                .pids = (int64_t)cli_opt_u64(call, "pids"),
                .env = call->n_env ? call->env : NULL,
                .network_json = net_given ? net.data : NULL,
        };
        cli_create_timeouts(call, &so);
        const char *token_file = cli_opt_str(call, "token-file");
        space_session *s = NULL;
        int r = space_session_new(&s, call->client, &so);
        if (r < 0)
                return cli_api_fail(call, r);
        r = EXIT_SUCCESS;
        if (token_file && space_session_token(s))
                r = cli_write_token_file(token_file, space_session_token(s));
        else if (token_file)
                r = cli_error("spaced returned no token for %s", space_session_id(s));
        cli_print_session(s, call->json);
        space_session_free(s);
        return r;
}

/* ---- ls -------------------------------------------------------------------------- */

#define SESSION_ROW "%-22s %-10s %-12s %-10s %-5s %-6s %s\n"

static void session_header(void) { printf(SESSION_ROW, "ID", "STATE", "TEMPLATE", "MEMORY", "CPUS", "PIDS", "CREATED"); }

static void print_session(const void *row) {
        const struct space_session_info *si = row;
        char mem[32] = "-", cpus[16] = "-", pids[24] = "-";
        if (si->memory_limit)
                cli_format_size(si->memory_limit, mem, sizeof mem);
        if (si->cpus > 0)
                snprintf(cpus, sizeof cpus, "%g", si->cpus);
        if (si->pids_limit > 0)
                snprintf(pids, sizeof pids, "%" PRId64, si->pids_limit);
        printf(SESSION_ROW, si->id, si->state, si->template_name, mem, cpus, pids, si->created_at);
}

CLI_DEFINE_LIST(cli_sessions_list, struct space_session_info, space_session_list, client, id, session_header,
                print_session, NULL);

int cli_inspect(struct cli_call *call) { return cli_print_json(space_session_json(call->session), call->json); }

static int rm_one(struct cli_call *call, const char *id) {
        const char *token = getenv("SPACE_SESSION_TOKEN");
        int e;
        if (token && *token) {
                /* with the token: through a handle that sends it */
                space_session *s = NULL;
                e = space_session_open(&s, call->client, id);
                if (e >= 0 && space_session_set_token(s, token) < 0) {
                        space_session_free(s);
                        return cli_error("SPACE_SESSION_TOKEN is not a valid token");
                }
                if (e >= 0)
                        e = space_session_delete(s);
                space_session_free(s);
        } else {
                e = space_session_delete_id(call->client, id);
        }
        if (e >= 0)
                printf("%s\n", id);
        return e < 0 ? e : 0;
}

int cli_rm(struct cli_call *call) { return cli_each_arg(call, rm_one); }

/* --token, else $SPACE_SESSION_TOKEN */
static const char *connect_token(const struct cli_call *call) {
        const char *t = cli_opt_str(call, "token");
        return t ? t : getenv("SPACE_SESSION_TOKEN");
}

int cli_connect_check(struct cli_call *call) {
        const char *t = connect_token(call);
        if (!t || !*t)
                return cli_usage(call->cmd, "missing --token (or SPACE_SESSION_TOKEN)");
        return 0;
}

int cli_connect(struct cli_call *call) {
        space_session *s = NULL;
        int e = space_session_connect(&s, call->client, call->argv[0], connect_token(call));
        int r = e < 0 ? cli_api_fail(call, e) : cli_print_json(space_session_json(s), call->json);
        space_session_free(s);
        return r;
}

/* pause, resume: one call per id */
static int lifecycle_one(struct cli_call *call, const char *id, int (*op)(space_session *s)) {
        space_session *s = NULL;
        int e = space_session_open(&s, call->client, id);
        if (e >= 0) {
                if (cli_apply_env_token(s) < 0) {
                        space_session_free(s);
                        return EXIT_FAILURE;
                }
                e = op(s);
        }
        if (e >= 0 && call->json)
                cli_print_raw_json(space_session_json(s));
        else if (e >= 0)
                printf("%s\n", id);
        space_session_free(s);
        return e < 0 ? e : 0;
}

static int pause_one(struct cli_call *call, const char *id) { return lifecycle_one(call, id, space_session_pause); }
static int resume_one(struct cli_call *call, const char *id) { return lifecycle_one(call, id, space_session_resume); }
int cli_pause(struct cli_call *call) { return cli_each_arg(call, pause_one); }
int cli_resume(struct cli_call *call) { return cli_each_arg(call, resume_one); }
