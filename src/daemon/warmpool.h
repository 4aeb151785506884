/* spaced's warm pool: per template, sandboxes made ahead of time and not yet given to
 * anyone, so that a create only hands one over (docs/performance.md, "Warm pool"). A
 * pooled sandbox is used once: taken by one session, never returned. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "common/json.h"
#include "runtime/runtime.h"

#define WPOOL_MAX_SIZE 256       /* sandboxes one template may keep ready */
#define WPOOL_MAX_TEMPLATES 64   /* templates with a pool */
#define WPOOL_RETRY_MS 5000      /* after a failed make, the next try waits this long */
#define WPOOL_NICE 10            /* of the thread that makes pooled sandboxes */
/* A refill waits for a quiet moment: no request for this long (daemon.request_ms), so that
 * making a replacement (milliseconds of kernel work that a non-preemptible kernel does not
 * give up) never runs beside the first command of the sandbox just taken. Below half
 * its size a pool refills at once, whatever the load, and so it does when requests have
 * not paused for WPOOL_QUIET_WAIT_MAX times the quiet. */
#define WPOOL_QUIET_DEFAULT_MS 10 /* spaced --pool-quiet */
#define WPOOL_QUIET_MAX_MS 60000
#define WPOOL_QUIET_WAIT_MAX 20  /* no quiet for 20 x --pool-quiet: the refill goes ahead */
#define WPOOL_ID_SIZE 21         /* "sbx_" + 16 hex + NUL: SES_ID_LEN + 1 */

struct daemon;
struct wpool;

/* What a session needs from a sandbox; pool_take refuses what a pooled one can't give. */
struct wpool_want {
        const char *template;
        bool network;
        struct rt_limits limits;
};

/* A sandbox handed over: the caller owns all of it (dir as DATA/sandboxes/<id>). */
struct wpool_sandbox {
        char id[WPOOL_ID_SIZE];
        char *dir;
        struct rt_sandbox *sb;
        int64_t clean_since_ns; /* CLOCK_REALTIME: its writable layer was empty then */
};

/* Off (every size 0) until pool_set. Refills run on a thread of the pool's own. */
int wpool_new(struct daemon *d, unsigned quiet_ms, struct wpool **ret);
/* Destroys every pooled sandbox (waits for makes in flight). Accepts NULL. */
struct wpool *wpool_free(struct wpool *p);
/* How many sandboxes of template to keep ready; 0 = none (and destroys those kept).
 * -EINVAL for a bad name or size over WPOOL_MAX_SIZE, -E2BIG past WPOOL_MAX_TEMPLATES.
 * The template need not exist yet: the pool fills once it does. */
int wpool_set(struct wpool *p, const char *template, unsigned size);
/* "TEMPLATE=N" (spaced --pool); p NULL only checks the syntax. */
int wpool_set_arg(struct wpool *p, const char *arg);
/* Hands over a ready sandbox that fits w, with w's limits applied; -ENOENT when there is
 * none (the caller makes one cold). The pool refills in the background. */
int wpool_take(struct wpool *p, const struct wpool_want *w, struct wpool_sandbox *ret);
/* Once a second: retries, template changes (a rebuilt template empties its pool). */
void wpool_tick(struct wpool *p);
/* {"templates":[{"template","size","ready","making","failing"}],"made":N,"taken":N,...};
 * p may be NULL (no pool: an empty list). */
void wpool_write_json(struct json_writer *w, struct wpool *p);
/* For metrics (daemon/metrics.h): each template's level, and what happened to the pool's
 * sandboxes since the start. p may be NULL (no pool: nothing, zeros). */
struct wpool_level {
        const char *template;
        unsigned size, ready, making;
};
void wpool_each_level(struct wpool *p, void (*fn)(const struct wpool_level *l, void *ud), void *ud);
struct wpool_counts {
        uint64_t made, taken, missed, failed, died, discarded;
};
void wpool_get_counts(struct wpool *p, struct wpool_counts *ret);
