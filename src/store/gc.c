/* Garbage collection, mark and sweep, concurrent with captures:
 *  1. under the exclusive lock (briefly): note the listed records, drop leftovers of
 *     crashed operations;
 *  2. without the lock: mark from the live set and the pins of running operations;
 *  3. under the exclusive lock: bump the GC generation, mark records committed since 1 or
 *     since the caller computed its live set (keep_since_ns), and pins taken since, then
 *     sweep.
 * A capture keeps new objects private until it commits under the shared lock, pins its
 * parent, and at commit re-checks reused objects if the generation moved (store.c). */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>

#include "common/fdio.h"
#include "store/store-internal.h"

/* Pins of running operations; removes temp dirs whose owner is gone. With live, the names
 * (transaction ids) of the running ones are added there. */
static int read_pins(struct store *s, struct store_hash **ret, size_t *ret_n, uint64_t *removed, bool dry_run,
                     struct hset *live) {
        DIR *d;
        int r = fdio_opendir(s->tmpfd, &d);
        if (r < 0)
                return r;
        _cleanup_free_ struct store_hash *v = NULL;
        size_t n = 0, cap = 0;
        struct dirent *de;
        while ((de = readdir(d))) {
                if (de->d_name[0] == '.')
                        continue;
                _cleanup_close_ int dfd = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (dfd < 0)
                        continue;
                if (flock(dfd, LOCK_EX | LOCK_NB) == 0) {
                        /* Nobody holds it: a crashed capture's leftovers. */
                        if (!dry_run && store_rm_rf_at(dirfd(d), de->d_name) == 0 && removed)
                                (*removed)++;
                        continue;
                }
                if (live) {
                        struct store_hash id = { 0 };
                        memcpy(id.b, de->d_name, MIN(strlen(de->d_name), sizeof id.b - 1));
                        if (hset_add(live, &id, 1) < 0)
                                r = -ENOMEM;
                }
                _cleanup_close_ int pf = openat(dfd, "pin", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
                if (pf < 0)
                        continue;
                struct store_hash h;
                while (read(pf, &h, sizeof h) == (ssize_t)sizeof h) {
                        if (ARRAY_RESERVE(v, cap, n + 1, 16) < 0) {
                                r = -ENOMEM;
                                break;
                        }
                        v[n++] = h;
                }
        }
        closedir(d);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(v);
        *ret_n = n;
        return 0;
}

/* Slack for the file system's coarse clock, which can lag CLOCK_REALTIME by a tick. */
#define KEEP_SLACK_NS (50 * 1000000LL)

struct recent {
        struct hset *set;
        int64_t cutoff_ns;
};

static int ref_add_recent(void *ud, int dfd, const char *name, const struct store_hash *h) {
        struct recent *x = ud;
        struct stat st;
        if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return 0;
        if (st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec < x->cutoff_ns - KEEP_SLACK_NS)
                return 0;
        return hset_add(x->set, h, 1);
}

/* Records whose ref file was created at or after cutoff_ns. */
static int refs_recent(struct store *s, int64_t cutoff_ns, struct hset *ret) {
        return refs_for_each(s, ref_add_recent, &(struct recent){ ret, cutoff_ns });
}

static int ref_add(void *ud, int dfd, const char *name, const struct store_hash *h) { return hset_add(ud, h, 1); }

static int refs_list(struct store *s, struct hset *ret) { return refs_for_each(s, ref_add, ret); }

struct gctx {
        struct store_gc_result *res;
        const struct store_gc_opts *o;
        int64_t last;
        uint64_t marked;
};

static int gc_on_obj(void *ud, const struct store_hash *h, enum obj_kind kind, const char *path) {
        struct gctx *g = ud;
        g->marked++;
        if (g->o && g->o->progress && store_now_ns() - g->last > 100000000) {
                g->last = store_now_ns();
                struct store_progress p = { .phase = "mark", .entries = g->marked };
                g->o->progress(g->o->userdata, &p);
        }
        return 0;
}

static int gc_on_err(void *ud, const struct store_hash *h, enum obj_kind kind, const char *path, int err) {
        char msg[1200];
        snprintf(msg, sizeof msg, "cannot collect garbage: %s (in %s); run verify, then forget the damaged snapshot",
                 store_error_detail(), path);
        return store_fail(err, "%s", msg);
}

static int mark(struct reach *rc, const struct store_hash *h) {
        char hex[STORE_HEX_LEN + 1], where[STORE_HEX_LEN + 16];
        store_hash_to_hex(h, hex);
        snprintf(where, sizeof where, "snapshot %s", hex);
        return reach_object(rc, h, where);
}

/* Temp packs of transactions that are not running (crashed or killed captures). */
static void sweep_temp_packs(struct store *s, const struct hset *live_txns, bool dry_run, struct store_gc_result *res) {
        DIR *d;
        if (fdio_opendir(s->packfd, &d) < 0)
                return;
        struct dirent *de;
        while ((de = readdir(d))) {
                if (strncmp(de->d_name, PACK_TEMP_PREFIX, strlen(PACK_TEMP_PREFIX)))
                        continue;
                struct store_hash id = { 0 };
                const char *idp = de->d_name + strlen(PACK_TEMP_PREFIX);
                size_t il = strcspn(idp, "-");
                if (il < sizeof id.b)
                        memcpy(id.b, idp, il);
                if (hset_get(live_txns, &id))
                        continue;
                if (!dry_run)
                        unlinkat(dirfd(d), de->d_name, 0);
                res->temp_removed++;
        }
        closedir(d);
}

/* Packs smaller than this are merged once there are enough of them (incremental captures
 * each leave one), so the number of packs stays proportional to the data. */
#define PACK_SMALL (PACK_TARGET / 8)
#define PACK_SMALL_MERGE 16

struct gc_pack {
        struct pack *p;
        bool *live;        /* per index entry */
        bool rewrite;
        uint64_t garbage_plain, total_plain;
};

struct copy_ctx {
        struct store *s;
        struct pack_writer *w;
        struct gc_pack *g;
        struct blk_obj *v;
        size_t n;
        int err;
};

static int collect_live(void *ud, const struct pack_ent *e, const void *data, int err) {
        struct copy_ctx *x = ud;
        if (!x->g->live[e - x->g->p->e])
                return 0;
        if (err < 0) {
                x->err = err; /* a live object we cannot read: keep its pack as it is */
                return 0;
        }
        void *copy = malloc(e->len ? e->len : 1);
        if (!copy)
                return -ENOMEM;
        memcpy(copy, data, e->len);
        x->v[x->n++] = (struct blk_obj){ .data = copy, .len = e->len, .kind = e->kind, .hash = e->hash };
        return 0;
}

static int copy_block(void *ud, struct pack *p, const struct pack_ent *const *ents, size_t n) {
        struct copy_ctx *x = ud;
        size_t nlive = 0;
        for (size_t i = 0; i < n; i++)
                nlive += x->g->live[ents[i] - p->e];
        if (!nlive)
                return 0;
        if (nlive == n && !p->damage) {
                /* whole block live: copy its bytes, no decompression */
                _cleanup_free_ void *raw = NULL;
                size_t len;
                int r = pack_raw_block(x->s, p, ents[0]->block, &raw, &len);
                if (r == 0 && get_le16((const uint8_t *)raw + 6) == n)
                        return pw_add_raw_block(x->w, raw, len, ents, n);
                if (r == -ENOMEM)
                        return r;
                /* else: rebuild it from what reads back */
        }
        x->v = calloc(n, sizeof *x->v);
        if (!x->v)
                return -ENOMEM;
        x->n = 0;
        int r = pack_read_block(x->s, p, ents, n, collect_live, x, NULL);
        if (r == 0 && x->n)
                r = pw_add_block(x->w, x->v, x->n, true);
        for (size_t i = 0; i < x->n; i++)
                free((void *)x->v[i].data);
        free(x->v);
        x->v = NULL;
        return r;
}

static int pack_order(const void *a, const void *b) {
        const struct gc_pack *x = a, *y = b;
        if (!x->p->damage != !y->p->damage)
                return x->p->damage ? 1 : -1; /* intact copies win over damaged ones */
        return strcmp(x->p->name, y->p->name);
}

/* Keeps packs whose every object is live; rewrites the others with only their live
 * objects (a duplicate of an object kept elsewhere counts as dead); merges small packs.
 * New packs are durable and in place before old ones are removed. Exclusive lock held. */
static int sweep_packs(struct store *s, const struct hset *seen, bool dry_run, struct store_gc_result *res) {
        struct pack **packs;
        size_t np;
        int r = packs_snapshot(s, true, &packs, &np);
        if (r < 0)
                return r;
        struct gc_pack *g = calloc(np ? np : 1, sizeof *g);
        struct hset kept = { 0 };
        struct pack_writer *w = NULL;
        if (!g) {
                packs_release(packs, np);
                return -ENOMEM;
        }
        for (size_t i = 0; i < np; i++)
                g[i].p = packs[i];
        qsort(g, np, sizeof *g, pack_order);
        size_t nsmall = 0;
        for (size_t i = 0; i < np && r >= 0; i++) {
                struct pack *p = g[i].p;
                g[i].live = calloc(p->n ? p->n : 1, sizeof *g[i].live);
                if (!g[i].live) {
                        r = -ENOMEM;
                        break;
                }
                for (size_t j = 0; j < p->n && r >= 0; j++) {
                        const struct pack_ent *e = &p->e[j];
                        g[i].total_plain += e->len;
                        if (hset_get(seen, &e->hash)) {
                                r = hset_add(&kept, &e->hash, 1);
                                g[i].live[j] = r > 0;
                        } else {
                                res->objects_removed++;
                                r = 0;
                        }
                        if (!g[i].live[j])
                                g[i].garbage_plain += e->len;
                }
                if (r < 0)
                        break;
                r = 0;
                g[i].rewrite = g[i].garbage_plain > 0 || p->damage || p->n == 0;
                for (size_t j = 0; j < p->n && !g[i].rewrite; j++)
                        g[i].rewrite = !g[i].live[j];
                if (!g[i].rewrite && p->size < PACK_SMALL)
                        nsmall++;
        }
        if (r >= 0 && nsmall >= PACK_SMALL_MERGE)
                for (size_t i = 0; i < np; i++)
                        if (g[i].p->size < PACK_SMALL)
                                g[i].rewrite = true;
        res->objects_kept = kept.n;
        bool any = false;
        for (size_t i = 0; i < np && r >= 0; i++)
                any = any || g[i].rewrite;
        if (r >= 0 && any && dry_run) {
                for (size_t i = 0; i < np; i++)
                        if (g[i].rewrite && g[i].total_plain)
                                res->bytes_removed += (uint64_t)((double)g[i].p->size * (double)g[i].garbage_plain /
                                                                 (double)g[i].total_plain);
                        else if (g[i].rewrite)
                                res->bytes_removed += g[i].p->size;
        }
        if (r >= 0 && any && !dry_run) {
                char tag[40];
                uint64_t rnd = (uint64_t)store_now_ns();
                snprintf(tag, sizeof tag, "gc%016llx", (unsigned long long)rnd);
                r = pw_new(s, tag, &w);
                uint64_t old_bytes = 0;
                for (size_t i = 0; i < np && r >= 0; i++) {
                        if (!g[i].rewrite)
                                continue;
                        struct copy_ctx x = { .s = s, .w = w, .g = &g[i] };
                        r = pack_for_each_block(g[i].p, copy_block, &x);
                        if (r >= 0 && x.err < 0)
                                g[i].rewrite = false; /* unreadable live objects: keep the pack whole */
                        if (g[i].rewrite)
                                old_bytes += g[i].p->size;
                }
                if (r >= 0)
                        r = pw_seal(w);
                if (r >= 0)
                        r = pw_publish(w);
                if (r >= 0) {
                        /* the replacements are durable and in place: now the old ones can go */
                        for (size_t i = 0; i < np; i++)
                                if (g[i].rewrite && unlinkat(s->packfd, g[i].p->name, 0) < 0 && errno != ENOENT) {
                                        r = store_fail(-errno, "cannot remove packs/%s: %m", g[i].p->name);
                                        break;
                                }
                        if (fsync(s->packfd) < 0 && r >= 0)
                                r = store_fail(-errno, "cannot flush packs/: %m");
                        uint64_t new_bytes = pw_bytes(w);
                        res->bytes_removed = old_bytes > new_bytes ? old_bytes - new_bytes : 0;
                }
        }
        pw_free(w);
        for (size_t i = 0; i < np; i++)
                free(g[i].live);
        free(g);
        hset_free(&kept);
        packs_release(packs, np);
        if (r >= 0 && any && !dry_run)
                r = packs_refresh(s, false, NULL, NULL);
        return r < 0 ? r : 0;
}

/* Stat caches of snapshots that are gone, and temp files of interrupted cache writes. */
static void sweep_caches(struct store *s, const struct hset *seen, bool dry_run) {
        DIR *d;
        if (fdio_opendir(s->cachefd, &d) < 0)
                return;
        struct dirent *de;
        while ((de = readdir(d))) {
                if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                        continue;
                char hex[STORE_HEX_LEN + 1];
                struct store_hash h;
                memcpy(hex, de->d_name, STORE_HEX_LEN);
                hex[STORE_HEX_LEN] = 0; /* names are HASH.DEV.INO */
                bool keep = strlen(de->d_name) > STORE_HEX_LEN && de->d_name[0] != '.' && store_hash_from_hex(hex, &h) == 0 && hset_get(seen, &h);
                if (!keep && !dry_run)
                        unlinkat(dirfd(d), de->d_name, 0);
        }
        closedir(d);
}

static int gc_locked_start(struct store *s, struct hset *refs0, struct store_hash **pins, size_t *npins, bool dry_run,
                           struct store_gc_result *res) {
        _cleanup_close_ int lk = store_lock(s, true);
        if (lk < 0)
                return lk;
        int r = refs_list(s, refs0);
        if (r < 0)
                return store_fail(r, "cannot list snapshots: %s", strerror(-r));
        r = read_pins(s, pins, npins, &res->temp_removed, dry_run, NULL);
        if (r < 0)
                return store_fail(r, "cannot read the store's tmp/: %s", strerror(-r));
        return 0;
}

static int bump_gen(struct store *s) {
        uint64_t gen;
        int r = store_gc_gen(s, &gen);
        if (r < 0)
                return r;
        char buf[32];
        int n = snprintf(buf, sizeof buf, "%llu\n", (unsigned long long)gen + 1);
        _cleanup_close_ int fd = openat(s->dfd, ".gcgen.tmp", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0 || write(fd, buf, (size_t)n) != n || renameat(s->dfd, ".gcgen.tmp", s->dfd, "gcgen") < 0)
                return -errno;
        return 0;
}

int store_gc(struct store *s, const struct store_hash *live, size_t n_live, const struct store_gc_opts *o,
             struct store_gc_result *ret) {
        struct store_gc_opts def = { 0 };
        if (!o)
                o = &def;
        struct store_gc_result res = { 0 };
        struct hset refs0 = { 0 }, refs1 = { 0 }, seen = { 0 };
        _cleanup_free_ struct store_hash *pins0 = NULL, *pins1 = NULL;
        size_t npins0 = 0, npins1 = 0;
        struct gctx g = { .res = &res, .o = o };
        struct reach rc = { .s = s, .seen = &seen, .on_obj = gc_on_obj, .on_err = gc_on_err, .ud = &g, .op = store_op_id() };
        int lk = -EBADF;

        int64_t keep_since = o->keep_since_ns ? o->keep_since_ns : store_now_ns();
        struct hset recent = { 0 }, live_txns = { 0 };
        int r = gc_locked_start(s, &refs0, &pins0, &npins0, o->dry_run, &res);
        if (r < 0)
                goto out;
        for (size_t i = 0; i < n_live; i++) {
                if (obj_exists(s, &live[i], i == 0) <= 0) {
                        char hex[STORE_HEX_LEN + 1];
                        store_hash_to_hex(&live[i], hex);
                        r = store_fail(-ENOENT, "live snapshot %s is not in the store; nothing was collected", hex);
                        goto out;
                }
                if ((r = mark(&rc, &live[i])) < 0)
                        goto out;
        }
        for (size_t i = 0; i < npins0; i++)
                if ((r = mark(&rc, &pins0[i])) < 0 && r != -ENOENT)
                        goto out;

        lk = store_lock(s, true);
        if (lk < 0) {
                r = lk;
                goto out;
        }
        if (!o->dry_run && (r = bump_gen(s)) < 0) {
                r = store_fail(r, "cannot bump the GC generation: %s", strerror(-r));
                goto out;
        }
        if ((r = refs_list(s, &refs1)) < 0)
                goto out;
        for (size_t i = 0; i < refs1.cap; i++)
                if (refs1.vals[i] && !hset_get(&refs0, &refs1.keys[i]) && (r = mark(&rc, &refs1.keys[i])) < 0)
                        goto out;
        if ((r = refs_recent(s, keep_since, &recent)) < 0)
                goto out;
        for (size_t i = 0; i < recent.cap; i++)
                if (recent.vals[i] && (r = mark(&rc, &recent.keys[i])) < 0)
                        goto out;
        if ((r = read_pins(s, &pins1, &npins1, NULL, true, &live_txns)) < 0)
                goto out;
        for (size_t i = 0; i < npins1; i++)
                if ((r = mark(&rc, &pins1[i])) < 0 && r != -ENOENT)
                        goto out;
        if ((r = reach_delta_bases(s, &seen)) < 0)
                goto out;
        if (o->progress)
                o->progress(o->userdata, &(struct store_progress){ .phase = "sweep", .entries = g.marked });
        /* Records go first: a crash mid-sweep must not leave a listed record whose trees are gone. */
        for (size_t i = 0; i < refs1.cap; i++) {
                if (!refs1.vals[i] || hset_get(&seen, &refs1.keys[i]))
                        continue;
                res.snapshots_removed++;
                if (!o->dry_run) {
                        char hex[STORE_HEX_LEN + 1];
                        store_hash_to_hex(&refs1.keys[i], hex);
                        if (unlinkat(s->snapfd, hex, 0) < 0 && errno != ENOENT) {
                                r = store_fail(-errno, "cannot remove snapshots/%s: %m", hex);
                                goto out;
                        }
                }
        }
        if (!o->dry_run && fsync(s->snapfd) < 0) {
                r = store_fail(-errno, "cannot flush snapshots/: %m");
                goto out;
        }
        res.live_snapshots = refs1.n - res.snapshots_removed;
        sweep_temp_packs(s, &live_txns, o->dry_run, &res);
        r = sweep_packs(s, &seen, o->dry_run, &res);
        if (r < 0)
                goto out;
        sweep_caches(s, &seen, o->dry_run);
        if (ret)
                *ret = res;
out:
        store_op_end(s, rc.op);
        safe_close(lk);
        hset_free(&refs0);
        hset_free(&refs1);
        hset_free(&recent);
        hset_free(&live_txns);
        hset_free(&seen);
        return r;
}
