/* The store handle, its on-disk layout, locking and the write transaction.
 *
 * Layout of a store directory:
 *   format              "space-store 2": what this directory is and which layout
 *   packs/ID.pack       every object (chunks, trees, snapshot records, memory images), in
 *                       pack files (pack.c)
 *   packs/.t-TXN-N.pack packs transaction TXN is writing; renamed to ID.pack at commit
 *   snapshots/HASH      one empty file per listed snapshot record ("refs")
 *   cache/HASH.DEV.INO  stat caches for incremental capture (not needed for correctness)
 *   tmp/ID/             one per running capture or materialization, flock'ed by its owner:
 *                       its pin list
 *   gate, lock          the store lock (see store_lock); gcgen: GC sweep counter
 *   remote/ID.known     objects known to be in a bucket (remote.c), one file per bucket
 * Format 1 (one file per object under objects/) is not read any more.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>


#include "common/fdio.h"
#include "store/store-internal.h"

#define FORMAT_LINE "space-store 2\n"

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
        int r = store_random(&rnd, sizeof rnd);
        if (r < 0)
                return r;
        snprintf(tmp, sizeof tmp, ".%s.%08x.tmp", name, rnd);
        _cleanup_close_ int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0)
                return -errno;
        if (write(fd, data, len) != (ssize_t)len || (durable && fsync(fd) < 0)) {
                r = errno ? -errno : -EIO;
                unlinkat(dfd, tmp, 0);
                return r;
        }
        if (renameat(dfd, tmp, dfd, name) < 0) {
                r = -errno;
                unlinkat(dfd, tmp, 0);
                return r;
        }
        if (durable && fsync(dfd) < 0)
                return -errno;
        return 0;
}

/* Everything a store directory may contain; a half-made store holds only these. */
static bool known_name(const char *n) {
        static const char *const names[] = { "packs", "snapshots", "cache", "tmp", "gate", "lock", "gcgen", "format",
                                             "remote" };
        for (size_t i = 0; i < ELEMENTSOF(names); i++)
                if (!strcmp(n, names[i]))
                        return true;
        return n[0] == '.'; /* our temp files, "." and ".." */
}

static int store_init_layout(int dfd, const char *dir) {
        _cleanup_closedir_ DIR *d = NULL;
        int r = fdio_opendir(dfd, &d);
        if (r < 0)
                return r;
        struct dirent *de;
        while ((de = readdir(d)))
                if (!known_name(de->d_name))
                        return store_fail(-EBADMSG, "%s is not a space store and not empty (it holds \"%s\")", dir,
                                          de->d_name);
        if ((r = mkdirat_ok(dfd, "packs", 0755)) < 0 || (r = mkdirat_ok(dfd, "snapshots", 0755)) < 0 ||
            (r = mkdirat_ok(dfd, "cache", 0700)) < 0 || (r = mkdirat_ok(dfd, "tmp", 0700)) < 0)
                return store_fail(r, "%s: cannot create the store layout: %s", dir, strerror(-r));
        if (fsync(dfd) < 0)
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
        if (!strcmp(buf, "space-store 1\n"))
                return store_fail(-EBADMSG,
                                  "%s is a space store of an unsupported format (\"space-store 1\", one file per object, "
                                  "from before pack files)", dir);
        if (strcmp(buf, FORMAT_LINE))
                return store_fail(-EBADMSG, "%s is a space store of an unsupported format (\"%.*s\")", dir,
                                  (int)strcspn(buf, "\n"), buf);
        return 0;
}

int store_probe(const char *dir) {
        if (!dir || !*dir)
                return store_fail(-EINVAL, "no store directory given");
        _cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0)
                return errno == ENOENT ? -ENOENT : store_fail(-errno, "cannot open store %s: %m", dir);
        int r = check_format(dfd, dir);
        if (r < 0 && r != -ENOENT && r != -EBADMSG)
                return store_fail(r, "%s: cannot read the format file: %s", dir, strerror(-r));
        return r;
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
        s->dfd = s->packfd = s->tmpfd = s->snapfd = s->cachefd = -EBADF;
        if (packs_init(&s->packs) < 0) {
                free(s);
                return -ENOMEM;
        }
        s->level = o->compression_level ? o->compression_level : 2;
        s->dir = strdup(dir);
        if (!s->dir) {
                store_free(s);
                return -ENOMEM;
        }
        s->dfd = TAKE_FD(dfd);
        static const char *const sub[] = { "packs", "tmp", "snapshots", "cache" };
        int *fds[] = { &s->packfd, &s->tmpfd, &s->snapfd, &s->cachefd };
        for (size_t i = 0; i < ELEMENTSOF(sub); i++) {
                *fds[i] = open_dir_at(s->dfd, sub[i]);
                if (*fds[i] < 0) {
                        r = store_fail(*fds[i], "store %s is damaged: %s/ cannot be opened: %s", dir, sub[i],
                                       strerror(-*fds[i]));
                        store_free(s);
                        return r;
                }
        }
        r = packs_refresh(s, false, NULL, NULL);
        if (r < 0) {
                r = store_fail(r, "store %s: %s", dir, store_error_detail());
                store_free(s);
                return r;
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
        packs_fini(&s->packs);
        safe_close(s->dfd);
        safe_close(s->packfd);
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
        struct pack_writer *w;
        atomic_uint_least64_t objects_written, objects_reused, trees_written, deltas_written;
};

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
        r = pw_new(s, t->name, &t->w);
        if (r < 0) {
                txn_free(t);
                return r;
        }
        /* See what other handles committed (dedup against it); cheap when nothing did. */
        packs_refresh_if_changed(s);
        *ret = t;
        return 0;
}

struct txn *txn_free(struct txn *t) {
        if (!t)
                return NULL;
        pw_free(t->w); /* removes packs not committed */
        if (t->dfd >= 0) {
                store_rm_rf_at(t->s->tmpfd, t->name);
                safe_close(t->dfd);
        }
        hset_free(&t->mine);
        hset_free(&t->hits);
        pthread_mutex_destroy(&t->mu);
        free(t);
        return NULL;
}

void txn_stats(struct txn *t, struct store_op_stats *st) {
        if (!st)
                return;
        st->objects_written += atomic_load(&t->objects_written);
        st->bytes_written += t->w ? pw_bytes(t->w) : 0;
        st->objects_reused += atomic_load(&t->objects_reused);
        st->trees_written += atomic_load(&t->trees_written);
        st->deltas_written += atomic_load(&t->deltas_written);
}

/* 1: h is new and now ours to write; 0: stored already (or claimed by another thread). */
static int txn_claim(struct txn *t, const struct store_hash *h, enum obj_kind kind) {
        pthread_mutex_lock(&t->mu);
        bool seen = hset_get(&t->mine, h) || hset_get(&t->hits, h);
        pthread_mutex_unlock(&t->mu);
        if (seen) {
                atomic_fetch_add(&t->objects_reused, 1);
                return 0;
        }
        int r = obj_exists(t->s, h, false);
        if (r < 0)
                return store_fail(r, "cannot look up an object: %s", strerror(-r));
        pthread_mutex_lock(&t->mu);
        if (r > 0)
                r = hset_add(&t->hits, h, 1) < 0 ? -ENOMEM : 0;
        else
                r = hset_add(&t->mine, h, (uint8_t)(kind + 1)); /* 0: another thread claimed it meanwhile */
        pthread_mutex_unlock(&t->mu);
        if (r == 0)
                atomic_fetch_add(&t->objects_reused, 1);
        return r;
}

int txn_put(struct txn *t, enum obj_kind kind, const void *plain, size_t len, const struct store_hash *known,
            struct store_hash *ret) {
        if (len > STORE_MAX_OBJECT)
                return store_fail(-E2BIG, "a %s of %zu bytes is over the object size limit", obj_kind_name(kind), len);
        struct store_hash h;
        if (known)
                h = *known;
        else
                store_sha256(plain, len, &h);
        int r = txn_claim(t, &h, kind);
        if (r < 0)
                return r;
        if (r > 0) {
                if (len < BLOCK_SMALL)
                        r = pw_add_small(t->w, plain, (uint32_t)len, (uint8_t)kind, &h);
                else {
                        struct blk_obj o = { .data = plain, .len = (uint32_t)len, .kind = (uint8_t)kind, .hash = h };
                        r = pw_add_block(t->w, &o, 1, z_worth_compressing(t->s->level, plain, len));
                }
                if (r < 0)
                        return store_fail(r, "cannot store a %s: %s", obj_kind_name(kind), strerror(-r));
                atomic_fetch_add(&t->objects_written, 1);
                if (kind == OBJ_TREE)
                        atomic_fetch_add(&t->trees_written, 1);
        }
        *ret = h;
        return 0;
}

int txn_put_run(struct txn *t, enum obj_kind kind, struct blk_obj *v, size_t n, bool hashed) {
        if (n > BLOCK_MAX_OBJECTS)
                return -EINVAL;
        _cleanup_free_ struct blk_obj *fresh = calloc(n ? n : 1, sizeof *fresh);
        if (!fresh)
                return -ENOMEM;
        size_t k = 0;
        bool compress = false;
        for (size_t i = 0; i < n; i++) {
                if (v[i].len > STORE_MAX_OBJECT)
                        return -E2BIG;
                if (!hashed)
                        store_sha256(v[i].data, v[i].len, &v[i].hash);
                v[i].kind = (uint8_t)kind;
                int r = txn_claim(t, &v[i].hash, kind);
                if (r < 0)
                        return r;
                if (r > 0) {
                        fresh[k++] = v[i];
                        compress = compress || z_worth_compressing(t->s->level, v[i].data, v[i].len);
                }
        }
        if (!k)
                return 0;
        int r = pw_add_block(t->w, fresh, k, compress);
        if (r < 0)
                return store_fail(r, "cannot store a %s: %s", obj_kind_name(kind), strerror(-r));
        atomic_fetch_add(&t->objects_written, k);
        return 0;
}

int txn_put_delta(struct txn *t, const void *data, size_t len, const struct store_hash *h,
                  const struct store_hash *prev, uint64_t op) {
        if (store_hash_eq(h, prev) || len == 0 || len > STORE_MAX_OBJECT)
                return 0;
        pthread_mutex_lock(&t->mu);
        bool seen = hset_get(&t->mine, h) || hset_get(&t->hits, h);
        pthread_mutex_unlock(&t->mu);
        int r = seen ? 1 : obj_exists(t->s, h, false);
        if (r != 0)
                return r < 0 ? r : 0; /* stored already: the ordinary path counts the reuse */
        /* the base is prev, or prev's own base: a base is never a delta */
        struct store_hash base = *prev;
        r = obj_delta_base(t->s, prev, &base);
        if (r == -ENOMEM)
                return r;
        if (r < 0)
                return 0; /* no usable base (prev unreadable): store it plain */
        _cleanup_free_ void *bp = NULL;
        size_t bl = 0;
        r = obj_read_op(t->s, &base, OBJ_CHUNK, op, &bp, &bl, NULL);
        if (r == -ENOMEM)
                return r;
        if (r < 0 || bl != len)
                return 0;
        size_t cap = z_bound(len);
        _cleanup_free_ uint8_t *x = malloc(len), *frame = malloc(cap), *alone = malloc(cap);
        if (!x || !frame || !alone)
                return -ENOMEM;
        const uint8_t *a = data, *b = bp;
        for (size_t i = 0; i < len; i++)
                x[i] = a[i] ^ b[i];
        size_t dz = 0, pz = 0;
        if ((r = z_compress(x, len, frame, cap, t->s->level, &dz)) < 0 ||
            (r = z_compress(data, len, alone, cap, t->s->level, &pz)) < 0)
                return r;
        if (pz == 0 || pz > len)
                pz = len; /* stored raw */
        if (dz == 0 || (DELTA_HEAD + dz) * DELTA_MAX_SHARE > pz)
                return 0;
        r = txn_claim(t, h, OBJ_CHUNK);
        if (r <= 0)
                return r < 0 ? r : 1; /* another thread of ours took it meanwhile */
        /* the base must outlive this capture's commit: a GC that took it fails the commit */
        if ((r = txn_hit(t, &base)) < 0)
                return r;
        r = pw_add_delta(t->w, h, &base, frame, dz, (uint32_t)len);
        if (r < 0)
                return store_fail(r, "cannot store a chunk: %s", strerror(-r));
        atomic_fetch_add(&t->objects_written, 1);
        atomic_fetch_add(&t->deltas_written, 1);
        return 1;
}

int txn_hit(struct txn *t, const struct store_hash *h) {
        pthread_mutex_lock(&t->mu);
        int r = hset_add(&t->hits, h, 1);
        pthread_mutex_unlock(&t->mu);
        return r < 0 ? r : 0;
}

/* Makes the transaction's packs visible. Runs under the shared store lock, after checking
 * that a GC sweep did not take away what we reused. */
static int txn_publish_locked(struct txn *t) {
        struct store *s = t->s;
        uint64_t gen;
        int r = store_gc_gen(s, &gen);
        if (r < 0)
                return store_fail(r, "cannot read the GC generation: %s", strerror(-r));
        if (gen != t->gen) {
                r = packs_refresh(s, false, NULL, NULL);
                if (r < 0)
                        return r;
                for (size_t i = 0; i < t->hits.cap; i++) {
                        if (!t->hits.vals[i])
                                continue;
                        r = obj_exists(s, &t->hits.keys[i], false);
                        if (r <= 0) {
                                char hex[STORE_HEX_LEN + 1];
                                store_hash_to_hex(&t->hits.keys[i], hex);
                                return store_fail(-EAGAIN,
                                                  "object %s was removed by a concurrent garbage collection; capture again",
                                                  hex);
                        }
                }
        }
        return pw_publish(t->w);
}

/* Seals the transaction's packs, then publishes them under the store lock. *ret_lock gets
 * the lock as soon as it is taken, whatever follows: the caller closes it once what must
 * happen under it (a snapshot's ref) is done. */
static int txn_seal_publish(struct txn *t, struct store_op_stats *st, int *ret_lock) {
        int r = pw_seal(t->w); /* the slow part (fsync) runs without the lock */
        if (r < 0) {
                txn_stats(t, st);
                return r;
        }
        int lk = store_lock(t->s, false);
        if (lk < 0)
                return lk;
        *ret_lock = lk;
        r = txn_publish_locked(t);
        txn_stats(t, st);
        return r;
}

int txn_commit_objects(struct txn *t, struct store_op_stats *st) {
        _cleanup_close_ int lk = -EBADF;
        return txn_seal_publish(t, st, &lk);
}

int txn_commit_record(struct txn *t, const void *rec, size_t len, const struct store_hash *h,
                      struct store_op_stats *st) {
        /* The record goes into the pack like every object. */
        struct store_hash got;
        int r = txn_put(t, OBJ_SNAPSHOT, rec, len, h, &got);
        if (r < 0)
                return r;
        _cleanup_close_ int lk = -EBADF;
        r = txn_seal_publish(t, st, &lk);
        if (r < 0)
                return r;
        char hex[STORE_HEX_LEN + 1];
        store_hash_to_hex(h, hex);
        _cleanup_close_ int fd = openat(t->s->snapfd, hex, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0 || fsync(t->s->snapfd) < 0)
                return store_fail(-errno, "cannot list snapshot %s: %m", hex);
        return 0;
}

int txn_commit(struct txn *t, const struct snap_record *rec, struct store_op_stats *st, struct store_hash *ret) {
        _cleanup_buf_ struct buf b = BUF_INIT(STORE_MAX_OBJECT);
        int r = snap_encode(rec, &b);
        if (r < 0)
                return store_fail(r, "cannot encode the snapshot record: %s", strerror(-r));
        struct store_hash h;
        store_sha256(b.data, b.len, &h);
        r = txn_commit_record(t, b.data, b.len, &h, st);
        if (r < 0)
                return r;
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

int refs_for_each(struct store *s, int (*fn)(void *ud, int dfd, const char *name, const struct store_hash *h),
                  void *ud) {
        _cleanup_closedir_ DIR *d = NULL;
        int r = fdio_opendir(s->snapfd, &d);
        if (r < 0)
                return r;
        struct dirent *de;
        while (r >= 0 && (de = readdir(d))) {
                struct store_hash h;
                if (store_hash_from_hex(de->d_name, &h) == 0)
                        r = fn(ud, dirfd(d), de->d_name, &h);
        }
        return r < 0 ? r : 0;
}

struct hash_vec {
        struct store_hash *v;
        size_t n, cap;
};

static int ref_push(void *ud, int dfd, const char *name, const struct store_hash *h) {
        struct hash_vec *hv = ud;
        if (ARRAY_RESERVE(hv->v, hv->cap, hv->n + 1, 64) < 0)
                return -ENOMEM;
        hv->v[hv->n++] = *h;
        return 0;
}

/* Names of the refs, unsorted, without loading the records. */
static int list_refs(struct store *s, struct store_hash **ret, size_t *ret_n) {
        struct hash_vec hv = { 0 };
        int r = refs_for_each(s, ref_push, &hv);
        if (r < 0) {
                free(hv.v);
                return r;
        }
        *ret = hv.v;
        *ret_n = hv.n;
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
        struct pack **packs;
        size_t np;
        int r = packs_snapshot(s, true, &packs, &np);
        if (r < 0)
                return r;
        struct hset seen = { 0 };
        for (size_t i = 0; i < np && r >= 0; i++) {
                st.bytes_stored += packs[i]->size;
                for (size_t j = 0; j < packs[i]->n && r >= 0; j++) {
                        const struct pack_ent *e = &packs[i]->e[j];
                        r = hset_add(&seen, &e->hash, 1);
                        if (r > 0) {
                                st.objects++;
                                st.bytes_plain += e->len;
                                st.by_kind[e->kind]++;
                        }
                }
        }
        packs_release(packs, np);
        hset_free(&seen);
        if (r < 0)
                return r;
        _cleanup_free_ struct store_hash *refs = NULL;
        size_t n;
        r = list_refs(s, &refs, &n);
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
