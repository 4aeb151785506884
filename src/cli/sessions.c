/* space create, ls, inspect, rm, connect, pause, resume: the commands that make, find,
 * reconnect to and delete sessions, and move them between running and paused. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "cli/commands.h"

/* ---- create ---------------------------------------------------------------------- */

struct create_args {
        struct space_session_opts so;
        struct cli_env env;
        const char *token_file;
};

static int create_option(struct cli_call *call, int opt, const char *arg) {
        struct create_args *a = call->args;
        struct space_session_opts *so = &a->so;
        uint64_t u;
        switch (opt) {
        case 't': so->template = arg; break;
        case 'r': so->runtime = arg; break;
        case 's': so->snapshot = arg; break;
        case 'I':
                if (cli_parse_duration_ms(arg, &so->snapshot_interval_ms) < 0)
                        return cli_usage(call->cmd, "invalid interval '%s' (e.g. 30s, 500ms, 5m, 0)", arg);
                so->no_rolling_snapshots = so->snapshot_interval_ms == 0;
                break;
        case 'R':
                if (cli_parse_uint(arg, 1, 100000, &u) < 0)
                        return cli_usage(call->cmd, "invalid retention '%s' (1..100000)", arg);
                so->retention = (unsigned)u;
                break;
        case 'F': a->token_file = arg; break;
        case 'm':
                if (cli_parse_size(arg, &so->memory) < 0)
                        return cli_usage(call->cmd, "invalid size '%s' (e.g. 512M, 2G)", arg);
                break;
        case 'D':
                if (cli_parse_size(arg, &so->disk) < 0 || so->disk == 0)
                        return cli_usage(call->cmd, "invalid disk size '%s' (e.g. 2G, 512M)", arg);
                break;
        case 'c':
                if (cli_parse_positive(arg, CLI_MAX_CPUS, &so->cpus) < 0)
                        return cli_usage(call->cmd, "invalid CPU count '%s'", arg);
                break;
        case 'p':
                if (cli_parse_uint(arg, 1, CLI_MAX_PIDS, &u) < 0)
                        return cli_usage(call->cmd, "invalid pids limit '%s'", arg);
                so->pids = (int64_t)u;
                break;
        case 'e': return cli_env_add(call, &a->env, arg);
        case 'n': so->network = true; break;
        }
        return 0;
}

static int create_run(struct cli_call *call) {
        struct create_args *a = call->args;
        if (a->env.n)
                a->so.env = a->env.v;
        space_session *s = NULL;
        int r = space_session_new(&s, call->client, &a->so);
        if (r < 0)
                return cli_api_fail(call, r);
        r = EXIT_SUCCESS;
        if (a->token_file) {
                if (space_session_token(s))
                        r = cli_write_token_file(a->token_file, space_session_token(s));
                else
                        r = cli_error("spaced returned no token for %s", space_session_id(s));
        }
        cli_print_session(s, call->json);
        space_session_free(s);
        return r;
}

const struct cli_cmd cli_create = {
        .name = "create",
        .summary = "create a sandbox session, print its id",
        .usage = "[OPTIONS]",
        .about = "Create a sandbox session and print its id. Its token is shown only now: keep\n"
                "it (--json or --token-file) to reconnect with 'space connect ID --token T'.\n",
        .options = "  -t, --template NAME   template to start from (daemon default: base)\n"
                "      --runtime NAME    ns or gvisor (keeps running processes across pause,\n"
                "                        resume and fork); default: the daemon's --runtime\n"
                "  -m, --memory SIZE     memory limit, e.g. 512M, 2G (binary units)\n"
                "      --cpus N          CPU limit in cores, e.g. 1.5\n"
                "      --pids N          limit on the number of processes\n"
                "      --disk SIZE       limit of the files the session may write, e.g. 2G, 512M\n"
                "                        (daemon default: see 'space health'); past it writes fail\n"
                "                        inside with \"Disk quota exceeded\"\n"
                "  -e, --env K=V         environment for every command (repeatable)\n"
                "      --network         give the sandbox network access (default: loopback only)\n"
                "  -s, --from-snapshot SNAP  start from this snapshot (of any session) instead of\n"
                "                        a template\n"
                "      --snapshot-interval DUR  take a rolling snapshot this often when files\n"
                "                        changed, e.g. 30s, 500ms, 5m; 0 = none (daemon default 30s)\n"
                "      --retention N     rolling snapshots to keep (daemon default 10); manual,\n"
                "                        pause and fork-source ones are always kept\n"
                "      --token-file FILE write the session's token to FILE (mode 0600)\n"
                "      --json            print the whole session object, with its \"token\",\n"
                "                        instead of the id\n",
        .flags = CLI_JSON | CLI_CLIENT,
        .short_opts = "t:m:e:s:",
        .long_opts = (const struct option[]){
                { "template", required_argument, NULL, 't' }, { "memory", required_argument, NULL, 'm' },
                { "cpus", required_argument, NULL, 'c' }, { "pids", required_argument, NULL, 'p' },
                { "env", required_argument, NULL, 'e' }, { "network", no_argument, NULL, 'n' },
                { "from-snapshot", required_argument, NULL, 's' },
                { "snapshot-interval", required_argument, NULL, 'I' }, { "retention", required_argument, NULL, 'R' },
                { "token-file", required_argument, NULL, 'F' }, { "disk", required_argument, NULL, 'D' },
                { "runtime", required_argument, NULL, 'r' }, { 0 } },
        CLI_ARGS(struct create_args, { .so = { SPACE_SESSION_OPTS_INIT } }),
        .option = create_option,
        .run = create_run,
};

/* ---- ls -------------------------------------------------------------------------- */

static int ls_run(struct cli_call *call) {
        struct space_session_info *v = NULL;
        size_t n = 0;
        int e = space_session_list(call->client, &v, &n);
        if (e < 0)
                return cli_api_fail(call, e);
        if (!call->quiet)
                printf("%-22s %-10s %-12s %-10s %-5s %-6s %s\n", "ID", "STATE", "TEMPLATE", "MEMORY", "CPUS", "PIDS",
                       "CREATED");
        for (size_t i = 0; i < n; i++) {
                if (call->quiet) {
                        printf("%s\n", v[i].id);
                        continue;
                }
                char mem[32] = "-", cpus[16] = "-", pids[24] = "-";
                if (v[i].memory_limit)
                        cli_format_size(v[i].memory_limit, mem, sizeof mem);
                if (v[i].cpus > 0)
                        snprintf(cpus, sizeof cpus, "%g", v[i].cpus);
                if (v[i].pids_limit > 0)
                        snprintf(pids, sizeof pids, "%" PRId64, v[i].pids_limit);
                printf("%-22s %-10s %-12s %-10s %-5s %-6s %s\n", v[i].id, v[i].state, v[i].template_name, mem, cpus,
                       pids, v[i].created_at);
        }
        free(v);
        return EXIT_SUCCESS;
}

const struct cli_cmd cli_ls = {
        .name = "ls",
        .summary = "list sessions",
        .usage = "[OPTIONS]",
        .about = "List the sessions the daemon knows.\n",
        .options = "      --json            print the daemon's JSON ({\"sessions\":[...]})\n"
                "  -q, --quiet           print ids only\n",
        .flags = CLI_JSON | CLI_QUIET | CLI_CLIENT,
        .json_path = "/v1/sessions",
        .run = ls_run,
};

/* ---- inspect --------------------------------------------------------------------- */

static int inspect_run(struct cli_call *call) { return cli_print_json(space_session_json(call->session), call->json); }

const struct cli_cmd cli_inspect = {
        .name = "inspect",
        .summary = "show a session's details",
        .usage = "[OPTIONS] ID",
        .about = "Print a session's object (state, limits, health) as indented JSON.\n",
        .options = "      --json            print it on one line, as the daemon sent it\n",
        .flags = CLI_JSON | CLI_SESSION,
        .min_args = 1, .max_args = 1, .missing = "sandbox id",
        .run = inspect_run,
};

/* ---- rm -------------------------------------------------------------------------- */

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

static int rm_run(struct cli_call *call) { return cli_each_arg(call, rm_one); }

const struct cli_cmd cli_rm = {
        .name = "rm",
        .summary = "delete sessions",
        .usage = "[OPTIONS] ID...",
        .about = "Delete sessions: their processes are killed and their files are gone. Prints each\n"
                "id deleted; goes on past failures and exits 1 if any.\n",
        .flags = CLI_CLIENT,
        .min_args = 1, .max_args = -1, .missing = "sandbox id",
        .run = rm_run,
};

/* ---- connect --------------------------------------------------------------------- */

struct connect_args {
        const char *token;
};

static int connect_option(struct cli_call *call, int opt, const char *arg) {
        struct connect_args *a = call->args;
        if (opt == 't')
                a->token = arg;
        return 0;
}

static int connect_check(struct cli_call *call) {
        struct connect_args *a = call->args;
        if (!a->token)
                a->token = getenv("SPACE_SESSION_TOKEN");
        if (!a->token || !*a->token)
                return cli_usage(call->cmd, "missing --token (or SPACE_SESSION_TOKEN)");
        return 0;
}

static int connect_run(struct cli_call *call) {
        struct connect_args *a = call->args;
        space_session *s = NULL;
        int e = space_session_connect(&s, call->client, call->argv[0], a->token);
        int r = e < 0 ? cli_api_fail(call, e) : cli_print_json(space_session_json(s), call->json);
        space_session_free(s);
        return r;
}

const struct cli_cmd cli_connect = {
        .name = "connect",
        .summary = "reconnect to a session with its token",
        .usage = "[OPTIONS] ID [--token TOKEN]",
        .about = "Reconnect to a session with the token its create (or fork) returned: checks the\n"
                "token and prints the session with its running background processes. Re-attach\n"
                "to a process's output with 'space logs --offset N --follow ID PID'. Later\n"
                "commands send the token when SPACE_SESSION_TOKEN holds it.\n",
        .options = "  -t, --token TOKEN     the session token (default: $SPACE_SESSION_TOKEN)\n"
                "      --json            print the answer on one line, as the daemon sent it\n",
        .flags = CLI_JSON | CLI_CLIENT,
        .short_opts = "t:",
        .long_opts = (const struct option[]){ { "token", required_argument, NULL, 't' }, { 0 } },
        .min_args = 1, .max_args = 1, .missing = "session id",
        .args_size = sizeof(struct connect_args),
        .option = connect_option,
        .check = connect_check,
        .run = connect_run,
};

/* ---- pause, resume: one call per id ---------------------------------------------- */

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
static int pause_run(struct cli_call *call) { return cli_each_arg(call, pause_one); }
static int resume_run(struct cli_call *call) { return cli_each_arg(call, resume_one); }

const struct cli_cmd cli_pause = {
        .name = "pause",
        .summary = "snapshot a session and release its sandbox",
        .usage = "[OPTIONS] ID...",
        .about = "Pause sessions: a final snapshot, then the sandbox is destroyed (no process,\n"
                "mount or cgroup is left; processes end). Files and the event log stay; 'space\n"
                "resume' brings the session back. Prints each id paused; goes on past failures\n"
                "and exits 1 if any.\n",
        .options = "      --json            print each session object instead of the id\n",
        .flags = CLI_JSON | CLI_CLIENT,
        .min_args = 1, .max_args = -1, .missing = "session id",
        .run = pause_run,
};

const struct cli_cmd cli_resume = {
        .name = "resume",
        .summary = "bring a paused session back on a new sandbox",
        .usage = "[OPTIONS] ID...",
        .about = "Resume paused sessions on a new sandbox from their newest snapshot: same id, same\n"
                "files, same event log. Prints each id resumed; exits 1 if any failed (resuming a\n"
                "session that is not paused is an error).\n",
        .options = "      --json            print each session object instead of the id\n",
        .flags = CLI_JSON | CLI_CLIENT,
        .min_args = 1, .max_args = -1, .missing = "session id",
        .run = resume_run,
};
