/* Every command of `space`, one row each (struct cli_cmd), defined in the file of its group;
 * main.c's table lists them. A new command: a row in a group file (or a new one), its name
 * here, and its word in main.c's table. */
#pragma once
#include "cli/cli.h"

/* sessions.c */
extern const struct cli_cmd cli_create, cli_ls, cli_inspect, cli_rm, cli_connect, cli_pause, cli_resume;
/* exec.c */
extern const struct cli_cmd cli_exec, cli_logs, cli_kill, cli_ps;
/* files.c */
extern const struct cli_cmd cli_cp;
/* snapshots.c */
extern const struct cli_cmd cli_snapshot, cli_snapshots, cli_restore, cli_fork;
/* events.c */
extern const struct cli_cmd cli_events, cli_event;
/* admin.c */
extern const struct cli_cmd cli_health, cli_gc, cli_pool;
/* templates.c: the group "template" and its own table */
extern const struct cli_cmd cli_template;
