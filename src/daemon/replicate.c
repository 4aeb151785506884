/* The replicator (replicate.h, docs/daemon.md "Replication"): a bounded set of snapshots
 * held in memory, each queued, pushing on one of the replicator's threads, done (the
 * loop thread commits the result) or waiting for its retry. The loop thread alone adds to
 * the set (from meta, oldest unreplicated first), commits results and frees slots; the
 * threads only take a queued slot, push it and hand it back through an eventfd. */
#include "daemon/replicate.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/json.h"
#include "common/log.h"
#include "common/macros.h"
#include "daemon/loop.h"
#include "daemon/spaced.h"
#include "meta/meta.h"
#include "store/remote.h"
#include "store/store.h"
#ifdef SPACE_HAVE_S3
#include "store/remote-s3.h"
#endif

#define REPL_ERR_SIZE 256u

enum slot_state { SLOT_FREE, SLOT_QUEUED, SLOT_PUSHING, SLOT_DONE, SLOT_WAITING };

struct slot {
        enum slot_state state;
        char id[META_ID_SIZE];
        char session[META_ID_SIZE];
        struct store_hash snap, mem;
        bool has_mem;
        unsigned failures;    /* pushes that failed in a row */
        uint64_t retry_ms;    /* SLOT_WAITING: when it is queued again (monotonic) */
        uint64_t queued_seq;  /* order of queueing: the oldest queued is pushed first */
        int r;                /* SLOT_DONE: the push's result */
        char err[REPL_ERR_SIZE];
        struct store_remote_stats st;
};

/* A snapshot whose push failed, out of the slots until its retry is due: failing
 * snapshots do not take the slots from the ones behind them. */
struct waiting {
        char id[META_ID_SIZE];
        unsigned failures;
        uint64_t retry_ms;
        bool seen;            /* listed by the last scan */
};

struct repl_thread {
        struct repl *rp;
        pthread_t th;
        struct store_remote *remote;
        bool started;
};

struct repl {
        struct daemon *d;
        pthread_mutex_t mu;
        pthread_cond_t cv;
        bool stop;
        struct slot slots[REPL_HELD_MAX];  /* under mu: state, and the result fields */
        uint64_t seq;
        struct repl_thread threads[REPL_JOBS_MAX];
        unsigned n_threads;
        struct loop_src src;               /* eventfd: a push finished */
        uint64_t pushed;
        struct waiting *wait;              /* REPL_WAIT_MAX; the loop thread's alone */
        size_t n_wait;
};

static uint64_t mono_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

bool repl_endpoint_valid(const char *s) {
        size_t n = strlen(s);
        if (n == 0 || n > REPL_ENDPOINT_MAX)
                return false;
        const char *h = !strncmp(s, "http://", 7) ? s + 7 : !strncmp(s, "https://", 8) ? s + 8 : NULL;
        if (!h || !*h || *h == '/')
                return false;
        for (const char *p = h; *p; p++)
                if (!isgraph((unsigned char)*p) || *p == '?' || *p == '#')
                        return false;
        return true;
}

/* S3's rule for a bucket name, path-style: 3..63 of [a-z0-9.-], starting and ending
 * with a letter or digit. */
bool repl_bucket_valid(const char *s) {
        size_t n = strlen(s);
        if (n < 3 || n > 63 || !isalnum((unsigned char)s[0]) || !isalnum((unsigned char)s[n - 1]))
                return false;
        for (size_t i = 0; i < n; i++)
                if (!(islower((unsigned char)s[i]) || isdigit((unsigned char)s[i]) || s[i] == '.' || s[i] == '-'))
                        return false;
        return true;
}

bool repl_region_valid(const char *s) {
        size_t n = strlen(s);
        if (n == 0 || n > REPL_REGION_MAX)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!(islower((unsigned char)s[i]) || isdigit((unsigned char)s[i]) || s[i] == '-'))
                        return false;
        return true;
}

/* ---- the threads ---- */

static struct slot *oldest_queued(struct repl *rp) {
        struct slot *best = NULL;
        for (size_t i = 0; i < REPL_HELD_MAX; i++)
                if (rp->slots[i].state == SLOT_QUEUED && (!best || rp->slots[i].queued_seq < best->queued_seq))
                        best = &rp->slots[i];
        return best;
}

static void *repl_main(void *p) {
        struct repl_thread *t = p;
        struct repl *rp = t->rp;
        pthread_mutex_lock(&rp->mu);
        for (;;) {
                struct slot *s;
                while (!rp->stop && !(s = oldest_queued(rp)))
                        pthread_cond_wait(&rp->cv, &rp->mu);
                if (rp->stop)
                        break;
                s->state = SLOT_PUSHING;
                struct store_hash snap = s->snap, mem = s->mem;
                bool has_mem = s->has_mem;
                pthread_mutex_unlock(&rp->mu);

                /* the memory image's record first: the snapshot's record in the bucket
                 * then means that everything it names is there */
                struct store_remote_stats st = { 0 }, st2 = { 0 };
                char err[REPL_ERR_SIZE] = "";
                int r = has_mem ? store_push(rp->d->store, t->remote, &mem, NULL, &st2) : 0;
                if (r >= 0)
                        r = store_push(rp->d->store, t->remote, &snap, NULL, &st);
                if (r < 0) {
                        const char *why = store_error_detail();
                        snprintf(err, sizeof err, "%s", why && *why ? why : strerror(-r));
                }
                st.objects_sent += st2.objects_sent;
                st.bytes_sent += st2.bytes_sent;

                pthread_mutex_lock(&rp->mu);
                s->r = r;
                s->st = st;
                memcpy(s->err, err, sizeof err);
                s->state = SLOT_DONE;
                (void)!write(rp->src.fd, &(uint64_t){ 1 }, sizeof(uint64_t));
        }
        pthread_mutex_unlock(&rp->mu);
        return NULL;
}

/* ---- the loop thread ---- */

static void record_replicated(struct repl *rp, const struct slot *s) {
        struct meta *m = rp->d->meta;
        struct buf b = BUF_INIT(0);
        struct json_writer w = JSON_WRITER_INIT(&b);
        char hex[STORE_HEX_LEN + 1];
        store_hash_to_hex(&s->snap, hex);
        json_w_obj_begin(&w);
        json_w_kstr(&w, "snapshot", s->id);
        json_w_kstr(&w, "store_snapshot", hex);
        json_w_kuint(&w, "objects_sent", s->st.objects_sent);
        json_w_kuint(&w, "bytes_sent", s->st.bytes_sent);
        json_w_kuint(&w, "failures", s->failures);
        json_w_obj_end(&w);
        int r = meta_begin(m);
        bool open = r >= 0;
        if (r >= 0 && (r = meta_snapshot_set_replicated(m, s->id, true)) >= 0 &&
            (r = meta_event_append(m, s->session, "replicated", b.data, b.len, NULL)) >= 0) {
                r = meta_commit(m);
                open = r < 0;
        }
        if (r < 0) {
                if (r != -ENOENT) /* deleted meanwhile (retention, a session deleted): nothing to mark */
                        log_warn("%s: recording that %s is replicated: %s", s->session, s->id, meta_last_error(m));
                if (open)
                        (void)meta_rollback(m);
        } else {
                rp->pushed++;
                log_debug("%s: snapshot %s replicated (%llu objects sent)", s->session, s->id,
                          (unsigned long long)s->st.objects_sent);
        }
        buf_free(&b);
}

static void retry_later(struct repl *rp, struct slot *s) {
        struct meta_snapshot m;
        if (meta_snapshot_get(rp->d->meta, s->id, &m) == -ENOENT) {
                s->state = SLOT_FREE; /* gone: no need to push it */
                return;
        }
        s->failures++;
        uint64_t backoff = REPL_BACKOFF_FIRST_MS;
        for (unsigned i = 1; i < s->failures && backoff < REPL_BACKOFF_MAX_MS; i++)
                backoff *= 2;
        backoff = MIN(backoff, (uint64_t)REPL_BACKOFF_MAX_MS);
        s->retry_ms = mono_ms() + backoff;
        s->state = SLOT_WAITING;
        if (rp->n_wait < REPL_WAIT_MAX) {
                struct waiting *w = &rp->wait[rp->n_wait++];
                *w = (struct waiting){ .failures = s->failures, .retry_ms = s->retry_ms, .seen = true };
                snprintf(w->id, sizeof w->id, "%s", s->id);
                s->state = SLOT_FREE; /* its slot goes to the next snapshot; the scan brings it back when due */
        }
        if (s->failures == 1 || backoff == REPL_BACKOFF_MAX_MS)
                log_warn("%s: replicating snapshot %s failed (%u in a row, next try in %llu ms): %s", s->session,
                         s->id, s->failures, (unsigned long long)backoff, s->err);
}

static void repl_scan(struct repl *rp);

static void repl_event(struct loop_src *src, uint32_t revents) {
        (void)revents;
        struct repl *rp = (struct repl *)((char *)src - offsetof(struct repl, src));
        uint64_t n;
        (void)!read(src->fd, &n, sizeof n);
        struct slot done[REPL_HELD_MAX];
        size_t nd = 0;
        pthread_mutex_lock(&rp->mu);
        for (size_t i = 0; i < REPL_HELD_MAX; i++)
                if (rp->slots[i].state == SLOT_DONE) {
                        done[nd++] = rp->slots[i];
                        rp->slots[i].state = SLOT_FREE; /* reused below, on this thread only */
                }
        pthread_mutex_unlock(&rp->mu);
        bool freed = false;
        for (size_t i = 0; i < nd; i++) {
                struct slot *s = &done[i];
                if (s->r >= 0) {
                        record_replicated(rp, s);
                        freed = true;
                        continue;
                }
                retry_later(rp, s);
                if (s->state == SLOT_FREE) {
                        freed = true;
                        continue;
                }
                /* back into a free slot (the one it had is free, and only this thread fills slots) */
                pthread_mutex_lock(&rp->mu);
                for (size_t k = 0; k < REPL_HELD_MAX; k++)
                        if (rp->slots[k].state == SLOT_FREE) {
                                rp->slots[k] = *s;
                                break;
                        }
                pthread_mutex_unlock(&rp->mu);
        }
        if (freed)
                repl_scan(rp);
}

static struct waiting *waiting_find(struct repl *rp, const char *id) {
        for (size_t i = 0; i < rp->n_wait; i++)
                if (!strcmp(rp->wait[i].id, id))
                        return &rp->wait[i];
        return NULL;
}

static void waiting_drop(struct repl *rp, struct waiting *w) {
        *w = rp->wait[--rp->n_wait];
}

static bool held(struct repl *rp, const char *id) {
        for (size_t i = 0; i < REPL_HELD_MAX; i++)
                if (rp->slots[i].state != SLOT_FREE && !strcmp(rp->slots[i].id, id))
                        return true;
        return false;
}

/* Fills free slots with the oldest unreplicated snapshots of meta not held yet and not
 * waiting for a retry (those due are taken back with their count of failures): listing
 * REPL_HELD_MAX plus the waiting ones finds at least as many of them as there are free
 * slots. A list shorter than asked is all of meta's: a waiting one not in it was deleted. */
static void repl_scan(struct repl *rp) {
        size_t n_free = 0;
        pthread_mutex_lock(&rp->mu);
        for (size_t i = 0; i < REPL_HELD_MAX; i++)
                n_free += rp->slots[i].state == SLOT_FREE;
        pthread_mutex_unlock(&rp->mu);
        if (n_free == 0)
                return;
        struct meta_snapshot *v = NULL;
        size_t n = 0;
        unsigned limit = (unsigned)MIN((size_t)META_UNREPLICATED_MAX, REPL_HELD_MAX + rp->n_wait);
        if (meta_snapshot_unreplicated(rp->d->meta, limit, &v, &n) < 0) {
                log_warn("replication: listing unreplicated snapshots: %s", meta_last_error(rp->d->meta));
                return;
        }
        bool added = false;
        uint64_t now = mono_ms();
        for (size_t i = 0; i < rp->n_wait; i++)
                rp->wait[i].seen = false;
        pthread_mutex_lock(&rp->mu);
        for (size_t i = 0, k = 0; i < n; i++) {
                struct waiting *w = waiting_find(rp, v[i].id);
                if (w)
                        w->seen = true;
                if (n_free == 0 || held(rp, v[i].id) || (w && w->retry_ms > now))
                        continue;
                struct slot s = { .state = SLOT_QUEUED, .queued_seq = rp->seq++ };
                if (w) {
                        s.failures = w->failures;
                        waiting_drop(rp, w);
                }
                snprintf(s.id, sizeof s.id, "%s", v[i].id);
                snprintf(s.session, sizeof s.session, "%s", v[i].session_id);
                if (store_hash_from_hex(v[i].store_hash, &s.snap) < 0)
                        continue;
                s.has_mem = v[i].memory_hash[0] && store_hash_from_hex(v[i].memory_hash, &s.mem) == 0;
                while (k < REPL_HELD_MAX && rp->slots[k].state != SLOT_FREE)
                        k++;
                if (k == REPL_HELD_MAX)
                        break;
                rp->slots[k] = s;
                n_free--;
                added = true;
        }
        if (added)
                pthread_cond_broadcast(&rp->cv);
        pthread_mutex_unlock(&rp->mu);
        if (n < limit) {
                for (size_t i = 0; i < rp->n_wait;) {
                        if (!rp->wait[i].seen)
                                waiting_drop(rp, &rp->wait[i]);
                        else
                                i++;
                }
        }
        free(v);
}

void repl_tick(struct repl *rp) {
        if (!rp)
                return;
        uint64_t now = mono_ms();
        bool due = false;
        pthread_mutex_lock(&rp->mu);
        for (size_t i = 0; i < REPL_HELD_MAX; i++) {
                struct slot *s = &rp->slots[i];
                if (s->state == SLOT_WAITING && s->retry_ms <= now) {
                        s->state = SLOT_QUEUED;
                        s->queued_seq = rp->seq++;
                        due = true;
                }
        }
        if (due)
                pthread_cond_broadcast(&rp->cv);
        pthread_mutex_unlock(&rp->mu);
        repl_scan(rp);
}

void repl_kick(struct repl *rp) {
        if (rp)
                repl_scan(rp);
}

void repl_status(struct repl *rp, struct repl_status *ret) {
        struct repl_status st = { .enabled = rp != NULL };
        if (rp) {
                if (meta_snapshot_count_unreplicated(rp->d->meta, &st.pending) < 0)
                        st.pending = 0;
                pthread_mutex_lock(&rp->mu);
                for (size_t i = 0; i < REPL_HELD_MAX; i++)
                        st.failed += rp->slots[i].state != SLOT_FREE && rp->slots[i].failures > 0;
                pthread_mutex_unlock(&rp->mu);
                st.failed += rp->n_wait;
                st.pushed = rp->pushed;
        }
        *ret = st;
}

struct repl *repl_free(struct repl *rp) {
        if (!rp)
                return NULL;
        pthread_mutex_lock(&rp->mu);
        rp->stop = true;
        pthread_cond_broadcast(&rp->cv);
        pthread_mutex_unlock(&rp->mu);
        for (unsigned i = 0; i < rp->n_threads; i++) {
                if (rp->threads[i].started)
                        pthread_join(rp->threads[i].th, NULL);
                store_remote_free(rp->threads[i].remote);
        }
        if (rp->src.fd >= 0) {
                if (rp->src.registered)
                        loop_del(rp->d->loop, &rp->src);
                close(rp->src.fd);
        }
        pthread_cond_destroy(&rp->cv);
        pthread_mutex_destroy(&rp->mu);
        free(rp->wait);
        free(rp);
        return NULL;
}

int repl_new(struct daemon *d, const struct repl_cfg *c, struct repl **ret) {
        if (!d || !c || !ret || !c->endpoint || !c->bucket || !c->access_key || !c->secret_key || c->jobs == 0 ||
            c->jobs > REPL_JOBS_MAX)
                return -EINVAL;
#ifndef SPACE_HAVE_S3
        return -EOPNOTSUPP;
#else
        struct repl *rp = calloc(1, sizeof *rp);
        if (!rp)
                return -ENOMEM;
        rp->d = d;
        rp->src.fd = -1;
        rp->wait = calloc(REPL_WAIT_MAX, sizeof *rp->wait);
        if (!rp->wait) {
                free(rp);
                return -ENOMEM;
        }
        pthread_mutex_init(&rp->mu, NULL);
        pthread_cond_init(&rp->cv, NULL);
        struct s3_config sc = { .endpoint = c->endpoint, .region = c->region ? c->region : REPL_REGION_DEFAULT,
                                .access_key = c->access_key, .secret_key = c->secret_key, .bucket = c->bucket,
                                .retries = -1 };
        int r = 0;
        /* one handle (one connection) per thread, each made here: the threads start with
         * everything they need */
        for (unsigned i = 0; i < c->jobs && r >= 0; i++) {
                rp->threads[i].rp = rp;
                r = i == 0 ? store_remote_s3_new(&sc, &rp->threads[i].remote)
                           : rp->threads[0].remote->ops->clone(rp->threads[0].remote, &rp->threads[i].remote);
                if (r >= 0)
                        rp->n_threads++;
        }
        if (r < 0)
                goto fail;
        rp->src.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        rp->src.cb = repl_event;
        if (rp->src.fd < 0) {
                r = -errno;
                goto fail;
        }
        if ((r = loop_add(d->loop, &rp->src, EPOLLIN)) < 0)
                goto fail;
        for (unsigned i = 0; i < rp->n_threads; i++) {
                if ((r = -pthread_create(&rp->threads[i].th, NULL, repl_main, &rp->threads[i])) < 0)
                        goto fail;
                rp->threads[i].started = true;
        }
        repl_scan(rp);
        *ret = rp;
        return 0;
fail:
        repl_free(rp);
        return r;
#endif
}
