/* The prologue every `space` command runs, written once: its options (its own through its
 * option hook, --host/--help/--json/--quiet here), the argument count, connecting to
 * spaced and opening the session, then the command's run; and the messages and printers
 * the commands share. Exit statuses: 0 ok, 1 error, 2 usage error. */
#include "cli/cli.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/args.h"
#include "common/buf.h"
#include "common/fdio.h"

#define CLI_MAX_LONG_OPTS 32 /* a command's own long options */
#define CLI_HELP_COLUMN 24   /* where option descriptions start in --help */

/* ---- messages -------------------------------------------------------------------- */

int cli_error(const char *fmt, ...) {
        va_list ap;
        fputs("space: ", stderr);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
        return EXIT_FAILURE;
}

int cli_usage(const struct cli_cmd *cmd, const char *fmt, ...) {
        va_list ap;
        fprintf(stderr, "space %s: ", cmd->name);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fprintf(stderr, "\nTry 'space %s --help'.\n", cmd->name);
        return CLI_EXIT_USAGE;
}

static const char *api_message(const struct cli_call *call, int r) {
        const char *m = call->client ? space_client_last_error(call->client) : "";
        return m && *m ? m : space_strerror(r);
}

int cli_api_fail(const struct cli_call *call, int r) { return cli_error("%s", api_message(call, r)); }

int cli_api_fail_on(const struct cli_call *call, const char *id, int r) {
        return cli_error("%s: %s", id, api_message(call, r));
}

int cli_show_help(const struct cli_cmd *cmd) {
        printf("Usage: space %s %s\n\n%s", cmd->name, cmd->usage, cmd->about);
        if (cmd->sub)
                return EXIT_SUCCESS;
        /* the options cli_run reads for every command, described where they are read */
        int w = (cmd->help_column ? cmd->help_column : CLI_HELP_COLUMN) - (int)strlen("  -h, ") - 1;
        printf("\nOptions:\n%s", cmd->options ? cmd->options : "");
        printf("      %-*s daemon address (default: $SPACE_HOST)\n", w, "--host ADDR");
        printf("  -h, %-*s show this help\n", w, "--help");
        return EXIT_SUCCESS;
}

/* ---- the prologue ---------------------------------------------------------------- */

/* The command's options into call: -1 to go on, else the exit status (help shown, or the
 * usage error printed). */
static int parse_options(struct cli_call *call, int argc, char **argv) {
        const struct cli_cmd *cmd = call->cmd;
        struct option lopts[CLI_MAX_LONG_OPTS + 5];
        size_t n = 0;
        for (const struct option *o = cmd->long_opts; o && o->name; o++) {
                if (n == CLI_MAX_LONG_OPTS)
                        return cli_error("%s: more than %d options", cmd->name, CLI_MAX_LONG_OPTS);
                lopts[n++] = *o;
        }
        if (cmd->flags & CLI_JSON)
                lopts[n++] = (struct option){ "json", no_argument, NULL, 'j' };
        if (cmd->flags & CLI_QUIET)
                lopts[n++] = (struct option){ "quiet", no_argument, NULL, 'q' };
        lopts[n++] = (struct option){ "help", no_argument, NULL, 'h' };
        lopts[n++] = (struct option){ "host", required_argument, NULL, 'H' };
        lopts[n] = (struct option){ 0 };
        char sopts[64];
        int w = snprintf(sopts, sizeof sopts, "%s:%s%sh", cmd->flags & CLI_IN_ORDER ? "+" : "",
                         cmd->short_opts ? cmd->short_opts : "", cmd->flags & CLI_QUIET ? "q" : "");
        if (w < 0 || (size_t)w >= sizeof sopts)
                return cli_error("%s: too many short options", cmd->name);

        optind = 0; /* GNU: full re-initialisation */
        opterr = 0;
        int c;
        while ((c = getopt_long(argc, argv, sopts, lopts, NULL)) != -1) {
                int r = 0;
                switch (c) {
                case '?':
                        if (optopt)
                                return cli_usage(cmd, "unknown option '-%c'", optopt);
                        return cli_usage(cmd, "unknown option '%s'", argv[optind - 1]);
                case ':': return cli_usage(cmd, "option '%s' needs a value", argv[optind - 1]);
                case 'h': return cli_show_help(cmd);
                case 'H': call->host = optarg; break;
                case 'j': call->json = true; break;
                case 'q': call->quiet = true; break;
                default: r = cmd->option ? cmd->option(call, c, optarg) : CLI_EXIT_USAGE; break;
                }
                if (r)
                        return r;
        }
        call->argc = argc - optind;
        call->argv = argv + optind;
        return -1;
}

/* The count of the arguments: false after printing the usage error. */
static bool args_ok(const struct cli_call *call) {
        const struct cli_cmd *cmd = call->cmd;
        if (call->argc < cmd->min_args) {
                const char *what = call->argc == 0 ? cmd->missing : cmd->missing_rest;
                cli_usage(cmd, "missing %s", what ? what : "arguments");
                return false;
        }
        if (cmd->max_args >= 0 && call->argc > cmd->max_args) {
                cli_usage(cmd, "unexpected argument '%s'", call->argv[cmd->max_args]);
                return false;
        }
        return true;
}

static int open_client(struct cli_call *call) {
        const char *h = call->host ? call->host : call->globals->host;
        const char *token = call->globals->token;
        int r = space_client_new(&call->client,
                                 &(struct space_client_opts){ SPACE_CLIENT_OPTS_INIT, .host = h, .token = token });
        if (r == -EKEYREJECTED)
                return cli_error("invalid API token in %s (printable ASCII without blanks, at most %d bytes)",
                                 token ? "--token" : "SPACE_TOKEN", SPACE_MAX_API_TOKEN);
        if (r < 0) {
                if (h)
                        return cli_error("invalid daemon address '%s': %s", h, strerror(-r));
                return cli_error("invalid SPACE_HOST '%s': %s", getenv("SPACE_HOST") ? getenv("SPACE_HOST") : "",
                                 strerror(-r));
        }
        return 0;
}

int cli_apply_env_token(space_session *s) {
        const char *t = getenv("SPACE_SESSION_TOKEN");
        if (!t || !*t)
                return 0;
        if (space_session_set_token(s, t) < 0) {
                cli_error("SPACE_SESSION_TOKEN is not a valid token (A-Z a-z 0-9 _ -, at most %d)", SPACE_MAX_TOKEN);
                return -EINVAL;
        }
        return 1;
}

static int open_session(struct cli_call *call) {
        const char *id = call->session_id ? call->session_id : call->argv[0];
        space_session *s = NULL;
        int r = space_session_open(&s, call->client, id);
        if (r < 0)
                return cli_api_fail(call, r);
        r = cli_apply_env_token(s);
        if (r == 1) {
                /* the lookup above went without it: ask again with the token, so a wrong
                 * token fails here, before anything else is sent */
                int e = space_session_inspect(s, NULL);
                r = e < 0 ? cli_api_fail(call, e) : 0;
        } else if (r < 0) {
                r = EXIT_FAILURE;
        }
        if (r) {
                space_session_free(s);
                return r;
        }
        call->session = s;
        return 0;
}

static int run_call(struct cli_call *call, int argc, char **argv) {
        const struct cli_cmd *cmd = call->cmd;
        int r = parse_options(call, argc, argv);
        if (r >= 0)
                return r;
        bool check_first = cmd->flags & CLI_CHECK_FIRST;
        if (check_first && cmd->check && (r = cmd->check(call)))
                return r;
        if (!args_ok(call))
                return CLI_EXIT_USAGE;
        if (!check_first && cmd->check && (r = cmd->check(call)))
                return r;
        if (cmd->flags & (CLI_CLIENT | CLI_SESSION) && (r = open_client(call)))
                return r;
        if (cmd->flags & CLI_SESSION && (r = open_session(call)))
                return r;
        if (!cmd->run || (call->json && cmd->json_path))
                return cli_get_json_and_print(call, cmd->json_path);
        return cmd->run(call);
}

/* A group ("template"): its next word names the command. */
static int run_group(const struct cli_cmd *cmd, const struct cli_globals *g, int argc, char **argv) {
        if (argc < 2)
                return cli_usage(cmd, "missing %s", cmd->missing);
        if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0)
                return cli_show_help(cmd);
        const struct cli_entry *e = cli_find(cmd->sub, argv[1], true);
        if (!e)
                return cli_usage(cmd, "unknown command '%s'", argv[1]);
        return cli_run(e->cmd, g, argc - 1, argv + 1);
}

int cli_run(const struct cli_cmd *cmd, const struct cli_globals *g, int argc, char **argv) {
        if (cmd->sub)
                return run_group(cmd, g, argc, argv);
        struct cli_call call = { .cmd = cmd, .globals = g };
        if (cmd->args_size) {
                call.args = calloc(1, cmd->args_size);
                if (!call.args)
                        return cli_error("out of memory");
                if (cmd->args_init)
                        memcpy(call.args, cmd->args_init, cmd->args_size);
        }
        int r = run_call(&call, argc, argv);
        if (cmd->cleanup)
                cmd->cleanup(&call);
        space_session_free(call.session);
        space_client_free(call.client);
        free(call.args);
        return r;
}

const struct cli_entry *cli_find(const struct cli_entry *table, const char *word, bool with_alias) {
        for (const struct cli_entry *e = table; e->word; e++)
                if (strcmp(e->word, word) == 0 && (with_alias || !(e->flags & CLI_ALIAS)))
                        return e;
        return NULL;
}

/* ---- pieces some commands share -------------------------------------------------- */

int cli_env_add(const struct cli_call *call, struct cli_env *env, const char *kv) {
        if (!cli_env_ok(kv))
                return cli_usage(call->cmd, "invalid environment entry '%s' (want K=V)", kv);
        if (env->n >= CLI_MAX_ENV)
                return cli_usage(call->cmd, "more than %d --env entries", CLI_MAX_ENV);
        env->v[env->n++] = kv;
        return 0;
}

int cli_each_arg(struct cli_call *call, int (*fn)(struct cli_call *call, const char *arg)) {
        int status = EXIT_SUCCESS;
        for (int i = 0; i < call->argc; i++) {
                int r = fn(call, call->argv[i]);
                if (r > 0)
                        return r;
                if (r < 0) {
                        cli_api_fail_on(call, call->argv[i], r);
                        status = EXIT_FAILURE;
                }
        }
        return status;
}

int cli_write_token_file(const char *path, const char *token) {
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
                return cli_error("%s: %s", path, strerror(errno));
        /* an existing file keeps its mode on open: a token must not stay world-readable */
        if (fchmod(fd, 0600) < 0)
                return cli_error("%s: %s", path, strerror(errno));
        char line[SPACE_MAX_TOKEN + 2];
        int n = snprintf(line, sizeof line, "%s\n", token);
        int r = fdio_write_all(fd, line, (size_t)n);
        if (r < 0)
                return cli_error("%s: %s", path, strerror(-r));
        if (close(TAKE_FD(fd)) < 0)
                return cli_error("%s: %s", path, strerror(errno));
        return 0;
}

int cli_exit_status(const struct space_exec_result *res) {
        if (res->signal > 0)
                return 128 + (res->signal & 0x7f);
        if (res->exit_code < 0)
                return EXIT_FAILURE;
        return res->exit_code & 0xff;
}

int cli_print_raw_json(const char *json) {
        if (fputs(json, stdout) < 0)
                return EXIT_FAILURE;
        size_t n = strlen(json);
        if (n == 0 || json[n - 1] != '\n')
                fputc('\n', stdout);
        return EXIT_SUCCESS;
}

int cli_print_json(const char *json, bool raw) {
        if (raw)
                return cli_print_raw_json(json);
        _cleanup_buf_ struct buf b = BUF_INIT(0);
        if (cli_json_pretty(&b, json, strlen(json)) < 0)
                return cli_print_raw_json(json);
        fwrite(b.data, 1, b.len, stdout);
        return EXIT_SUCCESS;
}

void cli_print_session(const space_session *s, bool json) {
        if (json)
                cli_print_raw_json(space_session_json(s));
        else
                printf("%s\n", space_session_id(s));
}

int cli_get_json_and_print(const struct cli_call *call, const char *path) {
        _cleanup_free_ char *json = NULL;
        int r = call->session ? space_session_get_json(call->session, path, &json)
                              : space_get_json(call->client, path, &json);
        if (r < 0)
                return cli_api_fail(call, r);
        return cli_print_raw_json(json);
}
