/* The pure rules of durable sessions, kept apart so unit tests reach them without a
 * sandbox or a daemon: session tokens, which lifecycle request a state allows, the
 * change check before a rolling snapshot, and the JSON of lifecycle events. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common/buf.h"
#include "meta/meta.h"

#define DL_TOKEN_BYTES 32
#define DL_TOKEN_LEN 43     /* base64url of 32 bytes, no padding */
/* Ctimes this close to the reference still count as changes: a change in the same
 * clock tick as the last capture may carry its exact timestamp. */
#define DL_DIRTY_SLACK_NS 20000000ll
#define DL_DIRTY_MAX_DEPTH 256

/* 32 random bytes as 43 url-safe base64 characters (A-Z a-z 0-9 - _), NUL-terminated. */
int dl_token_new(char out[DL_TOKEN_LEN + 1]);
/* Shape check before hashing what a client sent: 43 url-safe base64 characters. */
bool dl_token_well_formed(const char *t);

enum dl_action {
        DL_EXEC,      /* anything that talks to the sandbox: exec, files, processes */
        DL_SNAPSHOT,
        DL_PAUSE,
        DL_RESUME,
        DL_RESTORE,
        DL_FORK,
        DL_DELETE,
        DL_EVENTS,    /* read or append the event log, connect */
};
/* Whether a request of kind a may run in state st: 0 = allowed (it may still wait for an
 * action in progress), -EBUSY = wrong state, -EAGAIN = try again shortly (a recovery
 * runs). *why says what to tell the client. */
int dl_action_check(enum dl_action a, enum meta_session_state st, const char **why);

/* True if anything under dir (the directory itself included) has a ctime at or after
 * since_ns - DL_DIRTY_SLACK_NS: a file written, created, removed (its directory
 * changes), renamed, chmod'ed... Stops at the first one. Does not follow symlinks or
 * cross mounts. -errno if dir can't be read. */
int dl_dirty(const char *dir, int64_t since_ns, bool *ret);

/* "2026-11-30T05:14:07.123Z" from Unix ms. */
void dl_rfc3339_ms(int64_t ms, char *out, size_t outsz);

/* {"event":EV,"snapshot":SNAP|null[,"reason":R]}: a lifecycle event's payload. */
int dl_lifecycle_json(struct buf *b, const char *ev, const char *snap, const char *reason);
/* {"lost_sandbox","reason","from_snapshot"|null,"new_sandbox"|null[,"error"]}; error: why the
 * recovery stopped instead (NULL: it did not). */
int dl_recovery_json(struct buf *b, const char *lost, const char *reason, const char *from, const char *new_sbx,
                     const char *error);
/* {"snapshot","reason","bytes_added","label"|null[,"freeze_ms"]}; freeze_ms < 0: not frozen. */
int dl_snapshot_event_json(struct buf *b, const char *snap, const char *reason, uint64_t bytes_added,
                           const char *label, double freeze_ms);
/* {"reason","error"}: a capture that failed (the session keeps running unsnapshotted
 * until one succeeds, so it must be on the record, not only in the daemon's log). */
int dl_snapshot_failed_json(struct buf *b, const char *reason, const char *error);
/* Whether kind is one an agent may append (agent, tool_call, note). */
bool dl_agent_kind(const char *kind);

/* A token bucket: rate tokens a second up to burst. */
struct dl_bucket {
        double tokens;
        uint64_t at_ms; /* when tokens was last brought up to date; 0: full */
};
/* Takes one token at now_ms: true, or false and *retry_s, the whole seconds until one is
 * there (at least 1). */
bool dl_bucket_take(struct dl_bucket *b, uint64_t now_ms, uint64_t rate, uint64_t burst, unsigned *retry_s);
/* Snapshot storage (docs/security.md "Snapshot storage"): a session's limit on the bytes
 * its snapshots added to the store is factor times its disk limit, or times disk_default
 * when it has none; 0 = no limit (factor 0, or no disk limit anywhere). Saturates at
 * UINT64_MAX. */
uint64_t dl_snapshot_limit(unsigned factor, uint64_t disk, uint64_t disk_default);
/* Whether adding `add` bytes to `used` stays within limit (0 = no limit). */
bool dl_snapshot_fits(uint64_t used, uint64_t add, uint64_t limit);
/* The snapshot_limit event: usage and limits of the session and its tenant after snap. */
int dl_snapshot_limit_json(struct buf *b, const char *snap, uint64_t bytes, uint64_t limit, uint64_t tenant_bytes,
                           uint64_t tenant_limit);
