/* Disk limits (docs/security.md "Disk"): the quota volume DATA/vol that writable layers
 * live on, where a sandbox's directory goes, and what a session's layer holds. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct daemon;
struct session;
struct json_writer;

/* Mounts the quota volume DATA/vol (size 0 with size_given: none) and sets layer_dir;
 * without it, logs one warning and leaves disk limits off. <0 only for ENOMEM. */
int disk_setup(struct daemon *d, uint64_t size, bool size_given);
/* At exit: unmounts the volume unless sandboxes left running still use it. */
void disk_teardown(struct daemon *d);
static inline void disk_teardownp(struct daemon **d) {
        if (*d)
                disk_teardown(*d);
}
/* Where a new sandbox's directory goes (under layer_dir). */
char *disk_sandbox_dir(struct daemon *d, const char *sbx);
/* The directory of an existing sandbox: under layer_dir, or where a spaced without
 * the volume made it (DATA/sandboxes). */
char *disk_sandbox_dir_find(struct daemon *d, const char *sbx);
/* The disk limit of a new session: the default (!given), or asked if the volume allows it;
 * else -ENODEV (no disk limits on this host) or -EINVAL, and why. */
int disk_check_limit(struct daemon *d, bool given, uint64_t asked, uint64_t *ret, char *why, size_t why_size);
/* Bytes s's writable layer holds as its quota counts them (on btrfs: as of the last
 * transaction commit, seconds behind). -ENOENT without the volume or a sandbox. */
int disk_usage(struct session *s, uint64_t *ret);
/* "disk_limits": {...} of /v1/health. */
void disk_health_json(struct daemon *d, struct json_writer *w);
