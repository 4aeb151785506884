/* verify: reads every block of every pack and checks each object's hash (on the pool,
 * both cores), reports damaged packs and files that are not ours, then walks every listed
 * snapshot and reports what it references that is missing or corrupt. */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "common/fdio.h"
#include "store/store-internal.h"

struct problem {
        enum store_problem_kind kind;
        struct store_hash h;
        char *path;
        char *msg;
};

struct vctx {
        struct store *s;
        pthread_mutex_t mu;
        struct hset ok;        /* objects that passed; value = kind + 1 */
        struct hset bad;       /* objects that failed */
        struct hset missing;   /* objects reported missing */
        struct problem *probs;
        size_t nprobs, cap;
        atomic_size_t pending;
        atomic_uint_least64_t objects, bytes;
        store_problem_fn fn;
        void *ud;
};

static void add_problem(struct vctx *v, enum store_problem_kind kind, const struct store_hash *h, const char *path,
                        const char *msg) {
        pthread_mutex_lock(&v->mu);
        if (ARRAY_RESERVE(v->probs, v->cap, v->nprobs + 1, 16) < 0) {
                pthread_mutex_unlock(&v->mu);
                return;
        }
        struct problem *p = &v->probs[v->nprobs++];
        *p = (struct problem){ .kind = kind, .path = strdup(path ? path : ""), .msg = strdup(msg) };
        if (h)
                p->h = *h;
        pthread_mutex_unlock(&v->mu);
}

struct check_task {
        struct pool_task task;
        struct vctx *v;
        struct store_hash h;
};

/* Structured objects must also decode. */
static int decode_check(const void *p, size_t n) {
        int k = 0;
        if (n >= 4 && !memcmp(p, TREE_MAGIC, 4)) {
                struct tree tr;
                k = tree_decode(p, n, &tr);
                if (k == 0)
                        tree_free(&tr);
        } else if (n >= 4 && !memcmp(p, SNAP_MAGIC, 4)) {
                struct snap_record rec;
                k = snap_decode(p, n, &rec);
                if (k == 0)
                        snap_record_free(&rec);
        } else if (n >= 4 && !memcmp(p, MEM_MAGIC, 4)) {
                struct mem_image m;
                k = mem_decode(p, n, &m);
                if (k == 0)
                        free(m.chunks);
        }
        return k;
}

/* One object found after the scan (committed by a capture meanwhile). */
static void check_run(struct pool_task *pt) {
        struct check_task *t = (struct check_task *)pt;
        struct vctx *v = t->v;
        void *p = NULL;
        size_t n = 0;
        uint64_t br = 0;
        int r = obj_read(v->s, &t->h, -1, &p, &n, &br);
        atomic_fetch_add(&v->objects, 1);
        atomic_fetch_add(&v->bytes, br);
        char hex[STORE_HEX_LEN + 1];
        store_hash_to_hex(&t->h, hex);
        if (r < 0) {
                add_problem(v, r == -ENOENT ? STORE_PROBLEM_MISSING : STORE_PROBLEM_CORRUPT, &t->h, "packs",
                            store_error_detail());
                pthread_mutex_lock(&v->mu);
                hset_add(&v->bad, &t->h, 1);
                pthread_mutex_unlock(&v->mu);
        } else {
                int k = decode_check(p, n);
                pthread_mutex_lock(&v->mu);
                if (k < 0) {
                        hset_add(&v->bad, &t->h, 1);
                        pthread_mutex_unlock(&v->mu);
                        char msg[700];
                        snprintf(msg, sizeof msg, "object %s does not decode: %s", hex, store_error_detail());
                        add_problem(v, STORE_PROBLEM_CORRUPT, &t->h, "packs", msg);
                } else {
                        hset_add(&v->ok, &t->h, 1);
                        pthread_mutex_unlock(&v->mu);
                }
        }
        free(p);
        free(t);
        atomic_fetch_sub(&v->pending, 1);
        pool_notify(v->s->pool);
}

struct block_task {
        struct pool_task task;
        struct vctx *v;
        struct pack *p;
        size_t n;
        const struct pack_ent *ents[];
};

static int block_obj(void *ud, const struct pack_ent *e, const void *data, int err) {
        struct block_task *t = ud;
        struct vctx *v = t->v;
        char path[64];
        snprintf(path, sizeof path, "packs/%s", t->p->name);
        atomic_fetch_add(&v->objects, 1);
        if (err < 0) {
                add_problem(v, STORE_PROBLEM_CORRUPT, &e->hash, path, store_error_detail());
                pthread_mutex_lock(&v->mu);
                hset_add(&v->bad, &e->hash, 1);
                pthread_mutex_unlock(&v->mu);
                return 0;
        }
        int k = decode_check(data, e->len);
        pthread_mutex_lock(&v->mu);
        if (k < 0) {
                hset_add(&v->bad, &e->hash, 1);
                pthread_mutex_unlock(&v->mu);
                char hex[STORE_HEX_LEN + 1], msg[700];
                store_hash_to_hex(&e->hash, hex);
                snprintf(msg, sizeof msg, "object %s does not decode: %s", hex, store_error_detail());
                add_problem(v, STORE_PROBLEM_CORRUPT, &e->hash, path, msg);
        } else {
                hset_add(&v->ok, &e->hash, 1);
                pthread_mutex_unlock(&v->mu);
        }
        return 0;
}

static void block_run(struct pool_task *pt) {
        struct block_task *t = (struct block_task *)pt;
        struct vctx *v = t->v;
        uint64_t br = 0;
        int r = pack_read_block(v->s, t->p, t->ents, t->n, block_obj, t, &br);
        atomic_fetch_add(&v->bytes, br);
        if (r < 0) {
                char msg[300];
                snprintf(msg, sizeof msg, "pack %s cannot be read: %s", t->p->name, strerror(-r));
                add_problem(v, STORE_PROBLEM_CORRUPT, NULL, t->p->name, msg);
        }
        free(t);
        atomic_fetch_sub(&v->pending, 1);
        pool_notify(v->s->pool);
}

struct scan_ctx {
        struct vctx *v;
        store_progress_fn progress;
        void *pud;
        int64_t last;
};

static int submit_block(void *ud, struct pack *p, const struct pack_ent *const *ents, size_t n) {
        struct scan_ctx *x = ud;
        struct vctx *v = x->v;
        struct block_task *t = malloc(sizeof *t + n * sizeof *ents);
        if (!t)
                return -ENOMEM;
        t->task.fn = block_run;
        t->v = v;
        t->p = p;
        t->n = n;
        memcpy(t->ents, ents, n * sizeof *ents);
        atomic_fetch_add(&v->pending, 1);
        pool_submit(v->s->pool, &t->task, true);
        /* keep the queue short and give progress a beat */
        while (atomic_load(&v->pending) > 4 * pool_threads(v->s->pool) + 4)
                if (!pool_wait(v->s->pool, &v->pending, 100) && x->progress && store_now_ns() - x->last > 100000000) {
                        x->last = store_now_ns();
                        struct store_progress pr = { .phase = "verify", .entries = atomic_load(&v->objects),
                                                     .bytes = atomic_load(&v->bytes) };
                        x->progress(x->pud, &pr);
                }
        return 0;
}

static void on_foreign(void *ud, const char *name, const char *why) {
        struct vctx *v = ud;
        char path[300], msg[700];
        snprintf(path, sizeof path, "packs/%s", name);
        snprintf(msg, sizeof msg, "%s is not a store pack (foreign file: %s)", path, why);
        add_problem(v, STORE_PROBLEM_FOREIGN, NULL, path, msg);
}

static void scan_packs(struct vctx *v, store_progress_fn progress, void *pud) {
        struct store *s = v->s;
        /* recheck: a pack changed on disk since we loaded it is loaded (and checked) again */
        int r = packs_refresh(s, true, on_foreign, v);
        if (r < 0) {
                add_problem(v, STORE_PROBLEM_CORRUPT, NULL, "packs", store_error_detail());
                return;
        }
        struct pack **packs;
        size_t np;
        if (packs_snapshot(s, false, &packs, &np) < 0)
                return;
        struct scan_ctx x = { .v = v, .progress = progress, .pud = pud };
        for (size_t i = 0; i < np; i++) {
                struct pack *p = packs[i];
                if (p->damage) {
                        char path[64], msg[1024];
                        snprintf(path, sizeof path, "packs/%s", p->name);
                        snprintf(msg, sizeof msg, "pack %s is damaged: %s", p->name, p->damage);
                        add_problem(v, STORE_PROBLEM_CORRUPT, NULL, path, msg);
                }
                if (pack_for_each_block(p, submit_block, &x) < 0)
                        break;
        }
        pool_wait(s->pool, &v->pending, 0);
        packs_release(packs, np);
}

static void scan_refs(struct vctx *v) {
        DIR *d;
        if (fdio_opendir(v->s->snapfd, &d) < 0)
                return;
        struct dirent *de;
        while ((de = readdir(d))) {
                struct store_hash h;
                if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") || store_hash_from_hex(de->d_name, &h) == 0)
                        continue;
                char path[300], msg[400];
                snprintf(path, sizeof path, "snapshots/%s", de->d_name);
                snprintf(msg, sizeof msg, "%s is not a snapshot reference (foreign file)", path);
                add_problem(v, STORE_PROBLEM_FOREIGN, NULL, path, msg);
        }
        closedir(d);
}

static int on_obj(void *ud, const struct store_hash *h, enum obj_kind kind, const char *path) {
        struct vctx *v = ud;
        if (hset_get(&v->ok, h) || hset_get(&v->bad, h))
                return 0; /* bad ones were reported by the scan */
        if (obj_exists(v->s, h, false) > 0) {
                /* committed by a capture after the scan passed its directory: check it now */
                struct check_task *t = calloc(1, sizeof *t);
                if (!t)
                        return -ENOMEM;
                t->task.fn = check_run;
                t->v = v;
                t->h = *h;
                atomic_fetch_add(&v->pending, 1);
                check_run(&t->task);
                return 0;
        }
        char hex[STORE_HEX_LEN + 1], msg[900];
        store_hash_to_hex(h, hex);
        snprintf(msg, sizeof msg, "%s %s is missing (referenced by %s)", obj_kind_name(kind), hex, path);
        add_problem(v, STORE_PROBLEM_MISSING, h, path, msg);
        hset_add(&v->missing, h, 1);
        return 0;
}

static int on_err(void *ud, const struct store_hash *h, enum obj_kind kind, const char *path, int err) {
        struct vctx *v = ud;
        if (hset_get(&v->bad, h) || hset_get(&v->missing, h))
                return 0; /* reported once is enough */
        char msg[1200];
        snprintf(msg, sizeof msg, "%s (referenced by %s)", store_error_detail(), path);
        add_problem(v, err == -ENOENT ? STORE_PROBLEM_MISSING : STORE_PROBLEM_CORRUPT, h, path, msg);
        hset_add(err == -ENOENT ? &v->missing : &v->bad, h, 1);
        return 0; /* keep going: report everything */
}

int store_verify(struct store *s, store_problem_fn fn, void *userdata, store_progress_fn progress,
                 void *progress_userdata, struct store_verify_result *ret) {
        struct vctx v = { .s = s, .fn = fn, .ud = userdata };
        uint64_t op = store_op_id();
        pthread_mutex_init(&v.mu, NULL);
        struct hset seen = { 0 };
        struct store_verify_result res = { 0 };
        /* Shared lock: a GC sweep can't remove what we are about to look for. */
        _cleanup_close_ int lk = store_lock(s, false);
        if (lk < 0)
                return lk;
        scan_packs(&v, progress, progress_userdata);
        scan_refs(&v);
        _cleanup_free_ struct store_hash *snaps = NULL;
        size_t n = 0;
        int r = store_snapshot_list(s, &snaps, &n);
        if (r < 0)
                goto out;
        struct reach rc = { .s = s, .seen = &seen, .on_obj = on_obj, .on_err = on_err, .ud = &v, .op = op };
        for (size_t i = 0; i < n; i++) {
                char hex[STORE_HEX_LEN + 1], where[STORE_HEX_LEN + 16];
                store_hash_to_hex(&snaps[i], hex);
                snprintf(where, sizeof where, "snapshot %s", hex);
                if (!hset_get(&v.ok, &snaps[i]) && !hset_get(&v.bad, &snaps[i]) && obj_exists(s, &snaps[i], false) <= 0) {
                        char msg[300];
                        snprintf(msg, sizeof msg, "snapshot record %s is missing (listed in snapshots/)", hex);
                        add_problem(&v, STORE_PROBLEM_MISSING, &snaps[i], where, msg);
                        continue;
                }
                r = reach_object(&rc, &snaps[i], where);
                if (r < 0)
                        goto out;
        }
        if ((r = reach_delta_bases(s, &seen)) < 0)
                goto out;
        res.snapshots = n;
        res.objects_checked = atomic_load(&v.objects);
        res.bytes_checked = atomic_load(&v.bytes);
        for (size_t i = 0; i < v.ok.cap; i++)
                if (v.ok.vals[i] && !hset_get(&seen, &v.ok.keys[i]))
                        res.unreachable++;
        res.problems = v.nprobs;
        for (size_t i = 0; i < v.nprobs; i++) {
                struct problem *p = &v.probs[i];
                if (fn)
                        fn(userdata, &(struct store_problem){ .kind = p->kind, .object = p->h, .path = p->path,
                                                              .message = p->msg });
        }
        *ret = res;
out:
        pool_wait(s->pool, &v.pending, 0);
        store_op_end(s, op);
        for (size_t i = 0; i < v.nprobs; i++) {
                free(v.probs[i].path);
                free(v.probs[i].msg);
        }
        free(v.probs);
        hset_free(&v.ok);
        hset_free(&v.bad);
        hset_free(&v.missing);
        hset_free(&seen);
        pthread_mutex_destroy(&v.mu);
        return r;
}
