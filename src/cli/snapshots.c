/* space snapshot, snapshots, restore, fork: a session's snapshot timeline, time travel in
 * place, and branching into new sessions (their rows are in commands.c). */
#include <inttypes.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
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

int cli_snapshot(struct cli_call *call) {
        struct space_snapshot_info si;
        const char *label = cli_opt_str(call, "label");
        int e = space_snapshot_create_memory(call->session, label, cli_opt_set(call, "memory"), &si);
        if (e < 0)
                return cli_api_fail(call, e);
        if (call->json)
                print_snapshot_json(&si);
        else
                printf("%s\n", si.id);
        return EXIT_SUCCESS;
}

/* ---- snapshots ------------------------------------------------------------------- */

#define SNAPSHOT_ROW "%-22s %-24s %-8s %-10s %-10s %s\n"

static void snapshot_header(void) { printf(SNAPSHOT_ROW, "ID", "CREATED", "REASON", "ADDED", "SIZE", "LABEL"); }

static void print_snapshot(const void *row) {
        const struct space_snapshot_info *si = row;
        char added[32], size[32];
        cli_format_size(si->bytes_added, added, sizeof added);
        cli_format_size(si->logical_size, size, sizeof size);
        printf(SNAPSHOT_ROW, si->id, si->created_at, si->reason, added, size, si->label);
}

CLI_DEFINE_LIST(cli_snapshots_list, struct space_snapshot_info, space_snapshot_list, session, id, snapshot_header,
                print_snapshot, NULL);

/* ---- restore --------------------------------------------------------------------- */

int cli_restore(struct cli_call *call) {
        int e = space_session_restore(call->session, call->argv[1]);
        if (e < 0)
                return cli_api_fail(call, e);
        cli_print_session(call->session, call->json);
        return EXIT_SUCCESS;
}

/* ---- fork ------------------------------------------------------------------------ */

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

int cli_fork(struct cli_call *call) {
        struct space_fork_opts fo = {
                SPACE_FORK_OPTS_INIT,
                .snapshot = cli_opt_str(call, "snapshot"),
                .count = cli_opt_set(call, "count") ? (unsigned)cli_opt_u64(call, "count") : 1,
        };
        const char *token_dir = cli_opt_str(call, "token-dir");
        space_session **v = NULL;
        size_t n = 0;
        int e = space_session_fork(call->session, &fo, &v, &n);
        if (e < 0)
                return cli_api_fail(call, e);
        int r = token_dir ? write_tokens(token_dir, v, n) : 0;
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
