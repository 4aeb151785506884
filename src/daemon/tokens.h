/* `spaced token add|list|revoke`: the operator's commands for API bearer tokens, run
 * beside (or before) the daemon on the same data directory (docs/security.md). */
#pragma once

#define TOKENS_DEFAULT_DATA "/var/lib/space"

/* argv[0] is "token"; returns the process exit status. */
int tokens_main(int argc, char **argv);
