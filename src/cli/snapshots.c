/* space snapshot, snapshots, restore, fork: a session's snapshot timeline, time travel in
 * place, and branching into new sessions. */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "cli/commands.h"
#include "common/buf.h"
#include "common/json.h"

/* ---- snapshot -------------------------------------------------------------------- */

static void print_snapshot_json(const struct space_snapshot_info *si) {
        _cleanup_buf_ struct buf b = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        json_w_kstr(&w, "id", si->id);
        json_w_kstr(&w, "session", si->session);
        json_w_kstr(&w, "parent", si->parent[0] ? si->parent : NULL);
        json_w_kstr(&w, "created_at", si->created_at);
        json_w_kstr(&w, "reason", si->reason);
        json_w_kstr(&w, "label", si->label[0] ? si->label : NULL);
        json_w_key(&w, "bytes_added");
        json_w_uint(&w, si->bytes_added);
        json_w_key(&w, "logical_size");
        json_w_uint(&w, si->logical_size);
        json_w_kstr(&w, "root", si->root);
        json_w_kbool(&w, "memory", si->memory);
        if (si->store_snapshot[0])
                json_w_kstr(&w, "store_snapshot", si->store_snapshot);
        if (si->freeze_ms >= 0) {
                json_w_key(&w, "freeze_ms");
                json_w_double(&w, si->freeze_ms);
        }
        json_w_obj_end(&w);
        if (!w.err && buf_cstr(&b))
                printf("%s\n", b.data);
}

struct snapshot_args {
        const char *label;
        bool memory;
};

static int snapshot_option(struct cli_call *call, int opt, const char *arg) {
        struct snapshot_args *a = call->args;
        switch (opt) {
        case 'l':
                if (strlen(arg) > SPACE_MAX_LABEL)
                        return cli_usage(call->cmd, "label longer than %d bytes", SPACE_MAX_LABEL);
                a->label = arg;
                break;
        case 'M': a->memory = true; break;
        }
        return 0;
}

static int snapshot_run(struct cli_call *call) {
        struct snapshot_args *a = call->args;
        struct space_snapshot_info si;
        int e = space_snapshot_create_memory(call->session, a->label, a->memory, &si);
        if (e < 0)
                return cli_api_fail(call, e);
        if (call->json)
                print_snapshot_json(&si);
        else
                printf("%s\n", si.id);
        return EXIT_SUCCESS;
}

const struct cli_cmd cli_snapshot = {
        .name = "snapshot",
        .summary = "take a snapshot of a session's files, print its id",
        .usage = "[OPTIONS] ID",
        .about = "Take a snapshot of a session's files now and print its id (snap_...).\n",
        .options = "  -l, --label TEXT      a label to find it by (at most 256 bytes)\n"
                "      --memory          the running processes too (gvisor, microvm): the sandbox\n"
                "                        is checkpointed and restarted from the image\n"
                "      --json            print the snapshot object\n",
        .flags = CLI_JSON | CLI_SESSION,
        .short_opts = "l:",
        .long_opts = (const struct option[]){
                { "label", required_argument, NULL, 'l' }, { "memory", no_argument, NULL, 'M' }, { 0 } },
        .min_args = 1, .max_args = 1, .missing = "session id",
        .args_size = sizeof(struct snapshot_args),
        .option = snapshot_option,
        .run = snapshot_run,
};

/* ---- snapshots ------------------------------------------------------------------- */

static int snapshots_run(struct cli_call *call) {
        struct space_snapshot_info *v = NULL;
        size_t n = 0;
        int e = space_snapshot_list(call->session, &v, &n);
        if (e < 0)
                return cli_api_fail(call, e);
        if (!call->quiet)
                printf("%-22s %-24s %-8s %-10s %-10s %s\n", "ID", "CREATED", "REASON", "ADDED", "SIZE", "LABEL");
        for (size_t i = 0; i < n; i++) {
                if (call->quiet) {
                        printf("%s\n", v[i].id);
                        continue;
                }
                char added[32], size[32];
                cli_format_size(v[i].bytes_added, added, sizeof added);
                cli_format_size(v[i].logical_size, size, sizeof size);
                printf("%-22s %-24s %-8s %-10s %-10s %s\n", v[i].id, v[i].created_at, v[i].reason, added, size,
                       v[i].label);
        }
        free(v);
        return EXIT_SUCCESS;
}

const struct cli_cmd cli_snapshots = {
        .name = "snapshots",
        .summary = "list a session's snapshot timeline",
        .usage = "[OPTIONS] ID",
        .about = "List a session's snapshot timeline, oldest first: id, time, reason (rolling,\n"
                "pause, manual, fork, restore), bytes it added to the store, size of the files it\n"
                "holds, label.\n",
        .options = "      --json            print the daemon's JSON ({\"snapshots\":[...]})\n"
                "  -q, --quiet           print ids only\n",
        .flags = CLI_JSON | CLI_QUIET | CLI_SESSION,
        .min_args = 1, .max_args = 1, .missing = "session id",
        .json_path = "/snapshots",
        .run = snapshots_run,
};

/* ---- restore --------------------------------------------------------------------- */

static int restore_run(struct cli_call *call) {
        int e = space_session_restore(call->session, call->argv[1]);
        if (e < 0)
                return cli_api_fail(call, e);
        cli_print_session(call->session, call->json);
        return EXIT_SUCCESS;
}

const struct cli_cmd cli_restore = {
        .name = "restore",
        .summary = "put a session's files back to one of its snapshots",
        .usage = "[OPTIONS] ID SNAP",
        .about = "Time travel in place: the session's files go back to snapshot SNAP (one of its\n"
                "own; see 'space snapshots ID'). Newer snapshots stay in the timeline, so you can\n"
                "restore forward again. Processes restart on the new sandbox. Prints the id.\n",
        .options = "      --json            print the session object instead of the id\n",
        .flags = CLI_JSON | CLI_SESSION,
        .min_args = 2, .max_args = 2, .missing = "session id and snapshot", .missing_rest = "snapshot",
        .run = restore_run,
};

/* ---- fork ------------------------------------------------------------------------ */

struct fork_args {
        struct space_fork_opts fo;
        const char *token_dir;
};

static int fork_option(struct cli_call *call, int opt, const char *arg) {
        struct fork_args *a = call->args;
        uint64_t u;
        switch (opt) {
        case 's': a->fo.snapshot = arg; break;
        case 'n':
                if (cli_parse_uint(arg, 1, SPACE_MAX_FORK, &u) < 0)
                        return cli_usage(call->cmd, "invalid count '%s' (1..%d)", arg, SPACE_MAX_FORK);
                a->fo.count = (unsigned)u;
                break;
        case 'T': a->token_dir = arg; break;
        }
        return 0;
}

/* Each new session's token into token_dir/ID.token. */
static int write_tokens(const char *token_dir, space_session *const *v, size_t n) {
        int r = 0;
        for (size_t i = 0; i < n && !r; i++) {
                char path[PATH_MAX];
                if (snprintf(path, sizeof path, "%s/%s.token", token_dir, space_session_id(v[i])) >= (int)sizeof path)
                        r = cli_error("%s: path too long", token_dir);
                else if (space_session_token(v[i]))
                        r = cli_write_token_file(path, space_session_token(v[i]));
        }
        return r;
}

static int fork_run(struct cli_call *call) {
        struct fork_args *a = call->args;
        space_session **v = NULL;
        size_t n = 0;
        int e = space_session_fork(call->session, &a->fo, &v, &n);
        if (e < 0)
                return cli_api_fail(call, e);
        int r = a->token_dir ? write_tokens(a->token_dir, v, n) : 0;
        if (call->json) {
                fputs("{\"sessions\":[", stdout);
                for (size_t i = 0; i < n; i++) {
                        const char *js = space_session_json(v[i]);
                        size_t l = strlen(js);
                        while (l > 0 && (js[l - 1] == '\n' || js[l - 1] == ' '))
                                l--;
                        printf("%s%.*s", i ? "," : "", (int)l, js);
                }
                fputs("]}\n", stdout);
        } else {
                for (size_t i = 0; i < n; i++)
                        printf("%s\n", space_session_id(v[i]));
        }
        space_session_array_free(v, n);
        return r;
}

const struct cli_cmd cli_fork = {
        .name = "fork",
        .summary = "branch a session into N independent copies",
        .usage = "[OPTIONS] ID",
        .about = "Branch a session: N new sessions that start from a snapshot of it, independent of\n"
                "each other and of it (stored data is shared copy-on-write). Prints the new ids,\n"
                "one per line. Their tokens are shown only with --json (or --token-dir).\n",
        .options = "  -s, --snapshot SNAP   start from this snapshot (default: a new one of now)\n"
                "  -n, --count N         how many sessions (1..64, default 1)\n"
                "      --token-dir DIR   write each new session's token to DIR/ID.token (mode 0600)\n"
                "      --json            print {\"sessions\":[...]}: each session object with its token\n",
        .flags = CLI_JSON | CLI_SESSION,
        .short_opts = "s:n:",
        .long_opts = (const struct option[]){
                { "snapshot", required_argument, NULL, 's' }, { "count", required_argument, NULL, 'n' },
                { "token-dir", required_argument, NULL, 'T' }, { 0 } },
        .min_args = 1, .max_args = 1, .missing = "session id",
        CLI_ARGS(struct fork_args, { .fo = { SPACE_FORK_OPTS_INIT, .count = 1 } }),
        .option = fork_option,
        .run = fork_run,
};
