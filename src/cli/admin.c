/* space gc, pool: the commands about the daemon itself rather than one session (their
 * rows, and health's, which needs no code, are in commands.c). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"

int cli_gc(struct cli_call *call) {
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

/* "TEMPLATE=N" into name (n bytes) and *ret_size: 0, or the usage error's status. */
static int pool_arg(const struct cli_call *call, char *name, size_t n, unsigned *ret_size) {
        const char *arg = call->argv[0], *eq = strrchr(arg, '=');
        char *end = NULL;
        unsigned long size = 0;
        if (eq) {
                errno = 0;
                size = strtoul(eq + 1, &end, 10);
        }
        if (!eq || eq == arg || (size_t)(eq - arg) >= n || !end || end == eq + 1 || *end || eq[1] == '-' || errno ||
            size > 100000)
                return cli_usage(call->cmd, "'%s' is not TEMPLATE=N", arg);
        memcpy(name, arg, (size_t)(eq - arg));
        name[eq - arg] = '\0';
        *ret_size = (unsigned)size;
        return 0;
}

int cli_pool_check(struct cli_call *call) {
        char name[80];
        unsigned size;
        return call->argc ? pool_arg(call, name, sizeof name, &size) : 0;
}

int cli_pool(struct cli_call *call) {
        char name[80] = "";
        unsigned size = 0;
        if (call->argc)
                pool_arg(call, name, sizeof name, &size); /* as the check found it */
        _cleanup_free_ char *out = NULL;
        int e = name[0] ? space_pool_set(call->client, name, size, &out)
                        : space_get_json(call->client, "/v1/pool", &out);
        if (e < 0)
                return cli_api_fail(call, e);
        return cli_print_json(out, call->json);
}
