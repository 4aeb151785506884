/* space template build, ls, rm: the templates sandboxes start from, a group of its own
 * ("space template COMMAND") with its own table. */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "cli/commands.h"

/* ---- build ----------------------------------------------------------------------- */

struct build_args {
        struct space_template_build_opts bo;
        const char *packages;
        char abs[PATH_MAX]; /* --from-dir or --from-tar made absolute */
};

static int build_option(struct cli_call *call, int opt, const char *arg) {
        struct build_args *a = call->args;
        struct space_template_build_opts *bo = &a->bo;
        switch (opt) {
        case 'D': bo->from_dir = arg; break;
        case 'T': bo->from_tar = arg; break;
        case 'B': bo->debootstrap_suite = arg; break;
        case 'P': a->packages = arg; break;
        case 'M': bo->mirror = arg; break;
        case 'R': bo->runtime = arg; break;
        }
        return 0;
}

static int build_check(struct cli_call *call) {
        struct build_args *a = call->args;
        struct space_template_build_opts *bo = &a->bo;
        bo->name = call->argv[0];
        int sources = !!bo->from_dir + !!bo->from_tar + !!bo->debootstrap_suite;
        if (sources > 1)
                return cli_usage(call->cmd, "give at most one of --from-dir, --from-tar, --debootstrap");
        if ((a->packages || bo->mirror) && !bo->debootstrap_suite)
                return cli_usage(call->cmd, "--packages and --mirror go with --debootstrap");
        /* the daemon reads the paths, from its own working directory */
        const char **rel = bo->from_dir ? &bo->from_dir : bo->from_tar ? &bo->from_tar : NULL;
        if (rel && (*rel)[0] != '/') {
                if (!realpath(*rel, a->abs))
                        return cli_error("%s: %s", *rel, strerror(errno));
                *rel = a->abs;
        }
        return 0;
}

static void on_progress(void *ud, const char *msg) {
        FILE *f = ud;
        fprintf(f, "%s\n", msg);
        fflush(f);
}

static int build_run(struct cli_call *call) {
        struct build_args *a = call->args;
        struct space_template_build_opts *bo = &a->bo;
        _cleanup_free_ char **pkgs = NULL;
        if (a->packages) {
                if (cli_split_list(a->packages, &pkgs) < 0)
                        return cli_error("out of memory");
                bo->packages = (const char *const *)pkgs;
        }
        bo->on_progress = on_progress;
        bo->userdata = call->json ? stderr : stdout;
        struct space_template_info info;
        int e = space_template_build(call->client, bo, &info);
        if (e < 0)
                return cli_api_fail(call, e);
        if (call->json) {
                printf("{\"name\":\"%s\",\"size_bytes\":%" PRIu64 "}\n", info.name, info.size_bytes);
        } else {
                char size[32];
                cli_format_size(info.size_bytes, size, sizeof size);
                printf("built template %s (%s)\n", info.name[0] ? info.name : bo->name, size);
        }
        return EXIT_SUCCESS;
}

static const struct cli_cmd cli_template_build = {
        .name = "template build",
        .usage = "[OPTIONS] NAME [--from-dir DIR | --from-tar FILE |\n"
                "                            --debootstrap SUITE [--packages a,b] [--mirror URL]]\n"
                "                            [--runtime ns|gvisor|microvm]",
        .about = "Build a template on the daemon's host from a directory, a tar file, or a Debian\n"
                "suite through debootstrap (the daemon caches debootstrap output). Without a\n"
                "source the daemon builds its default for NAME: 'base' is Debian bookworm\n"
                "(minbase) with python3. Progress lines go to stdout; the last line is\n"
                "\"built template NAME (SIZE)\".\n"
                "Paths are read by the daemon; relative ones are made absolute here first.\n",
        .options = "      --from-dir DIR        copy this directory tree\n"
                "      --from-tar FILE       unpack this tar file\n"
                "      --debootstrap SUITE   install Debian SUITE (e.g. bookworm), minbase variant\n"
                "      --packages a,b        extra packages for --debootstrap\n"
                "      --mirror URL          Debian mirror for --debootstrap\n"
                "      --runtime NAME        the template's default runtime: sessions made from it\n"
                "                            run on NAME unless their create names one\n"
                "      --json                print the template object at the end (progress to stderr)\n",
        .help_column = 28,
        .flags = CLI_JSON | CLI_CLIENT,
        .long_opts = (const struct option[]){
                { "from-dir", required_argument, NULL, 'D' }, { "from-tar", required_argument, NULL, 'T' },
                { "debootstrap", required_argument, NULL, 'B' }, { "packages", required_argument, NULL, 'P' },
                { "mirror", required_argument, NULL, 'M' }, { "runtime", required_argument, NULL, 'R' }, { 0 } },
        .min_args = 1, .max_args = 1, .missing = "template name",
        CLI_ARGS(struct build_args, { .bo = { SPACE_TEMPLATE_BUILD_OPTS_INIT } }),
        .option = build_option,
        .check = build_check,
        .run = build_run,
};

/* ---- ls -------------------------------------------------------------------------- */

static int ls_run(struct cli_call *call) {
        struct space_template_info *v = NULL;
        size_t n = 0;
        int e = space_template_list(call->client, &v, &n);
        if (e < 0)
                return cli_api_fail(call, e);
        if (!call->quiet)
                printf("%-24s %-10s %s\n", "NAME", "SIZE", "CREATED");
        for (size_t i = 0; i < n; i++) {
                if (call->quiet) {
                        printf("%s\n", v[i].name);
                        continue;
                }
                char size[32];
                cli_format_size(v[i].size_bytes, size, sizeof size);
                printf("%-24s %-10s %s\n", v[i].name, size, v[i].created_at);
        }
        free(v);
        return EXIT_SUCCESS;
}

static const struct cli_cmd cli_template_ls = {
        .name = "template ls",
        .usage = "[OPTIONS]",
        .about = "List the templates on the daemon's host.\n",
        .options = "      --json            print the daemon's JSON ({\"templates\":[...]})\n"
                "  -q, --quiet           print names only\n",
        .flags = CLI_JSON | CLI_QUIET | CLI_CLIENT,
        .json_path = "/v1/templates",
        .run = ls_run,
};

/* ---- rm -------------------------------------------------------------------------- */

static int rm_one(struct cli_call *call, const char *name) {
        int e = space_template_delete(call->client, name);
        if (e >= 0)
                printf("%s\n", name);
        return e < 0 ? e : 0;
}

static int rm_run(struct cli_call *call) { return cli_each_arg(call, rm_one); }

static const struct cli_cmd cli_template_rm = {
        .name = "template rm",
        .usage = "[OPTIONS] NAME...",
        .about = "Delete templates. A template a session still uses can't be deleted.\n",
        .flags = CLI_CLIENT,
        .min_args = 1, .max_args = -1, .missing = "template name",
        .run = rm_run,
};

/* ---- the group ------------------------------------------------------------------- */

static const struct cli_entry template_commands[] = {
        { "build", &cli_template_build, 0 },
        { "ls", &cli_template_ls, 0 },
        { "list", &cli_template_ls, CLI_ALIAS },
        { "rm", &cli_template_rm, 0 },
        { NULL, NULL, 0 },
};

const struct cli_cmd cli_template = {
        .name = "template",
        .summary = "build, list and delete templates",
        .usage = "COMMAND ...",
        .about = "Manage the templates sandboxes start from.\n"
                "\n"
                "Commands:\n"
                "  build NAME [--from-dir DIR | --from-tar FILE | --debootstrap SUITE [--packages a,b]] [--runtime R]\n"
                "  ls [--json]\n"
                "  rm NAME\n"
                "\n"
                "Run 'space template COMMAND --help' for details.\n",
        .missing = "command (build, ls, rm)",
        .sub = template_commands,
};
