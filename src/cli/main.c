/* space: the command-line client of spaced. Each subcommand parses its own options,
 * talks to the daemon through libspace, and maps the outcome to an exit status:
 * 0 ok, 1 error ("space: <message>" on stderr), 2 usage error; exec and logs --follow
 * exit with the command's status (128+N when killed by signal N). */
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/args.h"
#include "common/buf.h"
#include "common/fdio.h"
#include "common/json.h"
#include "space/space.h"

#define EXIT_USAGE 2
#define EXIT_NOT_STARTED 127 /* a command that could not be started, as shells do */
#define MAX_ENV 1024
#define MAX_CP_DEPTH 64

static const char *g_host; /* --host before the command */
static const char *g_token; /* --token before the command: the API bearer token */

/* ---- messages -------------------------------------------------------------------- */

static int errorf(const char *fmt, ...) _printf_(1, 2);
static int errorf(const char *fmt, ...) {
        va_list ap;
        fputs("space: ", stderr);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
        return EXIT_FAILURE;
}

static int usage_error(const char *cmd, const char *fmt, ...) _printf_(2, 3);
static int usage_error(const char *cmd, const char *fmt, ...) {
        va_list ap;
        fprintf(stderr, "space %s: ", cmd);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fprintf(stderr, "\nTry 'space %s --help'.\n", cmd);
        return EXIT_USAGE;
}

/* The library's message, or the errno text when it has none. */
static const char *api_message(space_client *c, int r) {
        const char *m = c ? space_client_last_error(c) : "";
        return m && *m ? m : space_strerror(r);
}

static int api_fail(space_client *c, int r) {
        return errorf("%s", api_message(c, r));
}

/* A failure on one of the ids a command was given (it goes on with the others). */
static int api_fail_on(space_client *c, const char *id, int r) {
        return errorf("%s: %s", id, api_message(c, r));
}

/* ---- option parsing -------------------------------------------------------------- */

struct cmd {
        const char *name; /* "exec", "template build" */
        const char *help;
};

/* getopt_long with our messages: returns the option, -1 at the end, or '?' after having
 * printed a usage error. */
static int next_opt(const struct cmd *cmd, int argc, char **argv, const char *sopts, const struct option *lopts) {
        int c = getopt_long(argc, argv, sopts, lopts, NULL);
        if (c == '?') {
                if (optopt)
                        usage_error(cmd->name, "unknown option '-%c'", optopt);
                else
                        usage_error(cmd->name, "unknown option '%s'", argv[optind - 1]);
                return '?';
        }
        if (c == ':') {
                usage_error(cmd->name, "option '%s' needs a value", argv[optind - 1]);
                return '?';
        }
        return c;
}

static void start_opts(void) {
        optind = 0; /* GNU: full re-initialisation between subcommands */
        opterr = 0;
}

static int show_help(const struct cmd *cmd) {
        fputs(cmd->help, stdout);
        return EXIT_SUCCESS;
}

/* The count of the arguments after the options: at least min, at most max (-1: any).
 * Too few prints "missing <all>" when none was given, else "missing <rest>"; too many
 * names the first one over. False after printing the usage error. */
static bool args_ok(const struct cmd *cmd, int argc, char **argv, int min, int max, const char *all, const char *rest) {
        int n = argc - optind;
        if (n < min) {
                const char *what = n == 0 ? all : rest;
                usage_error(cmd->name, "missing %s", what ? what : "arguments");
                return false;
        }
        if (max >= 0 && n > max) {
                usage_error(cmd->name, "unexpected argument '%s'", argv[optind + max]);
                return false;
        }
        return true;
}

#define COMMON_LONG_OPTS { "help", no_argument, NULL, 'h' }, { "host", required_argument, NULL, 'H' }

/* What parse_simple_opts accepts besides --host and --help. */
enum {
        SIMPLE_JSON = 1 << 0,     /* --json */
        SIMPLE_QUIET = 1 << 1,    /* -q, --quiet */
        SIMPLE_IN_ORDER = 1 << 2, /* options end at the first argument (kill's "-9" is one) */
};

struct simple_opts {
        const char *host;
        bool json, quiet;
};

/* Commands whose own options are at most --json and --quiet: parses those accept names and
 * the common ones (--host, --help). -1: go on, *ret filled; otherwise the exit code to
 * return. */
static int parse_simple_opts(const struct cmd *cmd, int argc, char **argv, unsigned accept, struct simple_opts *ret) {
        struct option lopts[5] = { 0 };
        size_t n = 0;
        if (accept & SIMPLE_JSON)
                lopts[n++] = (struct option){ "json", no_argument, NULL, 'j' };
        if (accept & SIMPLE_QUIET)
                lopts[n++] = (struct option){ "quiet", no_argument, NULL, 'q' };
        lopts[n++] = (struct option){ "help", no_argument, NULL, 'h' };
        lopts[n] = (struct option){ "host", required_argument, NULL, 'H' };
        char sopts[8];
        snprintf(sopts, sizeof sopts, "%s:%sh", accept & SIMPLE_IN_ORDER ? "+" : "", accept & SIMPLE_QUIET ? "q" : "");
        struct simple_opts o = { 0 };
        int c;
        start_opts();
        while ((c = next_opt(cmd, argc, argv, sopts, lopts)) != -1) {
                switch (c) {
                case 'j': o.json = true; break;
                case 'q': o.quiet = true; break;
                case 'H': o.host = optarg; break;
                case 'h': return show_help(cmd);
                default: return EXIT_USAGE;
                }
        }
        *ret = o;
        return -1;
}

static int open_client(space_client **ret, const char *host) {
        const char *h = host ? host : g_host;
        int r = space_client_new(ret, &(struct space_client_opts){ SPACE_CLIENT_OPTS_INIT, .host = h, .token = g_token });
        if (r == -EKEYREJECTED)
                return errorf("invalid API token in %s (printable ASCII without blanks, at most %d bytes)",
                              g_token ? "--token" : "SPACE_TOKEN", SPACE_MAX_API_TOKEN);
        if (r < 0) {
                if (h)
                        return errorf("invalid daemon address '%s': %s", h, strerror(-r));
                return errorf("invalid SPACE_HOST '%s': %s", getenv("SPACE_HOST") ? getenv("SPACE_HOST") : "",
                              strerror(-r));
        }
        return 0;
}

/* The session's token from the environment, for scripts that kept it from create:
 * with it, every request on the session carries it (a wrong one is refused with 401). */
static int apply_env_token(space_session *s) {
        const char *t = getenv("SPACE_SESSION_TOKEN");
        if (!t || !*t)
                return 0;
        if (space_session_set_token(s, t) < 0) {
                errorf("SPACE_SESSION_TOKEN is not a valid token (A-Z a-z 0-9 _ -, at most %d)", SPACE_MAX_TOKEN);
                return -EINVAL;
        }
        return 1;
}

static int open_session(space_client *c, const char *id, space_session **ret) {
        space_session *s = NULL;
        int r = space_session_open(&s, c, id);
        if (r < 0)
                return api_fail(c, r);
        r = apply_env_token(s);
        if (r == 1) {
                /* the lookup above went without it: ask again with the token, so a wrong
                 * token fails here, before anything else is sent */
                int e = space_session_inspect(s, NULL);
                r = e < 0 ? api_fail(c, e) : 0;
        } else if (r < 0) {
                r = EXIT_FAILURE;
        }
        if (r) {
                space_session_free(s);
                return r;
        }
        *ret = s;
        return 0;
}

/* Client + session handle for commands on one session; prints the error itself. */
static int open_both(const char *host, const char *id, space_client **ret_c, space_session **ret_s) {
        space_client *cl = NULL;
        int r = open_client(&cl, host);
        if (r)
                return r;
        space_session *s = NULL;
        r = open_session(cl, id, &s);
        if (r) {
                space_client_free(cl);
                return r;
        }
        *ret_c = cl;
        *ret_s = s;
        return 0;
}

static int print_raw_json(const char *json) {
        if (fputs(json, stdout) < 0)
                return EXIT_FAILURE;
        size_t n = strlen(json);
        if (n == 0 || json[n - 1] != '\n')
                fputc('\n', stdout);
        return EXIT_SUCCESS;
}

static int print_pretty_json(const char *json) {
        _cleanup_buf_ struct buf b = BUF_INIT(0);
        if (cli_json_pretty(&b, json, strlen(json)) < 0)
                return print_raw_json(json);
        fwrite(b.data, 1, b.len, stdout);
        return EXIT_SUCCESS;
}

/* --json prints what the daemon sent, on one line; without it, indented for people. */
static int print_json(const char *json, bool raw) {
        return raw ? print_raw_json(json) : print_pretty_json(json);
}

/* A session a command made or changed: its object with --json, else its id. */
static void print_session(space_session *s, bool json) {
        if (json)
                print_raw_json(space_session_json(s));
        else
                printf("%s\n", space_session_id(s));
}

/* GETs path (under session s when given, else of the daemon) and prints the answer as it
 * came. */
static int get_json_and_print(space_client *c, space_session *s, const char *path) {
        _cleanup_free_ char *json = NULL;
        int r = s ? space_session_get_json(s, path, &json) : space_get_json(c, path, &json);
        if (r < 0)
                return api_fail(c, r);
        return print_raw_json(json);
}

static int exit_status_of(const struct space_exec_result *res) {
        if (res->signal > 0)
                return 128 + (res->signal & 0x7f);
        if (res->exit_code < 0)
                return EXIT_FAILURE;
        return res->exit_code & 0xff;
}

/* One --env K=V into env (MAX_ENV entries at most, NULL-terminated by its zeroed tail).
 * False after printing the usage error. */
static bool add_env(const struct cmd *cmd, const char *env[static MAX_ENV + 1], size_t *n, const char *kv) {
        if (!cli_env_ok(kv)) {
                usage_error(cmd->name, "invalid environment entry '%s' (want K=V)", kv);
                return false;
        }
        if (*n >= MAX_ENV) {
                usage_error(cmd->name, "more than %d --env entries", MAX_ENV);
                return false;
        }
        env[(*n)++] = kv;
        return true;
}

/* ---- create ---------------------------------------------------------------------- */

static int write_token_file(const char *path, const char *token);

static const struct cmd cmd_create = { "create",
        "Usage: space create [OPTIONS]\n"
        "\n"
        "Create a sandbox session and print its id. Its token is shown only now: keep\n"
        "it (--json or --token-file) to reconnect with 'space connect ID --token T'.\n"
        "\n"
        "Options:\n"
        "  -t, --template NAME   template to start from (daemon default: base)\n"
        "      --runtime NAME    ns or gvisor (keeps running processes across pause,\n"
        "                        resume and fork); default: the daemon's --runtime\n"
        "  -m, --memory SIZE     memory limit, e.g. 512M, 2G (binary units)\n"
        "      --cpus N          CPU limit in cores, e.g. 1.5\n"
        "      --pids N          limit on the number of processes\n"
        "      --disk SIZE       limit of the files the session may write, e.g. 2G, 512M\n"
        "                        (daemon default: see 'space health'); past it writes fail\n"
        "                        inside with \"Disk quota exceeded\"\n"
        "  -e, --env K=V         environment for every command (repeatable)\n"
        "      --network         give the sandbox network access (default: loopback only)\n"
        "  -s, --from-snapshot SNAP  start from this snapshot (of any session) instead of\n"
        "                        a template\n"
        "      --snapshot-interval DUR  take a rolling snapshot this often when files\n"
        "                        changed, e.g. 30s, 500ms, 5m; 0 = none (daemon default 30s)\n"
        "      --retention N     rolling snapshots to keep (daemon default 10); manual,\n"
        "                        pause and fork-source ones are always kept\n"
        "      --token-file FILE write the session's token to FILE (mode 0600)\n"
        "      --json            print the whole session object, with its \"token\",\n"
        "                        instead of the id\n"
        "      --host ADDR       daemon address (default: $SPACE_HOST)\n"
        "  -h, --help            show this help\n" };

static int do_create(int argc, char **argv) {
        static const struct option lopts[] = {
                { "template", required_argument, NULL, 't' }, { "memory", required_argument, NULL, 'm' },
                { "cpus", required_argument, NULL, 'c' },     { "pids", required_argument, NULL, 'p' },
                { "env", required_argument, NULL, 'e' },      { "network", no_argument, NULL, 'n' },
                { "json", no_argument, NULL, 'j' },           { "from-snapshot", required_argument, NULL, 's' },
                { "snapshot-interval", required_argument, NULL, 'I' }, { "retention", required_argument, NULL, 'R' },
                { "token-file", required_argument, NULL, 'F' }, { "disk", required_argument, NULL, 'D' },
                { "runtime", required_argument, NULL, 'r' },
                COMMON_LONG_OPTS,
                { 0 },
        };
        const struct cmd *cmd = &cmd_create;
        const char *token_file = NULL;
        struct space_session_opts so = { SPACE_SESSION_OPTS_INIT };
        const char *env[MAX_ENV + 1] = { 0 };
        size_t nenv = 0;
        bool json = false;
        const char *host = NULL;
        uint64_t u;
        int c;
        start_opts();
        while ((c = next_opt(cmd, argc, argv, ":t:m:e:s:h", lopts)) != -1) {
                switch (c) {
                case 't': so.template = optarg; break;
                case 'r': so.runtime = optarg; break;
                case 's': so.snapshot = optarg; break;
                case 'I':
                        if (cli_parse_duration_ms(optarg, &so.snapshot_interval_ms) < 0)
                                return usage_error(cmd->name, "invalid interval '%s' (e.g. 30s, 500ms, 5m, 0)", optarg);
                        so.no_rolling_snapshots = so.snapshot_interval_ms == 0;
                        break;
                case 'R':
                        if (cli_parse_uint(optarg, 1, 100000, &u) < 0)
                                return usage_error(cmd->name, "invalid retention '%s' (1..100000)", optarg);
                        so.retention = (unsigned)u;
                        break;
                case 'F': token_file = optarg; break;
                case 'm':
                        if (cli_parse_size(optarg, &so.memory) < 0)
                                return usage_error(cmd->name, "invalid size '%s' (e.g. 512M, 2G)", optarg);
                        break;
                case 'D':
                        if (cli_parse_size(optarg, &so.disk) < 0 || so.disk == 0)
                                return usage_error(cmd->name, "invalid disk size '%s' (e.g. 2G, 512M)", optarg);
                        break;
                case 'c':
                        if (cli_parse_positive(optarg, CLI_MAX_CPUS, &so.cpus) < 0)
                                return usage_error(cmd->name, "invalid CPU count '%s'", optarg);
                        break;
                case 'p':
                        if (cli_parse_uint(optarg, 1, CLI_MAX_PIDS, &u) < 0)
                                return usage_error(cmd->name, "invalid pids limit '%s'", optarg);
                        so.pids = (int64_t)u;
                        break;
                case 'e':
                        if (!add_env(cmd, env, &nenv, optarg))
                                return EXIT_USAGE;
                        break;
                case 'n': so.network = true; break;
                case 'j': json = true; break;
                case 'H': host = optarg; break;
                case 'h': return show_help(cmd);
                default: return EXIT_USAGE;
                }
        }
        if (!args_ok(cmd, argc, argv, 0, 0, NULL, NULL))
                return EXIT_USAGE;
        if (nenv)
                so.env = env;
        space_client *cl = NULL;
        int r = open_client(&cl, host);
        if (r)
                return r;
        space_session *s = NULL;
        r = space_session_new(&s, cl, &so);
        if (r < 0) {
                int e = api_fail(cl, r);
                space_client_free(cl);
                return e;
        }
        r = EXIT_SUCCESS;
        if (token_file) {
                if (space_session_token(s))
                        r = write_token_file(token_file, space_session_token(s));
                else
                        r = errorf("spaced returned no token for %s", space_session_id(s));
        }
        print_session(s, json);
        space_session_free(s);
        space_client_free(cl);
        return r;
}

/* ---- exec ------------------------------------------------------------------------ */

static const struct cmd cmd_exec = { "exec",
        "Usage: space exec [OPTIONS] ID [--] COMMAND [ARG...]\n"
        "\n"
        "Run a command in a sandbox. Its stdout and stderr are streamed to ours as they\n"
        "come; space exits with the command's exit code, 128+N when signal N killed it,\n"
        "127 when it could not be started, 1 on other errors.\n"
        "Our stdin is sent to the command (at most 512 KiB) with -i or when stdin is not a\n"
        "terminal; use </dev/null to send nothing.\n"
        "\n"
        "Options:\n"
        "  -i, --interactive     send stdin even when it is a terminal\n"
        "  -w, --cwd DIR         working directory inside the sandbox\n"
        "  -e, --env K=V         extra environment (repeatable)\n"
        "      --timeout SEC     kill the command after SEC seconds\n"
        "  -d, --background      start it in the background, print its pid and return;\n"
        "                        see its output with 'space logs ID PID' (no stdin)\n"
        "      --json            with -d: print {\"pid\":N}\n"
        "      --host ADDR       daemon address (default: $SPACE_HOST)\n"
        "  -h, --help            show this help\n" };

static int on_exec_output(void *ud, enum space_stream stream, const void *data, size_t len) {
        int r = fdio_write_all(stream == SPACE_STDERR ? STDERR_FILENO : STDOUT_FILENO, data, len);
        if (r == -EPIPE)
                *(bool *)ud = true;
        return r;
}

static int do_exec(int argc, char **argv) {
        static const struct option lopts[] = {
                { "interactive", no_argument, NULL, 'i' }, { "cwd", required_argument, NULL, 'w' },
                { "env", required_argument, NULL, 'e' },   { "timeout", required_argument, NULL, 'T' },
                { "background", no_argument, NULL, 'd' },  { "detach", no_argument, NULL, 'd' },
                { "json", no_argument, NULL, 'j' },        COMMON_LONG_OPTS,
                { 0 },
        };
        const struct cmd *cmd = &cmd_exec;
        struct space_exec_opts eo = { SPACE_EXEC_OPTS_INIT };
        const char *env[MAX_ENV + 1] = { 0 };
        size_t nenv = 0;
        bool interactive = false, json = false;
        const char *host = NULL;
        double tmo;
        int c;
        start_opts();
        /* '+': options end at the id, so the command's own options stay its own */
        while ((c = next_opt(cmd, argc, argv, "+:iw:e:dh", lopts)) != -1) {
                switch (c) {
                case 'i': interactive = true; break;
                case 'w': eo.cwd = optarg; break;
                case 'e':
                        if (!add_env(cmd, env, &nenv, optarg))
                                return EXIT_USAGE;
                        break;
                case 'T':
                        if (cli_parse_positive(optarg, CLI_MAX_TIMEOUT_S, &tmo) < 0)
                                return usage_error(cmd->name, "invalid timeout '%s' (seconds)", optarg);
                        eo.timeout_ms = (uint64_t)(tmo * 1000);
                        if (eo.timeout_ms == 0)
                                eo.timeout_ms = 1;
                        break;
                case 'd': eo.background = true; break;
                case 'j': json = true; break;
                case 'H': host = optarg; break;
                case 'h': return show_help(cmd);
                default: return EXIT_USAGE;
                }
        }
        if (eo.background && interactive)
                return usage_error(cmd->name, "a background command takes no stdin (-d with -i)");
        if (optind >= argc)
                return usage_error(cmd->name, "missing sandbox id");
        const char *id = argv[optind++];
        if (optind < argc && strcmp(argv[optind], "--") == 0)
                optind++;
        if (optind >= argc)
                return usage_error(cmd->name, "missing command");
        eo.argv = (const char *const *)&argv[optind];
        if (nenv)
                eo.env = env;

        _cleanup_buf_ struct buf in = BUF_INIT(SPACE_MAX_STDIN);
        if (interactive || (!eo.background && !isatty(STDIN_FILENO))) {
                int r = buf_read_fd(&in, STDIN_FILENO);
                if (r == -E2BIG)
                        return errorf("stdin is larger than %u KiB, the most exec can send; copy big inputs "
                                      "in with 'space cp'", SPACE_MAX_STDIN >> 10);
                if (r < 0 && r != -EBADF)
                        return errorf("reading stdin: %s", strerror(-r));
                if (in.len > 0) {
                        eo.stdin_data = in.data;
                        eo.stdin_len = in.len;
                }
        }
        bool broken_pipe = false;
        eo.on_output = on_exec_output;
        eo.userdata = &broken_pipe;

        space_client *cl;
        space_session *s;
        int r = open_both(host, id, &cl, &s);
        if (r)
                return r;
        struct space_exec_result res = { 0 };
        r = space_exec(s, &eo, &res);
        int status;
        if (r == -EPIPE && broken_pipe) {
                status = 128 + SIGPIPE; /* our reader went away, as a shell pipeline would see it */
        } else if (r < 0) {
                api_fail(cl, r);
                status = r == -ENOEXEC ? EXIT_NOT_STARTED : EXIT_FAILURE;
        } else if (eo.background) {
                if (json)
                        printf("{\"pid\":%d}\n", res.pid);
                else
                        printf("%d\n", res.pid);
                status = EXIT_SUCCESS;
        } else {
                if (res.timed_out)
                        errorf("command timed out after %.3g s and was killed", (double)eo.timeout_ms / 1000);
                status = exit_status_of(&res);
        }
        space_session_free(s);
        space_client_free(cl);
        return status;
}

/* ---- logs ------------------------------------------------------------------------ */

static const struct cmd cmd_logs = { "logs",
        "Usage: space logs [OPTIONS] ID PID\n"
        "\n"
        "Print the recorded output of a process (usually one started with 'exec -d'):\n"
        "stdout to stdout, stderr to stderr.\n"
        "\n"
        "Options:\n"
        "  -f, --follow          keep printing until the process ends, then exit with its\n"
        "                        status (128+N when killed by signal N)\n"
        "      --offset N        skip the first N bytes of recorded output\n"
        "      --host ADDR       daemon address (default: $SPACE_HOST)\n"
        "  -h, --help            show this help\n" };

static int parse_pid(const char *s, int *ret) {
        uint64_t v;
        if (cli_parse_uint(s, 1, INT_MAX, &v) < 0)
                return -EINVAL;
        *ret = (int)v;
        return 0;
}

static int do_logs(int argc, char **argv) {
        static const struct option lopts[] = {
                { "follow", no_argument, NULL, 'f' }, { "offset", required_argument, NULL, 'o' }, COMMON_LONG_OPTS, { 0 },
        };
        const struct cmd *cmd = &cmd_logs;
        struct space_attach_opts ao = { SPACE_ATTACH_OPTS_INIT };
        const char *host = NULL;
        int c;
        start_opts();
        while ((c = next_opt(cmd, argc, argv, ":fh", lopts)) != -1) {
                switch (c) {
                case 'f': ao.follow = true; break;
                case 'o':
                        if (cli_parse_uint(optarg, 0, UINT64_MAX - 1, &ao.offset) < 0)
                                return usage_error(cmd->name, "invalid offset '%s'", optarg);
                        break;
                case 'H': host = optarg; break;
                case 'h': return show_help(cmd);
                default: return EXIT_USAGE;
                }
        }
        if (!args_ok(cmd, argc, argv, 2, 2, "sandbox id and pid", "pid"))
                return EXIT_USAGE;
        int pid;
        if (parse_pid(argv[optind + 1], &pid) < 0)
                return usage_error(cmd->name, "invalid pid '%s'", argv[optind + 1]);
        bool broken_pipe = false;
        ao.on_output = on_exec_output;
        ao.userdata = &broken_pipe;
        space_client *cl;
        space_session *s;
        int r = open_both(host, argv[optind], &cl, &s);
        if (r)
                return r;
        struct space_exec_result res = { 0 };
        r = space_attach(s, pid, &ao, &res);
        int status = EXIT_SUCCESS;
        if (r == -EPIPE && broken_pipe)
                status = 128 + SIGPIPE;
        else if (r < 0)
                status = api_fail(cl, r);
        else if (ao.follow && res.exited)
                status = exit_status_of(&res);
        space_session_free(s);
        space_client_free(cl);
        return status;
}

/* ---- kill ------------------------------------------------------------------------ */

static const struct cmd cmd_kill = { "kill",
        "Usage: space kill [OPTIONS] ID PID [SIGNAL]\n"
        "\n"
        "Send a signal (default TERM) to a process in a sandbox. SIGNAL is a name (TERM,\n"
        "SIGKILL, int) or a number.\n"
        "\n"
        "Options:\n"
        "      --host ADDR       daemon address (default: $SPACE_HOST)\n"
        "  -h, --help            show this help\n" };

static int do_kill(int argc, char **argv) {
        const struct cmd *cmd = &cmd_kill;
        struct simple_opts o;
        int rc0 = parse_simple_opts(cmd, argc, argv, SIMPLE_IN_ORDER, &o);
        if (rc0 >= 0)
                return rc0;
        if (!args_ok(cmd, argc, argv, 2, 3, "sandbox id and pid", "pid"))
                return EXIT_USAGE;
        int pid, sig = SIGTERM;
        if (parse_pid(argv[optind + 1], &pid) < 0)
                return usage_error(cmd->name, "invalid pid '%s'", argv[optind + 1]);
        if (argc - optind == 3) {
                const char *sname = argv[optind + 2];
                if (sname[0] == '-')
                        sname++; /* "-9", "-KILL" like kill(1) */
                if (cli_parse_signal(sname, &sig) < 0)
                        return usage_error(cmd->name, "unknown signal '%s'", argv[optind + 2]);
        }
        space_client *cl;
        space_session *s;
        int r = open_both(o.host, argv[optind], &cl, &s);
        if (r)
                return r;
        int e = space_signal(s, pid, sig);
        r = e < 0 ? api_fail(cl, e) : EXIT_SUCCESS;
        space_session_free(s);
        space_client_free(cl);
        return r;
}

/* ---- ls / ps / inspect / rm ------------------------------------------------------ */

/* A command that prints a list: with --json the daemon's document at json_path, else the
 * table print_rows makes of the rows it fetches (their ids only with --quiet). */
struct list_cmd {
        const struct cmd *cmd;
        bool on_session;       /* takes a session id; json_path is under it */
        const char *json_path;
        int (*print_rows)(space_client *c, space_session *s, bool quiet);
};

static int run_list_cmd(const struct list_cmd *lc, int argc, char **argv) {
        const struct cmd *cmd = lc->cmd;
        struct simple_opts o;
        int rc0 = parse_simple_opts(cmd, argc, argv, SIMPLE_JSON | SIMPLE_QUIET, &o);
        if (rc0 >= 0)
                return rc0;
        int nargs = lc->on_session ? 1 : 0;
        if (!args_ok(cmd, argc, argv, nargs, nargs, "session id", NULL))
                return EXIT_USAGE;
        space_client *cl = NULL;
        space_session *s = NULL;
        int r = lc->on_session ? open_both(o.host, argv[optind], &cl, &s) : open_client(&cl, o.host);
        if (r)
                return r;
        r = o.json ? get_json_and_print(cl, s, lc->json_path) : lc->print_rows(cl, s, o.quiet);
        space_session_free(s);
        space_client_free(cl);
        return r;
}

static const struct cmd cmd_ls = { "ls",
        "Usage: space ls [OPTIONS]\n"
        "\n"
        "List the sessions the daemon knows.\n"
        "\n"
        "Options:\n"
        "      --json            print the daemon's JSON ({\"sessions\":[...]})\n"
        "  -q, --quiet           print ids only\n"
        "      --host ADDR       daemon address (default: $SPACE_HOST)\n"
        "  -h, --help            show this help\n" };

static int print_session_rows(space_client *cl, space_session *s, bool quiet) {
        (void)s;
        struct space_session_info *v = NULL;
        size_t n = 0;
        int e = space_session_list(cl, &v, &n);
        if (e < 0)
                return api_fail(cl, e);
        if (!quiet)
                printf("%-22s %-10s %-12s %-10s %-5s %-6s %s\n", "ID", "STATE", "TEMPLATE", "MEMORY", "CPUS", "PIDS",
                       "CREATED");
        for (size_t i = 0; i < n; i++) {
                if (quiet) {
                        printf("%s\n", v[i].id);
                        continue;
                }
                char mem[32] = "-", cpus[16] = "-", pids[24] = "-";
                if (v[i].memory_limit)
                        cli_format_size(v[i].memory_limit, mem, sizeof mem);
                if (v[i].cpus > 0)
                        snprintf(cpus, sizeof cpus, "%g", v[i].cpus);
                if (v[i].pids_limit > 0)
                        snprintf(pids, sizeof pids, "%" PRId64, v[i].pids_limit);
                printf("%-22s %-10s %-12s %-10s %-5s %-6s %s\n", v[i].id, v[i].state, v[i].template_name, mem, cpus,
                       pids, v[i].created_at);
        }
        free(v);
        return EXIT_SUCCESS;
}

static int do_ls(int argc, char **argv) {
        static const struct list_cmd lc = { &cmd_ls, false, "/v1/sessions", print_session_rows };
        return run_list_cmd(&lc, argc, argv);
}

static const struct cmd cmd_ps = { "ps",
        "Usage: space ps [OPTIONS] ID\n"
        "\n"
        "List the processes a sandbox's init tracks (background ones and their results).\n"
        "\n"
        "Options:\n"
        "      --json            print the daemon's JSON ({\"processes\":[...]})\n"
        "      --host ADDR       daemon address (default: $SPACE_HOST)\n"
        "  -h, --help            show this help\n" };

static int do_ps(int argc, char **argv) {
        const struct cmd *cmd = &cmd_ps;
        struct simple_opts o;
        int rc0 = parse_simple_opts(cmd, argc, argv, SIMPLE_JSON, &o);
        if (rc0 >= 0)
                return rc0;
        if (!args_ok(cmd, argc, argv, 1, 1, "sandbox id", NULL))
                return EXIT_USAGE;
        space_client *cl;
        space_session *s;
        int r = open_both(o.host, argv[optind], &cl, &s);
        if (r)
                return r;
        if (o.json) {
                r = get_json_and_print(cl, s, "/processes");
        } else {
                struct space_process *p = NULL;
                size_t n = 0;
                int e = space_process_list(s, &p, &n);
                if (e < 0) {
                        r = api_fail(cl, e);
                } else {
                        printf("%-8s %-14s %-10s %s\n", "PID", "STATUS", "OUTPUT", "COMMAND");
                        for (size_t i = 0; i < n; i++) {
                                char st[32], out[32];
                                const char *sn = cli_signal_name(p[i].signal);
                                if (p[i].running)
                                        snprintf(st, sizeof st, "running");
                                else if (p[i].timed_out)
                                        snprintf(st, sizeof st, "timed out");
                                else if (p[i].signal > 0)
                                        snprintf(st, sizeof st, "killed %s%s", sn ? "SIG" : "", sn ? sn : "");
                                else if (p[i].has_exit_code)
                                        snprintf(st, sizeof st, "exited %d", p[i].exit_code);
                                else
                                        snprintf(st, sizeof st, "ended");
                                if (!p[i].running && !p[i].timed_out && p[i].signal > 0 && !sn)
                                        snprintf(st, sizeof st, "killed %d", p[i].signal);
                                cli_format_size(p[i].output_bytes, out, sizeof out);
                                printf("%-8d %-14s %-10s", p[i].pid, st, out);
                                for (char **a = p[i].argv; a && *a; a++)
                                        printf(" %s", *a);
                                printf("\n");
                        }
                        space_process_list_free(p, n);
                        r = EXIT_SUCCESS;
                }
        }
        space_session_free(s);
        space_client_free(cl);
        return r;
}

static const struct cmd cmd_inspect = { "inspect",
        "Usage: space inspect [OPTIONS] ID\n"
        "\n"
        "Print a session's object (state, limits, health) as indented JSON.\n"
        "\n"
        "Options:\n"
        "      --json            print it on one line, as the daemon sent it\n"
        "      --host ADDR       daemon address (default: $SPACE_HOST)\n"
        "  -h, --help            show this help\n" };

static int do_inspect(int argc, char **argv) {
        const struct cmd *cmd = &cmd_inspect;
        struct simple_opts o;
        int rc0 = parse_simple_opts(cmd, argc, argv, SIMPLE_JSON, &o);
        if (rc0 >= 0)
                return rc0;
        if (!args_ok(cmd, argc, argv, 1, 1, "sandbox id", NULL))
                return EXIT_USAGE;
        space_client *cl;
        space_session *s;
        int r = open_both(o.host, argv[optind], &cl, &s);
        if (r)
                return r;
        r = print_json(space_session_json(s), o.json);
        space_session_free(s);
        space_client_free(cl);
        return r;
}

static const struct cmd cmd_rm = { "rm",
        "Usage: space rm [OPTIONS] ID...\n"
        "\n"
        "Delete sessions: their processes are killed and their files are gone. Prints each\n"
        "id deleted; goes on past failures and exits 1 if any.\n"
        "\n"
        "Options:\n"
        "      --host ADDR       daemon address (default: $SPACE_HOST)\n"
        "  -h, --help            show this help\n" };

static int do_rm(int argc, char **argv) {
        const struct cmd *cmd = &cmd_rm;
        struct simple_opts o;
        int rc0 = parse_simple_opts(cmd, argc, argv, 0, &o);
        if (rc0 >= 0)
                return rc0;
        if (!args_ok(cmd, argc, argv, 1, -1, "sandbox id", NULL))
                return EXIT_USAGE;
        space_client *cl = NULL;
        int r = open_client(&cl, o.host);
        if (r)
                return r;
        int status = EXIT_SUCCESS;
        for (int i = optind; i < argc; i++) {
                int e;
                if (getenv("SPACE_SESSION_TOKEN") && *getenv("SPACE_SESSION_TOKEN")) {
                        /* with the token: through a handle that sends it */
                        space_session *s = NULL;
                        e = space_session_open(&s, cl, argv[i]);
                        if (e >= 0 && space_session_set_token(s, getenv("SPACE_SESSION_TOKEN")) < 0) {
                                space_session_free(s);
                                space_client_free(cl);
                                return errorf("SPACE_SESSION_TOKEN is not a valid token");
                        }
                        if (e >= 0)
                                e = space_session_delete(s);
                        space_session_free(s);
                } else {
                        e = space_session_delete_id(cl, argv[i]);
                }
                if (e < 0) {
                        api_fail_on(cl, argv[i], e);
                        status = EXIT_FAILURE;
                } else {
                        printf("%s\n", argv[i]);
                }
        }
        space_client_free(cl);
        return status;
}

/* ---- cp -------------------------------------------------------------------------- */

static const struct cmd cmd_cp = { "cp",
        "Usage: space cp [OPTIONS] SRC DST\n"
        "\n"
        "Copy files between the host and a sandbox. One side is ID:/absolute/path in the\n"
        "sandbox, the other a local path; '-' is stdin (as SRC) or stdout (as DST).\n"
        "A DST that is an existing directory (or ends in '/') gets SRC's name inside it.\n"
        "Directories are copied recursively (regular files and directories only).\n"
        "\n"
        "Options:\n"
        "  -p, --parents         create missing parent directories in the sandbox\n"
        "      --host ADDR       daemon address (default: $SPACE_HOST)\n"
        "  -h, --help            show this help\n" };

static const char *base_name(const char *p) {
        size_t n = strlen(p);
        while (n > 1 && p[n - 1] == '/')
                n--;
        const char *s = p + n;
        while (s > p && s[-1] != '/')
                s--;
        return s;
}

/* dir + "/" + name without doubled slashes; trailing slashes of name dropped. */
static int join_path(char *out, size_t n, const char *dir, const char *name) {
        size_t nl = strlen(name);
        while (nl > 1 && name[nl - 1] == '/')
                nl--;
        size_t dl = strlen(dir);
        while (dl > 1 && dir[dl - 1] == '/')
                dl--;
        int w = snprintf(out, n, "%.*s%s%.*s", (int)dl, dir, dl == 1 && dir[0] == '/' ? "" : "/", (int)nl, name);
        return w < 0 || (size_t)w >= n ? -ENAMETOOLONG : 0;
}

static int upload_tree(space_client *cl, space_session *s, const char *local, const char *remote, bool parents, int depth);

static int upload_file(space_client *cl, space_session *s, const char *local, const char *remote, bool parents) {
        _cleanup_close_ int fd = strcmp(local, "-") == 0 ? fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 3)
                                                       : open(local, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return errorf("%s: %s", local, strerror(errno));
        struct stat st;
        if (fstat(fd, &st) < 0)
                return errorf("%s: %s", local, strerror(errno));
        unsigned mode = S_ISREG(st.st_mode) ? (st.st_mode & 07777) : 0644;
        int r = space_file_upload_fd(s, remote, fd, mode, parents, NULL);
        if (r < 0)
                return api_fail(cl, r);
        return 0;
}

static int upload_tree(space_client *cl, space_session *s, const char *local, const char *remote, bool parents, int depth) {
        if (depth > MAX_CP_DEPTH)
                return errorf("%s: directories nested deeper than %d", local, MAX_CP_DEPTH);
        if (strcmp(local, "-") == 0)
                return upload_file(cl, s, local, remote, parents);
        struct stat st;
        if (stat(local, &st) < 0)
                return errorf("%s: %s", local, strerror(errno));
        if (!S_ISDIR(st.st_mode))
                return upload_file(cl, s, local, remote, parents);
        int r = space_file_mkdir(s, remote, parents);
        if (r < 0 && r != -EEXIST)
                return api_fail(cl, r);
        _cleanup_closedir_ DIR *d = opendir(local);
        if (!d)
                return errorf("%s: %s", local, strerror(errno));
        struct dirent *de;
        while ((de = readdir(d))) {
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                char lp[PATH_MAX], rp[PATH_MAX];
                if (join_path(lp, sizeof lp, local, de->d_name) < 0 || join_path(rp, sizeof rp, remote, de->d_name) < 0)
                        return errorf("%s/%s: path too long", local, de->d_name);
                struct stat est;
                if (lstat(lp, &est) < 0)
                        return errorf("%s: %s", lp, strerror(errno));
                if (!S_ISDIR(est.st_mode) && !S_ISREG(est.st_mode)) {
                        fprintf(stderr, "space: skipping %s: not a regular file or directory\n", lp);
                        continue;
                }
                r = upload_tree(cl, s, lp, rp, false, depth + 1);
                if (r)
                        return r;
        }
        return 0;
}

static int download_file(space_client *cl, space_session *s, const char *remote, const char *local, unsigned mode) {
        if (strcmp(local, "-") == 0) {
                int r = space_file_download_fd(s, remote, STDOUT_FILENO, NULL);
                return r < 0 ? api_fail(cl, r) : 0;
        }
        /* into a temporary beside the target, renamed on success: a failed copy leaves
         * no half-written file behind */
        char tmp[PATH_MAX];
        if (snprintf(tmp, sizeof tmp, "%s.space-cp-%d", local, (int)getpid()) >= (int)sizeof tmp)
                return errorf("%s: path too long", local);
        _cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode ? mode & 0777 : 0644);
        if (fd < 0)
                return errorf("%s: %s", local, strerror(errno));
        int r = space_file_download_fd(s, remote, fd, NULL);
        if (r < 0) {
                unlink(tmp);
                return api_fail(cl, r);
        }
        if (close(TAKE_FD(fd)) < 0 || rename(tmp, local) < 0) {
                int e = errno;
                unlink(tmp);
                return errorf("%s: %s", local, strerror(e));
        }
        return 0;
}

static int download_tree(space_client *cl, space_session *s, const char *remote, const struct space_stat *rst,
                         const char *local, int depth) {
        if (depth > MAX_CP_DEPTH)
                return errorf("%s: directories nested deeper than %d", remote, MAX_CP_DEPTH);
        if (strcmp(rst->type, "dir") != 0 && strcmp(rst->type, "directory") != 0)
                return download_file(cl, s, remote, local, rst->mode);
        if (strcmp(local, "-") == 0)
                return errorf("%s is a directory; it can't go to stdout", remote);
        if (mkdir(local, 0755) < 0 && errno != EEXIST)
                return errorf("%s: %s", local, strerror(errno));
        struct space_dirent *ents = NULL;
        size_t n = 0;
        int r = space_file_list(s, remote, &ents, &n);
        if (r < 0)
                return api_fail(cl, r);
        int status = 0;
        for (size_t i = 0; i < n && !status; i++) {
                char lp[PATH_MAX], rp[PATH_MAX];
                if (strcmp(ents[i].name, ".") == 0 || strcmp(ents[i].name, "..") == 0 || strchr(ents[i].name, '/'))
                        continue;
                if (join_path(lp, sizeof lp, local, ents[i].name) < 0 || join_path(rp, sizeof rp, remote, ents[i].name) < 0) {
                        status = errorf("%s/%s: path too long", remote, ents[i].name);
                        break;
                }
                const char *t = ents[i].st.type;
                if (strcmp(t, "file") != 0 && strcmp(t, "dir") != 0 && strcmp(t, "directory") != 0 &&
                    strcmp(t, "regular") != 0) {
                        fprintf(stderr, "space: skipping %s: not a regular file or directory\n", rp);
                        continue;
                }
                status = download_tree(cl, s, rp, &ents[i].st, lp, depth + 1);
        }
        free(ents);
        return status;
}

static int do_cp(int argc, char **argv) {
        static const struct option lopts[] = { { "parents", no_argument, NULL, 'p' }, COMMON_LONG_OPTS, { 0 } };
        const struct cmd *cmd = &cmd_cp;
        const char *host = NULL;
        bool parents = false;
        int c;
        start_opts();
        while ((c = next_opt(cmd, argc, argv, ":ph", lopts)) != -1) {
                switch (c) {
                case 'p': parents = true; break;
                case 'H': host = optarg; break;
                case 'h': return show_help(cmd);
                default: return EXIT_USAGE;
                }
        }
        if (!args_ok(cmd, argc, argv, 2, 2, "source and destination", "destination"))
                return EXIT_USAGE;
        struct cli_cp_arg src, dst;
        if (cli_parse_cp_arg(argv[optind], &src) < 0)
                return usage_error(cmd->name, "'%s': a sandbox path must be ID:/absolute/path", argv[optind]);
        if (cli_parse_cp_arg(argv[optind + 1], &dst) < 0)
                return usage_error(cmd->name, "'%s': a sandbox path must be ID:/absolute/path", argv[optind + 1]);
        if (src.remote == dst.remote)
                return usage_error(cmd->name, src.remote ? "copying between sandboxes is not supported"
                                                         : "one side must be a sandbox path (ID:/path)");
        space_client *cl;
        space_session *s;
        int r = open_both(host, src.remote ? src.id : dst.id, &cl, &s);
        if (r)
                return r;
        char target[PATH_MAX];
        if (src.remote) {
                struct space_stat rst;
                int e = space_file_stat(s, src.path, &rst);
                if (e < 0) {
                        r = api_fail(cl, e);
                        goto out;
                }
                struct stat lst;
                const char *local = dst.path;
                size_t dl = strlen(local);
                if (strcmp(local, "-") != 0 && ((stat(local, &lst) == 0 && S_ISDIR(lst.st_mode)) || local[dl - 1] == '/')) {
                        if (join_path(target, sizeof target, local, base_name(src.path)) < 0) {
                                r = errorf("%s: path too long", local);
                                goto out;
                        }
                        local = target;
                }
                r = download_tree(cl, s, src.path, &rst, local, 0);
        } else {
                const char *remote = dst.path;
                size_t rl = strlen(remote);
                bool into = remote[rl - 1] == '/';
                if (!into && strcmp(src.path, "-") != 0) {
                        struct space_stat rst;
                        if (space_file_stat(s, remote, &rst) == 0 &&
                            (strcmp(rst.type, "dir") == 0 || strcmp(rst.type, "directory") == 0))
                                into = true;
                }
                if (into) {
                        if (strcmp(src.path, "-") == 0) {
                                r = usage_error(cmd->name, "copying stdin needs a file name, not a directory");
                                goto out;
                        }
                        if (join_path(target, sizeof target, remote, base_name(src.path)) < 0) {
                                r = errorf("%s: path too long", remote);
                                goto out;
                        }
                        remote = target;
                }
                struct stat lst;
                if (strcmp(src.path, "-") != 0 && stat(src.path, &lst) < 0) {
                        r = errorf("%s: %s", src.path, strerror(errno));
                        goto out;
                }
                r = upload_tree(cl, s, src.path, remote, parents, 0);
        }
out:
        space_session_free(s);
        space_client_free(cl);
        return r;
}

/* ---- templates ------------------------------------------------------------------- */

static const struct cmd cmd_template = { "template",
        "Usage: space template COMMAND ...\n"
        "\n"
        "Manage the templates sandboxes start from.\n"
        "\n"
        "Commands:\n"
        "  build NAME [--from-dir DIR | --from-tar FILE | --debootstrap SUITE [--packages a,b]] [--runtime R]\n"
        "  ls [--json]\n"
        "  rm NAME\n"
        "\n"
        "Run 'space template COMMAND --help' for details.\n" };

static const struct cmd cmd_template_build = { "template build",
        "Usage: space template build [OPTIONS] NAME [--from-dir DIR | --from-tar FILE |\n"
        "                            --debootstrap SUITE [--packages a,b] [--mirror URL]]\n"
        "                            [--runtime ns|gvisor|microvm]\n"
        "\n"
        "Build a template on the daemon's host from a directory, a tar file, or a Debian\n"
        "suite through debootstrap (the daemon caches debootstrap output). Without a\n"
        "source the daemon builds its default for NAME: 'base' is Debian bookworm\n"
        "(minbase) with python3. Progress lines go to stdout; the last line is\n"
        "\"built template NAME (SIZE)\".\n"
        "Paths are read by the daemon; relative ones are made absolute here first.\n"
        "\n"
        "Options:\n"
        "      --from-dir DIR        copy this directory tree\n"
        "      --from-tar FILE       unpack this tar file\n"
        "      --debootstrap SUITE   install Debian SUITE (e.g. bookworm), minbase variant\n"
        "      --packages a,b        extra packages for --debootstrap\n"
        "      --mirror URL          Debian mirror for --debootstrap\n"
        "      --runtime NAME        the template's default runtime: sessions made from it\n"
        "                            run on NAME unless their create names one\n"
        "      --json                print the template object at the end (progress to stderr)\n"
        "      --host ADDR           daemon address (default: $SPACE_HOST)\n"
        "  -h, --help                show this help\n" };

static const struct cmd cmd_template_ls = { "template ls",
        "Usage: space template ls [OPTIONS]\n"
        "\n"
        "List the templates on the daemon's host.\n"
        "\n"
        "Options:\n"
        "      --json            print the daemon's JSON ({\"templates\":[...]})\n"
        "  -q, --quiet           print names only\n"
        "      --host ADDR       daemon address (default: $SPACE_HOST)\n"
        "  -h, --help            show this help\n" };

static const struct cmd cmd_template_rm = { "template rm",
        "Usage: space template rm [OPTIONS] NAME...\n"
        "\n"
        "Delete templates. A template a session still uses can't be deleted.\n"
        "\n"
        "Options:\n"
        "      --host ADDR       daemon address (default: $SPACE_HOST)\n"
        "  -h, --help            show this help\n" };

static void on_progress(void *ud, const char *msg) {
        FILE *f = ud;
        fprintf(f, "%s\n", msg);
        fflush(f);
}

static int do_template_build(int argc, char **argv) {
        static const struct option lopts[] = {
                { "from-dir", required_argument, NULL, 'D' }, { "from-tar", required_argument, NULL, 'T' },
                { "debootstrap", required_argument, NULL, 'B' }, { "packages", required_argument, NULL, 'P' },
                { "mirror", required_argument, NULL, 'M' }, { "runtime", required_argument, NULL, 'R' },
                { "json", no_argument, NULL, 'j' }, COMMON_LONG_OPTS, { 0 },
        };
        const struct cmd *cmd = &cmd_template_build;
        struct space_template_build_opts bo = { SPACE_TEMPLATE_BUILD_OPTS_INIT };
        const char *host = NULL, *packages = NULL;
        bool json = false;
        int c;
        start_opts();
        while ((c = next_opt(cmd, argc, argv, ":h", lopts)) != -1) {
                switch (c) {
                case 'D': bo.from_dir = optarg; break;
                case 'T': bo.from_tar = optarg; break;
                case 'B': bo.debootstrap_suite = optarg; break;
                case 'P': packages = optarg; break;
                case 'M': bo.mirror = optarg; break;
                case 'R': bo.runtime = optarg; break;
                case 'j': json = true; break;
                case 'H': host = optarg; break;
                case 'h': return show_help(cmd);
                default: return EXIT_USAGE;
                }
        }
        if (!args_ok(cmd, argc, argv, 1, 1, "template name", NULL))
                return EXIT_USAGE;
        bo.name = argv[optind];
        int sources = !!bo.from_dir + !!bo.from_tar + !!bo.debootstrap_suite;
        if (sources > 1)
                return usage_error(cmd->name, "give at most one of --from-dir, --from-tar, --debootstrap");
        if ((packages || bo.mirror) && !bo.debootstrap_suite)
                return usage_error(cmd->name, "--packages and --mirror go with --debootstrap");
        char abs[PATH_MAX];
        const char **rel = bo.from_dir ? &bo.from_dir : bo.from_tar ? &bo.from_tar : NULL;
        if (rel && (*rel)[0] != '/') {
                if (!realpath(*rel, abs))
                        return errorf("%s: %s", *rel, strerror(errno));
                *rel = abs;
        }
        _cleanup_free_ char **pkgs = NULL;
        if (packages) {
                if (cli_split_list(packages, &pkgs) < 0)
                        return errorf("out of memory");
                bo.packages = (const char *const *)pkgs;
        }
        bo.on_progress = on_progress;
        bo.userdata = json ? stderr : stdout;
        space_client *cl = NULL;
        int r = open_client(&cl, host);
        if (r)
                return r;
        struct space_template_info info;
        int e = space_template_build(cl, &bo, &info);
        if (e < 0) {
                r = api_fail(cl, e);
        } else if (json) {
                printf("{\"name\":\"%s\",\"size_bytes\":%" PRIu64 "}\n", info.name, info.size_bytes);
        } else {
                char size[32];
                cli_format_size(info.size_bytes, size, sizeof size);
                printf("built template %s (%s)\n", info.name[0] ? info.name : bo.name, size);
        }
        space_client_free(cl);
        return r;
}

static int print_template_rows(space_client *cl, space_session *s, bool quiet) {
        (void)s;
        struct space_template_info *v = NULL;
        size_t n = 0;
        int e = space_template_list(cl, &v, &n);
        if (e < 0)
                return api_fail(cl, e);
        if (!quiet)
                printf("%-24s %-10s %s\n", "NAME", "SIZE", "CREATED");
        for (size_t i = 0; i < n; i++) {
                if (quiet) {
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

static int do_template_ls(int argc, char **argv) {
        static const struct list_cmd lc = { &cmd_template_ls, false, "/v1/templates", print_template_rows };
        return run_list_cmd(&lc, argc, argv);
}

static int do_template_rm(int argc, char **argv) {
        const struct cmd *cmd = &cmd_template_rm;
        struct simple_opts o;
        int rc0 = parse_simple_opts(cmd, argc, argv, 0, &o);
        if (rc0 >= 0)
                return rc0;
        if (!args_ok(cmd, argc, argv, 1, -1, "template name", NULL))
                return EXIT_USAGE;
        space_client *cl = NULL;
        int r = open_client(&cl, o.host);
        if (r)
                return r;
        int status = EXIT_SUCCESS;
        for (int i = optind; i < argc; i++) {
                int e = space_template_delete(cl, argv[i]);
                if (e < 0) {
                        api_fail_on(cl, argv[i], e);
                        status = EXIT_FAILURE;
                } else {
                        printf("%s\n", argv[i]);
                }
        }
        space_client_free(cl);
        return status;
}

/* ---- health ---------------------------------------------------------------------- */

static const struct cmd cmd_health = { "health",
        "Usage: space health [OPTIONS]\n"
        "\n"
        "Ask the daemon whether it is up; prints its health object. Exit 1 if unreachable.\n"
        "\n"
        "Options:\n"
        "      --host ADDR       daemon address (default: $SPACE_HOST)\n"
        "  -h, --help            show this help\n" };

static int do_health(int argc, char **argv) {
        const struct cmd *cmd = &cmd_health;
        struct simple_opts o;
        /* --json is accepted; health prints JSON either way */
        int rc0 = parse_simple_opts(cmd, argc, argv, SIMPLE_JSON, &o);
        if (rc0 >= 0)
                return rc0;
        if (!args_ok(cmd, argc, argv, 0, 0, NULL, NULL))
                return EXIT_USAGE;
        space_client *cl = NULL;
        int r = open_client(&cl, o.host);
        if (r)
                return r;
        r = get_json_and_print(cl, NULL, "/v1/health");
        space_client_free(cl);
        return r;
}

/* ---- durable sessions ------------------------------------------------------------ */

static int write_token_file(const char *path, const char *token) {
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
                return errorf("%s: %s", path, strerror(errno));
        /* an existing file keeps its mode on open: a token must not stay world-readable */
        if (fchmod(fd, 0600) < 0)
                return errorf("%s: %s", path, strerror(errno));
        char line[SPACE_MAX_TOKEN + 2];
        int n = snprintf(line, sizeof line, "%s\n", token);
        int r = fdio_write_all(fd, line, (size_t)n);
        if (r < 0)
                return errorf("%s: %s", path, strerror(-r));
        if (close(TAKE_FD(fd)) < 0)
                return errorf("%s: %s", path, strerror(errno));
        return 0;
}

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

static const struct cmd cmd_snapshot = { "snapshot",
        "Usage: space snapshot [OPTIONS] ID\n"
        "\n"
        "Take a snapshot of a session's files now and print its id (snap_...).\n"
        "\n"
        "Options:\n"
        "  -l, --label TEXT      a label to find it by (at most 256 bytes)\n"
        "      --memory          the running processes too (gvisor, microvm): the sandbox\n"
        "                        is checkpointed and restarted from the image\n"
        "      --json            print the snapshot object\n"
        "      --host ADDR       daemon address (default: $SPACE_HOST)\n"
        "  -h, --help            show this help\n" };

static int do_snapshot(int argc, char **argv) {
        static const struct option lopts[] = {
                { "label", required_argument, NULL, 'l' }, { "json", no_argument, NULL, 'j' },
                { "memory", no_argument, NULL, 'M' }, COMMON_LONG_OPTS, { 0 },
        };
        const struct cmd *cmd = &cmd_snapshot;
        const char *host = NULL, *label = NULL;
        bool json = false, memory = false;
        int c;
        start_opts();
        while ((c = next_opt(cmd, argc, argv, ":l:h", lopts)) != -1) {
                switch (c) {
                case 'l':
                        if (strlen(optarg) > SPACE_MAX_LABEL)
                                return usage_error(cmd->name, "label longer than %d bytes", SPACE_MAX_LABEL);
                        label = optarg;
                        break;
                case 'j': json = true; break;
                case 'M': memory = true; break;
                case 'H': host = optarg; break;
                case 'h': return show_help(cmd);
                default: return EXIT_USAGE;
                }
        }
        if (!args_ok(cmd, argc, argv, 1, 1, "session id", NULL))
                return EXIT_USAGE;
        space_client *cl;
        space_session *s;
        int r = open_both(host, argv[optind], &cl, &s);
        if (r)
                return r;
        struct space_snapshot_info si;
        int e = space_snapshot_create_memory(s, label, memory, &si);
        if (e < 0)
                r = api_fail(cl, e);
        else if (json)
                print_snapshot_json(&si);
        else
                printf("%s\n", si.id);
        space_session_free(s);
        space_client_free(cl);
        return r;
}

static const struct cmd cmd_snapshots = { "snapshots",
        "Usage: space snapshots [OPTIONS] ID\n"
        "\n"
        "List a session's snapshot timeline, oldest first: id, time, reason (rolling,\n"
        "pause, manual, fork, restore), bytes it added to the store, size of the files it\n"
        "holds, label.\n"
        "\n"
        "Options:\n"
        "      --json            print the daemon's JSON ({\"snapshots\":[...]})\n"
        "  -q, --quiet           print ids only\n"
        "      --host ADDR       daemon address (default: $SPACE_HOST)\n"
        "  -h, --help            show this help\n" };

static int print_snapshot_rows(space_client *cl, space_session *s, bool quiet) {
        struct space_snapshot_info *v = NULL;
        size_t n = 0;
        int e = space_snapshot_list(s, &v, &n);
        if (e < 0)
                return api_fail(cl, e);
        if (!quiet)
                printf("%-22s %-24s %-8s %-10s %-10s %s\n", "ID", "CREATED", "REASON", "ADDED", "SIZE", "LABEL");
        for (size_t i = 0; i < n; i++) {
                if (quiet) {
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

static int do_snapshots(int argc, char **argv) {
        static const struct list_cmd lc = { &cmd_snapshots, true, "/snapshots", print_snapshot_rows };
        return run_list_cmd(&lc, argc, argv);
}

/* pause, resume: the same shape, one call per id */
static int lifecycle_cmd(const struct cmd *cmd, int (*fn)(space_session *), int argc, char **argv) {
        struct simple_opts o;
        int rc0 = parse_simple_opts(cmd, argc, argv, SIMPLE_JSON, &o);
        if (rc0 >= 0)
                return rc0;
        if (!args_ok(cmd, argc, argv, 1, -1, "session id", NULL))
                return EXIT_USAGE;
        space_client *cl = NULL;
        int r = open_client(&cl, o.host);
        if (r)
                return r;
        int status = EXIT_SUCCESS;
        for (int i = optind; i < argc; i++) {
                space_session *s = NULL;
                int e = space_session_open(&s, cl, argv[i]);
                if (e >= 0) {
                        if (apply_env_token(s) < 0) {
                                space_session_free(s);
                                status = EXIT_FAILURE;
                                break;
                        }
                        e = fn(s);
                }
                if (e < 0) {
                        api_fail_on(cl, argv[i], e);
                        status = EXIT_FAILURE;
                } else if (o.json) {
                        print_raw_json(space_session_json(s));
                } else {
                        printf("%s\n", argv[i]);
                }
                space_session_free(s);
        }
        space_client_free(cl);
        return status;
}

static const struct cmd cmd_pause = { "pause",
        "Usage: space pause [OPTIONS] ID...\n"
        "\n"
        "Pause sessions: a final snapshot, then the sandbox is destroyed (no process,\n"
        "mount or cgroup is left; processes end). Files and the event log stay; 'space\n"
        "resume' brings the session back. Prints each id paused; goes on past failures\n"
        "and exits 1 if any.\n"
        "\n"
        "Options:\n"
        "      --json            print each session object instead of the id\n"
        "      --host ADDR       daemon address (default: $SPACE_HOST)\n"
        "  -h, --help            show this help\n" };

static const struct cmd cmd_resume = { "resume",
        "Usage: space resume [OPTIONS] ID...\n"
        "\n"
        "Resume paused sessions on a new sandbox from their newest snapshot: same id, same\n"
        "files, same event log. Prints each id resumed; exits 1 if any failed (resuming a\n"
        "session that is not paused is an error).\n"
        "\n"
        "Options:\n"
        "      --json            print each session object instead of the id\n"
        "      --host ADDR       daemon address (default: $SPACE_HOST)\n"
        "  -h, --help            show this help\n" };

static int do_pause(int argc, char **argv) { return lifecycle_cmd(&cmd_pause, space_session_pause, argc, argv); }
static int do_resume(int argc, char **argv) { return lifecycle_cmd(&cmd_resume, space_session_resume, argc, argv); }

static const struct cmd cmd_restore = { "restore",
        "Usage: space restore [OPTIONS] ID SNAP\n"
        "\n"
        "Time travel in place: the session's files go back to snapshot SNAP (one of its\n"
        "own; see 'space snapshots ID'). Newer snapshots stay in the timeline, so you can\n"
        "restore forward again. Processes restart on the new sandbox. Prints the id.\n"
        "\n"
        "Options:\n"
        "      --json            print the session object instead of the id\n"
        "      --host ADDR       daemon address (default: $SPACE_HOST)\n"
        "  -h, --help            show this help\n" };

static int do_restore(int argc, char **argv) {
        const struct cmd *cmd = &cmd_restore;
        struct simple_opts o;
        int rc0 = parse_simple_opts(cmd, argc, argv, SIMPLE_JSON, &o);
        if (rc0 >= 0)
                return rc0;
        if (!args_ok(cmd, argc, argv, 2, 2, "session id and snapshot", "snapshot"))
                return EXIT_USAGE;
        space_client *cl;
        space_session *s;
        int r = open_both(o.host, argv[optind], &cl, &s);
        if (r)
                return r;
        int e = space_session_restore(s, argv[optind + 1]);
        if (e < 0)
                r = api_fail(cl, e);
        else
                print_session(s, o.json);
        space_session_free(s);
        space_client_free(cl);
        return r;
}

static const struct cmd cmd_fork = { "fork",
        "Usage: space fork [OPTIONS] ID\n"
        "\n"
        "Branch a session: N new sessions that start from a snapshot of it, independent of\n"
        "each other and of it (stored data is shared copy-on-write). Prints the new ids,\n"
        "one per line. Their tokens are shown only with --json (or --token-dir).\n"
        "\n"
        "Options:\n"
        "  -s, --snapshot SNAP   start from this snapshot (default: a new one of now)\n"
        "  -n, --count N         how many sessions (1..64, default 1)\n"
        "      --token-dir DIR   write each new session's token to DIR/ID.token (mode 0600)\n"
        "      --json            print {\"sessions\":[...]}: each session object with its token\n"
        "      --host ADDR       daemon address (default: $SPACE_HOST)\n"
        "  -h, --help            show this help\n" };

static int do_fork(int argc, char **argv) {
        static const struct option lopts[] = {
                { "snapshot", required_argument, NULL, 's' }, { "count", required_argument, NULL, 'n' },
                { "token-dir", required_argument, NULL, 'T' }, { "json", no_argument, NULL, 'j' }, COMMON_LONG_OPTS, { 0 },
        };
        const struct cmd *cmd = &cmd_fork;
        struct space_fork_opts fo = { SPACE_FORK_OPTS_INIT, .count = 1 };
        const char *host = NULL, *token_dir = NULL;
        bool json = false;
        uint64_t u;
        int c;
        start_opts();
        while ((c = next_opt(cmd, argc, argv, ":s:n:h", lopts)) != -1) {
                switch (c) {
                case 's': fo.snapshot = optarg; break;
                case 'n':
                        if (cli_parse_uint(optarg, 1, SPACE_MAX_FORK, &u) < 0)
                                return usage_error(cmd->name, "invalid count '%s' (1..%d)", optarg, SPACE_MAX_FORK);
                        fo.count = (unsigned)u;
                        break;
                case 'T': token_dir = optarg; break;
                case 'j': json = true; break;
                case 'H': host = optarg; break;
                case 'h': return show_help(cmd);
                default: return EXIT_USAGE;
                }
        }
        if (!args_ok(cmd, argc, argv, 1, 1, "session id", NULL))
                return EXIT_USAGE;
        space_client *cl;
        space_session *s;
        int r = open_both(host, argv[optind], &cl, &s);
        if (r)
                return r;
        space_session **v = NULL;
        size_t n = 0;
        int e = space_session_fork(s, &fo, &v, &n);
        if (e < 0) {
                r = api_fail(cl, e);
                goto out;
        }
        for (size_t i = 0; token_dir && i < n && !r; i++) {
                char path[PATH_MAX];
                if (snprintf(path, sizeof path, "%s/%s.token", token_dir, space_session_id(v[i])) >= (int)sizeof path)
                        r = errorf("%s: path too long", token_dir);
                else if (space_session_token(v[i]))
                        r = write_token_file(path, space_session_token(v[i]));
        }
        if (json) {
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
out:
        space_session_free(s);
        space_client_free(cl);
        return r;
}

static const struct cmd cmd_events = { "events",
        "Usage: space events [OPTIONS] ID\n"
        "\n"
        "Print a session's event log, oldest first: every exec, lifecycle change (created,\n"
        "paused, resumed, restored, forked), snapshot, recovery, and the events an agent\n"
        "appended. One line per event: SEQ TIME KIND DATA (DATA is JSON).\n"
        "\n"
        "Options:\n"
        "      --after SEQ       only events after sequence number SEQ\n"
        "  -n, --limit N         at most N events (default: all)\n"
        "  -f, --follow          keep printing new events as they come (polls twice a\n"
        "                        second) until interrupted or the session is deleted\n"
        "      --json            one JSON object per line: {\"seq\",\"time\",\"kind\",\"data\"}\n"
        "      --host ADDR       daemon address (default: $SPACE_HOST)\n"
        "  -h, --help            show this help\n" };

#define EVENTS_FOLLOW_POLL_MS 500

static int print_event(const struct space_event *ev, bool json) {
        if (!json)
                return printf("%-6" PRIu64 " %-24s %-10s %s\n", ev->seq, ev->time, ev->kind, ev->data) < 0 ? -EIO : 0;
        _cleanup_buf_ struct buf b = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&b);
        json_w_obj_begin(&w);
        json_w_key(&w, "seq");
        json_w_uint(&w, ev->seq);
        json_w_kstr(&w, "time", ev->time);
        json_w_kstr(&w, "kind", ev->kind);
        json_w_key(&w, "data");
        json_w_raw(&w, ev->data, strlen(ev->data));
        json_w_obj_end(&w);
        if (w.err || !buf_cstr(&b))
                return w.err ? w.err : -ENOMEM;
        return printf("%s\n", b.data) < 0 ? -EIO : 0;
}

static int do_events(int argc, char **argv) {
        static const struct option lopts[] = {
                { "after", required_argument, NULL, 'a' }, { "limit", required_argument, NULL, 'n' },
                { "follow", no_argument, NULL, 'f' }, { "json", no_argument, NULL, 'j' }, COMMON_LONG_OPTS, { 0 },
        };
        const struct cmd *cmd = &cmd_events;
        const char *host = NULL;
        bool json = false, follow = false;
        uint64_t after = 0, limit = 0;
        int c;
        start_opts();
        while ((c = next_opt(cmd, argc, argv, ":n:fh", lopts)) != -1) {
                switch (c) {
                case 'a':
                        if (cli_parse_uint(optarg, 0, UINT64_MAX - 1, &after) < 0)
                                return usage_error(cmd->name, "invalid sequence number '%s'", optarg);
                        break;
                case 'n':
                        if (cli_parse_uint(optarg, 1, UINT32_MAX, &limit) < 0)
                                return usage_error(cmd->name, "invalid limit '%s'", optarg);
                        break;
                case 'f': follow = true; break;
                case 'j': json = true; break;
                case 'H': host = optarg; break;
                case 'h': return show_help(cmd);
                default: return EXIT_USAGE;
                }
        }
        if (follow && limit)
                return usage_error(cmd->name, "--follow and --limit don't go together");
        if (!args_ok(cmd, argc, argv, 1, 1, "session id", NULL))
                return EXIT_USAGE;
        space_client *cl;
        space_session *s;
        int r = open_both(host, argv[optind], &cl, &s);
        if (r)
                return r;
        uint64_t printed = 0;
        for (;;) {
                unsigned want = SPACE_MAX_EVENT_PAGE;
                if (limit && limit - printed < want)
                        want = (unsigned)(limit - printed);
                struct space_event_page p;
                int e = space_event_list(s, after, want, &p);
                if (e < 0) {
                        r = api_fail(cl, e);
                        break;
                }
                for (size_t i = 0; i < p.n && !r; i++) {
                        int pe = print_event(&p.events[i], json);
                        if (pe < 0)
                                r = errorf("writing the events: %s", strerror(-pe));
                }
                printed += p.n;
                bool more = p.more && p.n > 0;
                after = p.next; /* the library never moves it back */
                space_event_page_free(&p);
                if (r || (limit && printed >= limit))
                        break;
                if (more)
                        continue;
                if (!follow)
                        break;
                fflush(stdout);
                usleep(EVENTS_FOLLOW_POLL_MS * 1000);
        }
        space_session_free(s);
        space_client_free(cl);
        return r;
}

static const struct cmd cmd_event = { "event",
        "Usage: space event [OPTIONS] ID --data JSON\n"
        "\n"
        "Append an event of your own to a session's event log (an agent's tool call or\n"
        "note) and print its sequence number.\n"
        "\n"
        "Options:\n"
        "  -k, --kind KIND       agent, tool_call or note (default: note)\n"
        "  -d, --data JSON       the event's data: a JSON object, at most 64 KiB\n"
        "      --host ADDR       daemon address (default: $SPACE_HOST)\n"
        "  -h, --help            show this help\n" };

static int do_event(int argc, char **argv) {
        static const struct option lopts[] = {
                { "kind", required_argument, NULL, 'k' }, { "data", required_argument, NULL, 'd' }, COMMON_LONG_OPTS, { 0 },
        };
        const struct cmd *cmd = &cmd_event;
        const char *host = NULL, *kind = "note", *data = NULL;
        int c;
        start_opts();
        while ((c = next_opt(cmd, argc, argv, ":k:d:h", lopts)) != -1) {
                switch (c) {
                case 'k': kind = optarg; break;
                case 'd': data = optarg; break;
                case 'H': host = optarg; break;
                case 'h': return show_help(cmd);
                default: return EXIT_USAGE;
                }
        }
        if (!args_ok(cmd, argc, argv, 1, 1, "session id", NULL))
                return EXIT_USAGE;
        if (!data)
                return usage_error(cmd->name, "missing --data JSON");
        if (strlen(data) > SPACE_MAX_EVENT_DATA)
                return usage_error(cmd->name, "--data is larger than %u KiB", SPACE_MAX_EVENT_DATA >> 10);
        _cleanup_buf_ struct buf pretty = BUF_INIT(0);
        if (cli_json_pretty(&pretty, data, strlen(data)) < 0)
                return usage_error(cmd->name, "--data is not valid JSON");
        space_client *cl;
        space_session *s;
        int r = open_both(host, argv[optind], &cl, &s);
        if (r)
                return r;
        uint64_t seq = 0;
        int e = space_event_append(s, kind, data, &seq);
        if (e < 0)
                r = api_fail(cl, e);
        else
                printf("%" PRIu64 "\n", seq);
        space_session_free(s);
        space_client_free(cl);
        return r;
}

static const struct cmd cmd_connect = { "connect",
        "Usage: space connect [OPTIONS] ID [--token TOKEN]\n"
        "\n"
        "Reconnect to a session with the token its create (or fork) returned: checks the\n"
        "token and prints the session with its running background processes. Re-attach\n"
        "to a process's output with 'space logs --offset N --follow ID PID'. Later\n"
        "commands send the token when SPACE_SESSION_TOKEN holds it.\n"
        "\n"
        "Options:\n"
        "  -t, --token TOKEN     the session token (default: $SPACE_SESSION_TOKEN)\n"
        "      --json            print the answer on one line, as the daemon sent it\n"
        "      --host ADDR       daemon address (default: $SPACE_HOST)\n"
        "  -h, --help            show this help\n" };

static int do_connect(int argc, char **argv) {
        static const struct option lopts[] = {
                { "token", required_argument, NULL, 't' }, { "json", no_argument, NULL, 'j' }, COMMON_LONG_OPTS, { 0 },
        };
        const struct cmd *cmd = &cmd_connect;
        const char *host = NULL, *token = getenv("SPACE_SESSION_TOKEN");
        bool json = false;
        int c;
        start_opts();
        while ((c = next_opt(cmd, argc, argv, ":t:h", lopts)) != -1) {
                switch (c) {
                case 't': token = optarg; break;
                case 'j': json = true; break;
                case 'H': host = optarg; break;
                case 'h': return show_help(cmd);
                default: return EXIT_USAGE;
                }
        }
        if (!args_ok(cmd, argc, argv, 1, 1, "session id", NULL))
                return EXIT_USAGE;
        if (!token || !*token)
                return usage_error(cmd->name, "missing --token (or SPACE_SESSION_TOKEN)");
        space_client *cl = NULL;
        int r = open_client(&cl, host);
        if (r)
                return r;
        space_session *s = NULL;
        int e = space_session_connect(&s, cl, argv[optind], token);
        if (e < 0)
                r = api_fail(cl, e);
        else
                r = print_json(space_session_json(s), json);
        space_session_free(s);
        space_client_free(cl);
        return r;
}

static const struct cmd cmd_gc = { "gc",
        "Usage: space gc [OPTIONS]\n"
        "\n"
        "Collect the snapshot store's garbage now (spaced also does it by itself from\n"
        "time to time): data only deleted sessions and expired rolling snapshots held.\n"
        "\n"
        "Options:\n"
        "      --json            print {\"objects_removed\":N,\"bytes_freed\":N}\n"
        "      --host ADDR       daemon address (default: $SPACE_HOST)\n"
        "  -h, --help            show this help\n" };

static int do_gc(int argc, char **argv) {
        const struct cmd *cmd = &cmd_gc;
        struct simple_opts o;
        int rc0 = parse_simple_opts(cmd, argc, argv, SIMPLE_JSON, &o);
        if (rc0 >= 0)
                return rc0;
        if (!args_ok(cmd, argc, argv, 0, 0, NULL, NULL))
                return EXIT_USAGE;
        space_client *cl = NULL;
        int r = open_client(&cl, o.host);
        if (r)
                return r;
        struct space_gc_result g;
        int e = space_gc(cl, &g);
        if (e < 0) {
                r = api_fail(cl, e);
        } else if (o.json) {
                printf("{\"objects_removed\":%" PRIu64 ",\"bytes_freed\":%" PRIu64 "}\n", g.objects_removed, g.bytes_freed);
        } else {
                char size[32];
                cli_format_size(g.bytes_freed, size, sizeof size);
                printf("removed %" PRIu64 " objects, freed %s\n", g.objects_removed, size);
        }
        space_client_free(cl);
        return r;
}

/* ---- pool ------------------------------------------------------------------------ */

static const struct cmd cmd_pool = { "pool",
        "Usage: space pool [OPTIONS] [TEMPLATE=N]\n"
        "\n"
        "Show the warm pool: per template, how many sandboxes spaced keeps made ahead so\n"
        "that a create only hands one over. With TEMPLATE=N, keep N of TEMPLATE from now\n"
        "on (0 = none: every create makes its sandbox then); lasts until spaced stops\n"
        "(spaced --pool TEMPLATE=N sets it at start).\n"
        "\n"
        "Options:\n"
        "      --json            print the daemon's JSON on one line\n"
        "      --host ADDR       daemon address (default: $SPACE_HOST)\n"
        "  -h, --help            show this help\n" };

static int do_pool(int argc, char **argv) {
        const struct cmd *cmd = &cmd_pool;
        struct simple_opts o;
        int rc0 = parse_simple_opts(cmd, argc, argv, SIMPLE_JSON, &o);
        if (rc0 >= 0)
                return rc0;
        if (!args_ok(cmd, argc, argv, 0, 1, NULL, NULL))
                return EXIT_USAGE;
        char name[80] = "";
        unsigned long size = 0;
        if (optind < argc) {
                const char *arg = argv[optind], *eq = strrchr(arg, '=');
                char *end = NULL;
                if (eq) {
                        errno = 0;
                        size = strtoul(eq + 1, &end, 10);
                }
                if (!eq || eq == arg || (size_t)(eq - arg) >= sizeof name || !end || end == eq + 1 || *end ||
                    eq[1] == '-' || errno || size > 100000)
                        return usage_error(cmd->name, "'%s' is not TEMPLATE=N", arg);
                memcpy(name, arg, (size_t)(eq - arg));
                name[eq - arg] = '\0';
        }
        space_client *cl = NULL;
        int r = open_client(&cl, o.host);
        if (r)
                return r;
        char *out = NULL;
        int e = name[0] ? space_pool_set(cl, name, (unsigned)size, &out) : space_get_json(cl, "/v1/pool", &out);
        if (e < 0)
                r = api_fail(cl, e);
        else
                r = print_json(out, o.json);
        free(out);
        space_client_free(cl);
        return r;
}

/* ---- dispatch -------------------------------------------------------------------- */

static const char main_help[] =
        "Usage: space [--host ADDR] [--token TOKEN] COMMAND [ARGS...]\n"
        "\n"
        "Client of spaced, the SPACE sandbox daemon.\n"
        "\n"
        "Commands:\n"
        "  create      create a sandbox session, print its id\n"
        "  exec        run a command in a sandbox, streaming its output\n"
        "  cp          copy files between the host and a sandbox\n"
        "  ls          list sessions\n"
        "  ps          list a sandbox's processes\n"
        "  logs        print (or follow) a background process's output\n"
        "  kill        signal a process in a sandbox\n"
        "  inspect     show a session's details\n"
        "  rm          delete sessions\n"
        "\n"
        "  snapshot    take a snapshot of a session's files, print its id\n"
        "  snapshots   list a session's snapshot timeline\n"
        "  pause       snapshot a session and release its sandbox\n"
        "  resume      bring a paused session back on a new sandbox\n"
        "  restore     put a session's files back to one of its snapshots\n"
        "  fork        branch a session into N independent copies\n"
        "  events      print (or follow) a session's event log\n"
        "  event       append an event of your own to the log\n"
        "  connect     reconnect to a session with its token\n"
        "  gc          collect unreferenced snapshot data now\n"
        "  pool        show or set the warm pool of ready sandboxes\n"
        "\n"
        "  template    build, list and delete templates\n"
        "  health      check that the daemon answers\n"
        "\n"
        "The daemon is found at --host ADDR, else $SPACE_HOST, else the Unix socket\n"
        "$SPACE_DATA/spaced.sock ($SPACE_DATA defaults to /var/lib/space). ADDR is\n"
        "unix:/path, /path, tcp://host:port or host:port.\n"
        "Every request carries the API token --token TOKEN (before the command), else\n"
        "$SPACE_TOKEN, if any ('spaced token add' makes one): TCP needs it; on the Unix\n"
        "socket no token means the local operator. Prefer SPACE_TOKEN: a command line is\n"
        "visible to other users in ps.\n"
        "Run 'space COMMAND --help' for a command's options.\n";

struct entry {
        const char *name;
        int (*fn)(int argc, char **argv);
};

static const struct entry commands[] = {
        { "create", do_create }, { "exec", do_exec }, { "cp", do_cp },           { "ls", do_ls },
        { "list", do_ls },       { "ps", do_ps },     { "logs", do_logs },       { "kill", do_kill },
        { "inspect", do_inspect }, { "rm", do_rm },   { "health", do_health },
        { "snapshot", do_snapshot }, { "snapshots", do_snapshots }, { "pause", do_pause },
        { "resume", do_resume },   { "restore", do_restore }, { "fork", do_fork },
        { "events", do_events },   { "event", do_event }, { "connect", do_connect }, { "gc", do_gc },
        { "pool", do_pool },
};

static const struct entry template_commands[] = {
        { "build", do_template_build }, { "ls", do_template_ls }, { "list", do_template_ls }, { "rm", do_template_rm },
};

static int do_template(int argc, char **argv) {
        if (argc < 2)
                return usage_error("template", "missing command (build, ls, rm)");
        if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0)
                return show_help(&cmd_template);
        for (size_t i = 0; i < ELEMENTSOF(template_commands); i++)
                if (strcmp(argv[1], template_commands[i].name) == 0)
                        return template_commands[i].fn(argc - 1, argv + 1);
        return usage_error("template", "unknown command '%s'", argv[1]);
}

static const struct cmd *help_of(const char *name) {
        static const struct {
                const char *name;
                const struct cmd *cmd;
        } map[] = {
                { "create", &cmd_create }, { "exec", &cmd_exec },   { "cp", &cmd_cp },           { "ls", &cmd_ls },
                { "ps", &cmd_ps },         { "logs", &cmd_logs },   { "kill", &cmd_kill },       { "inspect", &cmd_inspect },
                { "rm", &cmd_rm },         { "health", &cmd_health }, { "template", &cmd_template },
                { "snapshot", &cmd_snapshot }, { "snapshots", &cmd_snapshots }, { "pause", &cmd_pause },
                { "resume", &cmd_resume }, { "restore", &cmd_restore }, { "fork", &cmd_fork },
                { "events", &cmd_events }, { "event", &cmd_event }, { "connect", &cmd_connect }, { "gc", &cmd_gc },
                { "pool", &cmd_pool },
        };
        for (size_t i = 0; i < ELEMENTSOF(map); i++)
                if (strcmp(name, map[i].name) == 0)
                        return map[i].cmd;
        return NULL;
}

int main(int argc, char **argv) {
        /* A closed stdout pipe shows up as EPIPE from write(), handled where we write. */
        signal(SIGPIPE, SIG_IGN);
        static const struct option lopts[] = {
                { "help", no_argument, NULL, 'h' }, { "host", required_argument, NULL, 'H' },
                { "token", required_argument, NULL, 'K' }, { "version", no_argument, NULL, 'V' }, { 0 },
        };
        int c;
        start_opts();
        while ((c = getopt_long(argc, argv, "+:h", lopts, NULL)) != -1) {
                switch (c) {
                case 'h': fputs(main_help, stdout); return EXIT_SUCCESS;
                case 'H': g_host = optarg; break;
                case 'K': g_token = optarg; break;
                case 'V': printf("space %s\n", SPACE_VERSION); return EXIT_SUCCESS;
                case ':':
                        fprintf(stderr, "space: option '%s' needs a value\nTry 'space --help'.\n", argv[optind - 1]);
                        return EXIT_USAGE;
                default:
                        fprintf(stderr, "space: unknown option '%s'\nTry 'space --help'.\n", argv[optind - 1]);
                        return EXIT_USAGE;
                }
        }
        if (optind >= argc) {
                fputs(main_help, stderr);
                return EXIT_USAGE;
        }
        const char *name = argv[optind];
        int sub_argc = argc - optind;
        char **sub_argv = argv + optind;
        if (strcmp(name, "help") == 0) {
                if (sub_argc < 2) {
                        fputs(main_help, stdout);
                        return EXIT_SUCCESS;
                }
                if (strcmp(sub_argv[1], "template") == 0 && sub_argc >= 3) {
                        char *av[] = { (char *)"template", sub_argv[2], (char *)"--help", NULL };
                        return do_template(3, av);
                }
                const struct cmd *h = help_of(sub_argv[1]);
                if (!h) {
                        fprintf(stderr, "space: unknown command '%s'\nTry 'space --help'.\n", sub_argv[1]);
                        return EXIT_USAGE;
                }
                return show_help(h);
        }
        if (strcmp(name, "template") == 0)
                return do_template(sub_argc, sub_argv);
        for (size_t i = 0; i < ELEMENTSOF(commands); i++)
                if (strcmp(name, commands[i].name) == 0) {
                        int r = commands[i].fn(sub_argc, sub_argv);
                        if (fflush(stdout) != 0 && r == EXIT_SUCCESS)
                                r = EXIT_FAILURE;
                        return r;
                }
        fprintf(stderr, "space: unknown command '%s'\nTry 'space --help'.\n", name);
        return EXIT_USAGE;
}
