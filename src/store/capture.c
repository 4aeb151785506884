/* Capture: turns a directory (a sandbox's overlayfs upper layer) into trees, chunks and a
 * snapshot record. The walk (one task per directory: list, sort, stat) and the file reads,
 * chunk hashing, compression and writing all run on the store's pool; the trees are built
 * afterwards in canonical (sorted) order, so the result does not depend on timing. With a
 * parent snapshot and its stat cache, unchanged files are not read and unchanged trees are
 * not rewritten: what is left of an incremental capture is a stat of every entry, which
 * both cores share. */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>

#include "common/fdio.h"
#include "store/store-internal.h"

#define READ_BUF (4u << 20)

struct cnode;

/* Chunk slots live in fixed blocks so tasks can hold pointers while more are added. */
struct slot_block {
        struct t_chunk c[256];
        size_t n;
        struct slot_block *next;
};

struct cnode {
        struct t_entry e;       /* e.name points at name */
        char *name;
        char *path;             /* relative to the root, "" for the root */
        void *owned;            /* xattr arena: ours to free */
        char *target;           /* symlink target read now (else the parent's is used) */
        const struct t_entry *old;
        struct tree old_tree;   /* DIR: the parent snapshot's tree for this directory */
        struct cnode *kids;
        size_t nkids;
        struct slot_block *slots; /* REG being read */
        struct cnode *link_first; /* hard link: the node that carries the data */
        uint32_t link_count;      /* on link_first: members seen */
        struct cnode *link_leader;/* on link_first: the member first in canonical order (names the group) */
        unsigned depth;           /* DIR: nesting below the root */
        bool same_names;          /* DIR: stat matches the cache, so it holds the names it held then */
        bool clean;               /* encodes as in the parent's tree (a DIR: everything below too) */
        uint64_t dev, ino;
        struct scache_rec st;
        bool cacheable;
        /* over a base (store_capture_opts.base): */
        const struct t_entry *base; /* what the base has at this path, if anything */
        struct tree base_tree;      /* DIR merging with the base's directory: its listing */
        bool merge;                 /* DIR: not opaque over a base directory */
        bool opaque;                /* DIR: trusted.overlay.opaque */
        struct t_xattr *xa_merged;  /* DIR: xattrs as merged (opaque added) */
};

struct capture {
        struct store *s;
        struct txn *txn;
        int rootfd;
        uint64_t root_dev;
        struct scache *cache;
        int64_t start_ns;
        atomic_size_t pending;
        atomic_int err;
        pthread_mutex_t mu;
        char errmsg[1024];
        atomic_uint_least64_t bytes_read, files_read;
        atomic_uint_least64_t entries, files, bytes_logical;
        /* hard links: (dev, ino) -> first node, a small open-addressing table (under mu) */
        struct cnode **links;
        size_t links_cap, links_n;
        uint64_t link_groups;  /* of them, with a second name seen */
        const struct store_capture_opts *o;
        int64_t last_progress;
        uint64_t op;
        pthread_t caller;  /* progress is reported from this thread only */
        /* over a base: its record, and what of it the upper layer hides */
        bool overlay;
        struct snap_record brec;
        uint64_t shadow_files, shadow_bytes;
};

static void cap_fail(struct capture *c, int r) {
        int zero = 0;
        pthread_mutex_lock(&c->mu);
        if (atomic_compare_exchange_strong(&c->err, &zero, r))
                snprintf(c->errmsg, sizeof c->errmsg, "%s", store_error_detail());
        pthread_mutex_unlock(&c->mu);
}

static void progress(struct capture *c, const char *phase, bool force) {
        if (!c->o || !c->o->progress || !pthread_equal(pthread_self(), c->caller))
                return;
        int64_t now = store_now_ns();
        if (!force && now - c->last_progress < 100000000)
                return;
        c->last_progress = now;
        struct store_progress p = { .phase = phase, .entries = atomic_load(&c->entries), .bytes = atomic_load(&c->bytes_read) };
        c->o->progress(c->o->userdata, &p);
}

/* ---- xattrs ---- */

struct xa_tmp {
        char *name;
        uint8_t *value;
        uint32_t vlen;
};

static int xa_cmp(const void *a, const void *b) {
        return strcmp(((const struct xa_tmp *)a)->name, ((const struct xa_tmp *)b)->name);
}

/* Reads all xattrs of an entry into one allocation (*owned) and e->xattrs. fd >= 0 uses
 * the fd; else path is used without following a final symlink. */
static int read_xattrs(int fd, const char *path, const char *shown, struct t_entry *e, void **owned) {
        ssize_t n = fd >= 0 ? flistxattr(fd, NULL, 0) : llistxattr(path, NULL, 0);
        if (n < 0) {
                if (errno == ENOTSUP || errno == ENODATA)
                        return 0;
                return store_fail(-errno, "%s: cannot list xattrs: %m", shown);
        }
        if (n == 0)
                return 0;
        _cleanup_free_ char *names = malloc((size_t)n + 1);
        if (!names)
                return -ENOMEM;
        n = fd >= 0 ? flistxattr(fd, names, (size_t)n) : llistxattr(path, names, (size_t)n);
        if (n < 0)
                return store_fail(-errno, "%s: cannot list xattrs: %m", shown);
        names[n] = 0;
        size_t count = 0;
        for (ssize_t i = 0; i < n; i += (ssize_t)strlen(names + i) + 1)
                count++;
        if (count > STORE_MAX_XATTRS)
                return store_fail(-E2BIG, "%s: %zu xattrs (limit %u)", shown, count, STORE_MAX_XATTRS);
        _cleanup_free_ struct xa_tmp *v = calloc(count ? count : 1, sizeof *v);
        if (!v)
                return -ENOMEM;
        size_t k = 0, total = 0;
        int r = 0;
        for (ssize_t i = 0; i < n && k < count; i += (ssize_t)strlen(names + i) + 1) {
                const char *nm = names + i;
                if (strlen(nm) == 0 || strlen(nm) > STORE_MAX_XATTR_NAME) {
                        r = store_fail(-E2BIG, "%s: xattr name too long", shown);
                        break;
                }
                ssize_t vl = fd >= 0 ? fgetxattr(fd, nm, NULL, 0) : lgetxattr(path, nm, NULL, 0);
                if (vl < 0) {
                        if (errno == ENODATA)
                                continue; /* removed meanwhile */
                        r = store_fail(-errno, "%s: cannot read xattr %s: %m", shown, nm);
                        break;
                }
                if ((size_t)vl > STORE_MAX_XATTR_VALUE) {
                        r = store_fail(-E2BIG, "%s: xattr %s has %zd bytes (limit %u)", shown, nm, vl,
                                       STORE_MAX_XATTR_VALUE);
                        break;
                }
                v[k].name = strdup(nm);
                v[k].value = malloc((size_t)vl + 1);
                if (!v[k].name || !v[k].value) {
                        free(v[k].name);
                        free(v[k].value);
                        r = -ENOMEM;
                        break;
                }
                ssize_t got = fd >= 0 ? fgetxattr(fd, nm, v[k].value, (size_t)vl) : lgetxattr(path, nm, v[k].value, (size_t)vl);
                if (got < 0) {
                        r = store_fail(errno == ERANGE ? -EAGAIN : -errno, "%s: xattr %s changed while read", shown, nm);
                        free(v[k].name);
                        free(v[k].value);
                        break;
                }
                v[k].vlen = (uint32_t)got;
                total += strlen(nm) + 1 + (size_t)got;
                k++;
        }
        if (r == 0 && k > 0) {
                qsort(v, k, sizeof *v, xa_cmp);
                char *mem = malloc(k * sizeof(struct t_xattr) + total + 1);
                if (!mem)
                        r = -ENOMEM;
                else {
                        struct t_xattr *xs = (struct t_xattr *)mem;
                        char *p = mem + k * sizeof(struct t_xattr);
                        for (size_t i = 0; i < k; i++) {
                                size_t nl = strlen(v[i].name) + 1;
                                memcpy(p, v[i].name, nl);
                                xs[i].name = p;
                                p += nl;
                                memcpy(p, v[i].value, v[i].vlen);
                                xs[i].value = (const uint8_t *)p;
                                xs[i].vlen = v[i].vlen;
                                p += v[i].vlen;
                        }
                        e->xattrs = xs;
                        e->nxattr = (uint32_t)k;
                        *owned = mem;
                }
        }
        for (size_t i = 0; i < k; i++) {
                free(v[i].name);
                free(v[i].value);
        }
        return r;
}

/* ---- reading files ---- */

struct file_job {
        struct pool_task task;
        struct capture *c;
        struct cnode *node;
};

/* Consecutive chunks of one file, stored as one block (compressed together: they share
 * context, and neighbours are read back together). */
#define RUN_MAX (BLOCK_TARGET / STORE_CHUNK_MIN + 2)
#define RUN_CAP (BLOCK_TARGET + STORE_CHUNK_MAX)
struct run_task {
        struct pool_task task;
        struct capture *c;
        const struct t_entry *old; /* the parent's version of the file, when deltas are wanted */
        size_t n, len;
        struct t_chunk *slots[RUN_MAX];
        uint8_t data[];
};

static struct t_chunk *slot_new(struct cnode *n, uint64_t off, uint32_t len) {
        struct slot_block *b = n->slots;
        /* blocks are kept newest first; order is restored when flattening */
        if (!b || b->n == ELEMENTSOF(b->c)) {
                b = calloc(1, sizeof *b);
                if (!b)
                        return NULL;
                b->next = n->slots;
                n->slots = b;
        }
        struct t_chunk *t = &b->c[b->n++];
        t->off = off;
        t->len = len;
        return t;
}

static void task_done(struct capture *c) {
        atomic_fetch_sub(&c->pending, 1);
        pool_notify(c->s->pool);
}

/* The parent's chunk at exactly [off, off + len), or NULL (chunks are sorted by offset). */
static const struct t_chunk *old_chunk_at(const struct t_entry *old, uint64_t off, uint32_t len) {
        size_t lo = 0, hi = old->nchunks;
        while (lo < hi) {
                size_t mid = (lo + hi) / 2;
                const struct t_chunk *k = &old->chunks[mid];
                if (k->off == off)
                        return k->len == len ? k : NULL;
                if (k->off < off)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return NULL;
}

static void run_run(struct pool_task *pt) {
        struct run_task *t = (struct run_task *)pt;
        struct capture *c = t->c;
        if (!atomic_load(&c->err)) {
                struct blk_obj v[RUN_MAX];
                size_t o = 0, k = 0;
                int r = 0;
                for (size_t i = 0; i < t->n && r >= 0; i++) {
                        struct t_chunk *slot = t->slots[i];
                        const uint8_t *d = t->data + o;
                        o += slot->len;
                        store_sha256(d, slot->len, &slot->hash);
                        /* a chunk rewritten in place: maybe only its difference to the old one */
                        const struct t_chunk *prev = t->old ? old_chunk_at(t->old, slot->off, slot->len) : NULL;
                        if (prev && (r = txn_put_delta(c->txn, d, slot->len, &slot->hash, &prev->hash, c->op)) != 0)
                                continue;
                        v[k] = (struct blk_obj){ .data = d, .len = slot->len, .hash = slot->hash };
                        k++;
                }
                if (r >= 0 && k)
                        r = txn_put_run(c->txn, OBJ_CHUNK, v, k, true);
                if (r < 0)
                        cap_fail(c, r);
        }
        free(t);
        pool_budget_give(c->s->pool, RUN_CAP);
        task_done(c);
}

static void run_submit(struct capture *c, struct run_task **run) {
        struct run_task *t = *run;
        *run = NULL;
        if (!t)
                return;
        atomic_fetch_add(&c->pending, 1);
        pool_submit(c->s->pool, &t->task, true);
}

static int emit_chunk(struct capture *c, struct cnode *n, struct run_task **run, const uint8_t *data, uint64_t off,
                      size_t len, bool inline_ok) {
        struct t_chunk *slot = slot_new(n, off, (uint32_t)len);
        if (!slot)
                return -ENOMEM;
        if (inline_ok)
                return txn_put(c->txn, OBJ_CHUNK, data, len, NULL, &slot->hash);
        if (*run && ((*run)->len + len > BLOCK_TARGET || (*run)->n == RUN_MAX))
                run_submit(c, run);
        if (!*run) {
                pool_budget_take(c->s->pool, RUN_CAP);
                struct run_task *t = malloc(sizeof *t + RUN_CAP);
                if (!t) {
                        pool_budget_give(c->s->pool, RUN_CAP);
                        return -ENOMEM;
                }
                t->task.fn = run_run;
                t->c = c;
                t->old = c->o->fixed_chunk && !c->o->no_delta && n->old && n->old->type == T_REG ? n->old : NULL;
                t->n = t->len = 0;
                *run = t;
        }
        struct run_task *t = *run;
        memcpy(t->data + t->len, data, len);
        t->len += len;
        t->slots[t->n++] = slot;
        return 0;
}

static int open_beneath(int rootfd, const char *path, int flags) {
        struct open_how how = {
                .flags = (uint64_t)(flags | O_NOFOLLOW | O_CLOEXEC),
                .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
        };
        int fd = (int)syscall(SYS_openat2, rootfd, path, &how, sizeof how);
        if (fd < 0 && errno == ENOSYS)
                fd = openat(rootfd, path, flags | O_NOFOLLOW | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

static int read_region(struct capture *c, struct cnode *n, int fd, uint8_t *buf, size_t cap, uint64_t from,
                       uint64_t to, bool single) {
        size_t start = 0, end = 0;
        uint64_t pos = from; /* file offset of buf[start] */
        bool eof = false;
        struct run_task *run = NULL;
        int r = 0;
        while (!eof || start < end) {
                if (!eof && end - start < STORE_CHUNK_MAX) {
                        if (cap - end < STORE_CHUNK_MAX) {
                                memmove(buf, buf + start, end - start);
                                end -= start;
                                start = 0;
                        }
                        uint64_t want = MIN((uint64_t)(cap - end), to - (pos + (end - start)));
                        ssize_t k = want ? pread(fd, buf + end, (size_t)want, (off_t)(pos + (end - start))) : 0;
                        if (k < 0) {
                                if (errno == EINTR)
                                        continue;
                                r = store_fail(-errno, "%s: read error: %m", n->path);
                                break;
                        }
                        atomic_fetch_add(&c->bytes_read, (uint64_t)k);
                        end += (size_t)k;
                        if (k == 0 || pos + (end - start) >= to)
                                eof = true; /* a file that shrank while read ends early */
                        if (!eof && end - start < STORE_CHUNK_MAX)
                                continue;
                }
                if (start == end)
                        break;
                size_t cut = c->o->fixed_chunk ? fixed_cut(pos, end - start, c->o->fixed_chunk)
                                               : cdc_cut(buf + start, end - start, eof);
                r = emit_chunk(c, n, &run, buf + start, pos, cut, single);
                if (r < 0)
                        break;
                start += cut;
                pos += cut;
                if (atomic_load(&c->err))
                        break;
        }
        if (r < 0 && run) {
                free(run);
                pool_budget_give(c->s->pool, RUN_CAP);
                run = NULL;
        }
        run_submit(c, &run);
        return r;
}

static void file_run(struct pool_task *pt) {
        struct file_job *j = (struct file_job *)pt;
        struct capture *c = j->c;
        struct cnode *n = j->node;
        int r = 0;
        _cleanup_free_ uint8_t *buf = NULL;
        _cleanup_close_ int fd = -EBADF;
        if (atomic_load(&c->err))
                goto done;
        fd = open_beneath(c->rootfd, n->path, O_RDONLY | O_NOATIME);
        if (fd == -EPERM)
                fd = open_beneath(c->rootfd, n->path, O_RDONLY);
        if (fd == -ENOENT) { /* removed since the walk saw it (a capture of a running sandbox) */
                r = store_fail(-EAGAIN, "%s was removed while captured", n->path);
                goto done;
        }
        if (fd < 0) {
                r = store_fail(fd, "%s: cannot open: %s", n->path, strerror(-fd));
                goto done;
        }
        struct stat st;
        if (fstat(fd, &st) < 0) {
                r = store_fail(-errno, "%s: %m", n->path);
                goto done;
        }
        if (!S_ISREG(st.st_mode) || (uint64_t)st.st_ino != n->ino) {
                r = store_fail(-EAGAIN, "%s was replaced while captured", n->path);
                goto done;
        }
        uint64_t size = (uint64_t)st.st_size;
        if (size > STORE_MAX_FILE_SIZE) {
                r = store_fail(-EFBIG, "%s: %llu bytes is over the file size limit", n->path, (unsigned long long)size);
                goto done;
        }
        n->e.size = size;
        n->e.mode = st.st_mode & 07777;
        n->e.uid = st.st_uid;
        n->e.gid = st.st_gid;
        n->e.mtime_sec = st.st_mtim.tv_sec;
        n->e.mtime_nsec = (uint32_t)st.st_mtim.tv_nsec;
        /* small files need no 4 MiB window: malloc of that size is an mmap + page faults */
        size_t cap = size < READ_BUF - STORE_CHUNK_MAX ? (size_t)size + STORE_CHUNK_MAX : READ_BUF;
        buf = malloc(cap);
        if (!buf) {
                r = -ENOMEM;
                goto done;
        }
        bool sparse = (uint64_t)st.st_blocks * 512 < size;
        bool single = size <= STORE_CHUNK_MIN;
        uint64_t off = 0;
        while (off < size && r == 0 && !atomic_load(&c->err)) {
                uint64_t ds = off, de = size;
                if (sparse) {
                        off_t d = lseek(fd, (off_t)off, SEEK_DATA);
                        if (d < 0) {
                                if (errno == ENXIO)
                                        break; /* only a hole is left */
                                r = store_fail(-errno, "%s: cannot find data: %m", n->path);
                                break;
                        }
                        off_t h = lseek(fd, d, SEEK_HOLE);
                        if (h < 0) {
                                r = store_fail(-errno, "%s: cannot find holes: %m", n->path);
                                break;
                        }
                        ds = MIN((uint64_t)d, size);
                        de = MIN((uint64_t)h, size);
                        if (de <= ds)
                                break;
                }
                r = read_region(c, n, fd, buf, cap, ds, de, single);
                off = de;
        }
        if (r == 0) {
                struct stat st2;
                if (fstat(fd, &st2) < 0)
                        r = store_fail(-errno, "%s: %m", n->path);
                else if (st2.st_size != st.st_size || st2.st_mtim.tv_sec != st.st_mtim.tv_sec ||
                         st2.st_mtim.tv_nsec != st.st_mtim.tv_nsec || st2.st_ctim.tv_sec != st.st_ctim.tv_sec ||
                         st2.st_ctim.tv_nsec != st.st_ctim.tv_nsec)
                        n->cacheable = false; /* changed while read: whatever we got, read it again next time */
                else {
                        n->st = (struct scache_rec){ .ino = (uint64_t)st.st_ino, .ctime_sec = st.st_ctim.tv_sec,
                                                     .ctime_nsec = (uint32_t)st.st_ctim.tv_nsec,
                                                     .mtime_sec = st.st_mtim.tv_sec,
                                                     .mtime_nsec = (uint32_t)st.st_mtim.tv_nsec, .size = size };
                        n->cacheable = !scache_racy(st.st_ctim.tv_sec, (uint32_t)st.st_ctim.tv_nsec, c->start_ns);
                }
        }
        atomic_fetch_add(&c->files_read, 1);
done:
        if (r < 0)
                cap_fail(c, r);
        free(j);
        task_done(c);
}

/* ---- the walk ---- */

static int name_cmp(const void *a, const void *b) {
        const char *x = *(char *const *)a, *y = *(char *const *)b;
        return strcmp(x, y); /* bytewise: the canonical order */
}

static const struct t_entry *old_find(const struct tree *t, const char *name) {
        size_t lo = 0, hi = t->n;
        while (lo < hi) {
                size_t mid = (lo + hi) / 2;
                int k = strcmp(t->e[mid].name, name);
                if (k == 0)
                        return &t->e[mid];
                if (k < 0)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return NULL;
}

/* The order of paths in a canonical walk: component by component, bytewise. */
static int path_canon_cmp(const char *a, const char *b) {
        for (;; a++, b++) {
                unsigned char x = *a == '/' ? 0 : (unsigned char)*a, y = *b == '/' ? 0 : (unsigned char)*b;
                if (!*a || !*b || x != y)
                        return (*a ? x + 1 : 0) - (*b ? y + 1 : 0);
        }
}

static int link_lookup_locked(struct capture *c, struct cnode *n) {
        if (c->links_n * 2 >= c->links_cap) {
                size_t ncap = c->links_cap ? c->links_cap * 2 : 64;
                struct cnode **nl = calloc(ncap, sizeof *nl);
                if (!nl)
                        return -ENOMEM;
                for (size_t i = 0; i < c->links_cap; i++) {
                        struct cnode *x = c->links[i];
                        if (!x)
                                continue;
                        size_t j = (x->ino * 0x9e3779b97f4a7c15ull ^ x->dev) & (ncap - 1);
                        while (nl[j])
                                j = (j + 1) & (ncap - 1);
                        nl[j] = x;
                }
                free(c->links);
                c->links = nl;
                c->links_cap = ncap;
        }
        size_t j = (n->ino * 0x9e3779b97f4a7c15ull ^ n->dev) & (c->links_cap - 1);
        while (c->links[j]) {
                struct cnode *x = c->links[j];
                if (x->ino == n->ino && x->dev == n->dev) {
                        n->link_first = x;
                        if (x->link_count++ == 1)
                                c->link_groups++;
                        /* walks run in parallel: the group is named by its canonical first member */
                        if (path_canon_cmp(n->path, x->link_leader->path) < 0)
                                x->link_leader = n;
                        return 0;
                }
                j = (j + 1) & (c->links_cap - 1);
        }
        c->links[j] = n;
        n->link_count = 1;
        n->link_leader = n;
        c->links_n++;
        return 0;
}

static int link_lookup(struct capture *c, struct cnode *n) {
        pthread_mutex_lock(&c->mu);
        int r = link_lookup_locked(c, n);
        pthread_mutex_unlock(&c->mu);
        return r;
}

static char *path_join(const char *dir, const char *name) {
        char *p;
        if (asprintf(&p, "%s%s%s", dir, *dir ? "/" : "", name) < 0)
                return NULL;
        return p;
}

static void walk_submit(struct capture *c, struct cnode *dn);
static int walk_names(struct capture *c, struct cnode *dn, int dfd, unsigned depth, char **names, size_t n);

static int walk_entry(struct capture *c, struct cnode *dn, int dfd, struct cnode *n, unsigned depth) {
        struct stat st;
        if (fstatat(dfd, n->name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
                if (errno == ENOENT)
                        return 1; /* removed since readdir: as if it never was */
                return store_fail(-errno, "%s: %m", n->path);
        }
        atomic_fetch_add(&c->entries, 1);
        struct t_entry *e = &n->e;
        e->name = n->name;
        e->mode = st.st_mode & 07777;
        e->uid = st.st_uid;
        e->gid = st.st_gid;
        e->mtime_sec = st.st_mtim.tv_sec;
        e->mtime_nsec = (uint32_t)st.st_mtim.tv_nsec;
        n->dev = st.st_dev;
        n->ino = st.st_ino;
        switch (st.st_mode & S_IFMT) {
        case S_IFREG: e->type = T_REG; break;
        case S_IFDIR: e->type = T_DIR; break;
        case S_IFLNK: e->type = T_LNK; break;
        case S_IFCHR: e->type = T_CHR; break;
        case S_IFBLK: e->type = T_BLK; break;
        case S_IFIFO: e->type = T_FIFO; break;
        case S_IFSOCK: e->type = T_SOCK; break;
        default: return store_fail(-EBADMSG, "%s: unknown file type", n->path);
        }
        if (e->type == T_CHR || e->type == T_BLK) {
                e->major = major(st.st_rdev);
                e->minor = minor(st.st_rdev);
        }
        const struct t_entry *old = dn->old_tree.mem ? old_find(&dn->old_tree, n->name) : NULL;
        if (old && old->type != e->type)
                old = NULL;
        if (dn->merge)
                n->base = old_find(&dn->base_tree, n->name);
        n->old = old;
        n->st = (struct scache_rec){ .ino = (uint64_t)st.st_ino, .ctime_sec = st.st_ctim.tv_sec,
                                     .ctime_nsec = (uint32_t)st.st_ctim.tv_nsec, .mtime_sec = st.st_mtim.tv_sec,
                                     .mtime_nsec = (uint32_t)st.st_mtim.tv_nsec, .size = (uint64_t)st.st_size };
        n->cacheable = !scache_racy(st.st_ctim.tv_sec, (uint32_t)st.st_ctim.tv_nsec, c->start_ns);
        const struct scache_rec *cr = old && !(c->o && c->o->no_stat_cache) ? scache_find(c->cache, n->path) : NULL;
        bool unchanged = cr && cr->ino == n->st.ino && cr->ctime_sec == n->st.ctime_sec &&
                         cr->ctime_nsec == n->st.ctime_nsec && cr->mtime_sec == n->st.mtime_sec &&
                         cr->mtime_nsec == n->st.mtime_nsec && old->mtime_sec == e->mtime_sec &&
                         old->mtime_nsec == e->mtime_nsec && old->mode == e->mode && old->uid == e->uid &&
                         old->gid == e->gid && (e->type != T_REG || (cr->size == n->st.size && old->size == n->st.size));

        /* A change of content, owner, mode or xattrs changes ctime: unchanged entries keep
         * the parent's xattrs, target and chunk list without a syscall. A directory's mtime
         * moves with every name made, removed or renamed in it (and its stat here comes
         * before its listing): unchanged, it holds the names its old tree lists. */
        /* Over a base, a directory's tree is the merge of its names with the base's and its
         * xattrs may have gained an opaque mark: read both again (they hold little). */
        n->same_names = unchanged && e->type == T_DIR && !c->overlay;
        n->clean = unchanged && e->type != T_DIR && (e->type != T_REG || st.st_nlink == 1);
        if (unchanged && !(c->overlay && e->type == T_DIR)) {
                e->nxattr = old->nxattr;
                e->xattrs = old->xattrs;
        } else {
                char proc[64 + STORE_MAX_NAME];
                snprintf(proc, sizeof proc, "/proc/self/fd/%d/%s", dfd, n->name);
                int r = read_xattrs(-1, proc, n->path, e, &n->owned);
                if (r == -ENOENT)
                        return 1; /* removed (or renamed away) since the fstatat */
                if (r < 0)
                        return r;
        }
        switch (e->type) {
        case T_LNK:
                if (unchanged)
                        e->target = old->target;
                else {
                        char *t = malloc(STORE_MAX_TARGET + 2);
                        if (!t)
                                return -ENOMEM;
                        ssize_t k = readlinkat(dfd, n->name, t, STORE_MAX_TARGET + 1);
                        if (k < 0 && errno == ENOENT) {
                                free(t);
                                return 1; /* removed since the fstatat */
                        }
                        if (k < 0 || k > (ssize_t)STORE_MAX_TARGET || k == 0) {
                                int r = k < 0 ? -errno : -E2BIG;
                                free(t);
                                return store_fail(r, "%s: cannot read the symlink (or its target is over %u bytes)",
                                                  n->path, STORE_MAX_TARGET);
                        }
                        t[k] = 0;
                        e->target = n->target = t;
                }
                break;
        case T_REG:
                atomic_fetch_add(&c->files, 1);
                atomic_fetch_add(&c->bytes_logical, (uint64_t)st.st_size);
                if (st.st_nlink > 1) {
                        int r = link_lookup(c, n);
                        if (r < 0)
                                return r;
                        if (n->link_first)
                                break; /* data comes from the first name */
                }
                e->size = (uint64_t)st.st_size;
                if (e->size > STORE_MAX_FILE_SIZE)
                        return store_fail(-EFBIG, "%s: %llu bytes is over the file size limit", n->path,
                                          (unsigned long long)e->size);
                if (unchanged) {
                        e->nchunks = old->nchunks;
                        e->chunks = old->chunks;
                } else if (e->size > 0) {
                        struct file_job *j = calloc(1, sizeof *j);
                        if (!j)
                                return -ENOMEM;
                        j->task.fn = file_run;
                        j->c = c;
                        j->node = n;
                        n->cacheable = false; /* file_run decides */
                        atomic_fetch_add(&c->pending, 1);
                        /* a big changed file is the long pole of an incremental capture:
                         * start it before the rest of the walk */
                        if (e->size >= (1u << 20))
                                pool_submit_first(c->s->pool, &j->task);
                        else
                                pool_submit(c->s->pool, &j->task, false);
                }
                break;
        case T_DIR: {
                if (depth + 1 > STORE_MAX_DEPTH) /* the limit first: the path may outgrow the message */
                        return store_fail(-E2BIG, "nested deeper than %u directories (the store's limit): %s",
                                          STORE_MAX_DEPTH, n->path);
                n->depth = depth + 1;
                n->opaque = ovl_opaque(e);
                n->merge = n->base && n->base->type == T_DIR && !n->opaque;
                walk_submit(c, n); /* its own task: both cores walk */
                return 0;
        }
        default:
                break;
        }
        return 0;
}

static int walk_dir(struct capture *c, struct cnode *dn, int dfd, unsigned depth) {
        if (dn->old && !dn->old_tree.mem) {
                uint64_t br = 0;
                int r = tree_load_op(c->s, &dn->old->tree, c->op, &dn->old_tree, &br);
                if (r < 0)
                        return r;
        }
        if (dn->merge && !dn->base_tree.mem) {
                int r = tree_load_op(c->s, &dn->base->tree, c->op, &dn->base_tree, NULL);
                if (r < 0)
                        return r;
        }
        _cleanup_free_ char **names = NULL;
        size_t n = 0, cap = 0;
        int r = 0;
        if (dn->same_names && dn->old_tree.mem) {
                /* no listing needed: the old tree's names, sorted already */
                names = calloc(dn->old_tree.n ? dn->old_tree.n : 1, sizeof *names);
                if (!names)
                        return -ENOMEM;
                for (; n < dn->old_tree.n; n++)
                        if (!(names[n] = strdup(dn->old_tree.e[n].name))) {
                                for (size_t i = 0; i < n; i++)
                                        free(names[i]);
                                return -ENOMEM;
                        }
                return walk_names(c, dn, dfd, depth, names, n);
        }
        _cleanup_closedir_ DIR *d = NULL;
        if ((r = fdio_opendir(dfd, &d)) < 0)
                return r;
        struct dirent *de;
        errno = 0;
        while ((de = readdir(d))) {
                if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                        continue;
                if (n >= STORE_MAX_DIR_ENTRIES) {
                        r = store_fail(-E2BIG, "%s: more than %u entries in one directory", *dn->path ? dn->path : ".",
                                       STORE_MAX_DIR_ENTRIES);
                        break;
                }
                if (ARRAY_RESERVE(names, cap, n + 1, 32) < 0 || !(names[n] = strdup(de->d_name))) {
                        r = -ENOMEM;
                        break;
                }
                n++;
        }
        if (r == 0 && errno)
                r = store_fail(-errno, "%s: cannot read the directory: %m", *dn->path ? dn->path : ".");
        if (r < 0) {
                for (size_t i = 0; i < n; i++)
                        free(names[i]);
                return r;
        }
        if (n)
                qsort(names, n, sizeof *names, name_cmp);
        return walk_names(c, dn, dfd, depth, names, n);
}

/* Stats each of the sorted names (and frees them). */
static int walk_names(struct capture *c, struct cnode *dn, int dfd, unsigned depth, char **names, size_t n) {
        int r = 0;
        if (r == 0) {
                dn->kids = calloc(n ? n : 1, sizeof *dn->kids);
                if (!dn->kids)
                        r = -ENOMEM;
        }
        size_t i = 0;
        for (; r == 0 && i < n; i++) {
                struct cnode *k = &dn->kids[dn->nkids];
                k->name = TAKE_PTR(names[i]);
                k->path = path_join(dn->path, k->name);
                if (!k->path) {
                        free(k->name);
                        k->name = NULL;
                        r = -ENOMEM;
                        break;
                }
                dn->nkids++;
                /* the capture opens entries by their path beneath the root */
                if (strlen(k->path) >= PATH_MAX) {
                        r = store_fail(-ENAMETOOLONG, "a path longer than %u bytes (the store's limit): %s",
                                       PATH_MAX - 1, k->path);
                        break;
                }
                r = walk_entry(c, dn, dfd, k, depth);
                if (r == 1) { /* vanished: drop it */
                        dn->nkids--;
                        free(k->name);
                        free(k->path);
                        free(k->owned);
                        *k = (struct cnode){ 0 };
                        r = 0;
                }
                progress(c, "scan", false);
                if (atomic_load(&c->err))
                        break;
        }
        for (; i < n; i++)
                free(names[i]);
        return r;
}

struct walk_task {
        struct pool_task task;
        struct capture *c;
        struct cnode *dn;
};

/* Opens a directory the walk found, beneath the root and without following symlinks;
 * -EAGAIN if it is not the one that was stat'ed. */
static int open_dir_node(struct capture *c, struct cnode *dn) {
        int fd = open_beneath(c->rootfd, dn->path, O_RDONLY | O_DIRECTORY);
        if (fd < 0)
                return store_fail(fd, "%s: cannot open the directory: %s", dn->path, strerror(-fd));
        struct stat st;
        if (fstat(fd, &st) < 0 || (uint64_t)st.st_ino != dn->ino || (uint64_t)st.st_dev != dn->dev) {
                close(fd);
                return store_fail(-EAGAIN, "%s was replaced while captured", dn->path);
        }
        return fd;
}

static void walk_run(struct pool_task *pt) {
        struct walk_task *t = (struct walk_task *)pt;
        struct capture *c = t->c;
        if (!atomic_load(&c->err)) {
                int fd = open_dir_node(c, t->dn);
                int r = fd < 0 ? fd : walk_dir(c, t->dn, fd, t->dn->depth);
                if (fd >= 0)
                        close(fd);
                if (r < 0)
                        cap_fail(c, r);
        }
        free(t);
        task_done(c);
}

static void walk_submit(struct capture *c, struct cnode *dn) {
        struct walk_task *t = malloc(sizeof *t);
        if (!t) {
                cap_fail(c, -ENOMEM);
                return;
        }
        *t = (struct walk_task){ .task.fn = walk_run, .c = c, .dn = dn };
        atomic_fetch_add(&c->pending, 1);
        /* in the queue of file reads, in the order found: a changed big file is not kept
         * waiting behind the rest of the walk */
        pool_submit(c->s->pool, &t->task, false);
}

/* ---- building trees ---- */

static int flatten_chunks(struct cnode *n) {
        size_t total = 0;
        for (struct slot_block *b = n->slots; b; b = b->next)
                total += b->n;
        if (total > UINT32_MAX)
                return -E2BIG;
        struct t_chunk *v = calloc(total ? total : 1, sizeof *v);
        if (!v)
                return -ENOMEM;
        size_t k = total;
        for (struct slot_block *b = n->slots; b; b = b->next) {
                k -= b->n;
                memcpy(v + k, b->c, b->n * sizeof *v);
        }
        while (n->slots) {
                struct slot_block *b = n->slots;
                n->slots = b->next;
                free(b);
        }
        n->slots = (struct slot_block *)v; /* freed with the node */
        n->e.chunks = v;
        n->e.nchunks = (uint32_t)total;
        return 0;
}

/* Over a base, the layer's groups are named with the base's root too: a group of the base
 * whose leader the layer shadowed keeps its id for its other names, which must not join
 * a new group of the layer led by the same path. */
static uint64_t link_id(const struct capture *c, const char *path) {
        struct store_hash h;
        if (c->overlay) {
                _cleanup_free_ char *salted = NULL;
                char hex[STORE_HEX_LEN + 1];
                store_hash_to_hex(&c->brec.info.root, hex);
                if (asprintf(&salted, "%s/%s", hex, path) < 0)
                        return 1; /* a collision at worst joins two groups of one name: never reached in practice */
                store_sha256(salted, strlen(salted), &h);
        } else
                store_sha256(path, strlen(path), &h);
        uint64_t v = get_le64(h.b);
        return v ? v : 1;
}

/* Every file's chunk list in one array, before any tree is built: a hard link's data
 * comes from whichever name was read, which may sit in a later directory. */
static int flatten_all(struct cnode *dn) {
        for (size_t i = 0; i < dn->nkids; i++) {
                struct cnode *k = &dn->kids[i];
                int r = 0;
                if (k->e.type == T_REG && !k->link_first && k->slots)
                        r = flatten_chunks(k);
                else if (k->e.type == T_DIR)
                        r = flatten_all(k);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* The names of an upper directory merged with its base directory's, both sorted: the
 * upper's win (a whiteout stays, it hides the same name below the base too); what they
 * hide of the base is counted off the base's totals. */
static int merge_base(struct capture *c, struct cnode *dn, struct t_entry **es, size_t *n) {
        const struct tree *bt = &dn->base_tree;
        struct t_entry *out = calloc(*n + bt->n + 1, sizeof *out);
        if (!out)
                return -ENOMEM;
        size_t i = 0, j = 0, k = 0;
        int r = 0;
        while (r == 0 && (i < *n || j < bt->n)) {
                int cmp = i >= *n ? 1 : j >= bt->n ? -1 : strcmp((*es)[i].name, bt->e[j].name);
                if (cmp > 0) {
                        out[k++] = bt->e[j++];
                        continue;
                }
                if (cmp == 0) {
                        const struct cnode *kid = &dn->kids[i];
                        if (!kid->merge) /* else the directory below counts its own */
                                r = ovl_count(c->s, &bt->e[j], c->op, dn->depth + 1, &c->shadow_files, &c->shadow_bytes);
                        j++;
                }
                out[k++] = (*es)[i++];
        }
        if (r < 0) {
                free(out);
                return r;
        }
        free(*es);
        *es = out;
        *n = k;
        return 0;
}

/* Post-order: children first, then this directory's tree. */
static int build(struct capture *c, struct cnode *dn, struct scache_builder *sc) {
        _cleanup_free_ struct t_entry *es = calloc(dn->nkids ? dn->nkids : 1, sizeof *es);
        if (!es)
                return -ENOMEM;
        /* Nothing changed below a directory that holds the same names, each unchanged:
         * its tree is the parent's, without encoding and hashing it again. */
        bool clean = dn->same_names && dn->old_tree.mem && dn->nkids == dn->old_tree.n;
        for (size_t i = 0; i < dn->nkids; i++) {
                struct cnode *k = &dn->kids[i];
                if (k->e.type == T_DIR) {
                        int r = build(c, k, sc);
                        if (r < 0)
                                return r;
                }
                clean = clean && k->clean;
        }
        for (size_t i = 0; i < dn->nkids; i++) {
                struct cnode *k = &dn->kids[i];
                if (k->e.type == T_REG && (k->link_first || k->link_count > 1)) {
                        struct cnode *f = k->link_first ? k->link_first : k;
                        if (f->link_count > 1) {
                                k->e.link = link_id(c, f->link_leader->path);
                                if (k->link_first) {
                                        /* every name carries the data: a tree stands alone */
                                        k->e.size = f->e.size;
                                        k->e.chunks = f->e.chunks;
                                        k->e.nchunks = f->e.nchunks;
                                        k->e.mode = f->e.mode;
                                        k->e.uid = f->e.uid;
                                        k->e.gid = f->e.gid;
                                        k->e.mtime_sec = f->e.mtime_sec;
                                        k->e.mtime_nsec = f->e.mtime_nsec;
                                        k->e.nxattr = f->e.nxattr;
                                        k->e.xattrs = f->e.xattrs;
                                }
                        }
                }
                es[i] = k->e;
                if (k->e.type == T_DIR && k->base && !k->opaque && (k->base->type != T_DIR || ovl_opaque(k->base))) {
                        /* overlayfs stops looking below a non-directory or an opaque
                         * directory of the base: the merged directory hides what lies under
                         * the base, so it is opaque too */
                        int nx = ovl_with_opaque(&k->e, &k->xa_merged);
                        if (nx < 0)
                                return nx;
                        es[i].xattrs = k->xa_merged;
                        es[i].nxattr = (uint32_t)nx;
                }
                if (k->cacheable && sc) {
                        int r = scache_add(sc, k->path, &k->st);
                        if (r < 0)
                                return r;
                }
        }
        if (clean) {
                dn->e.tree = dn->old->tree;
                dn->clean = true;
                return 0;
        }
        size_t n_es = dn->nkids;
        if (dn->merge) {
                int r = merge_base(c, dn, &es, &n_es);
                if (r < 0)
                        return r;
        }
        _cleanup_buf_ struct buf b = BUF_INIT(STORE_MAX_OBJECT);
        int r = tree_encode(es, n_es, &b);
        if (r < 0)
                return store_fail(r, "%s: cannot encode the directory: %s", *dn->path ? dn->path : ".",
                                  r == -E2BIG ? "too large" : strerror(-r));
        struct store_hash h;
        store_sha256(b.data, b.len, &h);
        if (dn->old && store_hash_eq(&h, &dn->old->tree))
                dn->e.tree = h; /* unchanged directory: the parent's tree object, already stored */
        else {
                r = txn_put(c->txn, OBJ_TREE, b.data, b.len, &h, &dn->e.tree);
                if (r < 0)
                        return r;
        }
        return 0;
}

static void node_free(struct cnode *n) {
        for (size_t i = 0; i < n->nkids; i++)
                node_free(&n->kids[i]);
        free(n->kids);
        if (n->e.type == T_REG) {
                if (n->slots && !n->e.chunks) {
                        while (n->slots) {
                                struct slot_block *b = n->slots;
                                n->slots = b->next;
                                free(b);
                        }
                } else
                        free(n->slots);
        }
        free(n->owned);
        free(n->xa_merged);
        tree_free(&n->base_tree);
        free(n->target);
        free(n->name);
        free(n->path);
        tree_free(&n->old_tree);
}

int store_capture(struct store *s, const char *dir, const struct store_hash *parent,
                  const struct store_capture_opts *o, struct store_hash *ret_snapshot) {
        struct store_capture_opts def = { 0 };
        if (!o)
                o = &def;
        if ((o->session && strlen(o->session) > STORE_MAX_SESSION) || (o->label && strlen(o->label) > STORE_MAX_LABEL))
                return store_fail(-E2BIG, "session id or label too long (limits %u and %u bytes)", STORE_MAX_SESSION,
                                  STORE_MAX_LABEL);
        if ((unsigned)o->reason >= _STORE_REASON_MAX)
                return store_fail(-EINVAL, "unknown snapshot reason %d", (int)o->reason);
        if (fixed_chunk_check(o->fixed_chunk) < 0)
                return store_fail(-EINVAL, "fixed chunk size %u is not a power of two from %u to %u bytes",
                                  o->fixed_chunk, STORE_FIXED_CHUNK_MIN, STORE_FIXED_CHUNK_MAX);
        struct capture c = { .s = s, .rootfd = -EBADF, .o = o, .start_ns = store_now_ns(), .op = store_op_id(),
                             .caller = pthread_self() };
        pthread_mutex_init(&c.mu, NULL);
        struct cnode root = { .path = (char *)"" };
        struct snap_record prec = { 0 };
        struct store_hash pins[3];
        size_t npins = 0;
        struct stat st;
        int r;

        c.rootfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (c.rootfd < 0) {
                r = store_fail(-errno, "cannot open %s: %m", dir);
                goto out;
        }
        if (fstat(c.rootfd, &st) < 0) {
                r = store_fail(-errno, "%s: %m", dir);
                goto out;
        }
        c.root_dev = st.st_dev;
        /* the stat cache's key: the directory, or the one dir is a frozen copy of */
        uint64_t key_dev = o->copy_ns ? o->cache_dev : (uint64_t)st.st_dev;
        uint64_t key_ino = o->copy_ns ? o->cache_ino : (uint64_t)st.st_ino;
        if (o->copy_ns)
                c.start_ns = o->copy_ns;
        if (parent) {
                pins[npins++] = *parent;
                r = snap_load(s, parent, &prec);
                if (r < 0) {
                        if (r == -ENOENT) {
                                char hex[STORE_HEX_LEN + 1];
                                store_hash_to_hex(parent, hex);
                                r = store_fail(r, "parent snapshot %s not found", hex);
                        }
                        goto out;
                }
        }
        if (o->memory)
                pins[npins++] = *o->memory;
        if (o->base) {
                pins[npins++] = *o->base;
                r = snap_load(s, o->base, &c.brec);
                if (r < 0) {
                        if (r == -ENOENT) {
                                char hex[STORE_HEX_LEN + 1];
                                store_hash_to_hex(o->base, hex);
                                r = store_fail(r, "base snapshot %s not found", hex);
                        }
                        goto out;
                }
                c.overlay = true;
        }
        r = txn_begin(s, pins, npins, &c.txn);
        if (r < 0)
                goto out;
        if (o->memory) {
                r = obj_exists(s, o->memory, true);
                if (r <= 0) {
                        char hex[STORE_HEX_LEN + 1];
                        store_hash_to_hex(o->memory, hex);
                        r = store_fail(r < 0 ? r : -ENOENT, "memory image %s not found", hex);
                        goto out;
                }
                if ((r = txn_hit(c.txn, o->memory)) < 0)
                        goto out;
        }
        if (parent) {
                r = scache_load(s, parent, key_dev, key_ino, o->fixed_chunk, &c.cache);
                if (r < 0)
                        c.cache = NULL; /* an unreadable cache only costs reading everything */
                root.old = &prec.root;
        }

        /* the root itself: in the stat cache as "" */
        root.st = (struct scache_rec){ .ino = (uint64_t)st.st_ino, .ctime_sec = st.st_ctim.tv_sec,
                                       .ctime_nsec = (uint32_t)st.st_ctim.tv_nsec, .mtime_sec = st.st_mtim.tv_sec,
                                       .mtime_nsec = (uint32_t)st.st_mtim.tv_nsec, .size = (uint64_t)st.st_size };
        root.cacheable = !scache_racy(st.st_ctim.tv_sec, (uint32_t)st.st_ctim.tv_nsec, c.start_ns);
        if (parent && !o->no_stat_cache) {
                const struct scache_rec *cr = scache_find(c.cache, "");
                root.same_names = !c.overlay && cr && cr->ino == root.st.ino && cr->ctime_sec == root.st.ctime_sec &&
                                  cr->ctime_nsec == root.st.ctime_nsec && cr->mtime_sec == root.st.mtime_sec &&
                                  cr->mtime_nsec == root.st.mtime_nsec;
        }
        root.e = (struct t_entry){ .name = "", .type = T_DIR, .mode = st.st_mode & 07777, .uid = st.st_uid,
                                   .gid = st.st_gid, .mtime_sec = st.st_mtim.tv_sec,
                                   .mtime_nsec = (uint32_t)st.st_mtim.tv_nsec };
        r = read_xattrs(c.rootfd, NULL, dir, &root.e, &root.owned);
        if (r < 0)
                goto out;
        if (c.overlay) {
                root.base = &c.brec.root;
                root.opaque = ovl_opaque(&root.e);
                root.merge = !root.opaque;
                if (root.opaque && (r = ovl_count(s, root.base, c.op, 0, &c.shadow_files, &c.shadow_bytes)) < 0)
                        goto out;
        }
        r = walk_dir(&c, &root, c.rootfd, 0);
        if (r < 0)
                cap_fail(&c, r);
        while (!pool_wait(s->pool, &c.pending, 100))
                progress(&c, "read", false);
        progress(&c, "read", true);
        r = atomic_load(&c.err);
        if (r < 0) {
                store_set_detail(c.errmsg);
                goto out;
        }
        struct scache_builder sc = { .b = BUF_INIT(0), .fixed_chunk = o->fixed_chunk };
        r = flatten_all(&root);
        if (r == 0)
                r = build(&c, &root, &sc);
        if (r == 0 && root.cacheable)
                r = scache_add(&sc, "", &root.st);
        if (r < 0) {
                buf_free(&sc.b);
                goto out;
        }
        struct snap_record rec = { .root = root.e };
        rec.root.name = "";
        if (root.merge && ovl_opaque(root.base)) {
                int nx = ovl_with_opaque(&root.e, &root.xa_merged);
                if (nx < 0) {
                        r = nx;
                        buf_free(&sc.b);
                        goto out;
                }
                rec.root.xattrs = root.xa_merged;
                rec.root.nxattr = (uint32_t)nx;
        }
        rec.info.root = root.e.tree;
        rec.info.has_parent = parent != NULL;
        if (parent)
                rec.info.parent = *parent;
        rec.info.has_memory = o->memory != NULL;
        if (o->memory)
                rec.info.memory = *o->memory;
        rec.info.time_ns = c.start_ns;
        rec.info.reason = o->reason;
        snprintf(rec.info.session, sizeof rec.info.session, "%s", o->session ? o->session : "");
        snprintf(rec.info.label, sizeof rec.info.label, "%s", o->label ? o->label : "");
        rec.info.files = atomic_load(&c.files);
        rec.info.bytes_logical = atomic_load(&c.bytes_logical);
        if (c.overlay) {
                rec.info.files += c.brec.info.files - MIN(c.shadow_files, c.brec.info.files);
                rec.info.bytes_logical += c.brec.info.bytes_logical - MIN(c.shadow_bytes, c.brec.info.bytes_logical);
        }
        progress(&c, "commit", true);
        struct store_hash h;
        r = txn_commit(c.txn, &rec, o->stats, &h);
        if (r == 0) {
                /* A cache is an optimization; failing to save one fails nothing. */
                (void)scache_save(s, &h, key_dev, key_ino, &sc);
                *ret_snapshot = h;
        }
        buf_free(&sc.b);
        if (o->stats) {
                o->stats->entries += atomic_load(&c.entries);
                o->stats->files += atomic_load(&c.files);
                o->stats->files_read += atomic_load(&c.files_read);
                o->stats->bytes_read += atomic_load(&c.bytes_read);
                o->stats->bytes_logical += atomic_load(&c.bytes_logical);
                o->stats->link_groups += c.link_groups;
        }
        goto done;
out:
        if (o->stats && c.txn) {
                txn_stats(c.txn, o->stats);
                o->stats->bytes_read += atomic_load(&c.bytes_read);
        }
done:
        /* tasks may still run if the walk failed early */
        pool_wait(s->pool, &c.pending, 0);
        store_op_end(s, c.op);
        txn_free(c.txn);
        root.path = NULL;
        node_free(&root);
        snap_record_free(&prec);
        snap_record_free(&c.brec);
        scache_free(c.cache);
        free(c.links);
        safe_close(c.rootfd);
        pthread_mutex_destroy(&c.mu);
        return r;
}
