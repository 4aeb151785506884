/* Replication of snapshots to an S3 bucket (issue #17, docs/daemon.md "Replication"):
 * with spaced --s3-endpoint, every snapshot committed to meta is pushed (store_push) by
 * threads of the replicator's own, at most --replicate-jobs at once, never on the loop
 * thread; the loop thread then marks it replicated in meta and appends a "replicated"
 * event to its session's log. A failed push is retried with a doubling backoff; the ones
 * not held in memory (a bounded set) wait in meta, which a restart reads again. Without
 * --s3-endpoint none of this exists: no thread, no libcurl call. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#define REPL_JOBS_DEFAULT 4u
#define REPL_JOBS_MAX 32u
#define REPL_HELD_MAX 64u              /* snapshots in slots: queued or pushing */
#define REPL_WAIT_MAX 1024u            /* failed ones remembered out of the slots until their retry */
#define REPL_BACKOFF_FIRST_MS 1000u    /* after the first failure; then doubled */
#define REPL_BACKOFF_MAX_MS 60000u
#define REPL_REGION_DEFAULT "us-east-1"
#define REPL_ENDPOINT_MAX 512u         /* bytes of --s3-endpoint */
#define REPL_REGION_MAX 64u
#define REPL_KEY_MAX 256u              /* bytes of SPACE_S3_ACCESS_KEY / SPACE_S3_SECRET_KEY */
#define REPL_ENV_ACCESS "SPACE_S3_ACCESS_KEY"
#define REPL_ENV_SECRET "SPACE_S3_SECRET_KEY"

struct daemon;
struct repl;

struct repl_cfg {
        const char *endpoint;  /* "http://HOST:PORT" */
        const char *bucket;
        const char *region;
        const char *access_key;
        const char *secret_key;
        unsigned jobs;         /* 1..REPL_JOBS_MAX */
};

/* Checks of the options (spaced exits 2 on a false one); why says what is wrong. */
bool repl_endpoint_valid(const char *s);
bool repl_bucket_valid(const char *s);
bool repl_region_valid(const char *s);

/* Starts the replicator on d's loop, meta and store (open already): its threads, then
 * a first look at meta for what is not replicated yet. The strings are copied. */
int repl_new(struct daemon *d, const struct repl_cfg *c, struct repl **ret);
/* Stops the threads (a push under way is finished first, bounded by the S3 client's
 * timeouts); what is not replicated stays so in meta. NULL is fine. */
struct repl *repl_free(struct repl *r);
/* On the loop thread, every second: retries that are due, and snapshots waiting in meta. */
void repl_tick(struct repl *r);
/* A snapshot was committed: look at meta now rather than at the next tick. NULL is fine. */
void repl_kick(struct repl *r);

struct repl_status {
        bool enabled;
        uint64_t pending;  /* snapshots not replicated yet (in meta) */
        uint64_t failed;   /* of those, held ones whose last push failed */
        uint64_t pushed;   /* pushes that succeeded since spaced started */
};
void repl_status(struct repl *r, struct repl_status *ret);
