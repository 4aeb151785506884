/* The remote tier (remote.h): push a snapshot's objects to a bucket, pull them into
 * another store, collect the bucket's garbage. Objects travel as their plain bytes
 * (zstd-compressed, with a small header) under objects/<hex>, records under
 * snapshots/<hex>; every object fetched is checked against its name before anything is
 * committed. The bucket is reached only through struct store_remote_ops. */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "store/remote.h"
#include "store/store-internal.h"

/* One object in the bucket: "SPRO" · version 1 · kind u8 · codec u8 · 0 · plain length
 * u32 · payload (the plain bytes raw, or one zstd frame of them). */
#define ROBJ_MAGIC "SPRO"
#define ROBJ_VERSION 1
enum { ROBJ_RAW = 0, ROBJ_ZSTD = 1 };
#define KNOWN_ENTRY 40 /* hash[32] · seconds u64 (LE) */
#define KEY_SIZE 80    /* "snapshots/" + 64 hex + NUL */

static int64_t now_s(void) { return store_now_ns() / 1000000000; }

static void key_of(const char *prefix, const struct store_hash *h, char out[KEY_SIZE]) {
        char hex[STORE_HEX_LEN + 1];
        store_hash_to_hex(h, hex);
        snprintf(out, KEY_SIZE, "%s%s", prefix, hex);
}

/* The backend's error for a call on key, as the store's detail. */
static int remote_fail(struct store_remote *r, int err, const char *what, const char *key) {
        return store_fail(err, "%s %s in %s: %s", what, key, r->name, r->ops->last_error(r));
}

static int robj_encode(const void *plain, size_t n, enum obj_kind kind, int level, uint8_t **ret, size_t *ret_n) {
        if (n > STORE_MAX_OBJECT)
                return -E2BIG;
        size_t cap = STORE_REMOTE_HEADER + MAX(z_bound(n), n);
        _cleanup_free_ uint8_t *b = malloc(cap);
        if (!b)
                return -ENOMEM;
        size_t z = 0;
        if (n >= 64 && z_worth_compressing(level, plain, n)) {
                int r = z_compress(plain, n, b + STORE_REMOTE_HEADER, cap - STORE_REMOTE_HEADER, level, &z);
                if (r < 0)
                        return r;
        }
        bool zstd = z > 0 && z < n;
        if (!zstd)
                memcpy(b + STORE_REMOTE_HEADER, plain, n);
        memcpy(b, ROBJ_MAGIC, 4);
        b[4] = ROBJ_VERSION;
        b[5] = (uint8_t)kind;
        b[6] = zstd ? ROBJ_ZSTD : ROBJ_RAW;
        b[7] = 0;
        put_le32(b + 8, (uint32_t)n);
        *ret_n = STORE_REMOTE_HEADER + (zstd ? z : n);
        *ret = TAKE_PTR(b);
        return 0;
}

/* The plain bytes of an object fetched as key: its header checked, its content checked
 * against want. -EBADMSG (naming the object) when anything is off. */
static int robj_decode(const uint8_t *d, size_t n, const struct store_hash *want, const char *key, void **ret,
                       size_t *ret_n) {
        const char *why = NULL;
        uint32_t plain = n >= STORE_REMOTE_HEADER ? get_le32(d + 8) : 0;
        if (n < STORE_REMOTE_HEADER || memcmp(d, ROBJ_MAGIC, 4) != 0)
                why = "not an object of ours (bad header)";
        else if (d[4] != ROBJ_VERSION)
                why = "an object format we do not read";
        else if (d[5] >= _OBJ_KIND_MAX || d[6] > ROBJ_ZSTD || d[7] != 0)
                why = "a bad kind, codec or reserved byte";
        else if (plain > STORE_MAX_OBJECT)
                why = "longer than the object size limit";
        else if (d[6] == ROBJ_RAW && n - STORE_REMOTE_HEADER != plain)
                why = "its length does not match its header";
        if (why)
                return store_fail(-EBADMSG, "object %s in the bucket is corrupt: %s", key, why);
        _cleanup_free_ uint8_t *p = malloc((size_t)plain + 1);
        if (!p)
                return -ENOMEM;
        if (d[6] == ROBJ_RAW)
                memcpy(p, d + STORE_REMOTE_HEADER, plain);
        else if (z_decompress(d + STORE_REMOTE_HEADER, n - STORE_REMOTE_HEADER, p, plain) < 0)
                return store_fail(-EBADMSG, "object %s in the bucket is corrupt: its data does not decompress", key);
        p[plain] = 0;
        struct store_hash h;
        store_sha256(p, plain, &h);
        if (!store_hash_eq(&h, want))
                return store_fail(-EBADMSG, "object %s in the bucket is corrupt: its content does not match its hash",
                                  key);
        *ret_n = plain;
        *ret = TAKE_PTR(p);
        return 0;
}

/* GET prefix<hex of h>, checked: the plain bytes. *ret_wire: bytes downloaded. */
static int robj_fetch(struct store_remote *r, const char *prefix, const struct store_hash *h, void **ret,
                      size_t *ret_n, uint64_t *ret_wire) {
        char key[KEY_SIZE];
        key_of(prefix, h, key);
        _cleanup_free_ uint8_t *d = NULL;
        size_t n = 0;
        int k = r->ops->get(r, key, STORE_REMOTE_OBJECT_MAX, (void **)&d, &n);
        if (k < 0)
                return remote_fail(r, k, "cannot fetch", key);
        if (ret_wire)
                *ret_wire = n;
        return robj_decode(d, n, h, key, ret, ret_n);
}

/* ---- the known list: objects this store put in (or saw in) a bucket, and when ---- */

struct known_ent {
        struct store_hash h;
        int64_t t;
};

struct known {
        struct known_ent *v; /* sorted by hash, one per hash (the newest time) */
        size_t n;
        int fd;              /* remote/ID.known, O_APPEND */
        pthread_mutex_t mu;
};

static int known_cmp(const void *a, const void *b) {
        const struct known_ent *x = a, *y = b;
        int c = memcmp(x->h.b, y->h.b, STORE_HASH_LEN);
        return c ? c : (x->t > y->t ? -1 : x->t < y->t);
}

static void known_close(struct known *k) {
        if (k->fd >= 0)
                (void)fdatasync(k->fd);
        k->fd = safe_close(k->fd);
        free(k->v);
        k->v = NULL;
        pthread_mutex_destroy(&k->mu);
}

/* Loads remote/ID.known for r (ID: the first 16 hex digits of the SHA-256 of r->name). A
 * torn last entry (a crash during an append) is ignored; a list grown past twice its
 * distinct entries is rewritten. */
static int known_open(struct store *s, struct store_remote *r, struct known *k) {
        *k = (struct known){ .fd = -EBADF };
        pthread_mutex_init(&k->mu, NULL);
        if (mkdirat(s->dfd, "remote", 0700) < 0 && errno != EEXIST)
                return store_fail(-errno, "cannot create remote/ in the store: %m");
        _cleanup_close_ int dfd = openat(s->dfd, "remote", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (dfd < 0)
                return store_fail(-errno, "cannot open remote/ in the store: %m");
        struct store_hash id;
        store_sha256(r->name, strlen(r->name), &id);
        char hex[STORE_HEX_LEN + 1], name[40];
        store_hash_to_hex(&id, hex);
        snprintf(name, sizeof name, "%.16s.known", hex);
        k->fd = openat(dfd, name, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (k->fd < 0)
                return store_fail(-errno, "cannot open remote/%s: %m", name);
        struct stat st;
        if (fstat(k->fd, &st) < 0)
                return store_fail(-errno, "cannot stat remote/%s: %m", name);
        size_t n = (size_t)MIN((uint64_t)st.st_size / KNOWN_ENTRY, (uint64_t)STORE_REMOTE_KNOWN_MAX);
        k->v = calloc(n ? n : 1, sizeof *k->v);
        if (!k->v)
                return -ENOMEM;
        /* read in pieces: the list may be large, the buffer need not be */
        uint8_t raw[256 * KNOWN_ENTRY];
        size_t got = 0;
        while (got < n) {
                size_t want = MIN(n - got, (size_t)256);
                ssize_t x = pread(k->fd, raw, want * KNOWN_ENTRY, (off_t)(got * KNOWN_ENTRY));
                if (x < 0 && errno == EINTR)
                        continue;
                if (x < (ssize_t)KNOWN_ENTRY)
                        break;
                for (size_t i = 0; i < (size_t)x / KNOWN_ENTRY; i++) {
                        memcpy(k->v[got + i].h.b, raw + i * KNOWN_ENTRY, STORE_HASH_LEN);
                        k->v[got + i].t = (int64_t)get_le64(raw + i * KNOWN_ENTRY + STORE_HASH_LEN);
                }
                got += (size_t)x / KNOWN_ENTRY;
        }
        n = got;
        qsort(k->v, n, sizeof *k->v, known_cmp);
        size_t u = 0;
        for (size_t i = 0; i < n; i++)
                if (u == 0 || !store_hash_eq(&k->v[u - 1].h, &k->v[i].h))
                        k->v[u++] = k->v[i];
        k->n = u;
        if (n > 2 * u + 4096 || (uint64_t)st.st_size % KNOWN_ENTRY) {
                /* rewrite: temp file, then rename over (an append racing with it is lost: a HEAD later) */
                /* the thread in the name too: spaced's replicator pushes on several threads,
                 * and two rewriting at once must not share one temp file */
                char tmp[80];
                snprintf(tmp, sizeof tmp, ".%s.%d.%d", name, (int)getpid(), (int)gettid());
                _cleanup_close_ int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
                bool ok = fd >= 0;
                for (size_t i = 0; ok && i < u; i++) {
                        uint8_t e[KNOWN_ENTRY];
                        memcpy(e, k->v[i].h.b, STORE_HASH_LEN);
                        put_le64(e + STORE_HASH_LEN, (uint64_t)k->v[i].t);
                        ok = write(fd, e, sizeof e) == (ssize_t)sizeof e;
                }
                ok = ok && fsync(fd) == 0 && renameat(dfd, tmp, dfd, name) == 0;
                if (!ok) {
                        (void)unlinkat(dfd, tmp, 0);
                        /* a torn tail would misalign what we append: read it, add nothing */
                        if ((uint64_t)st.st_size % KNOWN_ENTRY)
                                k->fd = safe_close(k->fd);
                } else {
                        safe_close(k->fd);
                        k->fd = openat(dfd, name, O_RDWR | O_APPEND | O_CLOEXEC | O_NOFOLLOW);
                        if (k->fd < 0)
                                return store_fail(-errno, "cannot open remote/%s: %m", name);
                }
        }
        return 0;
}

/* When h was last put in (or seen in) the bucket, INT64_MIN if never. */
static int64_t known_time(const struct known *k, const struct store_hash *h) {
        size_t lo = 0, hi = k->n;
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                int c = memcmp(k->v[mid].h.b, h->b, STORE_HASH_LEN);
                if (c == 0)
                        return k->v[mid].t;
                if (c < 0)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return INT64_MIN;
}

/* Appended only after the bucket said yes: nothing is listed that is not there. */
static void known_add(struct known *k, const struct store_hash *h, int64_t t) {
        uint8_t e[KNOWN_ENTRY];
        memcpy(e, h->b, STORE_HASH_LEN);
        put_le64(e + STORE_HASH_LEN, (uint64_t)t);
        pthread_mutex_lock(&k->mu);
        if (k->fd >= 0 && write(k->fd, e, sizeof e) != (ssize_t)sizeof e) {
                /* a lost entry costs a HEAD next time, nothing else */
        }
        pthread_mutex_unlock(&k->mu);
}

/* ---- worker threads, one backend handle each ---- */

struct run {
        pthread_mutex_t mu;
        pthread_cond_t cv;   /* a worker finished (main waits for all) */
        pthread_cond_t qcv;  /* work was queued or finished (workers wait) */
        unsigned running;
        int err;             /* the first error */
        char msg[1024];      /* its message */
        atomic_uint_least64_t done, done_bytes, total; /* total: of objects (grows during a pull) */
        uint64_t total_bytes;
        const char *phase;
        store_progress_fn progress;
        void *userdata;
        void (*work)(struct run *u, struct store_remote *r);
};

struct worker {
        struct run *u;
        struct store_remote *r;
        pthread_t th;
};

static void run_init(struct run *u, const char *phase, store_progress_fn fn, void *ud) {
        memset(u, 0, sizeof *u);
        pthread_mutex_init(&u->mu, NULL);
        pthread_cond_init(&u->cv, NULL);
        pthread_cond_init(&u->qcv, NULL);
        u->phase = phase;
        u->progress = fn;
        u->userdata = ud;
}

static void run_fini(struct run *u) {
        pthread_mutex_destroy(&u->mu);
        pthread_cond_destroy(&u->cv);
        pthread_cond_destroy(&u->qcv);
}

/* Records the first error with this thread's detail. Call with u->mu held. */
static void run_fail_locked(struct run *u, int r) {
        if (u->err)
                return;
        u->err = r;
        snprintf(u->msg, sizeof u->msg, "%s", store_error_detail());
        pthread_cond_broadcast(&u->qcv);
}

static void run_fail(struct run *u, int r) {
        pthread_mutex_lock(&u->mu);
        run_fail_locked(u, r);
        pthread_mutex_unlock(&u->mu);
}

static bool run_failed(struct run *u) {
        pthread_mutex_lock(&u->mu);
        bool f = u->err != 0;
        pthread_mutex_unlock(&u->mu);
        return f;
}

static void *worker_main(void *p) {
        struct worker *w = p;
        w->u->work(w->u, w->r);
        pthread_mutex_lock(&w->u->mu);
        w->u->running--;
        pthread_cond_broadcast(&w->u->cv);
        pthread_mutex_unlock(&w->u->mu);
        return NULL;
}

static void report(struct run *u) {
        if (u->progress)
                u->progress(u->userdata, &(struct store_progress){ .phase = u->phase, .entries = atomic_load(&u->done),
                                                                   .bytes = atomic_load(&u->done_bytes),
                                                                   .bytes_total = u->total_bytes,
                                                                   .entries_total = atomic_load(&u->total) });
}

/* Runs u->work on jobs threads (the first on r, the others on clones of it) and reports
 * progress from the calling thread every 100 ms until all are done. */
static int run_jobs(struct run *u, struct store_remote *r, unsigned jobs) {
        struct worker w[STORE_REMOTE_JOBS_MAX];
        unsigned n = 0;
        int ret = 0;
        for (; n < jobs; n++) {
                w[n] = (struct worker){ .u = u, .r = r };
                if (n > 0) {
                        int k = r->ops->clone(r, &w[n].r);
                        if (k < 0) {
                                ret = store_fail(k, "cannot open another connection to %s: %s", r->name, strerror(-k));
                                break;
                        }
                }
                pthread_mutex_lock(&u->mu);
                u->running++;
                pthread_mutex_unlock(&u->mu);
                if (pthread_create(&w[n].th, NULL, worker_main, &w[n]) != 0) {
                        pthread_mutex_lock(&u->mu);
                        u->running--;
                        pthread_mutex_unlock(&u->mu);
                        if (n > 0)
                                store_remote_free(w[n].r);
                        ret = store_fail(-EAGAIN, "cannot start a worker thread");
                        break;
                }
        }
        if (ret < 0)
                run_fail(u, ret);
        pthread_mutex_lock(&u->mu);
        while (u->running > 0) {
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_nsec += 100 * 1000000L;
                if (ts.tv_nsec >= 1000000000L) {
                        ts.tv_sec++;
                        ts.tv_nsec -= 1000000000L;
                }
                pthread_cond_timedwait(&u->cv, &u->mu, &ts);
                pthread_mutex_unlock(&u->mu);
                report(u);
                pthread_mutex_lock(&u->mu);
        }
        pthread_mutex_unlock(&u->mu);
        for (unsigned i = 0; i < n; i++) {
                pthread_join(w[i].th, NULL);
                if (i > 0)
                        store_remote_free(w[i].r);
        }
        report(u);
        if (u->err) {
                store_set_detail(u->msg);
                return u->err;
        }
        return 0;
}

static unsigned jobs_of(const struct store_remote_opts *o) {
        unsigned j = o && o->jobs ? o->jobs : STORE_REMOTE_JOBS_DEFAULT;
        return MIN(j, STORE_REMOTE_JOBS_MAX);
}

static unsigned grace_of(unsigned g) { return g ? MAX(g, STORE_REMOTE_GRACE_MIN) : STORE_REMOTE_GRACE_DEFAULT; }

/* ---- listing ---- */

struct key_ent {
        struct store_hash h;
        uint64_t size;
        int64_t mtime;
};

struct key_list {
        const char *prefix;
        struct key_ent *v;
        size_t n, cap;
        size_t limit;      /* stop (1) past this many keys; 0: none */
        uint64_t foreign;
};

static int list_keys(void *ud, const char *key, uint64_t size, int64_t mtime) {
        struct key_list *l = ud;
        size_t pl = strlen(l->prefix);
        struct store_hash h;
        if (strncmp(key, l->prefix, pl) != 0 || store_hash_from_hex(key + pl, &h) < 0) {
                l->foreign++;
                return 0;
        }
        if (l->limit && l->n >= l->limit)
                return 1;
        if (ARRAY_RESERVE(l->v, l->cap, l->n + 1, 1024) < 0)
                return -ENOMEM;
        l->v[l->n++] = (struct key_ent){ .h = h, .size = size, .mtime = mtime };
        return 0;
}

/* Every key under prefix+sub: 0, or 1 (nothing kept) when there are more than limit. */
static int list_prefix(struct store_remote *r, const char *prefix, const char *sub, size_t limit,
                       struct key_list *l) {
        char p[KEY_SIZE];
        snprintf(p, sizeof p, "%s%s", prefix, sub ? sub : "");
        *l = (struct key_list){ .prefix = prefix, .limit = limit };
        int k = r->ops->list(r, p, list_keys, l);
        if (k > 0) {
                free(l->v);
                l->v = NULL;
                l->n = 0;
                return 1;
        }
        if (k < 0) {
                free(l->v);
                l->v = NULL;
                return k == -ENOMEM ? k : remote_fail(r, k, "cannot list", p);
        }
        return 0;
}

static int key_ent_cmp(const void *a, const void *b) {
        return memcmp(((const struct key_ent *)a)->h.b, ((const struct key_ent *)b)->h.b, STORE_HASH_LEN);
}

/* ---- push ---- */

struct obj_ref {
        struct store_hash h;
        uint8_t kind;
        uint32_t len;
};

struct push {
        struct run u;
        struct store *s;
        struct obj_ref *v;
        size_t n;
        atomic_size_t next;
        struct known known;
        int64_t fresh_after; /* a copy in the bucket younger than this is reused */
        /* the bucket's objects/ listed at the start (sorted), instead of a HEAD each */
        bool listed;
        struct key_ent *in_bucket;
        size_t n_in_bucket;
        atomic_uint_least64_t sent, bytes_sent, known_hits, found;
};

struct collect {
        struct store *s;
        const struct store_hash *snap;
        struct obj_ref *v;
        size_t n, cap;
        uint64_t bytes;
};

static int collect_obj(void *ud, const struct store_hash *h, enum obj_kind kind, const char *path) {
        struct collect *c = ud;
        if (kind == OBJ_SNAPSHOT && store_hash_eq(h, c->snap))
                return 0; /* the record goes last, as snapshots/<hex> */
        uint32_t len = 0;
        int r = obj_size(c->s, h, &len);
        if (r < 0) {
                char hex[STORE_HEX_LEN + 1];
                store_hash_to_hex(h, hex);
                return store_fail(r, "object %s (%s of %s) is not in the store", hex, obj_kind_name(kind),
                                  *path ? path : "/");
        }
        if (c->n >= STORE_REMOTE_MAX_OBJECTS)
                return store_fail(-E2BIG, "the snapshot reaches more than %u objects", STORE_REMOTE_MAX_OBJECTS);
        if (ARRAY_RESERVE(c->v, c->cap, c->n + 1, 1024) < 0)
                return -ENOMEM;
        c->v[c->n++] = (struct obj_ref){ .h = *h, .kind = (uint8_t)kind, .len = len };
        c->bytes += len;
        return 0;
}

static int collect_err(void *ud, const struct store_hash *h, enum obj_kind kind, const char *path, int err) {
        return err;
}

/* One object: skipped when the bucket has a recent copy, else read, encoded and put. */
static int push_one(struct push *p, struct store_remote *r, const struct obj_ref *o, uint64_t op) {
        if (known_time(&p->known, &o->h) >= p->fresh_after) {
                atomic_fetch_add(&p->known_hits, 1);
                return 0;
        }
        char key[KEY_SIZE];
        key_of("objects/", &o->h, key);
        uint64_t size = 0;
        int64_t mtime = 0;
        int k;
        if (p->listed) {
                struct key_ent want = { .h = o->h };
                const struct key_ent *e =
                        p->n_in_bucket ? bsearch(&want, p->in_bucket, p->n_in_bucket, sizeof want, key_ent_cmp) : NULL;
                k = e ? 0 : -ENOENT;
                mtime = e ? e->mtime : 0;
        } else {
                k = r->ops->head(r, key, &size, &mtime);
        }
        if (k == 0 && mtime >= p->fresh_after) {
                known_add(&p->known, &o->h, mtime);
                atomic_fetch_add(&p->found, 1);
                return 0;
        }
        if (k < 0 && k != -ENOENT)
                return remote_fail(r, k, "cannot look up", key);
        /* missing, or older than half the grace: (re-)upload, which renews its time */
        _cleanup_free_ void *plain = NULL;
        size_t n = 0;
        k = obj_read_op(p->s, &o->h, -1, op, &plain, &n, NULL);
        if (k < 0)
                return k;
        _cleanup_free_ uint8_t *enc = NULL;
        size_t en = 0;
        if ((k = robj_encode(plain, n, o->kind, p->s->level, &enc, &en)) < 0)
                return store_fail(k, "cannot encode object %s: %s", key, strerror(-k));
        int64_t t = now_s();
        k = r->ops->put(r, key, enc, en);
        if (k < 0)
                return remote_fail(r, k, "cannot upload", key);
        known_add(&p->known, &o->h, t);
        atomic_fetch_add(&p->sent, 1);
        atomic_fetch_add(&p->bytes_sent, en);
        return 0;
}

/* A push with at least this many objects the known list does not vouch for lists the
 * bucket's objects/ once instead of a HEAD for each. */
#define PUSH_LIST_MIN 64
#define S3_PAGE_KEYS 1000 /* keys a LIST page holds (S3's maximum) */

/* Workers take runs of neighbours (the walk's order: a directory's small files and a
 * file's chunks share blocks), and each keeps the block it decoded last. */
#define PUSH_RUN 16

static void push_work(struct run *u, struct store_remote *r) {
        struct push *p = (struct push *)u;
        uint64_t op = store_op_id();
        for (bool stop = false; !stop;) {
                size_t first = atomic_fetch_add(&p->next, PUSH_RUN);
                for (size_t i = first; i < first + PUSH_RUN && !stop; i++) {
                        if (i >= p->n || run_failed(u)) {
                                stop = true;
                                break;
                        }
                        int k = push_one(p, r, &p->v[i], op);
                        if (k < 0) {
                                run_fail(u, k);
                                stop = true;
                                break;
                        }
                        atomic_fetch_add(&u->done, 1);
                        atomic_fetch_add(&u->done_bytes, p->v[i].len);
                }
        }
        store_op_end(p->s, op);
}

int store_push(struct store *s, struct store_remote *r, const struct store_hash *snap,
               const struct store_remote_opts *o, struct store_remote_stats *stats) {
        if (!s || !r || !snap)
                return -EINVAL;
        unsigned grace = grace_of(o ? o->grace_s : 0);
        int64_t start = now_s();
        /* pin the snapshot: a local GC must not take its objects while they are read */
        _cleanup_(txn_freep) struct txn *pin = NULL;
        int k = txn_begin(s, snap, 1, &pin);
        if (k < 0)
                return k;
        _cleanup_free_ uint8_t *rec = NULL;
        size_t rn = 0;
        k = obj_read(s, snap, OBJ_SNAPSHOT, (void **)&rec, &rn, NULL);
        if (k < 0)
                return k;
        struct collect c = { .s = s, .snap = snap };
        struct reach *rc = calloc(1, sizeof *rc);
        struct hset seen = { 0 };
        if (!rc)
                return -ENOMEM;
        *rc = (struct reach){ .s = s, .seen = &seen, .on_obj = collect_obj, .on_err = collect_err, .ud = &c,
                              .op = store_op_id() };
        k = reach_object(rc, snap, "");
        store_op_end(s, rc->op);
        free(rc);
        hset_free(&seen);
        if (k < 0) {
                free(c.v);
                return k;
        }
        struct push *p = calloc(1, sizeof *p);
        if (!p) {
                free(c.v);
                return -ENOMEM;
        }
        run_init(&p->u, "push", o ? o->progress : NULL, o ? o->userdata : NULL);
        p->u.work = push_work;
        p->s = s;
        p->v = c.v;
        p->n = c.n;
        p->u.total = c.n + 1;
        p->u.total_bytes = c.bytes + rn;
        /* +2: LastModified has whole seconds */
        p->fresh_after = start - (int64_t)grace / 2 + 2;
        k = known_open(s, r, &p->known);
        size_t unknown = 0;
        for (size_t i = 0; k >= 0 && i < c.n; i++)
                unknown += known_time(&p->known, &c.v[i].h) < p->fresh_after;
        if (k >= 0 && unknown >= PUSH_LIST_MIN) {
                /* one LIST page answers for up to 1000 objects; give up (and HEAD each) once
                 * the listing would cost more requests than half the HEADs */
                struct key_list l;
                k = list_prefix(r, "objects/", NULL, unknown * (S3_PAGE_KEYS / 2), &l);
                if (k == 0) {
                        if (l.n)
                                qsort(l.v, l.n, sizeof *l.v, key_ent_cmp);
                        p->listed = true;
                        p->in_bucket = l.v;
                        p->n_in_bucket = l.n;
                }
                k = k == -ENOMEM ? k : 0; /* a bucket that will not list: HEAD each (its error, if any) */
        }
        if (k >= 0)
                k = run_jobs(&p->u, r, (unsigned)MIN((size_t)jobs_of(o), MAX(c.n, (size_t)1)));
        if (k >= 0 && now_s() > start + (int64_t)grace / 2)
                k = store_fail(-ETIMEDOUT,
                               "the push ran longer than half the bucket's grace period (%u s): its record is not "
                               "written, push again",
                               grace);
        if (k >= 0) {
                char key[KEY_SIZE];
                key_of("snapshots/", snap, key);
                _cleanup_free_ uint8_t *enc = NULL;
                size_t en = 0;
                k = robj_encode(rec, rn, OBJ_SNAPSHOT, s->level, &enc, &en);
                if (k >= 0 && (k = r->ops->put(r, key, enc, en)) < 0)
                        k = remote_fail(r, k, "cannot upload", key);
                if (k >= 0) {
                        atomic_fetch_add(&p->sent, 1);
                        atomic_fetch_add(&p->bytes_sent, en);
                        atomic_fetch_add(&p->u.done, 1);
                        atomic_fetch_add(&p->u.done_bytes, rn);
                        report(&p->u);
                }
        }
        if (stats) {
                stats->objects += c.n + 1;
                stats->bytes += c.bytes + rn;
                stats->objects_sent += atomic_load(&p->sent);
                stats->bytes_sent += atomic_load(&p->bytes_sent);
                stats->objects_known += atomic_load(&p->known_hits);
                stats->objects_found += atomic_load(&p->found);
        }
        known_close(&p->known);
        run_fini(&p->u);
        free(p->in_bucket);
        free(p->v);
        free(p);
        return k < 0 ? k : 0;
}

/* ---- pull ---- */

struct pull {
        struct run u;
        struct store *s;
        struct txn *t;
        /* the work queue (under u.mu): objects to fetch or read, appended as trees decode */
        struct obj_ref *q;
        size_t qn, qcap, qhead;
        unsigned active;
        struct hset seen;
        atomic_uint_least64_t fetched, bytes_fetched, local;
};

/* Queues h unless seen. Call with u.mu held. */
static int pull_queue_locked(struct pull *p, const struct store_hash *h, enum obj_kind kind) {
        int k = hset_add(&p->seen, h, (uint8_t)(kind + 1));
        if (k <= 0)
                return k;
        if (p->qn >= STORE_REMOTE_MAX_OBJECTS)
                return store_fail(-E2BIG, "the snapshot in the bucket reaches more than %u objects",
                                  STORE_REMOTE_MAX_OBJECTS);
        if (ARRAY_RESERVE(p->q, p->qcap, p->qn + 1, 1024) < 0)
                return -ENOMEM;
        p->q[p->qn++] = (struct obj_ref){ .h = *h, .kind = (uint8_t)kind };
        p->u.total = p->qn + 1; /* grows as trees are read; +1: the record */
        pthread_cond_broadcast(&p->u.qcv);
        return 0;
}

/* What a tree or memory image refers to, queued. */
static int pull_children(struct pull *p, const struct obj_ref *o, const void *plain, size_t n) {
        char hex[STORE_HEX_LEN + 1];
        store_hash_to_hex(&o->h, hex);
        int k = 0;
        if (o->kind == OBJ_TREE) {
                struct tree t;
                if ((k = tree_decode(plain, n, &t)) < 0)
                        return store_fail(-EBADMSG, "tree %s does not decode: %s", hex, store_error_detail());
                pthread_mutex_lock(&p->u.mu);
                for (size_t i = 0; i < t.n && k >= 0; i++) {
                        if (t.e[i].type == T_DIR)
                                k = pull_queue_locked(p, &t.e[i].tree, OBJ_TREE);
                        else if (t.e[i].type == T_REG)
                                for (uint32_t j = 0; j < t.e[i].nchunks && k >= 0; j++)
                                        k = pull_queue_locked(p, &t.e[i].chunks[j].hash, OBJ_CHUNK);
                }
                pthread_mutex_unlock(&p->u.mu);
                tree_free(&t);
        } else if (o->kind == OBJ_MEMORY) {
                struct mem_image m;
                if ((k = mem_decode(plain, n, &m)) < 0)
                        return store_fail(-EBADMSG, "memory image %s does not decode: %s", hex, store_error_detail());
                pthread_mutex_lock(&p->u.mu);
                for (uint32_t i = 0; i < m.n && k >= 0; i++)
                        k = pull_queue_locked(p, &m.chunks[i].hash, OBJ_CHUNK);
                pthread_mutex_unlock(&p->u.mu);
                free(m.chunks);
        }
        return k < 0 ? k : 0;
}

static int pull_one(struct pull *p, struct store_remote *r, const struct obj_ref *o, uint64_t op) {
        int k = obj_exists(p->s, &o->h, false);
        if (k < 0)
                return k;
        _cleanup_free_ void *plain = NULL;
        size_t n = 0;
        if (k > 0) {
                /* ours already: a GC sweep that takes it before the commit fails the commit */
                if ((k = txn_hit(p->t, &o->h)) < 0)
                        return k;
                atomic_fetch_add(&p->local, 1);
                if (o->kind == OBJ_CHUNK)
                        return 0;
                if ((k = obj_read_op(p->s, &o->h, o->kind, op, &plain, &n, NULL)) < 0)
                        return k;
        } else {
                uint64_t wire = 0;
                if ((k = robj_fetch(r, "objects/", &o->h, &plain, &n, &wire)) < 0)
                        return k;
                struct store_hash got;
                if ((k = txn_put(p->t, o->kind, plain, n, &o->h, &got)) < 0)
                        return k;
                atomic_fetch_add(&p->fetched, 1);
                atomic_fetch_add(&p->bytes_fetched, wire);
                atomic_fetch_add(&p->u.done_bytes, n);
        }
        return pull_children(p, o, plain, n);
}

static void pull_work(struct run *u, struct store_remote *r) {
        struct pull *p = (struct pull *)u;
        uint64_t op = store_op_id();
        pthread_mutex_lock(&u->mu);
        for (;;) {
                while (!u->err && p->qhead == p->qn && p->active > 0)
                        pthread_cond_wait(&u->qcv, &u->mu);
                if (u->err || (p->qhead == p->qn && p->active == 0))
                        break;
                struct obj_ref o = p->q[p->qhead++];
                p->active++;
                pthread_mutex_unlock(&u->mu);
                int k = pull_one(p, r, &o, op);
                atomic_fetch_add(&u->done, 1);
                pthread_mutex_lock(&u->mu);
                p->active--;
                if (k < 0)
                        run_fail_locked(u, k);
                pthread_cond_broadcast(&u->qcv);
        }
        pthread_cond_broadcast(&u->qcv);
        pthread_mutex_unlock(&u->mu);
        store_op_end(p->s, op);
}

static bool snapshot_listed(struct store *s, const struct store_hash *h) {
        char hex[STORE_HEX_LEN + 1];
        store_hash_to_hex(h, hex);
        return faccessat(s->snapfd, hex, F_OK, AT_SYMLINK_NOFOLLOW) == 0;
}

int store_pull(struct store *s, struct store_remote *r, const struct store_hash *snap,
               const struct store_remote_opts *o, struct store_remote_stats *stats) {
        if (!s || !r || !snap)
                return -EINVAL;
        if (snapshot_listed(s, snap))
                return 0;
        _cleanup_free_ uint8_t *rec = NULL;
        size_t rn = 0;
        uint64_t wire = 0;
        int k = robj_fetch(r, "snapshots/", snap, (void **)&rec, &rn, &wire);
        if (k < 0)
                return k;
        struct snap_record sr;
        char hex[STORE_HEX_LEN + 1];
        store_hash_to_hex(snap, hex);
        if ((k = snap_decode(rec, rn, &sr)) < 0)
                return store_fail(-EBADMSG, "snapshot record %s in the bucket does not decode: %s", hex,
                                  store_error_detail());
        struct pull *p = calloc(1, sizeof *p);
        if (!p) {
                snap_record_free(&sr);
                return -ENOMEM;
        }
        run_init(&p->u, "pull", o ? o->progress : NULL, o ? o->userdata : NULL);
        p->u.work = pull_work;
        p->s = s;
        p->u.total_bytes = sr.info.bytes_logical;
        k = txn_begin(s, NULL, 0, &p->t);
        pthread_mutex_lock(&p->u.mu);
        if (k >= 0)
                k = pull_queue_locked(p, &sr.root.tree, OBJ_TREE);
        if (k >= 0 && sr.info.has_memory)
                k = pull_queue_locked(p, &sr.info.memory, OBJ_MEMORY);
        pthread_mutex_unlock(&p->u.mu);
        snap_record_free(&sr);
        if (k >= 0)
                k = run_jobs(&p->u, r, jobs_of(o));
        /* everything checked: the objects, then the record, durable and listed at once */
        struct store_op_stats st = { 0 };
        if (k >= 0)
                k = txn_commit_record(p->t, rec, rn, snap, &st);
        if (stats) {
                stats->objects += p->qn + 1;
                stats->objects_fetched += atomic_load(&p->fetched) + 1;
                stats->bytes_fetched += atomic_load(&p->bytes_fetched) + wire;
                stats->bytes += atomic_load(&p->u.done_bytes) + rn;
                stats->objects_local += atomic_load(&p->local);
        }
        txn_free(p->t);
        hset_free(&p->seen);
        free(p->q);
        run_fini(&p->u);
        free(p);
        return k < 0 ? k : 0;
}

int store_remote_snapshots(struct store_remote *r, const char *prefix, struct store_hash **ret, size_t *ret_n) {
        if (!r || !ret || !ret_n || (prefix && (strlen(prefix) > STORE_HEX_LEN ||
                                               strspn(prefix, "0123456789abcdef") != strlen(prefix))))
                return store_fail(-EINVAL, "a snapshot prefix is up to 64 lowercase hex digits");
        struct key_list l;
        int k = list_prefix(r, "snapshots/", prefix, 0, &l);
        if (k < 0)
                return k;
        struct store_hash *v = calloc(l.n ? l.n : 1, sizeof *v);
        if (!v) {
                free(l.v);
                return -ENOMEM;
        }
        for (size_t i = 0; i < l.n; i++)
                v[i] = l.v[i].h;
        *ret_n = l.n;
        *ret = v;
        free(l.v);
        return 0;
}

/* ---- the bucket's GC ---- */

struct gc_mark {
        struct store *s;
        struct store_remote *r;
        struct hset marked;
        struct obj_ref *q;
        size_t qn, qcap;
        store_progress_fn progress;
        void *userdata;
        int64_t last_report;
};

static int mark_add(struct gc_mark *m, const struct store_hash *h, enum obj_kind kind) {
        int k = hset_add(&m->marked, h, (uint8_t)(kind + 1));
        if (k <= 0 || kind == OBJ_CHUNK)
                return k < 0 ? k : 0;
        if (m->marked.n > STORE_REMOTE_MAX_OBJECTS)
                return store_fail(-E2BIG, "the live snapshots reach more than %u objects: nothing deleted",
                                  STORE_REMOTE_MAX_OBJECTS);
        if (ARRAY_RESERVE(m->q, m->qcap, m->qn + 1, 256) < 0)
                return -ENOMEM;
        m->q[m->qn++] = (struct obj_ref){ .h = *h, .kind = (uint8_t)kind };
        return 0;
}

/* A tree or memory image's bytes: from the store if it has them, else from the bucket. */
static int mark_load(struct gc_mark *m, const struct obj_ref *o, void **ret, size_t *ret_n) {
        int k = obj_exists(m->s, &o->h, false);
        if (k > 0 && obj_read(m->s, &o->h, o->kind, ret, ret_n, NULL) == 0)
                return 0;
        return robj_fetch(m->r, "objects/", &o->h, ret, ret_n, NULL);
}

static int mark_walk(struct gc_mark *m) {
        while (m->qn > 0) {
                struct obj_ref o = m->q[--m->qn];
                _cleanup_free_ void *plain = NULL;
                size_t n = 0;
                char hex[STORE_HEX_LEN + 1];
                store_hash_to_hex(&o.h, hex);
                int k = mark_load(m, &o, &plain, &n);
                if (k < 0) {
                        char msg[700];
                        snprintf(msg, sizeof msg, "a live snapshot's %s %s is neither in this store nor readable "
                                                  "in the bucket (%s): nothing deleted",
                                 obj_kind_name(o.kind), hex, store_error_detail());
                        return store_fail(k, "%s", msg);
                }
                if (o.kind == OBJ_TREE) {
                        struct tree t;
                        if ((k = tree_decode(plain, n, &t)) < 0)
                                return store_fail(-EBADMSG, "tree %s does not decode: nothing deleted", hex);
                        for (size_t i = 0; i < t.n && k >= 0; i++) {
                                if (t.e[i].type == T_DIR)
                                        k = mark_add(m, &t.e[i].tree, OBJ_TREE);
                                else if (t.e[i].type == T_REG)
                                        for (uint32_t j = 0; j < t.e[i].nchunks && k >= 0; j++)
                                                k = mark_add(m, &t.e[i].chunks[j].hash, OBJ_CHUNK);
                        }
                        tree_free(&t);
                } else {
                        struct mem_image mi;
                        if ((k = mem_decode(plain, n, &mi)) < 0)
                                return store_fail(-EBADMSG, "memory image %s does not decode: nothing deleted", hex);
                        for (uint32_t i = 0; i < mi.n && k >= 0; i++)
                                k = mark_add(m, &mi.chunks[i].hash, OBJ_CHUNK);
                        free(mi.chunks);
                }
                if (k < 0)
                        return k;
                int64_t now = store_now_ns();
                if (m->progress && now - m->last_report > 100000000) {
                        m->last_report = now;
                        m->progress(m->userdata, &(struct store_progress){ .phase = "mark", .entries = m->marked.n });
                }
        }
        return 0;
}

/* Marks what live snapshot h reaches: its record from the store, else from the bucket. */
static int mark_snapshot(struct gc_mark *m, const struct store_hash *h) {
        char hex[STORE_HEX_LEN + 1];
        store_hash_to_hex(h, hex);
        _cleanup_free_ void *rec = NULL;
        size_t n = 0;
        int k = obj_exists(m->s, h, false) > 0 ? obj_read(m->s, h, OBJ_SNAPSHOT, &rec, &n, NULL) : -ENOENT;
        if (k < 0) {
                k = robj_fetch(m->r, "snapshots/", h, &rec, &n, NULL);
                if (k == -ENOENT)
                        return store_fail(-EAGAIN,
                                          "live snapshot %s is neither in this store nor in the bucket (a push still "
                                          "running on another host?): nothing deleted",
                                          hex);
                if (k < 0)
                        return k;
        }
        struct snap_record sr;
        if ((k = snap_decode(rec, n, &sr)) < 0)
                return store_fail(-EBADMSG, "snapshot record %s does not decode: nothing deleted", hex);
        k = mark_add(m, &sr.root.tree, OBJ_TREE);
        if (k >= 0 && sr.info.has_memory)
                k = mark_add(m, &sr.info.memory, OBJ_MEMORY);
        snap_record_free(&sr);
        return k < 0 ? k : mark_walk(m);
}


int store_remote_gc(struct store *s, struct store_remote *r, const struct store_hash *live, size_t n_live,
                    const struct store_remote_gc_opts *o, struct store_remote_gc_result *ret) {
        if (!s || !r || (n_live && !live) || !ret)
                return -EINVAL;
        unsigned grace = grace_of(o ? o->grace_s : 0);
        int64_t since = o && o->live_since_ns ? o->live_since_ns / 1000000000 : now_s();
        int64_t deadline = since + (int64_t)grace / 2;
        struct store_remote_gc_result res = { .live_snapshots = n_live };
        struct gc_mark m = { .s = s, .r = r, .progress = o ? o->progress : NULL, .userdata = o ? o->userdata : NULL };
        struct hset live_set = { 0 };
        /* local objects are read too: pin the live snapshots against a local GC meanwhile */
        _cleanup_(txn_freep) struct txn *pin = NULL;
        int k = txn_begin(s, live, n_live, &pin);
        for (size_t i = 0; i < n_live && k >= 0; i++)
                if ((k = hset_add(&live_set, &live[i], 1)) > 0)
                        k = mark_snapshot(&m, &live[i]);
        res.objects_marked = m.marked.n;
        free(m.q);
        struct key_list snaps = { 0 }, objs = { 0 };
        if (k >= 0)
                k = list_prefix(r, "snapshots/", NULL, 0, &snaps);
        if (k >= 0)
                k = list_prefix(r, "objects/", NULL, 0, &objs);
        res.foreign = objs.foreign + snaps.foreign;
        /* the cutoff is taken after listing: an object put since is younger still */
        int64_t cutoff = now_s() - (int64_t)grace;
        uint64_t examined = 0;
        for (int pass = 0; pass < 2 && k >= 0; pass++) {
                struct key_list *l = pass == 0 ? &snaps : &objs;
                for (size_t i = 0; i < l->n && k >= 0; i++) {
                        const struct key_ent *e = &l->v[i];
                        bool keep = hset_get(pass == 0 ? &live_set : &m.marked, &e->h) != 0;
                        bool young = e->mtime == 0 || e->mtime >= cutoff;
                        examined++;
                        if (keep) {
                                if (pass == 1)
                                        res.objects_kept++;
                                continue;
                        }
                        if (young) {
                                *(pass == 0 ? &res.snapshots_young : &res.objects_young) += 1;
                                continue;
                        }
                        if (now_s() > deadline) {
                                k = store_fail(-ETIMEDOUT,
                                               "half the grace period (%u s) has passed since the live set was "
                                               "taken: stopped, run again",
                                               grace);
                                break;
                        }
                        char key[KEY_SIZE];
                        key_of(l->prefix, &e->h, key);
                        if (!(o && o->dry_run) && (k = r->ops->del(r, key)) < 0) {
                                k = remote_fail(r, k, "cannot delete", key);
                                break;
                        }
                        if (pass == 0) {
                                res.snapshots_deleted++;
                        } else {
                                res.objects_deleted++;
                                res.bytes_deleted += e->size;
                        }
                        if (m.progress && examined % 64 == 0)
                                m.progress(m.userdata, &(struct store_progress){ .phase = "sweep", .entries = examined });
                }
        }
        free(snaps.v);
        free(objs.v);
        hset_free(&m.marked);
        hset_free(&live_set);
        *ret = res;
        return k < 0 ? k : 0;
}
