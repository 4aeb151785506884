/* The prologue every `space` command runs, written once: its options as its row declares
 * them (each value checked as it is read), --help made from the row, the argument count,
 * connecting to spaced and opening the session, then the command's check and run; and the
 * messages and printers the commands share. Exit statuses: 0 ok, 1 error, 2 usage error. */
#include "cli/cli.h"

#include <assert.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/args.h"
#include "common/buf.h"
#include "common/fdio.h"

#define CLI_HELP_COLUMN 24 /* where option descriptions start in --help */
#define CLI_LONG_VAL 256   /* getopt's val of an option without a letter: this + its index */

/* The options cli_run reads for every command, after the command's own. */
static const struct cli_opt host_opt = { "host", 0, CLI_OPT_STR, "ADDR", .doc = "daemon address (default: $SPACE_HOST)" };
static const struct cli_opt help_opt = { "help", 'h', CLI_OPT_FLAG, NULL, .doc = "show this help" };

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

/* ---- --help ---------------------------------------------------------------------- */

/* "  -m, --memory SIZE     memory limit, ..." with the description at column, its later
 * lines indented to it. */
static void print_option(const struct cli_opt *o, int column) {
        int n = o->letter ? printf("  -%c, --%s", o->letter, o->name) : printf("      --%s", o->name);
        if (o->arg)
                n += printf(" %s", o->arg);
        printf("%*s", n < column ? column - n : 2, "");
        for (const char *p = o->doc;;) {
                const char *nl = strchr(p, '\n');
                if (!nl) {
                        printf("%s\n", p);
                        break;
                }
                printf("%.*s\n%*s", (int)(nl - p), p, column, "");
                p = nl + 1;
        }
}

int cli_show_help(const struct cli_cmd *cmd) {
        printf("Usage: space %s %s\n\n%s", cmd->name, cmd->usage, cmd->about);
        if (cmd->sub)
                return EXIT_SUCCESS;
        int column = cmd->help_column ? cmd->help_column : CLI_HELP_COLUMN;
        printf("\nOptions:\n");
        for (const struct cli_opt *o = cmd->opts; o && o->name; o++)
                if (o->doc)
                        print_option(o, column);
        print_option(&host_opt, column);
        print_option(&help_opt, column);
        return EXIT_SUCCESS;
}

/* ---- options --------------------------------------------------------------------- */

/* The index of option name among n, or -1. */
static int find_opt(const struct cli_opt *const *opts, size_t n, const char *name) {
        for (size_t i = 0; i < n; i++)
                if (strcmp(opts[i]->name, name) == 0)
                        return (int)i;
        return -1;
}

/* One value of option o into v (and call->env), checked; 0 or the usage error's status. */
static int take_value(struct cli_call *call, const struct cli_opt *o, struct cli_value *v, const char *arg) {
        const struct cli_cmd *cmd = call->cmd;
        int r = 0;
        switch (o->kind) {
        case CLI_OPT_FLAG: break;
        case CLI_OPT_STR:
                if (o->max && strlen(arg) > o->max)
                        return cli_usage(cmd, "%s longer than %" PRIu64 " bytes", o->what, o->max);
                break;
        case CLI_OPT_ENV:
                if (!cli_env_ok(arg))
                        return cli_usage(cmd, "invalid environment entry '%s' (want K=V)", arg);
                if (call->n_env >= CLI_MAX_ENV)
                        return cli_usage(cmd, "more than %d --env entries", CLI_MAX_ENV);
                call->env[call->n_env++] = arg;
                break;
        case CLI_OPT_LIST:
                if (o->max && strlen(arg) > o->max)
                        return cli_usage(cmd, "%s longer than %" PRIu64 " bytes", o->what, o->max);
                if (call->n_multi >= CLI_MAX_MULTI)
                        return cli_usage(cmd, "more than %d --%s values", CLI_MAX_MULTI, o->name);
                call->multi_opt[call->n_multi] = o;
                call->multi[call->n_multi++] = arg;
                break;
        case CLI_OPT_SIZE: r = cli_parse_size(arg, &v->u); break;
        case CLI_OPT_DURATION: r = cli_parse_duration_ms(arg, &v->u); break;
        case CLI_OPT_UINT: r = cli_parse_uint(arg, o->min, o->max, &v->u); break;
        case CLI_OPT_NUMBER: r = cli_parse_positive(arg, (double)o->max, &v->num); break;
        }
        if (r < 0 && o->range)
                return cli_usage(cmd, "invalid %s '%s' (%" PRIu64 "..%" PRIu64 ")", o->what, arg, o->min, o->max);
        if (r < 0)
                return cli_usage(cmd, "invalid %s '%s'%s", o->what, arg, o->hint ? o->hint : "");
        v->set = true;
        v->str = arg;
        return 0;
}

/* A command's options as getopt_long takes them: opts[i] is read into call->values[i]. */
struct getopt_spec {
        const struct cli_opt *opts[CLI_MAX_OPTS];
        size_t n;
        struct option lopts[CLI_MAX_OPTS + 1];
        char sopts[3 * CLI_MAX_OPTS + 3];
};

/* 0, or EXIT_FAILURE when the row declares more than we take. */
static int getopt_spec_init(const struct cli_cmd *cmd, struct getopt_spec *g) {
        g->n = 0;
        for (const struct cli_opt *o = cmd->opts; o && o->name; o++) {
                if (g->n == CLI_MAX_OPTS - 2)
                        return cli_error("%s: more than %d options", cmd->name, CLI_MAX_OPTS - 2);
                g->opts[g->n++] = o;
        }
        g->opts[g->n++] = &host_opt;
        g->opts[g->n++] = &help_opt;
        size_t s = 0;
        if (cmd->flags & CLI_IN_ORDER)
                g->sopts[s++] = '+';
        g->sopts[s++] = ':';
        for (size_t i = 0; i < g->n; i++) {
                const struct cli_opt *o = g->opts[i];
                int t = o->same_as ? find_opt(g->opts, g->n, o->same_as) : (int)i;
                assert(t >= 0); /* the table test checks every same_as */
                int val = g->opts[t]->letter ? g->opts[t]->letter : CLI_LONG_VAL + t;
                int has_arg = o->kind == CLI_OPT_FLAG ? no_argument : required_argument;
                g->lopts[i] = (struct option){ o->name, has_arg, NULL, val };
                if (o->letter) {
                        g->sopts[s++] = o->letter;
                        if (has_arg)
                                g->sopts[s++] = ':';
                }
        }
        g->lopts[g->n] = (struct option){ 0 };
        g->sopts[s] = '\0';
        return 0;
}

/* The command's options into call: -1 to go on, else the exit status (help shown, or the
 * usage error printed). */
static int parse_options(struct cli_call *call, int argc, char **argv) {
        const struct cli_cmd *cmd = call->cmd;
        struct getopt_spec g;
        if (getopt_spec_init(cmd, &g))
                return EXIT_FAILURE;
        optind = 0; /* GNU: full re-initialisation */
        opterr = 0;
        int c;
        while ((c = getopt_long(argc, argv, g.sopts, g.lopts, NULL)) != -1) {
                if (c == '?' && optopt)
                        return cli_usage(cmd, "unknown option '-%c'", optopt);
                if (c == '?')
                        return cli_usage(cmd, "unknown option '%s'", argv[optind - 1]);
                if (c == ':')
                        return cli_usage(cmd, "option '%s' needs a value", argv[optind - 1]);
                int i = c >= CLI_LONG_VAL ? c - CLI_LONG_VAL : -1;
                for (size_t k = 0; i < 0 && k < g.n; k++)
                        if (g.opts[k]->letter == c)
                                i = (int)k;
                assert(i >= 0);
                if (g.opts[i] == &help_opt)
                        return cli_show_help(cmd);
                int r = take_value(call, g.opts[i], &call->values[i], optarg);
                if (r)
                        return r;
        }
        call->host = call->values[g.n - 2].str;
        call->json = cli_opt_set(call, "json");
        call->quiet = cli_opt_set(call, "quiet");
        call->argc = argc - optind;
        call->argv = argv + optind;
        return -1;
}

static const struct cli_value *value_of(const struct cli_call *call, const char *name) {
        static const struct cli_value unset = { 0 };
        size_t i = 0;
        for (const struct cli_opt *o = call->cmd->opts; o && o->name; o++, i++)
                if (strcmp(o->name, name) == 0)
                        return &call->values[i];
        return &unset; /* an option the command doesn't take: never given */
}

bool cli_opt_set(const struct cli_call *call, const char *name) { return value_of(call, name)->set; }
const char *cli_opt_str(const struct cli_call *call, const char *name) { return value_of(call, name)->str; }
uint64_t cli_opt_u64(const struct cli_call *call, const char *name) { return value_of(call, name)->u; }
double cli_opt_num(const struct cli_call *call, const char *name) { return value_of(call, name)->num; }

size_t cli_opt_list(const struct cli_call *call, const char *name, const char **out, size_t max) {
        size_t n = 0;
        for (size_t i = 0; i < call->n_multi; i++) {
                if (strcmp(call->multi_opt[i]->name, name) != 0)
                        continue;
                if (n < max)
                        out[n] = call->multi[i];
                n++;
        }
        return n;
}

/* ---- the prologue ---------------------------------------------------------------- */

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

static int print_list(const struct cli_call *call, const struct cli_list *l) {
        void *rows = NULL;
        size_t n = 0;
        int e = l->fetch(call, &rows, &n);
        if (e < 0)
                return cli_api_fail(call, e);
        if (!call->quiet)
                l->header();
        for (size_t i = 0; i < n; i++) {
                const char *row = (const char *)rows + i * l->row_size;
                if (call->quiet)
                        printf("%s\n", row + l->id_offset);
                else
                        l->print(row);
        }
        if (l->free_rows)
                l->free_rows(rows, n);
        else
                free(rows);
        return EXIT_SUCCESS;
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
        if (cmd->json_path && (call->json || !(cmd->run || cmd->list)))
                return cli_get_json_and_print(call, cmd->json_path);
        return cmd->list ? print_list(call, cmd->list) : cmd->run(call);
}

/* A group ("template"): its next word names the command. */
static int run_group(const struct cli_cmd *cmd, const struct cli_globals *g, int argc, char **argv) {
        if (argc < 2)
                return cli_usage(cmd, "missing %s", cmd->missing);
        if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0)
                return cli_show_help(cmd);
        const struct cli_cmd *sub = cli_find(cmd->sub, argv[1], true);
        if (!sub)
                return cli_usage(cmd, "unknown command '%s'", argv[1]);
        return cli_run(sub, g, argc - 1, argv + 1);
}

int cli_run(const struct cli_cmd *cmd, const struct cli_globals *g, int argc, char **argv) {
        if (cmd->sub)
                return run_group(cmd, g, argc, argv);
        struct cli_call call = { .cmd = cmd, .globals = g };
        int r = run_call(&call, argc, argv);
        if (call.args_free)
                call.args_free(call.args);
        else
                free(call.args);
        space_session_free(call.session);
        space_client_free(call.client);
        return r;
}

static const char *word_of(const struct cli_cmd *cmd) {
        const char *sp = strrchr(cmd->name, ' ');
        return sp ? sp + 1 : cmd->name;
}

const struct cli_cmd *cli_find(const struct cli_cmd *table, const char *word, bool with_alias) {
        for (const struct cli_cmd *c = table; c->name; c++)
                if (strcmp(word_of(c), word) == 0 || (with_alias && c->alias && strcmp(c->alias, word) == 0))
                        return c;
        return NULL;
}

/* ---- pieces some commands share -------------------------------------------------- */

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

int cli_on_output(void *userdata, enum space_stream stream, const void *data, size_t len) {
        int r = fdio_write_all(stream == SPACE_STDERR ? STDERR_FILENO : STDOUT_FILENO, data, len);
        if (r == -EPIPE)
                *(bool *)userdata = true;
        return r;
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
