/* The store handle, its on-disk layout, locking and the write transaction.
 *
 * Layout of a store directory:
 *   format              "space-store 1": what this directory is and which layout
 *   objects/00..ff/HASH every object (chunks, trees, snapshot records, memory images)
 *   snapshots/HASH      one empty file per listed snapshot record ("refs")
 *   cache/HASH.DEV.INO  stat caches for incremental capture (not needed for correctness)
 *   tmp/ID/             one per running capture or materialization, flock'ed by its owner:
 *                       its pin list
 *   objects/ab/.t-ID-HASH  objects transaction ID wrote but has not committed yet (beside
 *                       their final name, so commit is a rename within one directory and
 *                       writers spread over 256 directories instead of contending on one)
 *   gate, lock          the store lock (see store_lock); gcgen: GC sweep counter
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>

#include "store/store-internal.h"

#define FORMAT_LINE "space-store 1\n"

static int mkdirat_ok(int dfd, const char *name, mode_t mode) {
        if (mkdirat(dfd, name, mode) < 0 && errno != EEXIST)
                return -errno;
        return 0;
}

static int open_dir_at(int dfd, const char *name) {
        int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

static int write_file_at(int dfd, const char *name, const void *data, size_t len, bool durable) {
        char tmp[300];
        unsigned rnd = 0;
        (void)getrandom(&rnd, sizeof rnd, 0);
        snprintf(tmp, sizeof tmp, ".%s.%08x.tmp", name, rnd);
        _cleanup_close_ int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0)
                return -errno;
        if (write(fd, data, len) != (ssize_t)len || (durable && fsync(fd) < 0)) {
                int r = errno ? -errno : -EIO;
                unlinkat(dfd, tmp, 0);
                return r;
        }
        if (renameat(dfd, tmp, dfd, name) < 0) {
                int r = -errno;
                unlinkat(dfd, tmp, 0);
                return r;
        }
        if (durable && fsync(dfd) < 0)
                return -errno;
        return 0;
}

/* Everything a store directory may contain; a half-made store holds only these. */
static bool known_name(const char *n) {
        static const char *const names[] = { "objects", "snapshots", "cache", "tmp", "gate", "lock", "gcgen", "format" };
        for (size_t i = 0; i < ELEMENTSOF(names); i++)
                if (!strcmp(n, names[i]))
                        return true;
        return n[0] == '.'; /* our temp files, "." and ".." */
}

static int store_init_layout(int dfd, const char *dir) {
        _cleanup_closedir_ DIR *d = NULL;
        int fd = dup(dfd);
        if (fd < 0 || !(d = fdopendir(fd))) {
                if (fd >= 0)
                        close(fd);
                return -errno;
        }
        struct dirent *de;
        while ((de = readdir(d)))
                if (!known_name(de->d_name))
                        return store_fail(-EBADMSG, "%s is not a space store and not empty (it holds \"%s\")", dir,
                                          de->d_name);
        int r;
        if ((r = mkdirat_ok(dfd, "objects", 0755)) < 0 || (r = mkdirat_ok(dfd, "snapshots", 0755)) < 0 ||
            (r = mkdirat_ok(dfd, "cache", 0700)) < 0 || (r = mkdirat_ok(dfd, "tmp", 0700)) < 0)
                return store_fail(r, "%s: cannot create the store layout: %s", dir, strerror(-r));
        _cleanup_close_ int ofd = open_dir_at(dfd, "objects");
        if (ofd < 0)
                return ofd;
        for (int i = 0; i < 256; i++) {
                char n[3];
                snprintf(n, sizeof n, "%02x", i);
                if ((r = mkdirat_ok(ofd, n, 0755)) < 0)
                        return store_fail(r, "%s: cannot create objects/%s: %s", dir, n, strerror(-r));
        }
        if (fsync(ofd) < 0)
                return -errno;
        r = write_file_at(dfd, "format", FORMAT_LINE, strlen(FORMAT_LINE), true);
        if (r < 0)
                return store_fail(r, "%s: cannot write the format file: %s", dir, strerror(-r));
        return 0;
}

static int check_format(int dfd, const char *dir) {
        _cleanup_close_ int fd = openat(dfd, "format", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
                return -errno;
        char buf[64];
        ssize_t n = read(fd, buf, sizeof buf - 1);
        if (n < 0)
                return -errno;
        buf[n] = 0;
        if (strncmp(buf, "space-store ", 12))
                return store_fail(-EBADMSG, "%s is not a space store (its format file is foreign)", dir);
        if (strcmp(buf, FORMAT_LINE))
                return store_fail(-EBADMSG, "%s is a space store of an unsupported format (\"%.*s\")", dir,
                                  (int)strcspn(buf, "\n"), buf);
        return 0;
}

int store_open(const char *dir, const struct store_opts *o, struct store **ret) {
        struct store_opts def = { STORE_OPTS_INIT };
        if (!o)
                o = &def;
        if (!dir || !*dir)
                return store_fail(-EINVAL, "no store directory given");
        if (o->version != STORE_OPTS_VERSION)
                return store_fail(-EINVAL, "store_opts version %u unknown", o->version);
        if (o->threads > STORE_MAX_THREADS)
                return store_fail(-EINVAL, "%u threads is over the limit of %u", o->threads, STORE_MAX_THREADS);
        if (o->compression_level < 0 || o->compression_level > 19)
                return store_fail(-EINVAL, "compression level %d out of range 1..19", o->compression_level);
        if (o->create && mkdir(dir, 0755) < 0 && errno != EEXIST)
                return store_fail(-errno, "cannot create %s: %m", dir);
        _cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0) {
                int r = -errno;
                return store_fail(r, r == -ENOENT ? "no store at %s (the directory does not exist)" : "cannot open store %s: %m",
                                  dir);
        }
        int r = check_format(dfd, dir);
        if (r == -ENOENT) {
                if (!o->create)
                        return store_fail(-ENOENT, "%s is not a space store (no format file)", dir);
                r = store_init_layout(dfd, dir);
                if (r < 0)
                        return r;
                r = check_format(dfd, dir);
        }
        if (r < 0)
                return r == -EBADMSG ? r : store_fail(r, "%s: cannot read the format file: %s", dir, strerror(-r));

        struct store *s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->dfd = s->objfd = s->tmpfd = s->snapfd = s->cachefd = -EBADF;
        s->level = o->compression_level ? o->compression_level : 1;
        s->dir = strdup(dir);
        if (!s->dir) {
                store_free(s);
                return -ENOMEM;
        }
        s->dfd = TAKE_FD(dfd);
        static const char *const sub[] = { "objects", "tmp", "snapshots", "cache" };
        int *fds[] = { &s->objfd, &s->tmpfd, &s->snapfd, &s->cachefd };
        for (size_t i = 0; i < ELEMENTSOF(sub); i++) {
                *fds[i] = open_dir_at(s->dfd, sub[i]);
                if (*fds[i] < 0) {
                        r = store_fail(*fds[i], "store %s is damaged: %s/ cannot be opened: %s", dir, sub[i],
                                       strerror(-*fds[i]));
                        store_free(s);
                        return r;
                }
        }
        unsigned threads = o->threads;
        if (!threads) {
                long n = sysconf(_SC_NPROCESSORS_ONLN);
                threads = n > 0 ? (unsigned)MIN(n, (long)STORE_MAX_THREADS) : 2;
        }
        r = pool_new(threads, &s->pool);
        if (r < 0) {
                store_free(s);
                return store_fail(r, "cannot start %u worker threads", threads);
        }
        *ret = s;
        return 0;
}

struct store *store_free(struct store *s) {
        if (!s)
                return NULL;
        pool_free(s->pool);
        safe_close(s->dfd);
        safe_close(s->objfd);
        safe_close(s->tmpfd);
        safe_close(s->snapfd);
        safe_close(s->cachefd);
        free(s->dir);
        free(s);
        return NULL;
}

static int flock_retry(int fd, int op) {
        while (flock(fd, op) < 0) {
                if (errno != EINTR)
                        return -errno;
        }
        return 0;
}

/* flock does not queue: a steady stream of shared holders would starve GC. Everyone passes
 * through the "gate" first, so a GC waiting for "lock" holds the gate and new users queue
 * behind it. Each call opens its own file descriptions, so threads of one process exclude
 * each other like separate processes do. */
int store_lock(struct store *s, bool exclusive) {
        _cleanup_close_ int gate = openat(s->dfd, "gate", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (gate < 0)
                return store_fail(-errno, "cannot open the store's gate file: %m");
        int r = flock_retry(gate, LOCK_EX);
        if (r < 0)
                return store_fail(r, "cannot lock the store: %s", strerror(-r));
        _cleanup_close_ int fd = openat(s->dfd, "lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
                return store_fail(-errno, "cannot open the store's lock file: %m");
        r = flock_retry(fd, exclusive ? LOCK_EX : LOCK_SH);
        if (r < 0)
                return store_fail(r, "cannot lock the store: %s", strerror(-r));
        return TAKE_FD(fd);
}

int store_gc_gen(struct store *s, uint64_t *ret) {
        _cleanup_close_ int fd = openat(s->dfd, "gcgen", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0) {
                if (errno != ENOENT)
                        return -errno;
                *ret = 0;
                return 0;
        }
        char buf[32];
        ssize_t n = read(fd, buf, sizeof buf - 1);
        if (n < 0)
                return -errno;
        buf[n] = 0;
        *ret = strtoull(buf, NULL, 10);
        return 0;
}

/* ---- transactions ---- */

struct txn {
        struct store *s;
        int dfd;
        char name[24];
        uint64_t gen;
        pthread_mutex_t mu;
        struct hset mine;  /* written by this transaction: kind + 1 */
        struct hset hits;  /* found already stored: must still be there at commit */
        struct store_hash *list;
        uint8_t *kinds;
        size_t n, cap;
        atomic_uint_least64_t objects_written, bytes_written, objects_reused, trees_written;
};

static void temp_rel(const struct txn *t, const struct store_hash *h, char out[STORE_HEX_LEN + 32]) {
        char hex[STORE_HEX_LEN + 1];
        store_hash_to_hex(h, hex);
        snprintf(out, STORE_HEX_LEN + 32, "%.2s/" TXN_TEMP_PREFIX "%s-%s", hex, t->name, hex);
}

int txn_begin(struct store *s, const struct store_hash *pins, size_t npins, struct txn **ret) {
        struct txn *t = calloc(1, sizeof *t);
        if (!t)
                return -ENOMEM;
        t->s = s;
        t->dfd = -EBADF;
        pthread_mutex_init(&t->mu, NULL);
        _cleanup_close_ int lk = store_lock(s, false);
        if (lk < 0) {
                txn_free(t);
                return lk;
        }
        int r = 0;
        for (int tries = 0; tries < 8; tries++) {
                uint64_t rnd;
                if (getrandom(&rnd, sizeof rnd, 0) != sizeof rnd)
                        rnd = (uint64_t)store_now_ns() ^ ((uint64_t)getpid() << 32);
                snprintf(t->name, sizeof t->name, "%016llx", (unsigned long long)rnd);
                if (mkdirat(s->tmpfd, t->name, 0700) == 0) {
                        r = 0;
                        break;
                }
                r = -errno;
                if (r != -EEXIST)
                        break;
        }
        if (r < 0) {
                txn_free(t);
                return store_fail(r, "cannot create a temporary directory in the store: %s", strerror(-r));
        }
        t->dfd = open_dir_at(s->tmpfd, t->name);
        if (t->dfd < 0 || flock(t->dfd, LOCK_EX | LOCK_NB) < 0) {
                r = t->dfd < 0 ? t->dfd : -errno;
                store_rm_rf_at(s->tmpfd, t->name);
                safe_close(t->dfd);
                t->dfd = -EBADF;
                txn_free(t);
                return store_fail(r, "cannot claim a temporary directory in the store: %s", strerror(-r));
        }
        if (npins) {
                _cleanup_close_ int pf = openat(t->dfd, "pin", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
                if (pf < 0 || write(pf, pins, npins * sizeof *pins) != (ssize_t)(npins * sizeof *pins)) {
                        r = errno ? -errno : -EIO;
                        txn_free(t);
                        return store_fail(r, "cannot write a pin file: %s", strerror(-r));
                }
        }
        r = store_gc_gen(s, &t->gen);
        if (r < 0) {
                txn_free(t);
                return store_fail(r, "cannot read the GC generation: %s", strerror(-r));
        }
        *ret = t;
        return 0;
}

struct txn *txn_free(struct txn *t) {
        if (!t)
                return NULL;
        /* uncommitted objects: after a commit these names are gone already */
        for (size_t i = 0; i < t->n; i++) {
                char tmp[STORE_HEX_LEN + 32];
                temp_rel(t, &t->list[i], tmp);
                unlinkat(t->s->objfd, tmp, 0);
        }
        if (t->dfd >= 0) {
                store_rm_rf_at(t->s->tmpfd, t->name);
                safe_close(t->dfd);
        }
        hset_free(&t->mine);
        hset_free(&t->hits);
        free(t->list);
        free(t->kinds);
        pthread_mutex_destroy(&t->mu);
        free(t);
        return NULL;
}

void txn_stats(struct txn *t, struct store_op_stats *st) {
        if (!st)
                return;
        st->objects_written += atomic_load(&t->objects_written);
        st->bytes_written += atomic_load(&t->bytes_written);
        st->objects_reused += atomic_load(&t->objects_reused);
        st->trees_written += atomic_load(&t->trees_written);
}

int txn_put(struct txn *t, enum obj_kind kind, const void *plain, size_t len, const struct store_hash *known,
            struct store_hash *ret) {
        struct store_hash h;
        if (known)
                h = *known;
        else
                store_sha256(plain, len, &h);

        pthread_mutex_lock(&t->mu);
        bool seen = hset_get(&t->mine, &h) || hset_get(&t->hits, &h);
        pthread_mutex_unlock(&t->mu);
        if (seen) {
                atomic_fetch_add(&t->objects_reused, 1);
                *ret = h;
                return 0;
        }
        int r = obj_exists(t->s, &h);
        if (r < 0)
                return store_fail(r, "cannot look up an object: %s", strerror(-r));
        pthread_mutex_lock(&t->mu);
        if (r > 0) {
                r = hset_add(&t->hits, &h, 1);
                pthread_mutex_unlock(&t->mu);
                if (r < 0)
                        return r;
                atomic_fetch_add(&t->objects_reused, 1);
                *ret = h;
                return 0;
        }
        /* Claim it before writing so another thread of this transaction skips it. */
        r = hset_add(&t->mine, &h, (uint8_t)(kind + 1));
        if (r > 0 && t->n == t->cap) {
                size_t ncap = t->cap ? t->cap * 2 : 256;
                struct store_hash *nl = realloc(t->list, ncap * sizeof *nl);
                if (nl)
                        t->list = nl;
                uint8_t *nk = realloc(t->kinds, ncap);
                if (nk)
                        t->kinds = nk;
                if (!nl || !nk)
                        r = -ENOMEM;
                else
                        t->cap = ncap;
        }
        if (r > 0) {
                t->list[t->n] = h;
                t->kinds[t->n++] = (uint8_t)kind;
        }
        pthread_mutex_unlock(&t->mu);
        if (r < 0)
                return r;
        if (r == 0) { /* another thread claimed it between our two looks */
                atomic_fetch_add(&t->objects_reused, 1);
                *ret = h;
                return 0;
        }

        _cleanup_free_ void *file = NULL;
        size_t flen;
        r = obj_encode(t->s, kind, plain, len, &file, &flen);
        if (r < 0)
                return store_fail(r, "cannot encode a %s: %s", obj_kind_name(kind), strerror(-r));
        char hex[STORE_HEX_LEN + 1], tmp[STORE_HEX_LEN + 32];
        store_hash_to_hex(&h, hex);
        temp_rel(t, &h, tmp);
        _cleanup_close_ int fd = openat(t->s->objfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
        if (fd < 0)
                return store_fail(-errno, "cannot create object %s: %m", hex);
        size_t done = 0;
        while (done < flen) {
                ssize_t k = write(fd, (char *)file + done, flen - done);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return store_fail(-errno, "cannot write object %s: %m", hex);
                }
                done += (size_t)k;
        }
        atomic_fetch_add(&t->objects_written, 1);
        atomic_fetch_add(&t->bytes_written, flen);
        if (kind == OBJ_TREE)
                atomic_fetch_add(&t->trees_written, 1);
        *ret = h;
        return 0;
}

int txn_hit(struct txn *t, const struct store_hash *h) {
        pthread_mutex_lock(&t->mu);
        int r = hset_add(&t->hits, h, 1);
        pthread_mutex_unlock(&t->mu);
        return r < 0 ? r : 0;
}

/* Commits the objects: fsync each (or the whole file system when there are many), then
 * rename them into objects/ and fsync the fan-out directories touched. Runs under the
 * shared store lock, after checking that a GC sweep did not take away what we reused. */
static int txn_commit_locked(struct txn *t) {
        struct store *s = t->s;
        uint64_t gen;
        int r = store_gc_gen(s, &gen);
        if (r < 0)
                return store_fail(r, "cannot read the GC generation: %s", strerror(-r));
        if (gen != t->gen) {
                for (size_t i = 0; i < t->hits.cap; i++) {
                        if (!t->hits.vals[i])
                                continue;
                        r = obj_exists(s, &t->hits.keys[i]);
                        if (r <= 0) {
                                char hex[STORE_HEX_LEN + 1];
                                store_hash_to_hex(&t->hits.keys[i], hex);
                                return store_fail(-EAGAIN,
                                                  "object %s was removed by a concurrent garbage collection; capture again",
                                                  hex);
                        }
                }
        }
        char tmp[STORE_HEX_LEN + 32];
        if (t->n > 64) {
                /* One syncfs beats thousands of fsyncs; it also flushes others' data, which
                 * is why small commits fsync file by file. */
                if (syncfs(s->objfd) < 0)
                        return store_fail(-errno, "cannot flush new objects to disk: %m");
        } else {
                for (size_t i = 0; i < t->n; i++) {
                        temp_rel(t, &t->list[i], tmp);
                        _cleanup_close_ int fd = openat(s->objfd, tmp, O_RDONLY | O_CLOEXEC);
                        if (fd < 0 || fsync(fd) < 0)
                                return store_fail(-errno, "cannot flush object %s to disk: %m", tmp);
                }
        }
        uint8_t touched[256] = { 0 };
        for (size_t i = 0; i < t->n; i++) {
                char rel[STORE_HEX_LEN + 4];
                store_obj_relpath(&t->list[i], rel);
                temp_rel(t, &t->list[i], tmp);
                if (renameat2(s->objfd, tmp, s->objfd, rel, RENAME_NOREPLACE) < 0) {
                        if (errno != EEXIST)
                                return store_fail(-errno, "cannot move object %s into place: %m", rel + 3);
                        /* Someone else committed the same object first: theirs is as good. */
                        unlinkat(s->objfd, tmp, 0);
                        continue;
                }
                touched[t->list[i].b[0]] = 1;
        }
        t->n = 0; /* every temp name is gone now: nothing for txn_free to remove */
        for (int i = 0; i < 256; i++) {
                if (!touched[i])
                        continue;
                char n[3];
                snprintf(n, sizeof n, "%02x", i);
                _cleanup_close_ int fd = open_dir_at(s->objfd, n);
                if (fd < 0 || fsync(fd) < 0)
                        return store_fail(fd < 0 ? fd : -errno, "cannot flush objects/%s to disk", n);
        }
        return 0;
}

int txn_commit_objects(struct txn *t, struct store_op_stats *st) {
        _cleanup_close_ int lk = store_lock(t->s, false);
        if (lk < 0)
                return lk;
        int r = txn_commit_locked(t);
        txn_stats(t, st);
        return r;
}

int txn_commit(struct txn *t, const struct snap_record *rec, struct store_op_stats *st, struct store_hash *ret) {
        _cleanup_buf_ struct buf b = BUF_INIT(STORE_MAX_OBJECT);
        int r = snap_encode(rec, &b);
        if (r < 0)
                return store_fail(r, "cannot encode the snapshot record: %s", strerror(-r));
        struct store_hash h;
        store_sha256(b.data, b.len, &h);
        /* The record goes through the same path as every object. */
        r = txn_put(t, OBJ_SNAPSHOT, b.data, b.len, &h, &h);
        if (r < 0)
                return r;
        _cleanup_close_ int lk = store_lock(t->s, false);
        if (lk < 0)
                return lk;
        r = txn_commit_locked(t);
        txn_stats(t, st);
        if (r < 0)
                return r;
        char hex[STORE_HEX_LEN + 1];
        store_hash_to_hex(&h, hex);
        _cleanup_close_ int fd = openat(t->s->snapfd, hex, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0 || fsync(t->s->snapfd) < 0)
                return store_fail(-errno, "cannot list snapshot %s: %m", hex);
        *ret = h;
        return 0;
}

/* ---- snapshot records ---- */

int store_snapshot_get(struct store *s, const struct store_hash *snap, struct store_snapshot_info *ret) {
        struct snap_record rec;
        int r = snap_load(s, snap, &rec);
        if (r < 0)
                return r;
        *ret = rec.info;
        snap_record_free(&rec);
        return 0;
}

struct snap_time {
        struct store_hash h;
        int64_t t;
};

static int snap_time_cmp(const void *a, const void *b) {
        const struct snap_time *x = a, *y = b;
        if (x->t != y->t)
                return x->t < y->t ? -1 : 1;
        return memcmp(x->h.b, y->h.b, STORE_HASH_LEN);
}

/* Names of the refs, unsorted, without loading the records. */
static int list_refs(struct store *s, struct store_hash **ret, size_t *ret_n) {
        int fd = dup(s->snapfd);
        if (fd < 0)
                return -errno;
        _cleanup_closedir_ DIR *d = fdopendir(fd);
        if (!d) {
                close(fd);
                return -errno;
        }
        rewinddir(d);
        _cleanup_free_ struct store_hash *v = NULL;
        size_t n = 0, cap = 0;
        struct dirent *de;
        while ((de = readdir(d))) {
                struct store_hash h;
                if (store_hash_from_hex(de->d_name, &h) < 0)
                        continue;
                if (n == cap) {
                        cap = cap ? cap * 2 : 64;
                        struct store_hash *nv = realloc(v, cap * sizeof *nv);
                        if (!nv)
                                return -ENOMEM;
                        v = nv;
                }
                v[n++] = h;
        }
        *ret = TAKE_PTR(v);
        *ret_n = n;
        return 0;
}

int store_snapshot_list(struct store *s, struct store_hash **ret, size_t *ret_n) {
        _cleanup_free_ struct store_hash *refs = NULL;
        size_t n;
        int r = list_refs(s, &refs, &n);
        if (r < 0)
                return store_fail(r, "cannot list snapshots: %s", strerror(-r));
        _cleanup_free_ struct snap_time *v = calloc(n ? n : 1, sizeof *v);
        if (!v)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                struct store_snapshot_info info;
                v[i].h = refs[i];
                /* An unreadable record sorts first; verify reports it. */
                v[i].t = store_snapshot_get(s, &refs[i], &info) < 0 ? INT64_MIN : info.time_ns;
        }
        qsort(v, n, sizeof *v, snap_time_cmp);
        for (size_t i = 0; i < n; i++)
                refs[i] = v[i].h;
        *ret = TAKE_PTR(refs);
        *ret_n = n;
        return 0;
}

int store_snapshot_resolve(struct store *s, const char *prefix, struct store_hash *ret) {
        size_t pl = prefix ? strlen(prefix) : 0;
        if (pl < 4 || pl > STORE_HEX_LEN || strspn(prefix, "0123456789abcdefABCDEF") != pl)
                return store_fail(-EINVAL, "\"%s\" is not a snapshot id (4 to 64 hex digits)", prefix ? prefix : "");
        _cleanup_free_ struct store_hash *refs = NULL;
        size_t n;
        int r = list_refs(s, &refs, &n);
        if (r < 0)
                return store_fail(r, "cannot list snapshots: %s", strerror(-r));
        size_t found = 0;
        struct store_hash h = { 0 };
        for (size_t i = 0; i < n; i++) {
                char hex[STORE_HEX_LEN + 1];
                store_hash_to_hex(&refs[i], hex);
                if (!strncasecmp(hex, prefix, pl)) {
                        h = refs[i];
                        found++;
                }
        }
        if (found == 0)
                return store_fail(-ENOENT, "no snapshot %s in this store", prefix);
        if (found > 1)
                return store_fail(-ENOTUNIQ, "snapshot id %s is ambiguous (%zu snapshots start with it)", prefix, found);
        *ret = h;
        return 0;
}

int store_snapshot_forget(struct store *s, const struct store_hash *snap) {
        char hex[STORE_HEX_LEN + 1];
        store_hash_to_hex(snap, hex);
        if (unlinkat(s->snapfd, hex, 0) < 0)
                return store_fail(-errno, errno == ENOENT ? "no snapshot %s in this store" : "cannot remove snapshot %s: %m",
                                  hex);
        if (fsync(s->snapfd) < 0)
                return store_fail(-errno, "cannot flush the snapshot list: %m");
        return 0;
}

int store_fork(struct store *s, const struct store_hash *snap, const char *session, const char *label,
               struct store_hash *ret_snapshot) {
        if ((session && strlen(session) > STORE_MAX_SESSION) || (label && strlen(label) > STORE_MAX_LABEL))
                return store_fail(-E2BIG, "session id or label too long (limits %u and %u bytes)", STORE_MAX_SESSION,
                                  STORE_MAX_LABEL);
        struct txn *t = NULL;
        int r = txn_begin(s, snap, 1, &t);
        if (r < 0)
                return r;
        struct snap_record rec;
        r = snap_load(s, snap, &rec);
        if (r < 0) {
                txn_free(t);
                return r;
        }
        rec.info.has_parent = true;
        rec.info.parent = *snap;
        rec.info.reason = STORE_REASON_FORK;
        rec.info.time_ns = store_now_ns();
        snprintf(rec.info.session, sizeof rec.info.session, "%s", session ? session : "");
        snprintf(rec.info.label, sizeof rec.info.label, "%s", label ? label : "");
        struct store_hash h;
        r = txn_commit(t, &rec, NULL, &h);
        snap_record_free(&rec);
        txn_free(t);
        if (r < 0)
                return r;
        *ret_snapshot = h;
        return 0;
}

/* ---- stats ---- */

int store_stats(struct store *s, struct store_stats *ret) {
        struct store_stats st = { 0 };
        for (int i = 0; i < 256; i++) {
                char n[3];
                snprintf(n, sizeof n, "%02x", i);
                int fd = open_dir_at(s->objfd, n);
                if (fd < 0)
                        return store_fail(fd, "cannot read objects/%s: %s", n, strerror(-fd));
                DIR *d = fdopendir(fd);
                if (!d) {
                        close(fd);
                        return -errno;
                }
                struct dirent *de;
                while ((de = readdir(d))) {
                        struct store_hash h;
                        if (store_hash_from_hex(de->d_name, &h) < 0)
                                continue;
                        _cleanup_close_ int of = openat(dirfd(d), de->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
                        struct stat sb;
                        uint8_t hdr[OBJ_HEADER];
                        struct obj_header oh;
                        if (of < 0 || fstat(of, &sb) < 0 || pread(of, hdr, sizeof hdr, 0) != (ssize_t)sizeof hdr ||
                            obj_header_parse(hdr, (size_t)sb.st_size, &oh) < 0)
                                continue; /* verify reports these */
                        st.objects++;
                        st.bytes_stored += (uint64_t)sb.st_size;
                        st.bytes_plain += oh.plain_len;
                        st.by_kind[oh.kind]++;
                }
                closedir(d);
        }
        _cleanup_free_ struct store_hash *refs = NULL;
        size_t n;
        int r = list_refs(s, &refs, &n);
        if (r < 0)
                return store_fail(r, "cannot list snapshots: %s", strerror(-r));
        for (size_t i = 0; i < n; i++) {
                struct store_snapshot_info info;
                if (store_snapshot_get(s, &refs[i], &info) < 0)
                        continue;
                st.snapshots++;
                st.bytes_logical += info.bytes_logical;
        }
        st.dedup_ratio = st.bytes_stored ? (double)st.bytes_logical / (double)st.bytes_stored : 0;
        *ret = st;
        return 0;
}
