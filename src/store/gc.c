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

#include "store/store-internal.h"

/* Pins of running operations; removes temp dirs whose owner is gone. With live, the names
 * (transaction ids) of the running ones are added there. */
static int read_pins(struct store *s, struct store_hash **ret, size_t *ret_n, uint64_t *removed, bool dry_run,
                     struct hset *live) {
        int fd = dup(s->tmpfd);
        DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
        if (!d) {
                if (fd >= 0)
                        close(fd);
                return -errno;
        }
        rewinddir(d);
        _cleanup_free_ struct store_hash *v = NULL;
        size_t n = 0, cap = 0;
        int r = 0;
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
                        if (n == cap) {
                                cap = cap ? cap * 2 : 16;
                                struct store_hash *nv = realloc(v, cap * sizeof *nv);
                                if (!nv) {
                                        r = -ENOMEM;
                                        break;
                                }
                                v = nv;
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

/* Records whose ref file was created at or after cutoff_ns. */
static int refs_recent(struct store *s, int64_t cutoff_ns, struct hset *ret) {
        int fd = dup(s->snapfd);
        DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
        if (!d) {
                if (fd >= 0)
                        close(fd);
                return -errno;
        }
        rewinddir(d);
        struct dirent *de;
        int r = 0;
        while ((de = readdir(d)) && r >= 0) {
                struct store_hash h;
                struct stat st;
                if (store_hash_from_hex(de->d_name, &h) < 0 || fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                        continue;
                if (st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec >= cutoff_ns - KEEP_SLACK_NS)
                        r = hset_add(ret, &h, 1);
        }
        closedir(d);
        return r < 0 ? r : 0;
}

static int refs_list(struct store *s, struct hset *ret) {
        int fd = dup(s->snapfd);
        DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
        if (!d) {
                if (fd >= 0)
                        close(fd);
                return -errno;
        }
        rewinddir(d);
        struct dirent *de;
        int r = 0;
        while ((de = readdir(d)) && r >= 0) {
                struct store_hash h;
                if (store_hash_from_hex(de->d_name, &h) == 0)
                        r = hset_add(ret, &h, 1);
        }
        closedir(d);
        return r < 0 ? r : 0;
}

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

/* Objects nobody reaches, and temp objects of transactions that are not running. */
static int sweep(struct store *s, const struct hset *seen, const struct hset *live_txns, bool dry_run,
                 struct store_gc_result *res) {
        for (int i = 0; i < 256; i++) {
                char dn[3];
                snprintf(dn, sizeof dn, "%02x", i);
                int fd = openat(s->objfd, dn, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
                if (!d) {
                        if (fd >= 0)
                                close(fd);
                        return store_fail(-errno, "cannot read objects/%s: %m", dn);
                }
                bool removed = false;
                struct dirent *de;
                while ((de = readdir(d))) {
                        struct store_hash h;
                        if (!strncmp(de->d_name, TXN_TEMP_PREFIX, strlen(TXN_TEMP_PREFIX))) {
                                struct store_hash id = { 0 };
                                const char *idp = de->d_name + strlen(TXN_TEMP_PREFIX);
                                size_t il = strcspn(idp, "-");
                                if (il < sizeof id.b)
                                        memcpy(id.b, idp, il);
                                if (!hset_get(live_txns, &id)) {
                                        if (!dry_run)
                                                unlinkat(dirfd(d), de->d_name, 0);
                                        res->temp_removed++;
                                }
                                continue;
                        }
                        if (store_hash_from_hex(de->d_name, &h) < 0)
                                continue; /* not ours: verify reports it, GC leaves it */
                        if (hset_get(seen, &h)) {
                                res->objects_kept++;
                                continue;
                        }
                        struct stat st;
                        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0)
                                res->bytes_removed += (uint64_t)st.st_size;
                        res->objects_removed++;
                        if (!dry_run && unlinkat(dirfd(d), de->d_name, 0) < 0 && errno != ENOENT) {
                                int r = -errno;
                                closedir(d);
                                return store_fail(r, "cannot remove objects/%s/%s: %s", dn, de->d_name, strerror(-r));
                        }
                        removed = true;
                }
                if (removed && !dry_run)
                        (void)fsync(dirfd(d));
                closedir(d);
        }
        return 0;
}

/* Stat caches of snapshots that are gone, and temp files of interrupted cache writes. */
static void sweep_caches(struct store *s, const struct hset *seen, bool dry_run) {
        int fd = dup(s->cachefd);
        DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
        if (!d) {
                if (fd >= 0)
                        close(fd);
                return;
        }
        rewinddir(d);
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
        struct reach rc = { .s = s, .seen = &seen, .on_obj = gc_on_obj, .on_err = gc_on_err, .ud = &g };
        int lk = -EBADF;

        int64_t keep_since = o->keep_since_ns ? o->keep_since_ns : store_now_ns();
        struct hset recent = { 0 }, live_txns = { 0 };
        int r = gc_locked_start(s, &refs0, &pins0, &npins0, o->dry_run, &res);
        if (r < 0)
                goto out;
        for (size_t i = 0; i < n_live; i++) {
                if (obj_exists(s, &live[i]) <= 0) {
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
        r = 0;
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
        r = sweep(s, &seen, &live_txns, o->dry_run, &res);
        if (r < 0)
                goto out;
        sweep_caches(s, &seen, o->dry_run);
        if (ret)
                *ret = res;
out:
        safe_close(lk);
        hset_free(&refs0);
        hset_free(&refs1);
        hset_free(&recent);
        hset_free(&live_txns);
        hset_free(&seen);
        return r;
}
