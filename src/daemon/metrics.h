/* Usage metrics (docs/api.md "Metrics", docs/daemon.md "GET /metrics"): a sampler on the
 * loop that reads every running session's CPU time, memory, disk and network bytes into a
 * bounded ring of its own, and the daemon's counters and histograms (lifecycle operations,
 * snapshots, HTTP answers) written out in the Prometheus text exposition format 0.0.4. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "daemon/loop.h"

#define METRICS_RING_MAX 720                 /* samples kept per session (1 h at 5 s) */
#define METRICS_INTERVAL_DEFAULT_MS 5000     /* spaced --metrics-interval */
#define METRICS_INTERVAL_MIN_S 1
#define METRICS_INTERVAL_MAX_S 60
#define METRICS_TIME_MAX 64                  /* longest ?start= / ?end= value read */
#define METRICS_HIST_MAX_BUCKETS 16
#define METRICS_NETDEV_MAX (4u << 20)      /* /proc/self/net/dev read per sampling, at most */

struct daemon;
struct session;
struct conn;
struct json_writer;

struct metrics_sample {
        int64_t t_ms;            /* Unix ms */
        uint64_t cpu_ns;         /* CPU time of the session's sandbox since it started */
        double cpu_pct;          /* of one CPU, since the sample before (0 for the first) */
        uint64_t memory_bytes;
        uint64_t memory_limit_bytes; /* 0: none */
        uint64_t disk_bytes;     /* its writable layer (0 without the quota volume) */
        uint64_t net_rx_bytes;   /* received by the sandbox (0 without egress) */
        uint64_t net_tx_bytes;
};

/* A session's samples, oldest first once full; freed with the session. */
struct metrics_ring {
        size_t head;             /* where the next sample goes */
        size_t n;
        char sbx[24];            /* the sandbox the last sample was of: cpu_pct restarts on a new one */
        struct metrics_sample v[METRICS_RING_MAX];
};
struct metrics_ring *metrics_ring_free(struct metrics_ring *r);
/* Appends (the oldest goes when full). */
void metrics_ring_push(struct metrics_ring *r, const struct metrics_sample *smp);
/* The i-th oldest sample, i < r->n. */
const struct metrics_sample *metrics_ring_at(const struct metrics_ring *r, size_t i);

/* A histogram with fixed upper bounds (ascending; +Inf is implied). */
struct metrics_hist {
        const double *bounds;
        size_t n_bounds;         /* at most METRICS_HIST_MAX_BUCKETS */
        uint64_t counts[METRICS_HIST_MAX_BUCKETS + 1]; /* per bucket, not cumulative; last: +Inf */
        double sum;
        uint64_t count;
};
void metrics_hist_observe(struct metrics_hist *h, double v);

/* The exposition writer: one family's HELP and TYPE, then its samples. labels: "" or
 * `k="v",...` already escaped (metrics_label_escape). */
void metrics_w_family(struct buf *b, const char *name, const char *type, const char *help);
void metrics_w_sample(struct buf *b, const char *name, const char *labels, double v);
/* name_bucket{labels,le=...} cumulative, name_sum, name_count. */
void metrics_w_hist(struct buf *b, const char *name, const char *labels, const struct metrics_hist *h);
/* v with \, " and newline escaped, into out (truncated to outsz). */
void metrics_label_escape(const char *v, char *out, size_t outsz);

/* Unix seconds ("1764748800", "1764748800.5") or RFC 3339 ("2026-12-03T10:00:00Z",
 * "...T10:00:00.250+01:00") -> Unix ms. -EINVAL for anything else (ms untouched). */
int metrics_parse_time(const char *s, int64_t *ret_ms);

/* The lifecycle operations counted and timed (from request to answer). */
enum metrics_op {
        METRICS_OP_CREATE,
        METRICS_OP_RESUME,
        METRICS_OP_FORK,
        METRICS_OP_RECOVER,
        METRICS_OP_SNAPSHOT,
        METRICS_OP_PAUSE,
        METRICS_OP_RESTORE,
        METRICS_OP_MAX,
};

struct metrics;
/* Starts the sampler (interval_ms, 1..60 s) on d's loop. */
int metrics_new(struct daemon *d, uint64_t interval_ms, struct metrics **ret);
struct metrics *metrics_free(struct metrics *m);
uint64_t metrics_interval_ms(const struct metrics *m);
/* Samples every running session now (the timer does this every interval). */
void metrics_sample_all(struct metrics *m);

/* Instrumentation (m may be NULL: nothing counted). */
void metrics_op_done(struct metrics *m, enum metrics_op op, bool ok, uint64_t ms);
void metrics_snapshot_bytes(struct metrics *m, uint64_t bytes);
/* An HTTP answer's status, by the route that matched (NULL: none). */
void metrics_http_answer(struct metrics *m, const void *route, int status);

/* The exposition of d's metrics (GET /metrics). */
int metrics_write_exposition(struct daemon *d, struct buf *b);
/* {"interval_ms":..,"samples":[...]} of s between from_ms and to_ms (inclusive), the
 * newest limit of them. */
void metrics_write_session_json(struct daemon *d, struct session *s, int64_t from_ms, int64_t to_ms, size_t limit,
                                struct json_writer *w);
