/* The part every `space` command shares: the row of the command table (struct cli_cmd,
 * filled in commands.c) and cli_run, the prologue written once: options (declared in the
 * row, checked as they are read), --help made from the row, the argument count,
 * connecting to spaced, and the messages and printers the commands use. A command's own
 * code (its group file) is a check before connecting and a run after. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/macros.h"
#include "space/space.h"

#define CLI_EXIT_USAGE 2
#define CLI_EXIT_NOT_STARTED 127 /* a command that could not be started, as shells do */
#define CLI_MAX_OPTS 32          /* options of one command, --host and --help included */
#define CLI_MAX_ENV 1024         /* --env entries of one command */
#define CLI_MAX_MULTI 512        /* values of the repeatable CLI_OPT_LIST options of one command */

/* What an option's value must be; cli_run refuses a bad one with a usage error. */
enum cli_opt_kind {
        CLI_OPT_FLAG,     /* no value */
        CLI_OPT_STR,      /* any text; at most max bytes when max is set */
        CLI_OPT_ENV,      /* K=V, repeatable (CLI_MAX_ENV at most): into call->env */
        CLI_OPT_SIZE,     /* cli_parse_size */
        CLI_OPT_DURATION, /* cli_parse_duration_ms */
        CLI_OPT_UINT,     /* cli_parse_uint in [min, max] */
        CLI_OPT_NUMBER,   /* cli_parse_positive, at most max */
        CLI_OPT_LIST,     /* text, repeatable (CLI_MAX_MULTI in all): cli_opt_list; max as STR */
};

struct cli_opt {
        const char *name; /* --name; how the command asks for it */
        char letter;      /* -letter too, or 0 */
        enum cli_opt_kind kind;
        const char *arg; /* the value's name in --help ("SIZE") */
        const char *doc; /* its --help text, '\n' between lines; NULL: not listed */
        /* A bad value: "invalid <what> '<value>'<hint>"; a too long string: "<what> longer
         * than <max> bytes". */
        const char *what, *hint;
        uint64_t min, max;
        bool range;          /* the hint is " (min..max)" */
        const char *same_as; /* another name of that option */
};

enum {
        CLI_IN_ORDER = 1 << 0,    /* options end at the first argument (kill's "-9" is one) */
        CLI_CLIENT = 1 << 1,      /* connects to spaced before run */
        CLI_SESSION = 1 << 2,     /* ... and opens the session call->session_id (default: the first argument) */
        CLI_CHECK_FIRST = 1 << 3, /* check runs before the argument count is checked */
        CLI_GAP = 1 << 4,         /* a blank line before it in 'space --help' */
};

struct cli_call;

/* A listing (ls, ps, snapshots, template ls): the rows fetch got, each printed under the
 * header, or with --quiet only each one's id. */
struct cli_list {
        size_t row_size;
        size_t id_offset; /* of the id (a char array) in a row */
        int (*fetch)(const struct cli_call *call, void **ret_rows, size_t *ret_n); /* a negative errno */
        void (*free_rows)(void *rows, size_t n);                                  /* NULL: free() */
        void (*header)(void);
        void (*print)(const void *row);
};

/* Defines the listing `name` of the rows the libspace call fn(call->handle, &rows, &n)
 * returns, of type: printed by print_fn under header_fn, with --quiet only their member id;
 * freed by free_fn (NULL: free()). */
#define CLI_DEFINE_LIST(name, type, fn, handle, id, header_fn, print_fn, free_fn)                 \
        static int name##_fetch(const struct cli_call *call, void **ret_rows, size_t *ret_n) { \
                type *v = NULL;                                                                \
                int r = fn(call->handle, &v, ret_n);                                           \
                *ret_rows = v;                                                                 \
                return r;                                                                      \
        }                                                                                      \
        const struct cli_list name = { .row_size = sizeof(type),                               \
                                       .id_offset = offsetof(type, id),                        \
                                       .fetch = name##_fetch,                                  \
                                       .free_rows = free_fn,                                   \
                                       .header = header_fn,                                    \
                                       .print = print_fn }

/* One command, or a group of them ("template"). */
struct cli_cmd {
        const char *name;    /* "exec", "template build": its last word calls it */
        const char *alias;   /* another word that calls it, not listed */
        const char *summary; /* its line in its group's listing */
        /* --help: "Usage: space <name> <usage>", a blank line, about; then (not for a group)
         * "Options:" and the options', --host's and --help's lines, their descriptions at
         * help_column (0: 24). */
        const char *usage, *about;
        int help_column;
        const struct cli_opt *opts; /* ended by a NULL name; --host and --help are added */
        unsigned flags;
        /* The arguments after the options: at least min_args, at most max_args (-1: any).
         * Too few says "missing <missing>" when none was given, else "missing <missing_rest>". */
        int min_args, max_args;
        const char *missing, *missing_rest;
        /* With --json, or without run and list: GET this (under the session with CLI_SESSION) and
         * print the daemon's answer as it came. */
        const char *json_path;
        const struct cli_list *list; /* a listing: cli_run prints it, without run */
        /* Each returns 0 to go on, else the exit status after printing why. check may leave
         * state for run in call->args. */
        int (*check)(struct cli_call *call); /* before connecting */
        int (*run)(struct cli_call *call);   /* connected as the flags say */
        const struct cli_cmd *sub;           /* a group's commands, ended by a NULL name */
};

/* --host and --token given before the command. */
struct cli_globals {
        const char *host;
        const char *token;
};

struct cli_value {
        bool set;
        const char *str;
        uint64_t u;
        double num;
};

/* What cli_run hands check and run. */
struct cli_call {
        const struct cli_cmd *cmd;
        const struct cli_globals *globals;
        struct cli_value values[CLI_MAX_OPTS]; /* as cmd->opts */
        const char *env[CLI_MAX_ENV + 1];      /* CLI_OPT_ENV values, NULL-terminated */
        size_t n_env;
        const char *multi[CLI_MAX_MULTI];      /* CLI_OPT_LIST values, in order ... */
        const struct cli_opt *multi_opt[CLI_MAX_MULTI]; /* ... and whose each is */
        size_t n_multi;
        const char *host; /* --host after the command */
        bool json, quiet; /* --json, --quiet */
        int argc;         /* the arguments after the options */
        char **argv;
        const char *session_id; /* CLI_SESSION: check may name another than argv[0] */
        space_client *client;   /* open for run with CLI_CLIENT or CLI_SESSION */
        space_session *session; /* open for run with CLI_SESSION */
        void *args;             /* check's state for run: freed with args_free, else free() */
        void (*args_free)(void *args);
};

/* Runs cmd on argv (argv[0] is the word that called it) and returns the exit status. */
int cli_run(const struct cli_cmd *cmd, const struct cli_globals *g, int argc, char **argv);
/* The command of table called word (its last name word, or its alias when with_alias). */
const struct cli_cmd *cli_find(const struct cli_cmd *table, const char *word, bool with_alias);
/* cmd's --help on stdout; EXIT_SUCCESS. */
int cli_show_help(const struct cli_cmd *cmd);

/* The option's value, as the command declared it: given at all, its text, its number
 * (SIZE, DURATION, UINT), its NUMBER. Unset: false, NULL, 0. */
bool cli_opt_set(const struct cli_call *call, const char *name);
const char *cli_opt_str(const struct cli_call *call, const char *name);
uint64_t cli_opt_u64(const struct cli_call *call, const char *name);
double cli_opt_num(const struct cli_call *call, const char *name);
/* The values of the CLI_OPT_LIST option name, in the order given: up to max into out;
 * returns how many were given. */
size_t cli_opt_list(const struct cli_call *call, const char *name, const char **out, size_t max);

/* ---- messages: each returns the exit status that goes with it ---------------------- */

/* "space: <message>" on stderr; EXIT_FAILURE. */
int cli_error(const char *fmt, ...) _printf_(1, 2);
/* "space <cmd>: <message>" and "Try 'space <cmd> --help'."; CLI_EXIT_USAGE. */
int cli_usage(const struct cli_cmd *cmd, const char *fmt, ...) _printf_(2, 3);
/* The library's message for r (or the errno text when it has none); EXIT_FAILURE. */
int cli_api_fail(const struct cli_call *call, int r);
/* The same about one of several ids a command was given: "space: <id>: <message>". */
int cli_api_fail_on(const struct cli_call *call, const char *id, int r);

/* ---- pieces some commands share ------------------------------------------------------ */

/* Applies $SPACE_SESSION_TOKEN to s: 0 when unset, 1 when applied, -EINVAL (after printing
 * why) when it is not a token. */
int cli_apply_env_token(space_session *s);
/* Calls fn on each argument, on past failures: fn returns a negative errno (printed with
 * the argument; the exit status becomes 1), 0, or an exit status that stops the loop. */
int cli_each_arg(struct cli_call *call, int (*fn)(struct cli_call *call, const char *arg));
/* Writes token and a newline to path, mode 0600; 0 or EXIT_FAILURE after printing why. */
int cli_write_token_file(const char *path, const char *token);
/* The exit status a shell would give the command's end (128+N for signal N). */
int cli_exit_status(const struct space_exec_result *res);
/* A command's output to ours (a space_output_fn); *(bool *)userdata is set when our
 * reader went away. */
int cli_on_output(void *userdata, enum space_stream stream, const void *data, size_t len);

/* The JSON document as it came, ending in a newline. */
int cli_print_raw_json(const char *json);
/* raw: as it came (--json); else indented for people. */
int cli_print_json(const char *json, bool raw);
/* A session a command made or changed: its object with json, else its id. */
void cli_print_session(const space_session *s, bool json);
/* GETs path (under call->session when open, else of the daemon) and prints it as it came. */
int cli_get_json_and_print(const struct cli_call *call, const char *path);
