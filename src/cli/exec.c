/* space exec, logs, kill, ps: the commands on a sandbox's processes (their rows are in
 * commands.c). exec and logs --follow exit with the command's status (128+N when signal N
 * killed it). */
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "common/buf.h"

static int parse_pid(const char *s, int *ret) {
        uint64_t v;
        if (cli_parse_uint(s, 1, INT_MAX, &v) < 0)
                return -EINVAL;
        *ret = (int)v;
        return 0;
}

/* ---- exec ------------------------------------------------------------------------ */

/* What exec's check leaves for its run. */
struct exec_args {
        struct space_exec_opts eo;
        bool broken_pipe;
        bool tty; /* -t: on a terminal of its own (terminal.c) */
};

static void exec_args_free(void *p) { free(p); }

/* Our stdin streams to the command (with -i, or when it is not a terminal) if it is open. */
static void stream_stdin(struct exec_args *a, bool interactive) {
        if (a->eo.background || (!interactive && isatty(STDIN_FILENO)) || fcntl(STDIN_FILENO, F_GETFD) < 0)
                return;
        a->eo.stdin_stream = true;
        a->eo.stdin_fd = STDIN_FILENO;
}

/* "ID [--] COMMAND [ARG...]", and whether our stdin goes to the command. */
int cli_exec_check(struct cli_call *call) {
        bool background = cli_opt_set(call, "background"), interactive = cli_opt_set(call, "interactive");
        if (background && interactive)
                return cli_usage(call->cmd, "a background command takes no stdin (-d with -i)");
        bool tty = cli_opt_set(call, "tty");
        if (tty && (background || cli_opt_set(call, "timeout")))
                return cli_usage(call->cmd, "-t takes neither -d nor --timeout");
        if (call->argc < 1)
                return cli_usage(call->cmd, "missing sandbox id");
        int i = 1;
        if (i < call->argc && strcmp(call->argv[i], "--") == 0)
                i++;
        if (i >= call->argc)
                return cli_usage(call->cmd, "missing command");

        struct exec_args *a = calloc(1, sizeof *a);
        if (!a)
                return cli_error("out of memory");
        call->args = a;
        call->args_free = exec_args_free;
        /* a timeout under a millisecond is one, not none */
        uint64_t timeout_ms = (uint64_t)(cli_opt_num(call, "timeout") * 1000);
        a->eo = (struct space_exec_opts){
                SPACE_EXEC_OPTS_INIT,
                .argv = (const char *const *)&call->argv[i],
                .env = call->n_env ? call->env : NULL,
                .cwd = cli_opt_str(call, "cwd"),
                .user = cli_opt_str(call, "user"),
                .timeout_ms = cli_opt_set(call, "timeout") && timeout_ms == 0 ? 1 : timeout_ms,
                .background = background,
                .on_output = cli_on_output,
                .userdata = &a->broken_pipe,
        };
        a->tty = tty;
        if (!tty)
                stream_stdin(a, interactive);
        return 0;
}

int cli_exec(struct cli_call *call) {
        struct exec_args *a = call->args;
        if (a->tty)
                return cli_terminal_run(call, a->eo.argv, a->eo.cwd);
        struct space_exec_result res = { 0 };
        int r = space_exec(call->session, &a->eo, &res);
        if (r == -EPIPE && a->broken_pipe)
                return 128 + SIGPIPE; /* our reader went away, as a shell pipeline would see it */
        if (r < 0) {
                cli_api_fail(call, r);
                return r == -ENOEXEC ? CLI_EXIT_NOT_STARTED : EXIT_FAILURE;
        }
        if (a->eo.background && call->json)
                printf("{\"pid\":%d}\n", res.pid);
        else if (a->eo.background)
                printf("%d\n", res.pid);
        if (a->eo.background)
                return EXIT_SUCCESS;
        if (res.timed_out)
                cli_error("command timed out after %.3g s and was killed", (double)a->eo.timeout_ms / 1000);
        return cli_exit_status(&res);
}

/* ---- logs ------------------------------------------------------------------------ */

int cli_logs_check(struct cli_call *call) {
        int pid;
        if (parse_pid(call->argv[1], &pid) < 0)
                return cli_usage(call->cmd, "invalid pid '%s'", call->argv[1]);
        return 0;
}

int cli_logs(struct cli_call *call) {
        bool broken_pipe = false;
        struct space_attach_opts ao = {
                SPACE_ATTACH_OPTS_INIT,
                .follow = cli_opt_set(call, "follow"),
                .offset = cli_opt_u64(call, "offset"),
                .on_output = cli_on_output,
                .userdata = &broken_pipe,
        };
        int pid = 0;
        parse_pid(call->argv[1], &pid); /* as the check found it */
        struct space_exec_result res = { 0 };
        int r = space_attach(call->session, pid, &ao, &res);
        if (r == -EPIPE && broken_pipe)
                return 128 + SIGPIPE;
        if (r < 0)
                return cli_api_fail(call, r);
        return ao.follow && res.exited ? cli_exit_status(&res) : EXIT_SUCCESS;
}

/* ---- kill ------------------------------------------------------------------------ */

/* "ID PID [SIGNAL]": 0, or the usage error's status. */
static int kill_target(const struct cli_call *call, int *ret_pid, int *ret_sig) {
        *ret_sig = SIGTERM;
        if (parse_pid(call->argv[1], ret_pid) < 0)
                return cli_usage(call->cmd, "invalid pid '%s'", call->argv[1]);
        if (call->argc < 3)
                return 0;
        const char *sname = call->argv[2];
        if (sname[0] == '-')
                sname++; /* "-9", "-KILL" like kill(1) */
        if (cli_parse_signal(sname, ret_sig) < 0)
                return cli_usage(call->cmd, "unknown signal '%s'", call->argv[2]);
        return 0;
}

int cli_kill_check(struct cli_call *call) {
        int pid, sig;
        return kill_target(call, &pid, &sig);
}

int cli_kill(struct cli_call *call) {
        int pid, sig;
        kill_target(call, &pid, &sig); /* as the check found them */
        int e = space_signal(call->session, pid, sig);
        return e < 0 ? cli_api_fail(call, e) : EXIT_SUCCESS;
}

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

static void process_header(void) { printf("%-8s %-14s %-10s %s\n", "PID", "STATUS", "OUTPUT", "COMMAND"); }

static void print_process(const void *row) {
        const struct space_process *p = row;
        char st[32], out[32];
        process_status(p, st, sizeof st);
        cli_format_size(p->output_bytes, out, sizeof out);
        printf("%-8d %-14s %-10s", p->pid, st, out);
        for (char **arg = p->argv; arg && *arg; arg++)
                printf(" %s", *arg);
        printf("\n");
}

static void free_processes(void *rows, size_t n) { space_process_list_free(rows, n); }

/* no --quiet: the id is never printed */
CLI_DEFINE_LIST(cli_processes_list, struct space_process, space_process_list, session, pid, process_header,
                print_process, free_processes);
