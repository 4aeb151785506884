/* space exec, logs, kill, ps: the commands on a sandbox's processes. exec and logs --follow
 * exit with the command's status (128+N when signal N killed it). */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "cli/commands.h"
#include "common/buf.h"
#include "common/fdio.h"

/* Output of a command to ours; a reader of ours that went away is noted in *ud. */
static int on_output(void *ud, enum space_stream stream, const void *data, size_t len) {
        int r = fdio_write_all(stream == SPACE_STDERR ? STDERR_FILENO : STDOUT_FILENO, data, len);
        if (r == -EPIPE)
                *(bool *)ud = true;
        return r;
}

static int parse_pid(const char *s, int *ret) {
        uint64_t v;
        if (cli_parse_uint(s, 1, INT_MAX, &v) < 0)
                return -EINVAL;
        *ret = (int)v;
        return 0;
}

/* ---- exec ------------------------------------------------------------------------ */

struct exec_args {
        struct space_exec_opts eo;
        struct cli_env env;
        bool interactive;
        bool broken_pipe;
        struct buf in; /* our stdin, read before connecting */
};

static int exec_option(struct cli_call *call, int opt, const char *arg) {
        struct exec_args *a = call->args;
        double tmo;
        switch (opt) {
        case 'i': a->interactive = true; break;
        case 'w': a->eo.cwd = arg; break;
        case 'e': return cli_env_add(call, &a->env, arg);
        case 'T':
                if (cli_parse_positive(arg, CLI_MAX_TIMEOUT_S, &tmo) < 0)
                        return cli_usage(call->cmd, "invalid timeout '%s' (seconds)", arg);
                a->eo.timeout_ms = (uint64_t)(tmo * 1000);
                if (a->eo.timeout_ms == 0)
                        a->eo.timeout_ms = 1;
                break;
        case 'd': a->eo.background = true; break;
        }
        return 0;
}

/* "ID [--] COMMAND [ARG...]", then our stdin when it goes to the command. */
static int exec_check(struct cli_call *call) {
        struct exec_args *a = call->args;
        struct space_exec_opts *eo = &a->eo;
        if (eo->background && a->interactive)
                return cli_usage(call->cmd, "a background command takes no stdin (-d with -i)");
        if (call->argc < 1)
                return cli_usage(call->cmd, "missing sandbox id");
        int i = 1;
        if (i < call->argc && strcmp(call->argv[i], "--") == 0)
                i++;
        if (i >= call->argc)
                return cli_usage(call->cmd, "missing command");
        eo->argv = (const char *const *)&call->argv[i];
        if (a->env.n)
                eo->env = a->env.v;

        a->in = BUF_INIT(SPACE_MAX_STDIN);
        if (a->interactive || (!eo->background && !isatty(STDIN_FILENO))) {
                int r = buf_read_fd(&a->in, STDIN_FILENO);
                if (r == -E2BIG)
                        return cli_error("stdin is larger than %u KiB, the most exec can send; copy big inputs "
                                         "in with 'space cp'", SPACE_MAX_STDIN >> 10);
                if (r < 0 && r != -EBADF)
                        return cli_error("reading stdin: %s", strerror(-r));
                if (a->in.len > 0) {
                        eo->stdin_data = a->in.data;
                        eo->stdin_len = a->in.len;
                }
        }
        eo->on_output = on_output;
        eo->userdata = &a->broken_pipe;
        return 0;
}

static int exec_run(struct cli_call *call) {
        struct exec_args *a = call->args;
        struct space_exec_result res = { 0 };
        int r = space_exec(call->session, &a->eo, &res);
        if (r == -EPIPE && a->broken_pipe)
                return 128 + SIGPIPE; /* our reader went away, as a shell pipeline would see it */
        if (r < 0) {
                cli_api_fail(call, r);
                return r == -ENOEXEC ? CLI_EXIT_NOT_STARTED : EXIT_FAILURE;
        }
        if (a->eo.background) {
                if (call->json)
                        printf("{\"pid\":%d}\n", res.pid);
                else
                        printf("%d\n", res.pid);
                return EXIT_SUCCESS;
        }
        if (res.timed_out)
                cli_error("command timed out after %.3g s and was killed", (double)a->eo.timeout_ms / 1000);
        return cli_exit_status(&res);
}

static void exec_cleanup(struct cli_call *call) {
        struct exec_args *a = call->args;
        buf_free(&a->in);
}

const struct cli_cmd cli_exec = {
        .name = "exec",
        .summary = "run a command in a sandbox, streaming its output",
        .usage = "[OPTIONS] ID [--] COMMAND [ARG...]",
        .about = "Run a command in a sandbox. Its stdout and stderr are streamed to ours as they\n"
                "come; space exits with the command's exit code, 128+N when signal N killed it,\n"
                "127 when it could not be started, 1 on other errors.\n"
                "Our stdin is sent to the command (at most 512 KiB) with -i or when stdin is not a\n"
                "terminal; use </dev/null to send nothing.\n",
        .options = "  -i, --interactive     send stdin even when it is a terminal\n"
                "  -w, --cwd DIR         working directory inside the sandbox\n"
                "  -e, --env K=V         extra environment (repeatable)\n"
                "      --timeout SEC     kill the command after SEC seconds\n"
                "  -d, --background      start it in the background, print its pid and return;\n"
                "                        see its output with 'space logs ID PID' (no stdin)\n"
                "      --json            with -d: print {\"pid\":N}\n",
        /* options end at the id, so the command's own options stay its own */
        .flags = CLI_JSON | CLI_IN_ORDER | CLI_SESSION | CLI_CHECK_FIRST,
        .short_opts = "iw:e:d",
        .long_opts = (const struct option[]){
                { "interactive", no_argument, NULL, 'i' }, { "cwd", required_argument, NULL, 'w' },
                { "env", required_argument, NULL, 'e' }, { "timeout", required_argument, NULL, 'T' },
                { "background", no_argument, NULL, 'd' }, { "detach", no_argument, NULL, 'd' }, { 0 } },
        .max_args = -1, /* exec_check reads them */
        CLI_ARGS(struct exec_args, { .eo = { SPACE_EXEC_OPTS_INIT } }),
        .option = exec_option,
        .check = exec_check,
        .run = exec_run,
        .cleanup = exec_cleanup,
};

/* ---- logs ------------------------------------------------------------------------ */

struct logs_args {
        struct space_attach_opts ao;
        int pid;
        bool broken_pipe;
};

static int logs_option(struct cli_call *call, int opt, const char *arg) {
        struct logs_args *a = call->args;
        switch (opt) {
        case 'f': a->ao.follow = true; break;
        case 'o':
                if (cli_parse_uint(arg, 0, UINT64_MAX - 1, &a->ao.offset) < 0)
                        return cli_usage(call->cmd, "invalid offset '%s'", arg);
                break;
        }
        return 0;
}

static int logs_check(struct cli_call *call) {
        struct logs_args *a = call->args;
        if (parse_pid(call->argv[1], &a->pid) < 0)
                return cli_usage(call->cmd, "invalid pid '%s'", call->argv[1]);
        a->ao.on_output = on_output;
        a->ao.userdata = &a->broken_pipe;
        return 0;
}

static int logs_run(struct cli_call *call) {
        struct logs_args *a = call->args;
        struct space_exec_result res = { 0 };
        int r = space_attach(call->session, a->pid, &a->ao, &res);
        if (r == -EPIPE && a->broken_pipe)
                return 128 + SIGPIPE;
        if (r < 0)
                return cli_api_fail(call, r);
        if (a->ao.follow && res.exited)
                return cli_exit_status(&res);
        return EXIT_SUCCESS;
}

const struct cli_cmd cli_logs = {
        .name = "logs",
        .summary = "print (or follow) a background process's output",
        .usage = "[OPTIONS] ID PID",
        .about = "Print the recorded output of a process (usually one started with 'exec -d'):\n"
                "stdout to stdout, stderr to stderr.\n",
        .options = "  -f, --follow          keep printing until the process ends, then exit with its\n"
                "                        status (128+N when killed by signal N)\n"
                "      --offset N        skip the first N bytes of recorded output\n",
        .flags = CLI_SESSION,
        .short_opts = "f",
        .long_opts = (const struct option[]){
                { "follow", no_argument, NULL, 'f' }, { "offset", required_argument, NULL, 'o' }, { 0 } },
        .min_args = 2, .max_args = 2, .missing = "sandbox id and pid", .missing_rest = "pid",
        CLI_ARGS(struct logs_args, { .ao = { SPACE_ATTACH_OPTS_INIT } }),
        .option = logs_option,
        .check = logs_check,
        .run = logs_run,
};

/* ---- kill ------------------------------------------------------------------------ */

struct kill_args {
        int pid, sig;
};

static int kill_check(struct cli_call *call) {
        struct kill_args *a = call->args;
        a->sig = SIGTERM;
        if (parse_pid(call->argv[1], &a->pid) < 0)
                return cli_usage(call->cmd, "invalid pid '%s'", call->argv[1]);
        if (call->argc == 3) {
                const char *sname = call->argv[2];
                if (sname[0] == '-')
                        sname++; /* "-9", "-KILL" like kill(1) */
                if (cli_parse_signal(sname, &a->sig) < 0)
                        return cli_usage(call->cmd, "unknown signal '%s'", call->argv[2]);
        }
        return 0;
}

static int kill_run(struct cli_call *call) {
        struct kill_args *a = call->args;
        int e = space_signal(call->session, a->pid, a->sig);
        return e < 0 ? cli_api_fail(call, e) : EXIT_SUCCESS;
}

const struct cli_cmd cli_kill = {
        .name = "kill",
        .summary = "signal a process in a sandbox",
        .usage = "[OPTIONS] ID PID [SIGNAL]",
        .about = "Send a signal (default TERM) to a process in a sandbox. SIGNAL is a name (TERM,\n"
                "SIGKILL, int) or a number.\n",
        .flags = CLI_IN_ORDER | CLI_SESSION,
        .min_args = 2, .max_args = 3, .missing = "sandbox id and pid", .missing_rest = "pid",
        .args_size = sizeof(struct kill_args),
        .check = kill_check,
        .run = kill_run,
};

/* ---- ps -------------------------------------------------------------------------- */

/* "running", "exited 0", "killed SIGKILL", ... */
static void process_status(const struct space_process *p, char *st, size_t n) {
        const char *sn = cli_signal_name(p->signal);
        if (p->running)
                snprintf(st, n, "running");
        else if (p->timed_out)
                snprintf(st, n, "timed out");
        else if (p->signal > 0 && sn)
                snprintf(st, n, "killed SIG%s", sn);
        else if (p->signal > 0)
                snprintf(st, n, "killed %d", p->signal);
        else if (p->has_exit_code)
                snprintf(st, n, "exited %d", p->exit_code);
        else
                snprintf(st, n, "ended");
}

static int ps_run(struct cli_call *call) {
        struct space_process *p = NULL;
        size_t n = 0;
        int e = space_process_list(call->session, &p, &n);
        if (e < 0)
                return cli_api_fail(call, e);
        printf("%-8s %-14s %-10s %s\n", "PID", "STATUS", "OUTPUT", "COMMAND");
        for (size_t i = 0; i < n; i++) {
                char st[32], out[32];
                process_status(&p[i], st, sizeof st);
                cli_format_size(p[i].output_bytes, out, sizeof out);
                printf("%-8d %-14s %-10s", p[i].pid, st, out);
                for (char **arg = p[i].argv; arg && *arg; arg++)
                        printf(" %s", *arg);
                printf("\n");
        }
        space_process_list_free(p, n);
        return EXIT_SUCCESS;
}

const struct cli_cmd cli_ps = {
        .name = "ps",
        .summary = "list a sandbox's processes",
        .usage = "[OPTIONS] ID",
        .about = "List the processes a sandbox's init tracks (background ones and their results).\n",
        .options = "      --json            print the daemon's JSON ({\"processes\":[...]})\n",
        .flags = CLI_JSON | CLI_SESSION,
        .min_args = 1, .max_args = 1, .missing = "sandbox id",
        .json_path = "/processes",
        .run = ps_run,
};
