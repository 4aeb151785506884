/* The session lifecycle (docs/sessions.md), as the API layer sees it: typed requests in,
 * and an answer through a waiter when the work is done: 0 and a JSON result, or a
 * negative errno and a message for people. Nothing here knows HTTP: api_*.c parse the
 * request into these arguments and map the answer to a response (api_status_of). */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include "common/buf.h"
#include "common/json.h"
#include "common/macros.h"
#include "meta/meta.h"
#include "daemon/net/policy.h"
#include "daemon/lifetime.h"

struct ports_req;

struct daemon;
struct session;

/* Whoever waits for a lifecycle request. done is called exactly once, by the lifecycle,
 * and frees the waiter: err 0 with the result (NULL: none), or -errno and msg. */
#define DUR_TIMING_MAX 192
struct dur_waiter;
struct dur_waiter_ops {
        void (*done)(struct dur_waiter *w, int err, const char *msg, const struct buf *result);
};
struct dur_waiter {
        const struct dur_waiter_ops *ops;
        /* Set before done by answers that say where their time went (a create): the value
         * of a Server-Timing header; "" for none. */
        char timing[DUR_TIMING_MAX];
};
/* Answers *w (if any) and forgets it. */
void dur_answer(struct dur_waiter **w, const struct buf *result);
void dur_answer_error(struct dur_waiter **w, int err, const char *fmt, ...) _printf_(3, 4);

/* POST /v1/sessions, parsed and range-checked by the API (api_sessions.c). What depends
 * on this host (the session limit, the snapshot, template and runtime, disk limits, what
 * the runtime can do) is checked by dur_create. */
struct ses_create_req {
        char tenant[META_NAME_MAX + 1];
        const char *snapshot;     /* a snap_ id to start from; NULL: a template */
        const char *template;     /* NULL: base (ignored with a snapshot: the snapshot's) */
        const char *runtime;      /* NULL: the template's, else the daemon's */
        uint64_t memory;          /* bytes */
        double cpus;              /* 0: no limit */
        uint32_t pids;
        bool disk_given;          /* false: the daemon's default */
        uint64_t disk;
        struct net_policy net;    /* checked against the operator's; taken by dur_create */
        int64_t interval_ms;      /* rolling snapshots; 0: off */
        uint32_t retention;
        char **env;               /* "K=V", NULL-terminated; taken by dur_create */
        size_t n_env;
        char *env_json;           /* the env object as sent, for meta; taken by dur_create */
        char *metadata_json;      /* "metadata" (daemon/metadata.h), NULL: none; taken by dur_create */
        struct ports_req *ports;  /* "ports" (daemon/ports.h), NULL: none; taken by dur_create */
        struct ses_lifetime life; /* "timeout", "idle_timeout", ... (daemon/lifetime.h) */
};

int dur_open(struct daemon *d);      /* meta + store + workers */
void dur_close(struct daemon *d);
/* After a start: every session of meta back in memory (adopted, recovering, paused). */
int dur_load(struct daemon *d);
void dur_tick(struct daemon *d);     /* rolling snapshots, retries, periodic GC */
/* Runs the loop until re-attached sandboxes said HELLO and recoveries ran (at most
 * timeout_ms), so that clients of a restarted daemon find sessions ready. */
void dur_settle(struct daemon *d, int timeout_ms);
/* SIGTERM: a final snapshot of every changed running session, sandboxes destroyed. */
void dur_shutdown(struct daemon *d);

/* Each answers w (which may be NULL) when done, or at once when it cannot start. */
void dur_create(struct daemon *d, struct ses_create_req *req, struct dur_waiter *w);
/* memory: checkpoint the processes too (runtimes with memory_snapshots; the sandbox is
 * restarted from the image, docs/runtime-gvisor.md). */
void dur_snapshot(struct session *s, const char *label, bool memory, struct dur_waiter *w);
void dur_pause(struct session *s, struct dur_waiter *w);
void dur_resume(struct session *s, struct dur_waiter *w);
void dur_restore(struct session *s, const char *snap_id, struct dur_waiter *w);
void dur_fork(struct session *s, const char *snap_id, unsigned count, struct dur_waiter *w);
void dur_delete(struct session *s, struct dur_waiter *w);
void dur_gc(struct daemon *d, struct dur_waiter *w);

/* {"id","session","parent",...}: a snapshot as the API shows it. */
void dur_snapshot_json(struct json_writer *w, const struct meta_snapshot *m);
