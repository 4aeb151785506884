/* spaced's warm pool (pool.h). Sandboxes are made and destroyed on a thread of the pool's
 * own, so a refill never holds the event loop nor the workers that take snapshots; the
 * loop thread only links finished ones in and hands them over. A pooled sandbox lives in
 * LAYERS/sandboxes/<id> like any other (LAYERS = the quota volume DATA/vol, else DATA):
 * after a crash, the start-up sweep of sandboxes no session holds reclaims it (dur_load),
 * so the directory is the pool's durable record. */
#include "daemon/warmpool.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <time.h>

#include "common/log.h"
#include "daemon/spaced.h"
#include "daemon/util.h"
#include "daemon/worker.h"
#include "daemon/session.h"
#include "daemon/durable.h"
#include "daemon/disk.h"
#include "daemon/templates.h"
#include "daemon/loop.h"
#include "runtime/fsutil.h"
#include "runtime/quota.h"
#include "runtime/template.h"

_Static_assert(WPOOL_ID_SIZE == SES_ID_LEN + 1, "a pooled sandbox id is a session's sandbox id");

struct wpool_tpl;

struct wpool_entry {
        struct wpool_entry *next;
        struct wpool_tpl *t;
        char id[WPOOL_ID_SIZE];
        char *dir;
        struct rt_sandbox *sb;
        int64_t made_ns;
        dev_t dev;          /* the template rootfs it was made over: a rebuilt */
        ino_t ino;          /* template has another, and its pool is emptied */
        struct loop_src pid_src; /* readable when init died while pooled */
};

struct wpool_tpl {
        struct wpool_tpl *next;
        struct wpool *p;
        char name[TEMPLATE_MAX_NAME + 1];
        unsigned size, ready, making;
        struct wpool_entry *entries;
        uint64_t retry_at_ms;
        bool failing;       /* the last make failed (logged once until one works) */
        uint64_t waiting_since_ms; /* a make wanted, waiting for a quiet moment since then */
};

enum pool_job_kind { PJ_MAKE, PJ_DESTROY };

struct wpool_job {
        struct wjob wj;
        struct wpool *p;
        enum pool_job_kind kind;
        char tpl[TEMPLATE_MAX_NAME + 1];
        char id[WPOOL_ID_SIZE];
        char *dir;
        struct rt_sandbox *sb;
        int64_t made_ns;
        dev_t dev;
        ino_t ino;
        int r;
        char err[512];
        bool take_back;     /* started in a quiet moment: rt_cow_take_back after it */
};

struct wpool {
        struct daemon *d;
        const struct runtime_ops *rt;
        struct workers *wk;
        struct loop_src wk_src;
        struct wpool_tpl *tpls;
        unsigned n_tpls;
        unsigned n_making;           /* makes in flight, every template */
        unsigned quiet_ms;           /* spaced --pool-quiet */
        struct loop_src quiet_src;   /* a timerfd: the quiet moment a refill waits for */
        bool sustained;              /* requests did not pause for long: refills go at once */
        bool stopping;
        uint64_t made, taken, missed, failed, died, discarded;
};

static int64_t realtime_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t mono_us(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int rootfs_ident(const char *data_dir, const char *tpl, dev_t *dev, ino_t *ino) {
        _cleanup_free_ char *path = NULL;
        int r = template_rootfs_path(data_dir, tpl, &path);
        if (r < 0)
                return r;
        struct stat st;
        if (stat(path, &st) < 0)
                return -errno;
        *dev = st.st_dev;
        *ino = st.st_ino;
        return 0;
}

/* ---------------- on the pool's thread ---------------- */


static void work_make(struct wpool_job *j) {
        struct wpool *p = j->p;
        /* Refills yield to the requests they serve: the thread runs at a low priority (the
         * driver starts the sandbox itself at the normal one). Nice is per thread. */
        static __thread bool niced;
        if (!niced) {
                niced = true;
                if (setpriority(PRIO_PROCESS, 0, WPOOL_NICE) < 0)
                        log_debug("pool: nice %d: %m", WPOOL_NICE);
        }
        const char *data = p->d->data_dir;
        _cleanup_free_ char *lower = NULL, *upper = NULL, *work = NULL, *run = NULL;
        int r = util_random_id("sbx_", j->id, sizeof j->id);
        if (r < 0 || !(j->dir = disk_sandbox_dir(p->d, j->id)) || asprintf(&upper, "%s/upper", j->dir) < 0 ||
            asprintf(&work, "%s/work", j->dir) < 0 || asprintf(&run, "%s/run", j->dir) < 0 ||
            template_rootfs_path(data, j->tpl, &lower) < 0) {
                j->r = r < 0 ? r : -ENOMEM;
                snprintf(j->err, sizeof j->err, "out of memory");
                return;
        }
        if (!template_exists(data, j->tpl) || (r = rootfs_ident(data, j->tpl, &j->dev, &j->ino)) < 0) {
                j->r = -ENOENT;
                snprintf(j->err, sizeof j->err, "template %s does not exist", j->tpl);
                return;
        }
        /* The layout start_begin makes for a cold sandbox, so a taken one is no different
         * (on the quota volume a subvolume: a disk limit can be put on it when taken). */
        r = rt_volume_make_dir(j->dir, 0700);
        if (r == 0 && (mkdir(upper, 0755) < 0 || mkdir(work, 0700) < 0 || mkdir(run, 0700) < 0))
                r = -errno;
        if (r < 0) {
                j->r = r;
                snprintf(j->err, sizeof j->err, "making %s: %s", j->dir, strerror(-r));
                (void)rt_rm_rf(j->dir);
                return;
        }
        /* With the network room a lease with everything closed: the taker's policy is
         * applied when it is taken (dur_start_begin), before anything of the taker runs. */
        struct net_lease *lease = NULL;
        if (p->d->net && p->rt->network && (r = net_lease_new(p->d->net, j->id, j->dir, &lease, j->err, sizeof j->err)) < 0) {
                j->r = r;
                (void)rt_rm_rf(j->dir);
                return;
        }
        /* The session defaults, so that a create asking for none changes nothing. */
        struct rt_spec spec = {
                .id = j->id,
                .lower_dirs = lower,
                .upper_dir = upper,
                .work_dir = work,
                .run_dir = run,
                .init_path = p->d->init_path,
                .limits = { .memory_bytes = SES_DEFAULT_MEMORY, .pids = SES_DEFAULT_PIDS },
                .network = lease != NULL,
                .netns_fd = lease ? net_lease_netns_fd(lease) : -1,
                .resolv_conf = lease ? net_lease_resolv_conf(lease) : NULL,
        };
        j->made_ns = realtime_ns(); /* before create: the layer is empty from here on */
        r = p->rt->create(&spec, &j->sb);
        if (r >= 0 && j->take_back) {
                int64_t t0 = mono_us();
                rt_cow_take_back(); /* the loop thread's next writes would fault: docs/performance.md */
                log_debug("pool: %s: spaced's pages writable again in %" PRId64 " us", j->id, mono_us() - t0);
        }
        if (r < 0) {
                j->sb = NULL;
                j->r = r;
                snprintf(j->err, sizeof j->err, "%s", *runtime_last_error() ? runtime_last_error() : strerror(-r));
                if (lease)
                        net_lease_release(p->d->net, lease);
                (void)rt_rm_rf(j->dir);
        }
}

static void work_destroy(struct wpool_job *j) {
        if (j->sb && j->p->rt->destroy(j->sb) < 0)
                snprintf(j->err, sizeof j->err, "destroying pooled sandbox %s: %s", j->id, runtime_last_error());
        j->sb = NULL;
        net_release_sbx(j->p->d->net, j->id, j->dir);
        int r = rt_rm_rf(j->dir);
        if (r < 0 && r != -ENOENT && !j->err[0])
                snprintf(j->err, sizeof j->err, "removing %s: %s", j->dir, strerror(-r));
}

static void job_work(struct wjob *wj) {
        struct wpool_job *j = (struct wpool_job *)wj;
        if (j->kind == PJ_MAKE)
                work_make(j);
        else
                work_destroy(j);
}

/* ---------------- on the loop thread ---------------- */

static void job_done(struct wjob *wj);

static struct wpool_job *job_new(struct wpool *p, enum pool_job_kind kind) {
        struct wpool_job *j = calloc(1, sizeof *j);
        if (!j)
                return NULL;
        j->p = p;
        j->kind = kind;
        j->wj.work = job_work;
        j->wj.done = job_done;
        return j;
}

static void job_free(struct wpool_job *j) {
        free(j->dir);
        free(j);
}

/* Destroys a sandbox nobody will get, off the loop (at shutdown: right here). */
static void discard(struct wpool *p, const char *id, char *dir, struct rt_sandbox *sb) {
        p->discarded++;
        struct wpool_job *j = p->stopping ? NULL : job_new(p, PJ_DESTROY);
        if (j) {
                snprintf(j->id, sizeof j->id, "%s", id);
                j->dir = dir;
                j->sb = sb;
                if (wk_submit(p->wk, &j->wj) == 0)
                        return;
                j->dir = NULL;
                job_free(j);
        }
        struct wpool_job now = { .p = p, .dir = dir, .sb = sb };
        snprintf(now.id, sizeof now.id, "%s", id);
        work_destroy(&now);
        if (now.err[0])
                log_warn("pool: %s", now.err);
        free(dir);
}

static void entry_unlink(struct wpool_entry *e) {
        struct wpool_tpl *t = e->t;
        for (struct wpool_entry **pp = &t->entries; *pp; pp = &(*pp)->next)
                if (*pp == e) {
                        *pp = e->next;
                        break;
                }
        t->ready--;
        loop_del(t->p->d->loop, &e->pid_src);
}

static void entry_discard(struct wpool_entry *e) {
        struct wpool *p = e->t->p;
        entry_unlink(e);
        discard(p, e->id, e->dir, e->sb);
        free(e);
}

static void refill(struct wpool_tpl *t);

static void entry_died(struct loop_src *src, uint32_t revents) {
        (void)revents;
        struct wpool_entry *e = (struct wpool_entry *)((char *)src - offsetof(struct wpool_entry, pid_src));
        struct wpool_tpl *t = e->t;
        log_warn("pool: sandbox %s (template %s) died while pooled", e->id, t->name);
        t->p->died++;
        entry_discard(e);
        refill(t);
}

static void flush(struct wpool_tpl *t) {
        while (t->entries)
                entry_discard(t->entries);
}

/* Wakes the pool at at_ms (CLOCK_MONOTONIC, util_now_ms), to refill then. */
static void quiet_arm(struct wpool *p, uint64_t at_ms) {
        uint64_t now = util_now_ms(), in = at_ms > now ? at_ms - now : 1;
        struct itimerspec its = { .it_value = { .tv_sec = (time_t)(in / 1000), .tv_nsec = (long)(in % 1000) * 1000000 } };
        if (timerfd_settime(p->quiet_src.fd, 0, &its, NULL) < 0)
                log_debug("pool: timerfd: %m"); /* the once-a-second tick refills instead */
}

/* Below half its size (rounded up) a pool refills at once, all it lacks. Above,
 * one make at a time (of every template), each started in a quiet moment: quiet_ms
 * after the last request, so that it does not run beside the commands of the sandboxes
 * just taken; with no such moment for WPOOL_QUIET_WAIT_MAX times that, at once. */
static void refill(struct wpool_tpl *t) {
        struct wpool *p = t->p;
        if (p->stopping || util_now_ms() < t->retry_at_ms)
                return;
        while (t->ready + t->making < t->size) {
                bool urgent = t->ready + t->making < (t->size + 1) / 2;
                uint64_t now = util_now_ms(), quiet_at = p->d->request_ms + p->quiet_ms;
                if (p->d->n_in_flight)
                        quiet_at = MAX(quiet_at, now + MAX(p->quiet_ms, 1u)); /* looked at again then */
                if (now >= quiet_at)
                        p->sustained = false;
                if (!urgent && !p->sustained) {
                        if (p->n_making)
                                return; /* make_done comes back here */
                        if (!t->waiting_since_ms)
                                t->waiting_since_ms = now;
                        /* Requests that never pause: the pool refills beside them after all,
                         * once WPOOL_QUIET_WAIT_MAX times the quiet has passed, and goes on
                         * so until they pause. */
                        uint64_t give_up = t->waiting_since_ms + (uint64_t)p->quiet_ms * WPOOL_QUIET_WAIT_MAX;
                        if (now < quiet_at && now < give_up) {
                                quiet_arm(p, MIN(quiet_at, give_up));
                                return;
                        }
                        if (now < quiet_at)
                                p->sustained = true;
                }
                t->waiting_since_ms = 0;
                struct wpool_job *j = job_new(p, PJ_MAKE);
                if (!j)
                        return;
                snprintf(j->tpl, sizeof j->tpl, "%s", t->name);
                /* Only in the quiet: under load the loop thread's faults come anyway, and
                 * taking the pages back beside it contends for the address space (10 ms
                 * p90 with 8 clients, against 1 ms at rest). */
                j->take_back = now >= quiet_at;
                if (wk_submit(p->wk, &j->wj) < 0) {
                        job_free(j);
                        return;
                }
                t->making++;
                p->n_making++;
                if (!urgent && !p->sustained)
                        return;
        }
}

static void refill_all(struct wpool *p) {
        for (struct wpool_tpl *t = p->tpls; t; t = t->next)
                refill(t);
}

static void quiet_event(struct loop_src *src, uint32_t revents) {
        (void)revents;
        struct wpool *p = (struct wpool *)((char *)src - offsetof(struct wpool, quiet_src));
        uint64_t n;
        (void)!read(src->fd, &n, sizeof n);
        refill_all(p);
}

static struct wpool_tpl *tpl_find(struct wpool *p, const char *name) {
        for (struct wpool_tpl *t = p->tpls; t; t = t->next)
                if (!strcmp(t->name, name))
                        return t;
        return NULL;
}

static void tpl_maybe_free(struct wpool_tpl *t) {
        struct wpool *p = t->p;
        if (t->size || t->ready || t->making)
                return;
        for (struct wpool_tpl **pp = &p->tpls; *pp; pp = &(*pp)->next)
                if (*pp == t) {
                        *pp = t->next;
                        break;
                }
        p->n_tpls--;
        free(t);
}

static void make_done(struct wpool_job *j) {
        struct wpool *p = j->p;
        struct wpool_tpl *t = tpl_find(p, j->tpl);
        if (t)
                t->making--;
        p->n_making--;
        if (j->r < 0) {
                p->failed++;
                if (t) {
                        if (!t->failing)
                                log_warn("pool: making a sandbox of template %s failed: %s (retrying every %d s)", t->name,
                                         j->err, WPOOL_RETRY_MS / 1000);
                        t->failing = true;
                        t->retry_at_ms = util_now_ms() + WPOOL_RETRY_MS;
                        tpl_maybe_free(t);
                }
                return;
        }
        dev_t dev = 0; /* set: gcc cannot tell rootfs_ident's -errno from its 0 */
        ino_t ino = 0;
        /* Kept only if still wanted and made over the template as it is now. */
        bool keep = t && !p->stopping && t->ready < t->size &&
                    rootfs_ident(p->d->data_dir, t->name, &dev, &ino) == 0 && dev == j->dev && ino == j->ino;
        struct wpool_entry *e = keep ? calloc(1, sizeof *e) : NULL;
        if (e) {
                e->t = t;
                memcpy(e->id, j->id, sizeof e->id);
                e->dir = TAKE_PTR(j->dir);
                e->sb = TAKE_PTR(j->sb);
                e->made_ns = j->made_ns;
                e->dev = j->dev;
                e->ino = j->ino;
                e->pid_src.fd = p->rt->pid_fd(e->sb);
                e->pid_src.cb = entry_died;
                if (loop_add(p->d->loop, &e->pid_src, EPOLLIN) < 0) {
                        j->dir = TAKE_PTR(e->dir);
                        j->sb = TAKE_PTR(e->sb);
                        free(e);
                        e = NULL;
                }
        }
        if (!e) {
                discard(p, j->id, TAKE_PTR(j->dir), TAKE_PTR(j->sb));
                if (t)
                        tpl_maybe_free(t);
                return;
        }
        p->made++;
        if (t->failing)
                log_info("pool: template %s: sandboxes are made again", t->name);
        t->failing = false;
        /* Oldest first out: each waits as briefly as it can, and a drained pool is one
         * whose every sandbox was taken. */
        struct wpool_entry **tail = &t->entries;
        while (*tail)
                tail = &(*tail)->next;
        *tail = e;
        t->ready++;
}

static void job_done(struct wjob *wj) {
        struct wpool_job *j = (struct wpool_job *)wj;
        if (j->kind == PJ_MAKE) {
                struct wpool *p = j->p;
                make_done(j);
                refill_all(p); /* this template's next, or another's waiting for its turn */
        } else if (j->err[0])
                log_warn("pool: %s", j->err);
        job_free(j);
}

static void wk_event(struct loop_src *src, uint32_t revents) {
        (void)revents;
        struct wpool *p = (struct wpool *)((char *)src - offsetof(struct wpool, wk_src));
        wk_dispatch(p->wk);
}

int wpool_new(struct daemon *d, unsigned quiet_ms, struct wpool **ret) {
        struct wpool *p = calloc(1, sizeof *p);
        if (!p)
                return -ENOMEM;
        p->d = d;
        p->rt = d->rt;
        p->quiet_ms = quiet_ms;
        p->wk_src.fd = -1;
        /* One thread: a refill is a background chore, and a second would only take the
         * CPU from the creates it serves. */
        int r = wk_new(1, &p->wk);
        if (r < 0) {
                free(p);
                return r;
        }
        p->wk_src.fd = wk_fd(p->wk);
        p->wk_src.cb = wk_event;
        r = loop_add(d->loop, &p->wk_src, EPOLLIN);
        if (r < 0) {
                wk_free(p->wk);
                free(p);
                return r;
        }
        p->quiet_src.fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        p->quiet_src.cb = quiet_event;
        if (p->quiet_src.fd < 0 || (r = loop_add(d->loop, &p->quiet_src, EPOLLIN)) < 0) {
                r = p->quiet_src.fd < 0 ? -errno : r;
                safe_close(p->quiet_src.fd);
                loop_del(d->loop, &p->wk_src);
                wk_free(p->wk);
                free(p);
                return r;
        }
        *ret = p;
        return 0;
}

struct wpool *wpool_free(struct wpool *p) {
        if (!p)
                return NULL;
        p->stopping = true;
        /* Makes in flight finish; their done() sees stopping and destroys them here. */
        wk_drain(p->wk);
        unsigned n = 0;
        while (p->tpls) {
                struct wpool_tpl *t = p->tpls;
                n += t->ready;
                flush(t);
                p->tpls = t->next;
                free(t);
        }
        if (n)
                log_info("pool: %u pooled sandbox(es) destroyed", n);
        loop_del(p->d->loop, &p->wk_src);
        loop_del(p->d->loop, &p->quiet_src);
        safe_close(p->quiet_src.fd);
        wk_free(p->wk);
        free(p);
        return NULL;
}

int wpool_set(struct wpool *p, const char *template, unsigned size) {
        if (!template_name_valid(template) || size > WPOOL_MAX_SIZE)
                return -EINVAL;
        if (size && !p->rt->set_limits)
                return -EOPNOTSUPP;
        struct wpool_tpl *t = tpl_find(p, template);
        if (!t) {
                if (!size)
                        return 0;
                if (p->n_tpls >= WPOOL_MAX_TEMPLATES)
                        return -E2BIG;
                t = calloc(1, sizeof *t);
                if (!t)
                        return -ENOMEM;
                t->p = p;
                snprintf(t->name, sizeof t->name, "%s", template);
                t->next = p->tpls;
                p->tpls = t;
                p->n_tpls++;
        }
        t->size = size;
        t->retry_at_ms = 0;
        while (t->ready > size)
                entry_discard(t->entries);
        refill(t);
        tpl_maybe_free(t);
        return 0;
}

int wpool_set_arg(struct wpool *p, const char *arg) {
        const char *eq = strrchr(arg, '=');
        if (!eq || eq == arg || (size_t)(eq - arg) > TEMPLATE_MAX_NAME)
                return -EINVAL;
        char name[TEMPLATE_MAX_NAME + 1];
        memcpy(name, arg, (size_t)(eq - arg));
        name[eq - arg] = '\0';
        char *end;
        errno = 0;
        unsigned long n = strtoul(eq + 1, &end, 10);
        if (errno || end == eq + 1 || *end || eq[1] == '-' || n > WPOOL_MAX_SIZE)
                return -EINVAL;
        return p ? wpool_set(p, name, (unsigned)n) : (template_name_valid(name) ? 0 : -EINVAL);
}

/* The disk limit of a sandbox being taken: nothing but space-init has run inside, so it
 * holds before the session's first command, as create() would have it. The pooled
 * directory is on the quota volume (work_make), where rt_quota_apply can set it. */
static int apply_disk(const struct wpool_entry *e, const struct rt_limits *l) {
        if (!l->disk_bytes && !l->disk_inodes)
                return 0;
        _cleanup_free_ char *upper = NULL, *work = NULL;
        if (asprintf(&upper, "%s/upper", e->dir) < 0 || asprintf(&work, "%s/work", e->dir) < 0)
                return -ENOMEM;
        return rt_quota_apply(upper, work, l->disk_bytes, l->disk_inodes);
}

int wpool_take(struct wpool *p, const struct wpool_want *w, struct wpool_sandbox *ret) {
        /* A pooled sandbox has the template's files and, with the network room, a closed
         * lease (the taker's policy comes at take), else no network; a disk limit needs the
         * quota volume: anything else is made cold. */
        if (!p || (w->network && !p->d->net) || ((w->limits.disk_bytes || w->limits.disk_inodes) && !p->d->disk_quota) ||
            !p->rt->set_limits)
                return -ENOENT;
        struct rt_limits other = w->limits; /* set_limits refuses disk limits: apply_disk does them */
        other.disk_bytes = other.disk_inodes = 0;
        struct wpool_tpl *t = tpl_find(p, w->template);
        if (!t)
                return -ENOENT;
        dev_t dev = 0;
        ino_t ino = 0;
        bool have_ident = t->entries && rootfs_ident(p->d->data_dir, t->name, &dev, &ino) == 0;
        while (t->entries) {
                struct wpool_entry *e = t->entries;
                struct pollfd pf = { .fd = e->pid_src.fd, .events = POLLIN };
                if (!have_ident || e->dev != dev || e->ino != ino) {
                        log_info("pool: template %s changed: its pooled sandboxes are replaced", t->name);
                        flush(t);
                        break;
                }
                if (poll(&pf, 1, 0) != 0) { /* died in this very batch */
                        p->died++;
                        entry_discard(e);
                        continue;
                }
                int r = p->rt->set_limits(e->sb, &other);
                if (r >= 0)
                        r = apply_disk(e, &w->limits);
                if (r < 0) {
                        log_warn("pool: %s: %s; making one cold", e->id,
                                 *runtime_last_error() ? runtime_last_error() : strerror(-r));
                        entry_discard(e);
                        continue;
                }
                entry_unlink(e);
                memcpy(ret->id, e->id, sizeof ret->id);
                ret->dir = e->dir;
                ret->sb = e->sb;
                ret->clean_since_ns = e->made_ns;
                free(e);
                p->taken++;
                refill(t);
                return 0;
        }
        if (t->size)
                p->missed++;
        refill(t);
        return -ENOENT;
}

void wpool_tick(struct wpool *p) {
        if (!p)
                return;
        for (struct wpool_tpl *t = p->tpls; t; t = t->next) {
                dev_t dev = 0;
                ino_t ino = 0;
                if (t->entries && (rootfs_ident(p->d->data_dir, t->name, &dev, &ino) < 0 || dev != t->entries->dev ||
                                   ino != t->entries->ino)) {
                        log_info("pool: template %s changed or is gone: its pooled sandboxes are replaced", t->name);
                        flush(t);
                }
                refill(t);
        }
}

void wpool_write_json(struct json_writer *w, struct wpool *p) {
        json_w_obj_begin(w);
        json_w_key(w, "templates");
        json_w_arr_begin(w);
        for (struct wpool_tpl *t = p ? p->tpls : NULL; t; t = t->next) {
                json_w_obj_begin(w);
                json_w_kstr(w, "template", t->name);
                json_w_kint(w, "size", t->size);
                json_w_kint(w, "ready", t->ready);
                json_w_kint(w, "making", t->making);
                json_w_kbool(w, "failing", t->failing);
                json_w_obj_end(w);
        }
        json_w_arr_end(w);
        json_w_kint(w, "made", p ? (int64_t)p->made : 0);
        json_w_kint(w, "taken", p ? (int64_t)p->taken : 0);
        json_w_kint(w, "missed", p ? (int64_t)p->missed : 0);
        json_w_kint(w, "failed", p ? (int64_t)p->failed : 0);
        json_w_kint(w, "died", p ? (int64_t)p->died : 0);
        json_w_kint(w, "discarded", p ? (int64_t)p->discarded : 0);
        json_w_obj_end(w);
}

void wpool_each_level(struct wpool *p, void (*fn)(const struct wpool_level *l, void *ud), void *ud) {
        for (struct wpool_tpl *t = p ? p->tpls : NULL; t; t = t->next)
                fn(&(struct wpool_level){ .template = t->name, .size = t->size, .ready = t->ready, .making = t->making },
                   ud);
}

void wpool_get_counts(struct wpool *p, struct wpool_counts *ret) {
        *ret = p ? (struct wpool_counts){ .made = p->made, .taken = p->taken, .missed = p->missed,
                                          .failed = p->failed, .died = p->died, .discarded = p->discarded }
                 : (struct wpool_counts){ 0 };
}
