/* The part every `space` command shares: the row a command fills (struct cli_cmd) and the
 * prologue that runs it (cli_run: options, argument count, connecting to spaced), plus the
 * messages and printers the commands use. A command is one row and its hooks; it never
 * parses --host/--help/--json or opens the client itself. */
#pragma once
#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/macros.h"
#include "space/space.h"

#define CLI_EXIT_USAGE 2
#define CLI_EXIT_NOT_STARTED 127 /* a command that could not be started, as shells do */
#define CLI_MAX_ENV 1024         /* --env entries of one command */

/* What cli_run does for a command besides --host and --help. */
enum {
        CLI_JSON = 1 << 0,        /* accepts --json (call->json) */
        CLI_QUIET = 1 << 1,       /* accepts -q, --quiet (call->quiet) */
        CLI_IN_ORDER = 1 << 2,    /* options end at the first argument (kill's "-9" is one) */
        CLI_CLIENT = 1 << 3,      /* connects to spaced before run */
        CLI_SESSION = 1 << 4,     /* ... and opens the session call->session_id (default: the first argument) */
        CLI_CHECK_FIRST = 1 << 5, /* check runs before the argument count is checked */
};

/* --host and --token given before the command. */
struct cli_globals {
        const char *host;
        const char *token;
};

struct cli_call;
struct cli_entry;

struct cli_cmd {
        const char *name;    /* "exec", "template build": what messages call it */
        const char *summary; /* its line in 'space --help' */
        /* Its --help: "Usage: space <name> <usage>", a blank line, about; then (not for a
         * group) "Options:", options and the lines of --host and --help, whose descriptions
         * start at help_column (0: 24) like those of options. */
        const char *usage, *about, *options;
        int help_column;
        unsigned flags;
        const char *short_opts;          /* the command's own options, getopt style ("t:m:e:s:") */
        const struct option *long_opts;  /* ... and long ones, {0}-terminated; vals h H j q are taken */
        /* The arguments after the options: at least min_args, at most max_args (-1: any).
         * Too few says "missing <missing>" when none was given, else "missing <missing_rest>". */
        int min_args, max_args;
        const char *missing, *missing_rest;
        /* With --json (or without run): GET this, under the session with CLI_SESSION, and print
         * the daemon's answer as it came. */
        const char *json_path;
        /* The command's own state (call->args): args_size bytes, a copy of *args_init (CLI_ARGS)
         * or zeros. */
        size_t args_size;
        const void *args_init;
        /* Each returns 0 to go on, else the exit status (after printing why). */
        int (*option)(struct cli_call *call, int opt, const char *arg); /* one of its own options */
        int (*check)(struct cli_call *call); /* after the options and the argument count, before connecting */
        int (*run)(struct cli_call *call);   /* connected as the flags say */
        void (*cleanup)(struct cli_call *call); /* frees what option or check kept in args */
        const struct cli_entry *sub; /* a group of subcommands ("template build"): dispatched by word */
};

/* One word of a command table: the name it is called by, and its row. */
struct cli_entry {
        const char *word;
        const struct cli_cmd *cmd;
        unsigned flags;
};

enum {
        CLI_ALIAS = 1 << 0, /* another word for a row listed under its own name: not in --help */
        CLI_GAP = 1 << 1,   /* a blank line before it in --help */
};

/* The state cli_run hands the hooks. */
struct cli_call {
        const struct cli_cmd *cmd;
        const struct cli_globals *globals;
        const char *host; /* --host after the command */
        bool json, quiet;
        int argc; /* the arguments after the options */
        char **argv;
        const char *session_id; /* CLI_SESSION: check may name another than argv[0] */
        space_client *client;   /* open for run with CLI_CLIENT or CLI_SESSION */
        space_session *session; /* open for run with CLI_SESSION */
        void *args;             /* cmd->args_size bytes of the command's own */
};

/* A command's args: `CLI_ARGS(struct create_args, { .so = { SPACE_SESSION_OPTS_INIT } })`. */
#define CLI_ARGS(type, ...) .args_size = sizeof(type), .args_init = &(const type)__VA_ARGS__

/* Runs cmd on argv (argv[0] is the command's word) and returns the exit status. */
int cli_run(const struct cli_cmd *cmd, const struct cli_globals *g, int argc, char **argv);
/* The entry of table (ended by a NULL word) called word, aliases too when with_alias. */
const struct cli_entry *cli_find(const struct cli_entry *table, const char *word, bool with_alias);

/* ---- messages: each returns the exit status that goes with it ---------------------- */

/* "space: <message>" on stderr; EXIT_FAILURE. */
int cli_error(const char *fmt, ...) _printf_(1, 2);
/* "space <cmd>: <message>" and "Try 'space <cmd> --help'."; CLI_EXIT_USAGE. */
int cli_usage(const struct cli_cmd *cmd, const char *fmt, ...) _printf_(2, 3);
/* The library's message for r (or the errno text when it has none); EXIT_FAILURE. */
int cli_api_fail(const struct cli_call *call, int r);
/* The same about one of several ids a command was given: "space: <id>: <message>". */
int cli_api_fail_on(const struct cli_call *call, const char *id, int r);
/* cmd's --help on stdout; EXIT_SUCCESS. */
int cli_show_help(const struct cli_cmd *cmd);

/* ---- pieces some commands share ------------------------------------------------------ */

/* --env K=V entries, NULL-terminated. */
struct cli_env {
        const char *v[CLI_MAX_ENV + 1];
        size_t n;
};
/* Adds kv; 0, or the usage error's status after printing it. */
int cli_env_add(const struct cli_call *call, struct cli_env *env, const char *kv);

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

/* The JSON document as it came, ending in a newline. */
int cli_print_raw_json(const char *json);
/* raw: as it came (--json); else indented for people. */
int cli_print_json(const char *json, bool raw);
/* A session a command made or changed: its object with json, else its id. */
void cli_print_session(const space_session *s, bool json);
/* GETs path (under call->session when open, else of the daemon) and prints it as it came. */
int cli_get_json_and_print(const struct cli_call *call, const char *path);
