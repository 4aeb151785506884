/* The command table of `space`: per command its name, --help text, options (cli_run reads
 * and checks them), argument rules, and the functions of its group file that check and
 * run it. 'space --help' lists the table in this order. A new command is a row here and
 * its functions in a group file (declared in commands.h). */
#include "cli/commands.h"

#include "cli/args.h"

/* Options more than one command has. */
#define OPT_ENV(text) { "env", 'e', CLI_OPT_ENV, "K=V", .doc = text }
#define OPT_JSON(text) { "json", 0, CLI_OPT_FLAG, NULL, .doc = text }
#define OPT_QUIET(text) { "quiet", 'q', CLI_OPT_FLAG, NULL, .doc = text }
#define OPT_END { .name = NULL }
/* A session's network rules (create, network); the daemon checks them. */
#define OPT_ALLOW                                                                                         \
        { "allow", 0, CLI_OPT_LIST, "RULE", .what = "rule", .max = 299,                                   \
          .doc = "reach only these (repeatable): 203.0.113.0/24, 203.0.113.7:443,\n"                       \
                 "2001:db8::/32, [2001:db8::1]:443, example.com, *.example.com:443;\n"                       \
                 "none: every destination the host allows" }
#define OPT_DENY \
        { "deny", 0, CLI_OPT_LIST, "RULE", .what = "rule", .max = 299, .doc = "never reach these (repeatable; deny wins)" }
/* A session's timeouts (create, timeout); the daemon checks the limits. */
#define OPT_TIMEOUTS                                                                                      \
        { "timeout", 0, CLI_OPT_DURATION, "DUR", .what = "timeout", .hint = " (e.g. 1h, 30m, 90s)",          \
          .doc = "pause the session DUR from now (--on-timeout delete: delete\n"                           \
                 "it); at most a year" },                                                                  \
        { "idle-timeout", 0, CLI_OPT_DURATION, "DUR", .what = "idle timeout", .hint = " (e.g. 10m, 1h)",   \
          .doc = "pause it after DUR without an exec, file, port or terminal\n"                           \
                 "request (--on-idle delete: delete it); 1s to 720h" },                                    \
        { "on-timeout", 0, CLI_OPT_STR, "ACTION", .what = "action", .max = 16,                            \
          .doc = "what the timeout does: pause (default) or delete" },                                     \
        { "on-idle", 0, CLI_OPT_STR, "ACTION", .what = "action", .max = 16,                               \
          .doc = "what the idle timeout does: pause (default) or delete" },                                \
        { "auto-resume", 0, CLI_OPT_FLAG, NULL,                                                            \
          .doc = "an exec, file, port or terminal request to it while\n"                                   \
                 "paused resumes it first (else it fails: session paused)" }
#define OPT_BANDWIDTH                                                                                     \
        { "bandwidth", 0, CLI_OPT_STR, "RATE", .what = "rate", .max = 64,                                 \
          .doc = "limit each way: 20mbit, 1.5gbit, 500kbit, or bit/s" }

static const struct cli_cmd template_commands[] = {
        {
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
                .help_column = 28,
                .opts = (const struct cli_opt[]){
                        { "from-dir", 0, CLI_OPT_STR, "DIR", .doc = "copy this directory tree" },
                        { "from-tar", 0, CLI_OPT_STR, "FILE", .doc = "unpack this tar file" },
                        { "debootstrap", 0, CLI_OPT_STR, "SUITE",
                          .doc = "install Debian SUITE (e.g. bookworm), minbase variant" },
                        { "packages", 0, CLI_OPT_STR, "a,b", .doc = "extra packages for --debootstrap" },
                        { "mirror", 0, CLI_OPT_STR, "URL", .doc = "Debian mirror for --debootstrap" },
                        { "runtime", 0, CLI_OPT_STR, "NAME",
                          .doc = "the template's default runtime: sessions made from it\n"
                          "run on NAME unless their create names one" },
                        OPT_JSON("print the template object at the end (progress to stderr)"),
                        OPT_END },
                .flags = CLI_CLIENT,
                .min_args = 1, .max_args = 1, .missing = "template name",
                .check = cli_template_build_check,
                .run = cli_template_build,
        },
        {
                .name = "template ls",
                .alias = "list",
                .usage = "[OPTIONS]",
                .about = "List the templates on the daemon's host.\n",
                .opts = (const struct cli_opt[]){
                        OPT_JSON("print the daemon's JSON ({\"templates\":[...]})"),
                        OPT_QUIET("print names only"),
                        OPT_END },
                .flags = CLI_CLIENT,
                .json_path = "/v1/templates",
                .list = &cli_templates_list,
        },
        {
                .name = "template rm",
                .usage = "[OPTIONS] NAME...",
                .about = "Delete templates. A template a session still uses can't be deleted.\n",
                .flags = CLI_CLIENT,
                .min_args = 1, .max_args = -1, .missing = "template name",
                .run = cli_template_rm,
        },
        { .name = NULL },
};

const struct cli_cmd cli_commands[] = {
        {
                .name = "create",
                .summary = "create a sandbox session, print its id",
                .usage = "[OPTIONS]",
                .about = "Create a sandbox session and print its id. Its token is shown only now: keep\n"
                         "it (--json or --token-file) to reconnect with 'space connect ID --token T'.\n",
                .opts = (const struct cli_opt[]){
                        { "template", 't', CLI_OPT_STR, "NAME", .doc = "template to start from (daemon default: base)" },
                        { "runtime", 0, CLI_OPT_STR, "NAME",
                          .doc = "ns or gvisor (keeps running processes across pause,\n"
                          "resume and fork); default: the daemon's --runtime" },
                        { "memory", 'm', CLI_OPT_SIZE, "SIZE", .doc = "memory limit, e.g. 512M, 2G (binary units)",
                          .what = "size", .hint = " (e.g. 512M, 2G)" },
                        { "cpus", 0, CLI_OPT_NUMBER, "N", .doc = "CPU limit in cores, e.g. 1.5",
                          .what = "CPU count", .max = (uint64_t)CLI_MAX_CPUS },
                        { "pids", 0, CLI_OPT_UINT, "N", .doc = "limit on the number of processes",
                          .what = "pids limit", .min = 1, .max = CLI_MAX_PIDS },
                        { "disk", 0, CLI_OPT_SIZE, "SIZE",
                          .doc = "limit of the files the session may write, e.g. 2G, 512M\n"
                          "(daemon default: see 'space health'); past it writes fail\n"
                          "inside with \"Disk quota exceeded\"",
                          .what = "disk size", .hint = " (e.g. 2G, 512M)" },
                        OPT_ENV("environment for every command (repeatable)"),
                        { "egress", 0, CLI_OPT_FLAG, NULL,
                          .doc = "let the sandbox reach the network (the host's operator\n"
                          "must allow it: spaced --egress on); default: loopback only;\n"
                          "--allow, --deny and --bandwidth imply it" },
                        { "no-egress", 0, CLI_OPT_FLAG, NULL, .doc = "loopback only (with rules: kept for later)" },
                        { "network", 0, CLI_OPT_FLAG, .same_as = "egress" },
                        OPT_ALLOW, OPT_DENY, OPT_BANDWIDTH,
                        { "from-snapshot", 's', CLI_OPT_STR, "SNAP",
                          .doc = "start from this snapshot (of any session) instead of\n"
                          "a template" },
                        { "snapshot-interval", 0, CLI_OPT_DURATION, "DUR",
                          .doc = "take a rolling snapshot this often when files\n"
                          "changed, e.g. 30s, 500ms, 5m; 0 = none (daemon default 30s)",
                          .what = "interval", .hint = " (e.g. 30s, 500ms, 5m, 0)" },
                        { "retention", 0, CLI_OPT_UINT, "N",
                          .doc = "rolling snapshots to keep (daemon default 10); manual,\n"
                          "pause and fork-source ones are always kept",
                          .what = "retention", .min = 1, .max = 100000, .range = true },
                        OPT_TIMEOUTS,
                        { "token-file", 0, CLI_OPT_STR, "FILE", .doc = "write the session's token to FILE (mode 0600)" },
                        OPT_JSON("print the whole session object, with its \"token\",\n"
                                 "instead of the id"),
                        OPT_END },
                .flags = CLI_CLIENT,
                .check = cli_create_check,
                .run = cli_create,
        },
        {
                .name = "exec",
                .summary = "run a command in a sandbox, streaming its output",
                .usage = "[OPTIONS] ID [--] COMMAND [ARG...]",
                .about = "Run a command in a sandbox. Its stdout and stderr are streamed to ours as they\n"
                         "come; space exits with the command's exit code, 128+N when signal N killed it,\n"
                         "127 when it could not be started, 1 on other errors.\n"
                         "Our stdin is streamed to the command until its end (any length, as fast as the\n"
                         "command reads it) with -i or when stdin is not a terminal; use </dev/null to\n"
                         "send nothing.\n"
                         "With -t the command runs on a terminal of the sandbox, like 'space shell'.\n",
                .opts = (const struct cli_opt[]){
                        { "interactive", 'i', CLI_OPT_FLAG, NULL, .doc = "send stdin even when it is a terminal" },
                        { "tty", 't', CLI_OPT_FLAG, NULL,
                          .doc = "run it on a terminal of the sandbox: ours in raw mode carries\n"
                          "every key (Ctrl-C too) to it, our window size follows; one output stream" },
                        { "cwd", 'w', CLI_OPT_STR, "DIR", .doc = "working directory inside the sandbox" },
                        { "user", 'u', CLI_OPT_STR, "USER",
                          .doc = "run as USER of the sandbox's /etc/passwd (a name or a uid;\n"
                          "default root), with its groups, HOME and, without -w, its home\n"
                          "as the working directory" },
                        OPT_ENV("extra environment (repeatable)"),
                        { "timeout", 0, CLI_OPT_NUMBER, "SEC", .doc = "kill the command after SEC seconds",
                          .what = "timeout", .hint = " (seconds)", .max = (uint64_t)CLI_MAX_TIMEOUT_S },
                        { "background", 'd', CLI_OPT_FLAG, NULL,
                          .doc = "start it in the background, print its pid and return;\n"
                          "see its output with 'space logs ID PID' (no stdin)" },
                        { "detach", 0, CLI_OPT_FLAG, .same_as = "background" },
                        OPT_JSON("with -d: print {\"pid\":N}"),
                        OPT_END },
                /* options end at the id, so the command's own options stay its own; the
                 * arguments are the check's to read */
                .flags = CLI_IN_ORDER | CLI_SESSION | CLI_CHECK_FIRST,
                .max_args = -1,
                .check = cli_exec_check,
                .run = cli_exec,
        },
        {
                .name = "shell",
                .summary = "open an interactive shell in a sandbox",
                .usage = "[OPTIONS] ID",
                .about = "Open a login shell (/bin/bash -l, or /bin/sh -l where there is no bash) on a\n"
                         "terminal of the sandbox, the way 'docker exec -it' does: our terminal goes to raw\n"
                         "mode (restored on exit), every key reaches the shell (Ctrl-C interrupts its\n"
                         "command, not space), resizing our window resizes its terminal, and space exits\n"
                         "with the shell's exit code (128+N when signal N killed it). The shell runs on if\n"
                         "the connection is lost (see 'space ps').\n",
                .opts = (const struct cli_opt[]){
                        { "cwd", 'w', CLI_OPT_STR, "DIR", .doc = "working directory inside the sandbox" },
                        { "user", 'u', CLI_OPT_STR, "USER",
                          .doc = "the shell of USER of the sandbox's /etc/passwd (a name or a uid;\n"
                          "default root), with its groups, HOME and, without -w, its home\n"
                          "as the working directory" },
                        OPT_ENV("extra environment (repeatable)"),
                        OPT_END },
                .flags = CLI_SESSION,
                .min_args = 1, .max_args = 1, .missing = "sandbox id",
                .run = cli_shell,
        },
        {
                .name = "cp",
                .summary = "copy files between the host and a sandbox",
                .usage = "[OPTIONS] SRC DST",
                .about = "Copy files between the host and a sandbox. One side is ID:/absolute/path in the\n"
                         "sandbox, the other a local path; '-' is stdin (as SRC) or stdout (as DST).\n"
                         "A DST that is an existing directory (or ends in '/') gets SRC's name inside it.\n"
                         "Directories are copied recursively (regular files and directories only).\n",
                .opts = (const struct cli_opt[]){
                        { "parents", 'p', CLI_OPT_FLAG, NULL, .doc = "create missing parent directories in the sandbox" },
                        { "user", 'u', CLI_OPT_STR, "USER",
                          .doc = "into a sandbox: the files and directories made belong to USER\n"
                          "(a name or a uid of its /etc/passwd; default root)" },
                        OPT_END },
                .flags = CLI_SESSION,
                .min_args = 2, .max_args = 2, .missing = "source and destination", .missing_rest = "destination",
                .check = cli_cp_check,
                .run = cli_cp,
        },
        {
                .name = "watch",
                .summary = "print the changes to files in a sandbox as they happen",
                .usage = "[OPTIONS] ID PATH",
                .about = "Watch the directory PATH in a sandbox and everything below it (directories made\n"
                         "later included) and print each change as it happens: TYPE PATH, where TYPE is\n"
                         "create, write, chmod, remove, rename_from or rename_to and a directory's PATH\n"
                         "ends in '/'. 'overflow' says that events were lost (they came faster than they\n"
                         "were read). Runs until interrupted, --count is reached or PATH goes away. A\n"
                         "session has at most 16 watches at once.\n",
                .opts = (const struct cli_opt[]){
                        { "no-recursive", 0, CLI_OPT_FLAG, NULL, .doc = "only PATH itself, not the directories below it" },
                        { "count", 'n', CLI_OPT_UINT, "N", .doc = "exit after N events",
                          .what = "count", .min = 1, .max = UINT32_MAX },
                        OPT_JSON("one JSON object per line: {\"type\",\"path\",\"dir\"}"),
                        OPT_END },
                .flags = CLI_SESSION,
                .min_args = 2, .max_args = 2, .missing = "session id and path", .missing_rest = "path",
                .run = cli_watch,
        },
        {
                .name = "ls",
                .alias = "list",
                .summary = "list sessions",
                .usage = "[OPTIONS]",
                .about = "List the sessions the daemon knows.\n",
                .opts = (const struct cli_opt[]){
                        OPT_JSON("print the daemon's JSON ({\"sessions\":[...]})"),
                        OPT_QUIET("print ids only"),
                        OPT_END },
                .flags = CLI_CLIENT,
                .json_path = "/v1/sessions",
                .list = &cli_sessions_list,
        },
        {
                .name = "ps",
                .summary = "list a sandbox's processes",
                .usage = "[OPTIONS] ID",
                .about = "List the processes a sandbox's init tracks (background ones and their results).\n",
                .opts = (const struct cli_opt[]){
                        OPT_JSON("print the daemon's JSON ({\"processes\":[...]})"),
                        OPT_END },
                .flags = CLI_SESSION,
                .min_args = 1, .max_args = 1, .missing = "sandbox id",
                .json_path = "/processes",
                .list = &cli_processes_list,
        },
        {
                .name = "logs",
                .summary = "print (or follow) a background process's output",
                .usage = "[OPTIONS] ID PID",
                .about = "Print the recorded output of a process (usually one started with 'exec -d'):\n"
                         "stdout to stdout, stderr to stderr.\n",
                .opts = (const struct cli_opt[]){
                        { "follow", 'f', CLI_OPT_FLAG, NULL,
                          .doc = "keep printing until the process ends, then exit with its\n"
                          "status (128+N when killed by signal N)" },
                        { "offset", 0, CLI_OPT_UINT, "N", .doc = "skip the first N bytes of recorded output",
                          .what = "offset", .max = UINT64_MAX - 1 },
                        OPT_END },
                .flags = CLI_SESSION,
                .min_args = 2, .max_args = 2, .missing = "sandbox id and pid", .missing_rest = "pid",
                .check = cli_logs_check,
                .run = cli_logs,
        },
        {
                .name = "kill",
                .summary = "signal a process in a sandbox",
                .usage = "[OPTIONS] ID PID [SIGNAL]",
                .about = "Send a signal (default TERM) to a process in a sandbox. SIGNAL is a name (TERM,\n"
                         "SIGKILL, int) or a number.\n",
                .flags = CLI_IN_ORDER | CLI_SESSION, /* "-9" is the signal, not an option */
                .min_args = 2, .max_args = 3, .missing = "sandbox id and pid", .missing_rest = "pid",
                .check = cli_kill_check,
                .run = cli_kill,
        },
        {
                .name = "network",
                .summary = "show or replace a session's network policy",
                .usage = "[OPTIONS] ID\n"
                         "       space network [OPTIONS] ID --on|--off [--allow RULE]... [--deny RULE]...\n"
                         "                     [--bandwidth RATE]",
                .about = "Without --on or --off, print the session's network policy. With one, replace the\n"
                         "whole policy (rules not given again are dropped); it is in force at once, without\n"
                         "a restart, and kept across daemon restarts and forks. Egress needs the host's\n"
                         "operator to allow it (spaced --egress on). See docs/api.md \"Network\".\n",
                .opts = (const struct cli_opt[]){
                        { "on", 0, CLI_OPT_FLAG, NULL, .doc = "egress on, with the rules given" },
                        { "off", 0, CLI_OPT_FLAG, NULL, .doc = "loopback only (the rules given are kept, unused)" },
                        OPT_ALLOW, OPT_DENY, OPT_BANDWIDTH,
                        OPT_JSON("print the daemon's JSON policy object"),
                        OPT_END },
                .flags = CLI_SESSION,
                .min_args = 1, .max_args = 1, .missing = "session id",
                .check = cli_network_check,
                .run = cli_network,
        },
        {
                .name = "timeout",
                .summary = "show, set or clear a session's timeouts",
                .usage = "[OPTIONS] ID",
                .about = "Without options, print the session's timeouts. With them, set, extend or clear\n"
                         "them; what is not given is kept. A new --timeout or --at replaces the deadline.\n"
                         "When one fires the session is paused (or deleted); with --auto-resume an exec,\n"
                         "file, port or terminal request to the paused session resumes it first. Kept\n"
                         "across daemon restarts. See docs/sessions.md \"Timeouts\".\n",
                .help_column = 28,
                .opts = (const struct cli_opt[]){
                        OPT_TIMEOUTS,
                        { "at", 0, CLI_OPT_STR, "TIME", .what = "time", .max = 64,
                          .doc = "pause (or delete) it at TIME, in RFC 3339:\n2026-12-03T18:00:00Z" },
                        { "no-timeout", 0, CLI_OPT_FLAG, NULL, .doc = "clear the timeout" },
                        { "no-idle-timeout", 0, CLI_OPT_FLAG, NULL, .doc = "clear the idle timeout" },
                        { "no-auto-resume", 0, CLI_OPT_FLAG, NULL, .doc = "turn auto-resume off" },
                        OPT_JSON("print the daemon's JSON timeouts object"),
                        OPT_END },
                .flags = CLI_SESSION,
                .min_args = 1, .max_args = 1, .missing = "session id",
                .check = cli_timeout_check,
                .run = cli_timeout,
        },
        {
                .name = "inspect",
                .summary = "show a session's details",
                .usage = "[OPTIONS] ID",
                .about = "Print a session's object (state, limits, health) as indented JSON.\n",
                .opts = (const struct cli_opt[]){ OPT_JSON("print it on one line, as the daemon sent it"), OPT_END },
                .flags = CLI_SESSION,
                .min_args = 1, .max_args = 1, .missing = "sandbox id",
                .run = cli_inspect,
        },
        {
                .name = "rm",
                .summary = "delete sessions",
                .usage = "[OPTIONS] ID...",
                .about = "Delete sessions: their processes are killed and their files are gone. Prints each\n"
                         "id deleted; goes on past failures and exits 1 if any.\n",
                .flags = CLI_CLIENT,
                .min_args = 1, .max_args = -1, .missing = "sandbox id",
                .run = cli_rm,
        },
        {
                .name = "snapshot",
                .summary = "take a snapshot of a session's files, print its id",
                .usage = "[OPTIONS] ID",
                .about = "Take a snapshot of a session's files now and print its id (snap_...).\n",
                .opts = (const struct cli_opt[]){
                        { "label", 'l', CLI_OPT_STR, "TEXT", .doc = "a label to find it by (at most 256 bytes)",
                          .what = "label", .max = SPACE_MAX_LABEL },
                        { "memory", 0, CLI_OPT_FLAG, NULL,
                          .doc = "the running processes too (gvisor, microvm): the sandbox\n"
                          "is checkpointed and restarted from the image" },
                        OPT_JSON("print the snapshot object"),
                        OPT_END },
                .flags = CLI_SESSION | CLI_GAP,
                .min_args = 1, .max_args = 1, .missing = "session id",
                .run = cli_snapshot,
        },
        {
                .name = "snapshots",
                .summary = "list a session's snapshot timeline",
                .usage = "[OPTIONS] ID",
                .about = "List a session's snapshot timeline, oldest first: id, time, reason (rolling,\n"
                         "pause, manual, fork, restore), bytes it added to the store, size of the files it\n"
                         "holds, label.\n",
                .opts = (const struct cli_opt[]){
                        OPT_JSON("print the daemon's JSON ({\"snapshots\":[...]})"),
                        OPT_QUIET("print ids only"),
                        OPT_END },
                .flags = CLI_SESSION,
                .min_args = 1, .max_args = 1, .missing = "session id",
                .json_path = "/snapshots",
                .list = &cli_snapshots_list,
        },
        {
                .name = "pause",
                .summary = "snapshot a session and release its sandbox",
                .usage = "[OPTIONS] ID...",
                .about = "Pause sessions: a final snapshot, then the sandbox is destroyed (no process,\n"
                         "mount or cgroup is left; processes end). Files and the event log stay; 'space\n"
                         "resume' brings the session back. Prints each id paused; goes on past failures\n"
                         "and exits 1 if any.\n",
                .opts = (const struct cli_opt[]){ OPT_JSON("print each session object instead of the id"), OPT_END },
                .flags = CLI_CLIENT,
                .min_args = 1, .max_args = -1, .missing = "session id",
                .run = cli_pause,
        },
        {
                .name = "resume",
                .summary = "bring a paused session back on a new sandbox",
                .usage = "[OPTIONS] ID...",
                .about = "Resume paused sessions on a new sandbox from their newest snapshot: same id, same\n"
                         "files, same event log. Prints each id resumed; exits 1 if any failed (resuming a\n"
                         "session that is not paused is an error).\n",
                .opts = (const struct cli_opt[]){ OPT_JSON("print each session object instead of the id"), OPT_END },
                .flags = CLI_CLIENT,
                .min_args = 1, .max_args = -1, .missing = "session id",
                .run = cli_resume,
        },
        {
                .name = "restore",
                .summary = "put a session's files back to one of its snapshots",
                .usage = "[OPTIONS] ID SNAP",
                .about = "Time travel in place: the session's files go back to snapshot SNAP (one of its\n"
                         "own; see 'space snapshots ID'). Newer snapshots stay in the timeline, so you can\n"
                         "restore forward again. Processes restart on the new sandbox. Prints the id.\n",
                .opts = (const struct cli_opt[]){ OPT_JSON("print the session object instead of the id"), OPT_END },
                .flags = CLI_SESSION,
                .min_args = 2, .max_args = 2, .missing = "session id and snapshot", .missing_rest = "snapshot",
                .run = cli_restore,
        },
        {
                .name = "fork",
                .summary = "branch a session into N independent copies",
                .usage = "[OPTIONS] ID",
                .about = "Branch a session: N new sessions that start from a snapshot of it, independent of\n"
                         "each other and of it (stored data is shared copy-on-write). Prints the new ids,\n"
                         "one per line. Their tokens are shown only with --json (or --token-dir).\n",
                .opts = (const struct cli_opt[]){
                        { "snapshot", 's', CLI_OPT_STR, "SNAP",
                          .doc = "start from this snapshot (default: a new one of now)" },
                        { "count", 'n', CLI_OPT_UINT, "N", .doc = "how many sessions (1..64, default 1)",
                          .what = "count", .min = 1, .max = SPACE_MAX_FORK, .range = true },
                        { "token-dir", 0, CLI_OPT_STR, "DIR",
                          .doc = "write each new session's token to DIR/ID.token (mode 0600)" },
                        OPT_JSON("print {\"sessions\":[...]}: each session object with its token"),
                        OPT_END },
                .flags = CLI_SESSION,
                .min_args = 1, .max_args = 1, .missing = "session id",
                .run = cli_fork,
        },
        {
                .name = "events",
                .summary = "print (or follow) a session's event log",
                .usage = "[OPTIONS] ID",
                .about = "Print a session's event log, oldest first: every exec, lifecycle change (created,\n"
                         "paused, resumed, restored, forked), snapshot, recovery, and the events an agent\n"
                         "appended. One line per event: SEQ TIME KIND DATA (DATA is JSON).\n",
                .opts = (const struct cli_opt[]){
                        { "after", 0, CLI_OPT_UINT, "SEQ", .doc = "only events after sequence number SEQ",
                          .what = "sequence number", .max = UINT64_MAX - 1 },
                        { "limit", 'n', CLI_OPT_UINT, "N", .doc = "at most N events (default: all)",
                          .what = "limit", .min = 1, .max = UINT32_MAX },
                        { "follow", 'f', CLI_OPT_FLAG, NULL,
                          .doc = "keep printing new events as they come (polls twice a\n"
                          "second) until interrupted or the session is deleted" },
                        OPT_JSON("one JSON object per line: {\"seq\",\"time\",\"kind\",\"data\"}"),
                        OPT_END },
                .flags = CLI_SESSION | CLI_CHECK_FIRST,
                .min_args = 1, .max_args = 1, .missing = "session id",
                .check = cli_events_check,
                .run = cli_events,
        },
        {
                .name = "event",
                .summary = "append an event of your own to the log",
                .usage = "[OPTIONS] ID --data JSON",
                .about = "Append an event of your own to a session's event log (an agent's tool call or\n"
                         "note) and print its sequence number.\n",
                .opts = (const struct cli_opt[]){
                        { "kind", 'k', CLI_OPT_STR, "KIND", .doc = "agent, tool_call or note (default: note)" },
                        { "data", 'd', CLI_OPT_STR, "JSON", .doc = "the event's data: a JSON object, at most 64 KiB" },
                        OPT_END },
                .flags = CLI_SESSION,
                .min_args = 1, .max_args = 1, .missing = "session id",
                .check = cli_event_check,
                .run = cli_event,
        },
        {
                .name = "connect",
                .summary = "reconnect to a session with its token",
                .usage = "[OPTIONS] ID [--token TOKEN]",
                .about = "Reconnect to a session with the token its create (or fork) returned: checks the\n"
                         "token and prints the session with its running background processes. Re-attach\n"
                         "to a process's output with 'space logs --offset N --follow ID PID'. Later\n"
                         "commands send the token when SPACE_SESSION_TOKEN holds it.\n",
                .opts = (const struct cli_opt[]){
                        { "token", 't', CLI_OPT_STR, "TOKEN", .doc = "the session token (default: $SPACE_SESSION_TOKEN)" },
                        OPT_JSON("print the answer on one line, as the daemon sent it"),
                        OPT_END },
                .flags = CLI_CLIENT,
                .min_args = 1, .max_args = 1, .missing = "session id",
                .check = cli_connect_check,
                .run = cli_connect,
        },
        {
                .name = "expose",
                .summary = "serve a port of a sandbox through spaced",
                .usage = "[OPTIONS] ID PORT [--public]",
                .about = "Expose PORT (a server inside the sandbox listening on 127.0.0.1 or ::1) on\n"
                         "spaced's own address: at /v1/sessions/ID/ports/PORT/ and, when spaced has\n"
                         "--ports-domain, at http://PORT-ID.DOMAIN/. Unless --public, a request needs the\n"
                         "port's token, printed only now (or the owner's API token). Exposing a port again\n"
                         "gives it a new token. At most 32 per session; they last until unexposed or the\n"
                         "session ends, across daemon restarts (not into forks).\n",
                .opts = (const struct cli_opt[]){
                        { "public", 0, CLI_OPT_FLAG, NULL, .doc = "anyone who reaches spaced may use it (no token)" },
                        OPT_JSON("print the port object, token included"),
                        OPT_END },
                .flags = CLI_SESSION | CLI_GAP,
                .min_args = 2, .max_args = 2, .missing = "session id and port", .missing_rest = "port",
                .check = cli_expose_check,
                .run = cli_expose,
        },
        {
                .name = "ports",
                .summary = "list a session's exposed ports",
                .usage = "[OPTIONS] ID",
                .about = "List the exposed ports of a session: port, access (public or token), path, URL.\n",
                .opts = (const struct cli_opt[]){
                        OPT_JSON("print the daemon's JSON ({\"ports\":[...]})"),
                        OPT_END },
                .flags = CLI_SESSION,
                .min_args = 1, .max_args = 1, .missing = "session id",
                .run = cli_ports,
        },
        {
                .name = "unexpose",
                .summary = "stop serving an exposed port",
                .usage = "[OPTIONS] ID PORT",
                .about = "Unexpose PORT: its token stops working and connections through it are closed.\n",
                .flags = CLI_SESSION,
                .min_args = 2, .max_args = 2, .missing = "session id and port", .missing_rest = "port",
                .check = cli_unexpose_check,
                .run = cli_unexpose,
        },
        {
                .name = "port-forward",
                .summary = "forward a local TCP port to a sandbox's port",
                .usage = "[OPTIONS] ID PORT[:LOCAL]",
                .about = "Listen on 127.0.0.1:LOCAL (default: PORT) and carry each connection to PORT\n"
                         "inside the sandbox as raw TCP, through one upgraded API connection each (as\n"
                         "'kubectl port-forward' does). Any port of your session works, exposed or not.\n"
                         "Runs until interrupted.\n",
                .flags = CLI_SESSION,
                .min_args = 2, .max_args = 2, .missing = "session id and PORT[:LOCAL]", .missing_rest = "PORT[:LOCAL]",
                .check = cli_port_forward_check,
                .run = cli_port_forward,
        },
        {
                .name = "gc",
                .summary = "collect unreferenced snapshot data now",
                .usage = "[OPTIONS]",
                .about = "Collect the snapshot store's garbage now (spaced also does it by itself from\n"
                         "time to time): data only deleted sessions and expired rolling snapshots held.\n",
                .opts = (const struct cli_opt[]){ OPT_JSON("print {\"objects_removed\":N,\"bytes_freed\":N}"), OPT_END },
                .flags = CLI_CLIENT,
                .run = cli_gc,
        },
        {
                .name = "pool",
                .summary = "show or set the warm pool of ready sandboxes",
                .usage = "[OPTIONS] [TEMPLATE=N]",
                .about = "Show the warm pool: per template, how many sandboxes spaced keeps made ahead so\n"
                         "that a create only hands one over. With TEMPLATE=N, keep N of TEMPLATE from now\n"
                         "on (0 = none: every create makes its sandbox then); lasts until spaced stops\n"
                         "(spaced --pool TEMPLATE=N sets it at start).\n",
                .opts = (const struct cli_opt[]){ OPT_JSON("print the daemon's JSON on one line"), OPT_END },
                .flags = CLI_CLIENT,
                .max_args = 1,
                .check = cli_pool_check,
                .run = cli_pool,
        },
        {
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
                .flags = CLI_GAP,
                .missing = "command (build, ls, rm)",
                .sub = template_commands,
        },
        /* usage metrics (#15) */
        {
                .name = "top",
                .summary = "show sessions' CPU, memory, disk and network use",
                .usage = "[OPTIONS] [ID]",
                .about = "Without ID: a table of every session with its newest usage sample (spaced takes\n"
                         "one every --metrics-interval, 5 s by default, while a session runs). With ID:\n"
                         "that session's recent samples, oldest first. CPU% is of one CPU since the\n"
                         "sample before; CPU-TIME counts from the start of the session's current sandbox.\n"
                         "Refreshes every 2 seconds until interrupted (Ctrl-C), unless --once.\n"
                         "--json: without ID a line per session {\"id\", \"state\", \"metrics\"} (metrics:\n"
                         "GET .../metrics?limit=1 as the API answers it; null when not running or unreadable);\n"
                         "with ID the API's answer of GET .../metrics?limit=N; once per refresh.\n",
                .opts = (const struct cli_opt[]){
                        { "once", 0, CLI_OPT_FLAG, NULL, .doc = "print once and exit" },
                        OPT_JSON("JSON lines instead of a table"),
                        { "samples", 'n', CLI_OPT_UINT, "N", .doc = "with ID: the newest N samples (default 10, 1..720)",
                          .what = "sample count", .min = 1, .max = 720, .range = true },
                        OPT_END },
                .flags = CLI_CLIENT,
                .min_args = 0, .max_args = 1,
                .run = cli_top,
        },
        {
                .name = "health",
                .summary = "check that the daemon answers",
                .usage = "[OPTIONS]",
                .about = "Ask the daemon whether it is up; prints its health object. Exit 1 if unreachable.\n",
                .opts = (const struct cli_opt[]){ OPT_JSON(NULL), OPT_END }, /* accepted: it prints JSON anyway */
                .flags = CLI_CLIENT,
                .json_path = "/v1/health", /* and no run: the answer is what it prints */
        },
        { .name = NULL },
};
