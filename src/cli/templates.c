/* space template build, ls, rm: the templates sandboxes start from (their rows, and the
 * group "template" they form, are in commands.c). */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"

/* ---- build ----------------------------------------------------------------------- */

int cli_template_build_check(struct cli_call *call) {
        const char *from_dir = cli_opt_str(call, "from-dir"), *from_tar = cli_opt_str(call, "from-tar");
        bool debootstrap = cli_opt_set(call, "debootstrap");
        if (!!from_dir + !!from_tar + debootstrap > 1)
                return cli_usage(call->cmd, "give at most one of --from-dir, --from-tar, --debootstrap");
        if ((cli_opt_set(call, "packages") || cli_opt_set(call, "mirror")) && !debootstrap)
                return cli_usage(call->cmd, "--packages and --mirror go with --debootstrap");
        /* the daemon reads the path, from its own working directory: the absolute one goes */
        const char *rel = from_dir ? from_dir : from_tar;
        if (rel && rel[0] != '/' && !(call->args = realpath(rel, NULL)))
                return cli_error("%s: %s", rel, strerror(errno));
        return 0;
}

static void on_progress(void *ud, const char *msg) {
        FILE *f = ud;
        fprintf(f, "%s\n", msg);
        fflush(f);
}

int cli_template_build(struct cli_call *call) {
        const char *abs = call->args; /* the check's, for a relative path */
        struct space_template_build_opts bo = {
                SPACE_TEMPLATE_BUILD_OPTS_INIT,
                .name = call->argv[0],
                .from_dir = cli_opt_str(call, "from-dir"),
                .from_tar = cli_opt_str(call, "from-tar"),
                .debootstrap_suite = cli_opt_str(call, "debootstrap"),
                .mirror = cli_opt_str(call, "mirror"),
                .runtime = cli_opt_str(call, "runtime"),
                .on_progress = on_progress,
                .userdata = call->json ? stderr : stdout,
        };
        if (abs && bo.from_dir)
                bo.from_dir = abs;
        else if (abs)
                bo.from_tar = abs;
        _cleanup_free_ char **pkgs = NULL;
        const char *packages = cli_opt_str(call, "packages");
        if (packages && cli_split_list(packages, &pkgs) < 0)
                return cli_error("out of memory");
        bo.packages = (const char *const *)pkgs;
        struct space_template_info info;
        int e = space_template_build(call->client, &bo, &info);
        if (e < 0)
                return cli_api_fail(call, e);
        if (call->json) {
                printf("{\"name\":\"%s\",\"size_bytes\":%" PRIu64 "}\n", info.name, info.size_bytes);
        } else {
                char size[32];
                cli_format_size(info.size_bytes, size, sizeof size);
                printf("built template %s (%s)\n", info.name[0] ? info.name : bo.name, size);
        }
        return EXIT_SUCCESS;
}

/* ---- ls -------------------------------------------------------------------------- */

#define TEMPLATE_ROW "%-24s %-10s %s\n"

static void template_header(void) { printf(TEMPLATE_ROW, "NAME", "SIZE", "CREATED"); }

static void print_template(const void *row) {
        const struct space_template_info *t = row;
        char size[32];
        cli_format_size(t->size_bytes, size, sizeof size);
        printf(TEMPLATE_ROW, t->name, size, t->created_at);
}

CLI_DEFINE_LIST(cli_templates_list, struct space_template_info, space_template_list, client, name, template_header,
                print_template, NULL);

/* ---- rm -------------------------------------------------------------------------- */

static int rm_one(struct cli_call *call, const char *name) {
        int e = space_template_delete(call->client, name);
        if (e >= 0)
                printf("%s\n", name);
        return e < 0 ? e : 0;
}

int cli_template_rm(struct cli_call *call) { return cli_each_arg(call, rm_one); }
