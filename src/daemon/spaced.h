/* spaced's internal types: the daemon, its HTTP connections, durable sessions (at most one
 * live sandbox each), their lifecycle actions and worker jobs, and the requests in flight
 * between an HTTP client and a sandbox's space-init. Shared by server.c, session.c,
 * durable.c, worker.c, api*.c and main.c; nothing here is a public API. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#include <sys/types.h>

#include "common/buf.h"
#include "common/json.h"
#include "meta/meta.h"
#include "store/store.h"
#include "daemon/limits.h"
#include "daemon/loop.h"
#include "daemon/net/net.h"
#include "daemon/net/policy.h"

#define SPACED_VERSION "0.1.0"

#define SPACED_MAX_SESSIONS 4096
#define SES_DEFAULT_MEMORY (512ull << 20)
#define SES_DEFAULT_PIDS 512u
#define SES_MAX_MEMORY (1ull << 40)
#define SES_MAX_PIDS 1000000u
#define SES_MAX_CPUS 1024.0
/* Disk limit of a session's writable layer (docs/security.md "Disk"). */
#define SES_DEFAULT_DISK (10ull << 30)    /* spaced --disk-default */
#define SES_MIN_DISK (16ull << 20)        /* below this even a package install fails */
#define SES_MAX_DISK (16ull << 40)        /* and never more than the volume */
/* Snapshot storage (docs/security.md "Snapshot storage"): a session's snapshots may add
 * this many times its disk limit to the store (spaced --snapshot-bytes-factor) ... */
#define SES_DEFAULT_SNAPSHOT_FACTOR 4u
#define SES_MAX_SNAPSHOT_FACTOR 1000u
/* ... and a tenant's sessions together at most spaced --tenant-snapshot-bytes (0 = none) */
#define SES_MAX_TENANT_SNAPSHOT_BYTES (1ull << 50)
#define SPACED_VOLUME_DEFAULT_MAX (64ull << 30) /* default volume: min(this, half the free space) */
/* Durable sessions (docs/sessions.md). */
#define SES_DEFAULT_INTERVAL_MS 30000     /* rolling snapshots; 0 = off */
#define SES_MIN_INTERVAL_MS 1000
#define SES_MAX_INTERVAL_MS (7ll * 24 * 3600 * 1000)
#define SES_DEFAULT_RETENTION 10u         /* rolling snapshots kept */
#define SES_MAX_RETENTION 10000u
#define SES_MAX_FORKS 64                  /* sessions one fork request makes */
#define SES_MAX_QUEUED_ACTIONS 64         /* lifecycle requests waiting per session */
#define SES_EVENTS_DEFAULT 100
#define SES_EVENTS_MAX META_PAGE_MAX      /* 1000 */
#define SES_EVENT_DATA_MAX META_JSON_MAX  /* 64 KiB */
#define SES_LABEL_MAX META_LABEL_MAX      /* 256 bytes */
#define SES_TOKEN_BYTES 32                /* random bytes; 43 url-safe base64 chars */
#define SES_TOKEN_LEN 43
#define SES_TOKEN_HEADER "X-Space-Session-Token"
#define SES_RECOVER_RETRY_MS 1000         /* a recovery that failed is tried again after */
#define SPACED_GC_INTERVAL_MS (10 * 60 * 1000)
#define SPACED_SETTLE_MS 5000            /* a restart serves once sessions are back, or after this */
#define SPACED_WORKERS 2                  /* threads for captures, materializations, GC */
#define SPACED_STARTERS 2                 /* threads for sandbox creates */

struct daemon;
struct session;
struct op;
struct tpl_job;
struct action;
struct job;
struct wpool;
struct metrics;
struct e2b;
struct repl;

struct daemon {
        struct loop *loop;
        char *data_dir;
        char *sock_path;
        char *init_path;
        const struct runtime_ops *rt;
        struct loop_src unix_src;
        struct loop_src tcp_src;
        struct loop_src e2b_src;    /* spaced --e2b-listen (server.h) */
        struct loop_src accept_src; /* the accept back-off timer (server.c) */
        bool accept_short;          /* accept is out of fds: logged, backing off */
        struct loop_src sig_src;
        struct loop_src timer_src;
        struct loop_src tpl_src;  /* read end of the template workers' pipe */
        int tpl_wfd;
        const struct srv_router *router; /* what requests go to (server.h) */
        const struct ses_hooks *ses_hooks; /* what the lifecycle hears of sandboxes (session.h) */
        struct conn *conns;
        size_t n_conns;
        size_t n_tcp, n_unix, n_strangers; /* of n_conns (server.c) */
        /* What clients may hold and write (limits.h); a zero field means its default. */
        struct spaced_limits limits;
        struct session *sessions;
        size_t n_sessions;
        struct tpl_job *jobs;
        uint64_t request_timeout_ms; /* 0: CONN_REQUEST_TIMEOUT_MS */
        uint64_t idle_timeout_ms;    /* 0: CONN_IDLE_TIMEOUT_MS */
        /* Writable layers live under layer_dir: DATA/vol (the quota volume) when disk
         * limits can be enforced, else DATA itself, as before the volume existed. */
        char *layer_dir;
        bool disk_quota;          /* the volume is mounted: disk limits work */
        char disk_error[256];     /* why they don't, for logs, /v1/health and 503s */
        uint64_t disk_default;    /* limit of a session that asks none; 0 = none */
        uint64_t disk_max;        /* the largest a session may ask */
        uint64_t volume_size;
        unsigned snap_factor;     /* a session's snapshot bytes: this times its disk limit; 0 = none */
        uint64_t tenant_snap_max; /* a tenant's snapshot bytes, all sessions; 0 = none */
        bool stopping;
        /* durability */
        struct meta *meta;        /* used by the loop thread only */
        struct store *store;      /* shared with the workers (thread-safe) */
        struct workers *workers;
        struct loop_src job_src;  /* completions from the workers */
        struct workers *reaper;   /* one thread that destroys deleted sessions' sandboxes */
        struct loop_src reaper_src;
        struct workers *starter;  /* threads that run the runtime's create (runsc and QEMU
                                   * take seconds: never on the loop thread) */
        struct loop_src starter_src;
        uint64_t next_gc_ms;
        bool gc_running;
        struct dur_waiter *gc_waiters[16];
        size_t n_gc_waiters;
        struct wpool *pool;        /* warm pool (warmpool.h); NULL until the sessions are loaded */
        uint64_t request_ms;       /* when the last request came, was answered or its stream
                                    * ended (server.c): the pool refills in the quiet after it */
        unsigned n_in_flight;      /* requests not answered yet (a stream: until it begins) */
        struct ingress *ingress;   /* exposed ports' connections (net/ingress.h) */
        char *ports_domain;        /* spaced --ports-domain: "PORT-ses_ID.DOMAIN" hosts; NULL: off */
        /* The network room (net/net.h): NULL with --egress off, when nothing on the host's
         * network changes. net_cfg: the operator's --egress flags, whatever they say. */
        struct net_room *net;
        /* The E2B-compatible API (e2b/e2b.h): NULL with --e2b off. */
        struct e2b *e2b;
        struct net_cfg net_cfg;
        /* The operator's network policy (spaced --egress ..., docs/network.md); zero:
         * egress off, every sandbox loopback only. */
        struct net_operator net_op;
        /* Usage metrics (metrics.h): the sampler and the daemon's counters; NULL: none
         * (unit tests), and every count call does nothing. */
        struct metrics *metrics;
        /* Replication of snapshots to S3 (replicate.h): NULL without --s3-endpoint. */
        struct repl *repl;
};


