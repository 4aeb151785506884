/* Argument parsing helpers of the `space` CLI, kept apart from main.c so the unit tests
 * can call them: sizes, signals, numbers, `ID:/path` specs, K=V pairs, JSON printing. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common/buf.h"

#define CLI_MAX_SIZE (1ull << 50)   /* largest --memory we accept (1 PiB) */
#define CLI_MAX_CPUS 4096.0
#define CLI_MAX_PIDS 4194304        /* the kernel's PID_MAX_LIMIT */
#define CLI_MAX_TIMEOUT_S (366.0 * 24 * 3600)
#define CLI_MAX_DURATION_MS (366.0 * 24 * 3600 * 1000) /* --snapshot-interval */

/* "512M", "1.5G", "64MiB", "1048576", "2g": binary units K/M/G/T with optional "i"/"iB"/"B".
 * -EINVAL on a malformed value, -ERANGE on 0 or over CLI_MAX_SIZE. */
int cli_parse_size(const char *s, uint64_t *ret);
/* "30s", "500ms", "2m", "1.5h", "30" (seconds), "0" into milliseconds; -EINVAL on a
 * malformed value or unknown unit, -ERANGE over CLI_MAX_DURATION_MS or under 1 ms but > 0. */
int cli_parse_duration_ms(const char *s, uint64_t *ret);
/* Decimal unsigned integer in [min, max]; -EINVAL / -ERANGE. */
int cli_parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *ret);
/* A finite decimal number > 0 and <= max; -EINVAL / -ERANGE. */
int cli_parse_positive(const char *s, double max, double *ret);
/* "TERM", "SIGTERM", "sigkill", "9": -EINVAL if unknown. */
int cli_parse_signal(const char *s, int *ret);
/* "TERM" for 15, or NULL. */
const char *cli_signal_name(int sig);
/* "K=V" with a non-empty K made of [A-Za-z0-9_] not starting with a digit. */
bool cli_env_ok(const char *kv);

/* The two sides of `space cp`. "ID:/path" is a sandbox path (id must look like an id, the
 * path must be absolute); anything starting with '/' or '.', without ':' or with an
 * empty id part is a local path. */
struct cli_cp_arg {
        bool remote;
        char id[64];
        const char *path; /* points into the argument */
};
/* -EINVAL for "ID:" without a path or a relative sandbox path. */
int cli_parse_cp_arg(const char *s, struct cli_cp_arg *ret);

/* "512 MiB", "1.5 GiB", "800 B". */
void cli_format_size(uint64_t bytes, char *out, size_t n);
/* Re-indents a JSON document for people; -EINVAL if it doesn't parse. */
int cli_json_pretty(struct buf *out, const char *json, size_t len);
/* "a,b,,c" into a NULL-terminated array of non-empty items (one allocation; free() it). */
int cli_split_list(const char *s, char ***ret);
