/* The command table (commands.c) and what of the group files it names: a check runs
 * before connecting to spaced, a run after; a listing is fetched and printed by cli_run
 * (struct cli_cmd says how). */
#pragma once
#include "cli/cli.h"

/* All commands, ended by a NULL name, in the order 'space --help' lists them. */
extern const struct cli_cmd cli_commands[];

/* What a check and a run are. */
typedef int cli_hook(struct cli_call *call);

/* sessions.c: make, find, reconnect to and delete sessions; pause and resume them */
cli_hook cli_create, cli_inspect, cli_rm, cli_connect_check, cli_connect, cli_pause, cli_resume;
extern const struct cli_list cli_sessions_list;
/* network.c: a session's network policy (space network; create's network options) */
cli_hook cli_create_check, cli_network_check, cli_network;
struct buf;
/* create's --egress/--no-egress/--allow/--deny/--bandwidth as a policy object into out;
 * *ret_given false (out untouched) when none was given. 0 or EXIT_FAILURE. */
int cli_create_network(const struct cli_call *call, struct buf *out, bool *ret_given);
/* timeouts.c: a session's lifecycle timeouts (space timeout; create's timeout options) */
cli_hook cli_timeout_check, cli_timeout, cli_create_timeouts_check;
/* create's --timeout/--idle-timeout/--on-timeout/--on-idle/--auto-resume into so. */
void cli_create_timeouts(const struct cli_call *call, struct space_session_opts *so);
/* exec.c: a sandbox's processes */
cli_hook cli_exec_check, cli_exec, cli_logs_check, cli_logs, cli_kill_check, cli_kill;
extern const struct cli_list cli_processes_list;
/* terminal.c: space shell, and exec -t's run (#15) */
cli_hook cli_shell;
int cli_terminal_run(struct cli_call *call, const char *const *argv, const char *cwd);
/* files.c */
cli_hook cli_cp_check, cli_cp, cli_watch;
/* snapshots.c: the snapshot timeline, time travel, fork */
cli_hook cli_snapshot, cli_restore, cli_fork;
extern const struct cli_list cli_snapshots_list;
/* events.c: the event log */
cli_hook cli_events_check, cli_events, cli_event_check, cli_event;
/* templates.c */
cli_hook cli_template_build_check, cli_template_build, cli_template_rm;
extern const struct cli_list cli_templates_list;
/* ports.c: exposed ports and port-forward */
cli_hook cli_expose_check, cli_expose, cli_ports, cli_unexpose_check, cli_unexpose, cli_port_forward_check,
        cli_port_forward;
/* top.c: usage metrics */
cli_hook cli_top;
/* admin.c: the daemon itself (health has neither: its row prints the answer) */
cli_hook cli_gc, cli_pool_check, cli_pool;
