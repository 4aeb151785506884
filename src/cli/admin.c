/* space health, gc, pool: the commands about the daemon itself rather than one session. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "cli/commands.h"

/* ---- health: no run, it prints its json_path with or without --json ---------------- */

const struct cli_cmd cli_health = {
        .name = "health",
        .summary = "check that the daemon answers",
        .usage = "[OPTIONS]",
        .about = "Ask the daemon whether it is up; prints its health object. Exit 1 if unreachable.\n",
        .flags = CLI_JSON | CLI_CLIENT, /* --json is accepted; health prints JSON either way */
        .json_path = "/v1/health",
};

/* ---- gc -------------------------------------------------------------------------- */

static int gc_run(struct cli_call *call) {
        struct space_gc_result g;
        int e = space_gc(call->client, &g);
        if (e < 0)
                return cli_api_fail(call, e);
        if (call->json) {
                printf("{\"objects_removed\":%" PRIu64 ",\"bytes_freed\":%" PRIu64 "}\n", g.objects_removed, g.bytes_freed);
        } else {
                char size[32];
                cli_format_size(g.bytes_freed, size, sizeof size);
                printf("removed %" PRIu64 " objects, freed %s\n", g.objects_removed, size);
        }
        return EXIT_SUCCESS;
}

const struct cli_cmd cli_gc = {
        .name = "gc",
        .summary = "collect unreferenced snapshot data now",
        .usage = "[OPTIONS]",
        .about = "Collect the snapshot store's garbage now (spaced also does it by itself from\n"
                "time to time): data only deleted sessions and expired rolling snapshots held.\n",
        .options = "      --json            print {\"objects_removed\":N,\"bytes_freed\":N}\n",
        .flags = CLI_JSON | CLI_CLIENT,
        .run = gc_run,
};

/* ---- pool ------------------------------------------------------------------------ */

struct pool_args {
        char name[80]; /* TEMPLATE of TEMPLATE=N; "" shows the pool */
        unsigned long size;
};

static int pool_check(struct cli_call *call) {
        struct pool_args *a = call->args;
        if (call->argc == 0)
                return 0;
        const char *arg = call->argv[0], *eq = strrchr(arg, '=');
        char *end = NULL;
        if (eq) {
                errno = 0;
                a->size = strtoul(eq + 1, &end, 10);
        }
        if (!eq || eq == arg || (size_t)(eq - arg) >= sizeof a->name || !end || end == eq + 1 || *end ||
            eq[1] == '-' || errno || a->size > 100000)
                return cli_usage(call->cmd, "'%s' is not TEMPLATE=N", arg);
        memcpy(a->name, arg, (size_t)(eq - arg));
        a->name[eq - arg] = '\0';
        return 0;
}

static int pool_run(struct cli_call *call) {
        struct pool_args *a = call->args;
        _cleanup_free_ char *out = NULL;
        int e = a->name[0] ? space_pool_set(call->client, a->name, (unsigned)a->size, &out)
                           : space_get_json(call->client, "/v1/pool", &out);
        if (e < 0)
                return cli_api_fail(call, e);
        return cli_print_json(out, call->json);
}

const struct cli_cmd cli_pool = {
        .name = "pool",
        .summary = "show or set the warm pool of ready sandboxes",
        .usage = "[OPTIONS] [TEMPLATE=N]",
        .about = "Show the warm pool: per template, how many sandboxes spaced keeps made ahead so\n"
                "that a create only hands one over. With TEMPLATE=N, keep N of TEMPLATE from now\n"
                "on (0 = none: every create makes its sandbox then); lasts until spaced stops\n"
                "(spaced --pool TEMPLATE=N sets it at start).\n",
        .options = "      --json            print the daemon's JSON on one line\n",
        .flags = CLI_JSON | CLI_CLIENT,
        .max_args = 1,
        .args_size = sizeof(struct pool_args),
        .check = pool_check,
        .run = pool_run,
};
