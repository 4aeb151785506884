/* Pack files: where objects live. A writer (a capture, a memory image, a GC rewrite) fills
 * blocks of objects into a temp pack, seals it with a sorted index and a checksummed
 * trailer, fsyncs it and renames it into packs/; readers find objects through the indexes
 * of every loaded pack. One file per few thousand objects instead of one per object: the
 * file system's inode allocation no longer dominates a capture, and small objects are
 * compressed together. */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/uio.h>

#include "common/fdio.h"
#include "store/store-internal.h"

#define PACK_MAX_OPEN 128u           /* packs with an open fd before idle ones are closed */
#define SYNC_STEP (16u << 20)        /* start writeback every this many bytes written */

static ssize_t pread_full(int fd, void *buf, size_t n, uint64_t off) {
        size_t done = 0;
        while (done < n) {
                ssize_t k = pread(fd, (char *)buf + done, n - done, (off_t)(off + done));
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (k == 0)
                        break;
                done += (size_t)k;
        }
        return (ssize_t)done;
}

static int pwrite_full(int fd, const void *buf, size_t n, uint64_t off) {
        size_t done = 0;
        while (done < n) {
                ssize_t k = pwrite(fd, (const char *)buf + done, n - done, (off_t)(off + done));
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                done += (size_t)k;
        }
        return 0;
}

/* ---- block headers ---- */

struct blk_hdr {
        uint8_t codec;
        uint16_t nobj;
        uint32_t plain_len, stored_len;
        uint64_t size; /* header + table + payload */
};

static int blk_hdr_parse(const uint8_t *p, struct blk_hdr *ret) {
        if (memcmp(p, BLOCK_MAGIC, 4))
                return store_fail(-EBADMSG, "bad block magic");
        struct blk_hdr h = { .codec = p[4], .nobj = get_le16(p + 6), .plain_len = get_le32(p + 8),
                             .stored_len = get_le32(p + 12) };
        if (h.codec > BLOCK_DELTA || p[5])
                return store_fail(-EBADMSG, "invalid block codec");
        if (h.nobj == 0 || h.nobj > BLOCK_MAX_OBJECTS)
                return store_fail(-EBADMSG, "block claims %u objects (limit %u)", h.nobj, BLOCK_MAX_OBJECTS);
        if (h.plain_len > STORE_MAX_OBJECT || h.stored_len > z_bound(STORE_MAX_OBJECT))
                return store_fail(-EBADMSG, "block claims %u bytes (limit %u)", h.plain_len, STORE_MAX_OBJECT);
        if (h.codec == BLOCK_RAW && h.stored_len != h.plain_len)
                return store_fail(-EBADMSG, "raw block with differing lengths");
        if (h.codec == BLOCK_DELTA && (h.nobj != 1 || h.stored_len <= DELTA_HEAD))
                return store_fail(-EBADMSG, "delta block with %u objects or no frame", h.nobj);
        h.size = BLOCK_HEADER + (uint64_t)h.nobj * BLOCK_OBJ + h.stored_len;
        *ret = h;
        return 0;
}

/* ---- loading packs ---- */

static int ent_cmp(const void *a, const void *b) {
        return memcmp(((const struct pack_ent *)a)->hash.b, ((const struct pack_ent *)b)->hash.b, STORE_HASH_LEN);
}

static void pack_fanout(struct pack *p) {
        size_t j = 0;
        for (unsigned b = 0; b < 256; b++) {
                p->fan[b] = (uint32_t)j;
                while (j < p->n && p->e[j].hash.b[0] == b)
                        j++;
        }
        p->fan[256] = (uint32_t)p->n;
}

static void pack_destroy(struct pack *p) {
        if (p->fd >= 0)
                close(p->fd);
        free(p->e);
        free(p->damage);
        pthread_mutex_destroy(&p->mu);
        free(p);
}

void pack_put(struct pack *p) {
        if (p && atomic_fetch_sub(&p->refs, 1) == 1)
                pack_destroy(p);
}

static int idx_decode(const uint8_t *idx, size_t n, uint64_t data_end, uint8_t version, struct pack_ent *out) {
        /* only packs of the delta version may flag deltas */
        uint64_t reserved = (UINT64_C(0xff) << 48) & ~(version == PACK_VERSION_DELTA ? IDX_DELTA : 0);
        for (size_t i = 0; i < n; i++) {
                const uint8_t *q = idx + i * PACK_IDX_ENTRY;
                struct pack_ent *e = &out[i];
                memcpy(e->hash.b, q, STORE_HASH_LEN);
                uint64_t bk = get_le64(q + 32);
                e->kind = (uint8_t)(bk >> 56);
                e->block = bk & ((UINT64_C(1) << 48) - 1);
                e->delta = (bk & IDX_DELTA) != 0;
                e->off = get_le32(q + 40);
                e->len = get_le32(q + 44);
                if (bk & reserved || e->kind >= _OBJ_KIND_MAX)
                        return store_fail(-EBADMSG, "index entry %zu: reserved bits set", i);
                if (e->block < PACK_HEADER || e->block + BLOCK_HEADER > data_end)
                        return store_fail(-EBADMSG, "index entry %zu points outside the blocks", i);
                if (e->len > STORE_MAX_OBJECT || (uint64_t)e->off + e->len > STORE_MAX_OBJECT)
                        return store_fail(-EBADMSG, "index entry %zu claims %u bytes (limit %u)", i, e->len,
                                          STORE_MAX_OBJECT);
                if (i && memcmp(out[i - 1].hash.b, e->hash.b, STORE_HASH_LEN) >= 0)
                        return store_fail(-EBADMSG, "index entries out of order at %zu", i);
        }
        return 0;
}

/* Reads and checks the trailer (of the header's version) and index. */
static int pack_load_index(int fd, uint64_t size, uint8_t version, struct pack *p) {
        if (size < PACK_HEADER + PACK_TRAILER)
                return store_fail(-EBADMSG, "no trailer (%llu bytes): torn or truncated", (unsigned long long)size);
        uint8_t t[PACK_TRAILER];
        ssize_t k = pread_full(fd, t, sizeof t, size - PACK_TRAILER);
        if (k != (ssize_t)sizeof t)
                return store_fail(k < 0 ? (int)k : -EIO, "cannot read the trailer");
        if (memcmp(t, PACK_TRAILER_MAGIC, 4) || memcmp(t + 56, PACK_END_MAGIC, 8))
                return store_fail(-EBADMSG, "no trailer at the end: torn or truncated");
        if (t[4] != version || t[5] || t[6] || t[7] || get_le32(t + 20))
                return store_fail(-EBADMSG, "trailer of an unsupported version");
        uint64_t idx_off = get_le64(t + 8);
        uint32_t n = get_le32(t + 16);
        if (n > PACK_MAX_OBJECTS)
                return store_fail(-EBADMSG, "trailer claims %u objects (limit %u)", n, PACK_MAX_OBJECTS);
        if (idx_off < PACK_HEADER || idx_off + (uint64_t)n * PACK_IDX_ENTRY + PACK_TRAILER != size)
                return store_fail(-EBADMSG, "trailer does not match the file size");
        size_t ilen = (size_t)n * PACK_IDX_ENTRY;
        _cleanup_free_ uint8_t *idx = malloc(ilen ? ilen : 1);
        if (!idx)
                return -ENOMEM;
        k = pread_full(fd, idx, ilen, idx_off);
        if (k != (ssize_t)ilen)
                return store_fail(k < 0 ? (int)k : -EIO, "cannot read the index");
        struct store_hash sum;
        store_sha256(idx, ilen, &sum);
        if (memcmp(sum.b, t + 24, STORE_HASH_LEN))
                return store_fail(-EBADMSG, "the index does not match its checksum");
        struct pack_ent *e = calloc(n ? n : 1, sizeof *e);
        if (!e)
                return -ENOMEM;
        int r = idx_decode(idx, n, idx_off, version, e);
        if (r < 0) {
                free(e);
                return r;
        }
        p->e = e;
        p->n = n;
        p->data_end = idx_off;
        return 0;
}

struct scan {
        struct pack_ent *e;
        size_t n, cap;
};

/* Rebuilds the index of a damaged pack from its blocks: every object is decompressed and
 * hashed again, up to the first block that does not parse or decode. */
static int pack_rebuild(int fd, uint64_t size, struct pack *p) {
        struct scan sc = { 0 };
        uint64_t off = PACK_HEADER;
        int r = 0;
        _cleanup_free_ uint8_t *tab = malloc(BLOCK_MAX_OBJECTS * BLOCK_OBJ);
        if (!tab)
                return -ENOMEM;
        while (off + BLOCK_HEADER <= size) {
                uint8_t hb[BLOCK_HEADER];
                struct blk_hdr h;
                if (pread_full(fd, hb, sizeof hb, off) != (ssize_t)sizeof hb || blk_hdr_parse(hb, &h) < 0 ||
                    off + h.size > size)
                        break;
                size_t tl = (size_t)h.nobj * BLOCK_OBJ;
                if (pread_full(fd, tab, tl, off + BLOCK_HEADER) != (ssize_t)tl)
                        break;
                uint64_t sum = 0;
                bool ok = true;
                for (unsigned i = 0; i < h.nobj; i++) {
                        sum += get_le32(tab + i * BLOCK_OBJ);
                        ok = ok && tab[i * BLOCK_OBJ + 4] < _OBJ_KIND_MAX;
                }
                if (!ok || sum != h.plain_len || (h.codec == BLOCK_DELTA && tab[4] != OBJ_CHUNK))
                        break;
                uint8_t *stored = malloc(h.stored_len ? h.stored_len : 1);
                uint8_t *plain = h.codec != BLOCK_RAW ? malloc(h.plain_len ? h.plain_len : 1) : stored;
                if (!stored || !plain) {
                        free(stored);
                        if (plain != stored)
                                free(plain);
                        r = -ENOMEM;
                        break;
                }
                ok = pread_full(fd, stored, h.stored_len, off + BLOCK_HEADER + tl) == (ssize_t)h.stored_len;
                /* a delta's plain bytes need its base, maybe in another pack: its frame must
                 * decode, and its hash is the one it records (checked on every read) */
                if (ok && h.codec == BLOCK_DELTA)
                        ok = z_decompress(stored + DELTA_HEAD, h.stored_len - DELTA_HEAD, plain, h.plain_len) == 0;
                else if (ok && h.codec == BLOCK_ZSTD)
                        ok = z_decompress(stored, h.stored_len, plain, h.plain_len) == 0;
                uint32_t o = 0;
                for (unsigned i = 0; ok && i < h.nobj; i++) {
                        uint32_t len = get_le32(tab + i * BLOCK_OBJ);
                        if (sc.n >= PACK_MAX_OBJECTS || ARRAY_RESERVE(sc.e, sc.cap, sc.n + 1, 256) < 0) {
                                ok = false;
                                break;
                        }
                        struct pack_ent *e = &sc.e[sc.n++];
                        if (h.codec == BLOCK_DELTA)
                                memcpy(e->hash.b, stored + STORE_HASH_LEN, STORE_HASH_LEN);
                        else
                                store_sha256(plain + o, len, &e->hash);
                        e->delta = h.codec == BLOCK_DELTA;
                        e->block = off;
                        e->off = o;
                        e->len = len;
                        e->kind = tab[i * BLOCK_OBJ + 4];
                        o += len;
                }
                if (plain != stored)
                        free(plain);
                free(stored);
                if (!ok)
                        break;
                off += h.size;
        }
        if (r < 0) {
                free(sc.e);
                return r;
        }
        if (sc.n)
                qsort(sc.e, sc.n, sizeof *sc.e, ent_cmp);
        size_t w = 0;
        for (size_t i = 0; i < sc.n; i++)
                if (!w || memcmp(sc.e[w - 1].hash.b, sc.e[i].hash.b, STORE_HASH_LEN))
                        sc.e[w++] = sc.e[i];
        p->e = sc.e;
        p->n = w;
        p->data_end = off;
        return 0;
}

static bool pack_name_valid(const char *n) {
        return strlen(n) == 21 && strspn(n, "0123456789abcdef") == 16 && !strcmp(n + 16, ".pack");
}

/* Loads packs/name. -EMEDIUMTYPE: not one of ours (a foreign file, or a pack version we
 * don't read), left alone. A damaged pack loads with its rebuilt index and p->damage set. */
static int pack_load(struct store *s, const char *name, struct pack **ret) {
        _cleanup_close_ int fd = openat(s->packfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
                return -errno;
        struct stat st;
        if (fstat(fd, &st) < 0)
                return -errno;
        if (!S_ISREG(st.st_mode))
                return store_fail(-EMEDIUMTYPE, "not a regular file");
        if ((uint64_t)st.st_size > PACK_MAX_SIZE)
                return store_fail(-EMEDIUMTYPE, "larger than any pack (%lld bytes)", (long long)st.st_size);
        uint8_t hb[PACK_HEADER];
        if (pread_full(fd, hb, sizeof hb, 0) != (ssize_t)sizeof hb || memcmp(hb, PACK_MAGIC, 4))
                return store_fail(-EMEDIUMTYPE, "not a pack (bad magic)");
        if (hb[4] != PACK_VERSION && hb[4] != PACK_VERSION_DELTA)
                return store_fail(-EMEDIUMTYPE, "pack format version %u is not supported", hb[4]);
        struct pack *p = calloc(1, sizeof *p);
        if (!p)
                return -ENOMEM;
        snprintf(p->name, sizeof p->name, "%s", name);
        p->id = strtoull(name, NULL, 16);
        p->size = (uint64_t)st.st_size;
        p->ino = (uint64_t)st.st_ino;
        p->fd = -1;
        pthread_mutex_init(&p->mu, NULL);
        atomic_init(&p->refs, 1);
        int r = pack_load_index(fd, p->size, hb[4], p);
        if (r == -EBADMSG || r == -EIO) {
                char why[512];
                snprintf(why, sizeof why, "%s", store_error_detail());
                r = pack_rebuild(fd, p->size, p);
                if (r == 0) {
                        if (asprintf(&p->damage, "%s; index rebuilt from the blocks: %zu objects in %llu of %llu bytes", why,
                                     p->n, (unsigned long long)p->data_end, (unsigned long long)p->size) < 0)
                                p->damage = NULL;
                        if (!p->damage)
                                r = -ENOMEM;
                }
        }
        if (r < 0) {
                pack_destroy(p);
                return r;
        }
        pack_fanout(p);
        *ret = p;
        return 0;
}

/* ---- the handle's list of packs ---- */

static int packset_add_locked(struct packset *ps, struct pack *p) {
        if (ARRAY_RESERVE(ps->v, ps->cap, ps->n + 1, 16) < 0)
                return -ENOMEM;
        ps->v[ps->n++] = p;
        return 0;
}

/* Closes the fds of packs no reader holds, when too many are open. Write lock held. */
static void packset_trim_locked(struct packset *ps) {
        if (atomic_load(&ps->nopen) <= PACK_MAX_OPEN)
                return;
        for (size_t i = 0; i < ps->n && atomic_load(&ps->nopen) > PACK_MAX_OPEN / 2; i++) {
                struct pack *p = ps->v[i];
                if (atomic_load(&p->refs) != 1)
                        continue;
                pthread_mutex_lock(&p->mu);
                if (p->fd >= 0) {
                        close(p->fd);
                        p->fd = -1;
                        atomic_fetch_sub(&ps->nopen, 1);
                }
                pthread_mutex_unlock(&p->mu);
        }
}

static void packset_drop_locked(struct packset *ps, size_t i) {
        struct pack *p = ps->v[i];
        pthread_mutex_lock(&p->mu);
        if (p->fd >= 0)
                atomic_fetch_sub(&ps->nopen, 1);
        pthread_mutex_unlock(&p->mu);
        ps->v[i] = ps->v[--ps->n];
        pack_put(p);
}

static int name_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int packs_refresh(struct store *s, bool recheck, void (*foreign)(void *ud, const char *name, const char *why),
                  void *ud) {
        struct packset *ps = &s->packs;
        struct stat dst;
        if (fstat(s->packfd, &dst) < 0)
                return store_fail(-errno, "cannot read packs/: %m");
        DIR *d;
        int r = fdio_opendir(s->packfd, &d);
        if (r < 0)
                return store_fail(r, "cannot read packs/: %s", strerror(-r));
        /* the names first, then one pass under the write lock */
        char **names = NULL;
        size_t n = 0, cap = 0;
        struct dirent *de;
        while ((de = readdir(d))) {
                if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
                    !strncmp(de->d_name, PACK_TEMP_PREFIX, strlen(PACK_TEMP_PREFIX)))
                        continue; /* temp packs: being written, or left by a crash (for gc) */
                if (!pack_name_valid(de->d_name)) {
                        if (foreign)
                                foreign(ud, de->d_name, "not named like a pack");
                        continue;
                }
                if (ARRAY_RESERVE(names, cap, n + 1, 64) < 0 || !(names[n] = strdup(de->d_name))) {
                        r = -ENOMEM;
                        break;
                }
                n++;
        }
        closedir(d);
        if (r == 0 && n)
                qsort(names, n, sizeof *names, name_cmp);
        if (r == 0) {
                pthread_rwlock_wrlock(&ps->lk);
                ps->seen_mtime = dst.st_mtim;
                /* drop packs that are gone (or changed, on recheck) */
                for (size_t i = ps->n; i-- > 0;) {
                        struct pack *p = ps->v[i];
                        const char *key = p->name;
                        bool keep = n && bsearch(&key, names, n, sizeof *names, name_cmp);
                        struct stat st;
                        if (keep && recheck &&
                            (fstatat(s->packfd, p->name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
                             (uint64_t)st.st_size != p->size || (uint64_t)st.st_ino != p->ino))
                                keep = false;
                        if (!keep)
                                packset_drop_locked(ps, i);
                }
                for (size_t j = 0; j < n && r == 0; j++) {
                        bool have = false;
                        for (size_t i = 0; i < ps->n && !have; i++)
                                have = !strcmp(ps->v[i]->name, names[j]);
                        if (have)
                                continue;
                        struct pack *p;
                        int k = pack_load(s, names[j], &p);
                        if (k == -ENOENT)
                                continue; /* removed since readdir */
                        if (k == -EMEDIUMTYPE) {
                                if (foreign)
                                        foreign(ud, names[j], store_error_detail());
                                continue;
                        }
                        if (k < 0) {
                                char msg[512];
                                snprintf(msg, sizeof msg, "%s", store_error_detail());
                                r = store_fail(k, "pack %s: %s", names[j], msg);
                                break;
                        }
                        k = packset_add_locked(ps, p);
                        if (k < 0) {
                                pack_put(p);
                                r = k;
                        }
                }
                packset_trim_locked(ps);
                pthread_rwlock_unlock(&ps->lk);
        }
        for (size_t j = 0; j < n; j++)
                free(names[j]);
        free(names);
        return r;
}

/* Refreshes when packs/ changed since we last looked (a cheap stat); other handles'
 * commits then become visible for dedup. Misses only cost a duplicate object. */
static void packs_maybe_refresh(struct store *s) {
        struct stat st;
        if (fstat(s->packfd, &st) < 0)
                return;
        pthread_rwlock_rdlock(&s->packs.lk);
        bool same = st.st_mtim.tv_sec == s->packs.seen_mtime.tv_sec && st.st_mtim.tv_nsec == s->packs.seen_mtime.tv_nsec;
        pthread_rwlock_unlock(&s->packs.lk);
        if (!same)
                (void)packs_refresh(s, false, NULL, NULL);
}

int packs_snapshot(struct store *s, bool refresh, struct pack ***ret, size_t *ret_n) {
        if (refresh) {
                int r = packs_refresh(s, false, NULL, NULL);
                if (r < 0)
                        return r;
        }
        pthread_rwlock_rdlock(&s->packs.lk);
        size_t n = s->packs.n;
        struct pack **v = calloc(n ? n : 1, sizeof *v);
        if (v)
                for (size_t i = 0; i < n; i++) {
                        v[i] = s->packs.v[i];
                        atomic_fetch_add(&v[i]->refs, 1);
                }
        pthread_rwlock_unlock(&s->packs.lk);
        if (!v)
                return -ENOMEM;
        *ret = v;
        *ret_n = n;
        return 0;
}

void packs_release(struct pack **v, size_t n) {
        for (size_t i = 0; i < n; i++)
                pack_put(v[i]);
        free(v);
}

static const struct pack_ent *pack_find(const struct pack *p, const struct store_hash *h) {
        size_t lo = p->fan[h->b[0]], hi = p->fan[h->b[0] + 1];
        while (lo < hi) {
                size_t mid = (lo + hi) / 2;
                int k = memcmp(p->e[mid].hash.b, h->b, STORE_HASH_LEN);
                if (k == 0)
                        return &p->e[mid];
                if (k < 0)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return NULL;
}

/* Finds h; *ret holds a reference. Intact packs are preferred over damaged ones. */
static bool packs_lookup(struct store *s, const struct store_hash *h, struct pack **ret, struct pack_ent *ret_e) {
        struct packset *ps = &s->packs;
        struct pack *best = NULL;
        const struct pack_ent *be = NULL;
        pthread_rwlock_rdlock(&ps->lk);
        /* newest first: a fresh pack is the likeliest home of what we just wrote */
        for (size_t i = ps->n; i-- > 0;) {
                const struct pack_ent *e = pack_find(ps->v[i], h);
                if (!e)
                        continue;
                best = ps->v[i];
                be = e;
                if (!best->damage)
                        break;
        }
        if (best) {
                atomic_fetch_add(&best->refs, 1);
                *ret = best;
                *ret_e = *be;
        }
        pthread_rwlock_unlock(&ps->lk);
        return best != NULL;
}

static int pack_fd(struct store *s, struct pack *p) {
        pthread_mutex_lock(&p->mu);
        int fd = p->fd;
        if (fd < 0) {
                fd = openat(s->packfd, p->name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
                if (fd < 0)
                        fd = -errno;
                else {
                        p->fd = fd;
                        atomic_fetch_add(&s->packs.nopen, 1);
                }
        }
        pthread_mutex_unlock(&p->mu);
        if (fd >= 0 && atomic_load(&s->packs.nopen) > PACK_MAX_OPEN && pthread_rwlock_trywrlock(&s->packs.lk) == 0) {
                /* our reference keeps p's fd open through the trim */
                packset_trim_locked(&s->packs);
                pthread_rwlock_unlock(&s->packs.lk);
        }
        return fd;
}

/* ---- reading ---- */

/* Multi-object blocks recently decoded by an operation (a materialize, a walk of trees),
 * shared by its threads: files of one directory sit in a few blocks, and whichever thread
 * restores a file finds its block decoded already. Keyed by operation, so nothing read
 * before an operation started is served to it. */
#define BCACHE_SLOTS 32
struct bc_slot {
        uint64_t op, pack_id, block, used;
        uint8_t *plain;
        uint32_t len;
};
struct bcache {
        pthread_mutex_t mu;
        uint64_t tick;
        struct bc_slot s[BCACHE_SLOTS];
};

/* Copies [off, off+len) of a cached block into a fresh buffer: 1 found, 0 not, <0 error. */
static int bcache_copy(struct bcache *c, uint64_t op, uint64_t pack_id, uint64_t block, uint32_t off, uint32_t len,
                       uint8_t **ret) {
        int r = 0;
        pthread_mutex_lock(&c->mu);
        for (unsigned i = 0; i < BCACHE_SLOTS; i++) {
                struct bc_slot *x = &c->s[i];
                if (!x->plain || x->op != op || x->pack_id != pack_id || x->block != block)
                        continue;
                if ((uint64_t)off + len > x->len) {
                        r = store_fail(-EBADMSG, "its index entry points past its block");
                        break;
                }
                uint8_t *out = malloc((size_t)len + 1);
                if (!out) {
                        r = -ENOMEM;
                        break;
                }
                memcpy(out, x->plain + off, len);
                x->used = ++c->tick;
                *ret = out;
                r = 1;
                break;
        }
        pthread_mutex_unlock(&c->mu);
        return r;
}

/* Takes plain (a decoded block) into the cache, evicting the least recently used. */
static void bcache_put(struct bcache *c, uint64_t op, uint64_t pack_id, uint64_t block, uint8_t *plain, uint32_t len) {
        pthread_mutex_lock(&c->mu);
        struct bc_slot *v = &c->s[0];
        for (unsigned i = 0; i < BCACHE_SLOTS; i++) {
                struct bc_slot *x = &c->s[i];
                if (x->plain && x->op == op && x->pack_id == pack_id && x->block == block) {
                        v = NULL; /* another thread was first */
                        break;
                }
                if (!x->plain || x->used < v->used || (v->plain && !x->plain))
                        v = x;
        }
        if (v) {
                free(v->plain);
                *v = (struct bc_slot){ .op = op, .pack_id = pack_id, .block = block, .plain = plain, .len = len,
                                       .used = ++c->tick };
                plain = NULL;
        }
        pthread_mutex_unlock(&c->mu);
        free(plain);
}

void store_op_end(struct store *s, uint64_t op) {
        struct bcache *c = s->packs.bcache;
        pthread_mutex_lock(&c->mu);
        for (unsigned i = 0; i < BCACHE_SLOTS; i++)
                if (c->s[i].op == op) {
                        free(c->s[i].plain);
                        c->s[i] = (struct bc_slot){ 0 };
                }
        pthread_mutex_unlock(&c->mu);
}

uint64_t store_op_id(void) {
        static atomic_uint_least64_t next = 1;
        return atomic_fetch_add(&next, 1);
}

/* Delta blocks being resolved by this thread: a base must be stored plain. */
static _Thread_local unsigned delta_depth;

/* The plain bytes of a delta block's object: its frame's content XOR its base (read
 * through the store, hash-checked). payload is the block's stored bytes. */
static int delta_apply(struct store *s, const uint8_t *payload, uint32_t stored_len, uint8_t *plain, uint32_t plain_len,
                       uint64_t op, uint64_t *bytes_read) {
        char hex[STORE_HEX_LEN + 1];
        struct store_hash base;
        memcpy(base.b, payload, STORE_HASH_LEN);
        store_hash_to_hex(&base, hex);
        if (delta_depth >= STORE_DELTA_DEPTH)
                return store_fail(-EBADMSG, "it is the base of a delta and itself a delta (depth limit %u)",
                                  STORE_DELTA_DEPTH);
        int r = z_decompress(payload + DELTA_HEAD, stored_len - DELTA_HEAD, plain, plain_len);
        if (r < 0)
                return r;
        _cleanup_free_ void *bp = NULL;
        size_t bl = 0;
        delta_depth++;
        r = obj_read_op(s, &base, OBJ_CHUNK, op, &bp, &bl, bytes_read);
        delta_depth--;
        if (r < 0) {
                char why[512];
                snprintf(why, sizeof why, "%s", store_error_detail());
                return store_fail(r == -ENOMEM ? r : -EBADMSG, "its delta base: %s", why);
        }
        if (bl != plain_len)
                return store_fail(-EBADMSG, "its delta base %s has %zu bytes, not %u", hex, bl, plain_len);
        const uint8_t *b = bp;
        for (uint32_t i = 0; i < plain_len; i++)
                plain[i] ^= b[i];
        return 0;
}

/* Reads and decodes block hdr at off: *plain (malloc'd) holds plain_len bytes (a delta's
 * resolved through its base, read with op). */
static int block_load(struct store *s, int fd, const struct pack *p, uint64_t off, uint64_t op, struct blk_hdr *ret_h,
                      uint8_t **ret_tab, uint8_t **ret_plain, uint64_t *bytes_read) {
        uint8_t hb[BLOCK_HEADER];
        ssize_t k = pread_full(fd, hb, sizeof hb, off);
        if (k < 0)
                return store_fail((int)k, "read error: %s", strerror((int)-k));
        if (k != (ssize_t)sizeof hb)
                return store_fail(-EBADMSG, "its block at %llu lies past the end of the file (truncated?)",
                                  (unsigned long long)off);
        struct blk_hdr h;
        int r = blk_hdr_parse(hb, &h);
        if (r < 0) {
                char why[256];
                snprintf(why, sizeof why, "%s", store_error_detail());
                return store_fail(r, "its block at %llu is damaged: %s", (unsigned long long)off, why);
        }
        if (off + h.size > p->data_end)
                return store_fail(-EBADMSG, "its block at %llu claims to end past the blocks", (unsigned long long)off);
        size_t tl = (size_t)h.nobj * BLOCK_OBJ;
        _cleanup_free_ uint8_t *buf = malloc(tl + h.stored_len + 1);
        if (!buf)
                return -ENOMEM;
        k = pread_full(fd, buf, tl + h.stored_len, off + BLOCK_HEADER);
        if (k < 0)
                return store_fail((int)k, "read error: %s", strerror((int)-k));
        if ((size_t)k != tl + h.stored_len)
                return store_fail(-EBADMSG, "its block at %llu is cut short (truncated file?)", (unsigned long long)off);
        if (bytes_read)
                *bytes_read += BLOCK_HEADER + (uint64_t)k;
        uint64_t sum = 0;
        for (unsigned i = 0; i < h.nobj; i++)
                sum += get_le32(buf + i * BLOCK_OBJ);
        if (sum != h.plain_len)
                return store_fail(-EBADMSG, "its block at %llu has a table that does not add up", (unsigned long long)off);
        if (h.codec == BLOCK_DELTA && buf[4] != OBJ_CHUNK)
                return store_fail(-EBADMSG, "its delta block at %llu holds a %s", (unsigned long long)off,
                                  obj_kind_name(buf[4] < _OBJ_KIND_MAX ? (enum obj_kind)buf[4] : OBJ_CHUNK));
        uint8_t *plain = malloc(h.plain_len + 1);
        if (!plain)
                return -ENOMEM;
        if (h.codec == BLOCK_ZSTD) {
                r = z_decompress(buf + tl, h.stored_len, plain, h.plain_len);
                if (r < 0) {
                        free(plain);
                        return store_fail(r, "its block at %llu does not decompress", (unsigned long long)off);
                }
        } else if (h.codec == BLOCK_DELTA) {
                r = delta_apply(s, buf + tl, h.stored_len, plain, h.plain_len, op, bytes_read);
                if (r < 0) {
                        char why[600];
                        snprintf(why, sizeof why, "%s", store_error_detail());
                        free(plain);
                        return store_fail(r, "its delta block at %llu: %s", (unsigned long long)off, why);
                }
        } else
                memcpy(plain, buf + tl, h.plain_len);
        if (ret_tab) {
                *ret_tab = TAKE_PTR(buf);
        }
        *ret_h = h;
        *ret_plain = plain;
        return 0;
}

/* Reads object e of pack p into a fresh buffer; the caller checks the hash. */
static int pack_read_ent(struct store *s, struct pack *p, const struct pack_ent *e, uint64_t op, uint8_t **ret,
                         uint64_t *bytes_read) {
        int fd = pack_fd(s, p);
        if (fd < 0)
                return fd;
        struct bcache *c = op ? s->packs.bcache : NULL;
        if (c) {
                int k = bcache_copy(c, op, p->id, e->block, e->off, e->len, ret);
                if (k != 0)
                        return k < 0 ? k : 0;
        }
        /* A raw block: read just the object (file data that did not compress). */
        uint8_t hb[BLOCK_HEADER];
        ssize_t k = pread_full(fd, hb, sizeof hb, e->block);
        if (k < 0)
                return store_fail((int)k, "read error: %s", strerror((int)-k));
        if (k == (ssize_t)sizeof hb && !memcmp(hb, BLOCK_MAGIC, 4) && hb[4] == BLOCK_RAW) {
                struct blk_hdr h;
                int r = blk_hdr_parse(hb, &h);
                if (r < 0)
                        return store_fail(r, "its block at %llu is damaged", (unsigned long long)e->block);
                if (e->block + h.size > p->data_end)
                        return store_fail(-EBADMSG, "its block at %llu claims to end past the blocks",
                                          (unsigned long long)e->block);
                if ((uint64_t)e->off + e->len > h.plain_len)
                        return store_fail(-EBADMSG, "its index entry points past its block");
                uint8_t *out = malloc((size_t)e->len + 1);
                if (!out)
                        return -ENOMEM;
                uint64_t at = e->block + BLOCK_HEADER + (uint64_t)h.nobj * BLOCK_OBJ + e->off;
                k = pread_full(fd, out, e->len, at);
                if (k != (ssize_t)e->len) {
                        free(out);
                        return k < 0 ? store_fail((int)k, "read error: %s", strerror((int)-k))
                                     : store_fail(-EBADMSG, "its block at %llu is cut short (truncated file?)",
                                                  (unsigned long long)e->block);
                }
                if (bytes_read)
                        *bytes_read += BLOCK_HEADER + e->len;
                *ret = out;
                return 0;
        }
        struct blk_hdr h;
        uint8_t *plain;
        int r = block_load(s, fd, p, e->block, op, &h, NULL, &plain, bytes_read);
        if (r < 0)
                return r;
        if ((uint64_t)e->off + e->len > h.plain_len) {
                free(plain);
                return store_fail(-EBADMSG, "its index entry points past its block");
        }
        if (h.nobj == 1) {
                *ret = plain; /* the whole block is the object: no copy */
                plain[e->len] = 0;
                return 0;
        }
        uint8_t *out = malloc((size_t)e->len + 1);
        if (!out) {
                free(plain);
                return -ENOMEM;
        }
        memcpy(out, plain + e->off, e->len);
        if (c)
                bcache_put(c, op, p->id, e->block, plain, h.plain_len);
        else
                free(plain);
        *ret = out;
        return 0;
}

int obj_read_op(struct store *s, const struct store_hash *h, int kind, uint64_t op, void **ret, size_t *ret_len,
                uint64_t *bytes_read) {
        char hex[STORE_HEX_LEN + 1];
        store_hash_to_hex(h, hex);
        for (int tries = 0;; tries++) {
                struct pack *p;
                struct pack_ent e;
                if (!packs_lookup(s, h, &p, &e)) {
                        if (tries == 0) {
                                /* maybe committed by another handle, or moved by a GC, or
                                 * in a pack loaded as damaged that was repaired since (put
                                 * back from a copy): packs changed on disk load again */
                                int r = packs_refresh(s, true, NULL, NULL);
                                if (r < 0)
                                        return r;
                                continue;
                        }
                        return store_fail(-ENOENT, "%s %s is missing", kind >= 0 ? obj_kind_name((enum obj_kind)kind) : "object",
                                          hex);
                }
                uint8_t *data = NULL;
                int r = pack_read_ent(s, p, &e, op, &data, bytes_read);
                if (r == -ENOENT && tries < 2) {
                        pack_put(p); /* its pack was replaced by a GC: look again */
                        if ((r = packs_refresh(s, false, NULL, NULL)) < 0)
                                return r;
                        continue;
                }
                if (r < 0) {
                        char msg[512];
                        snprintf(msg, sizeof msg, "object %s is corrupt (pack %s): %s", hex, p->name, store_error_detail());
                        pack_put(p);
                        return store_fail(r == -ENOMEM ? r : -EBADMSG, "%s", msg);
                }
                if (!s->skip_hash_check) {
                        struct store_hash got;
                        store_sha256(data, e.len, &got);
                        if (!store_hash_eq(&got, h)) {
                                free(data);
                                int k = store_fail(-EBADMSG, "object %s is corrupt (pack %s): its content does not match its hash",
                                                   hex, p->name);
                                pack_put(p);
                                return k;
                        }
                }
                pack_put(p);
                data[e.len] = 0;
                *ret = data;
                *ret_len = e.len;
                return 0;
        }
}

int obj_read(struct store *s, const struct store_hash *h, int kind, void **ret, size_t *ret_len, uint64_t *bytes_read) {
        return obj_read_op(s, h, kind, 0, ret, ret_len, bytes_read);
}

int obj_exists(struct store *s, const struct store_hash *h, bool refresh) {
        if (refresh) {
                int r = packs_refresh(s, false, NULL, NULL);
                if (r < 0)
                        return r;
        }
        struct pack *p;
        struct pack_ent e;
        if (!packs_lookup(s, h, &p, &e))
                return 0;
        pack_put(p);
        return 1;
}

int obj_size(struct store *s, const struct store_hash *h, uint32_t *ret_len) {
        struct pack *p;
        struct pack_ent e;
        if (!packs_lookup(s, h, &p, &e))
                return -ENOENT;
        pack_put(p);
        *ret_len = e.len;
        return 0;
}

int obj_locate(struct store *s, const struct store_hash *h, char name[64], uint64_t *ret_block, uint64_t *ret_len) {
        struct pack *p;
        struct pack_ent e;
        if (!packs_lookup(s, h, &p, &e))
                return -ENOENT;
        int fd = pack_fd(s, p);
        uint8_t hb[BLOCK_HEADER];
        struct blk_hdr bh;
        int r = fd < 0 ? fd : pread_full(fd, hb, sizeof hb, e.block) != (ssize_t)sizeof hb ? -EIO : blk_hdr_parse(hb, &bh);
        if (r == 0) {
                snprintf(name, 64, "%s", p->name);
                *ret_block = e.block;
                *ret_len = bh.size;
        }
        pack_put(p);
        return r;
}

/* ---- whole blocks, for verify and GC ---- */

struct blk_sort {
        const struct pack_ent **v;
};

static int ent_block_cmp(const void *a, const void *b) {
        const struct pack_ent *x = *(const struct pack_ent *const *)a, *y = *(const struct pack_ent *const *)b;
        if (x->block != y->block)
                return x->block < y->block ? -1 : 1;
        return x->off < y->off ? -1 : x->off > y->off;
}

int pack_for_each_block(struct pack *p, int (*fn)(void *ud, struct pack *p, const struct pack_ent *const *ents, size_t n),
                        void *ud) {
        if (!p->n)
                return 0;
        _cleanup_free_ const struct pack_ent **v = calloc(p->n, sizeof *v);
        if (!v)
                return -ENOMEM;
        for (size_t i = 0; i < p->n; i++)
                v[i] = &p->e[i];
        qsort(v, p->n, sizeof *v, ent_block_cmp);
        for (size_t i = 0; i < p->n;) {
                size_t j = i + 1;
                while (j < p->n && v[j]->block == v[i]->block)
                        j++;
                int r = fn(ud, p, v + i, j - i);
                if (r < 0)
                        return r;
                i = j;
        }
        return 0;
}

int pack_read_block(struct store *s, struct pack *p, const struct pack_ent *const *ents, size_t n, pack_obj_fn fn,
                    void *ud, uint64_t *bytes_read) {
        int fd = pack_fd(s, p);
        if (fd < 0)
                return fd;
        struct blk_hdr h;
        _cleanup_free_ uint8_t *tab = NULL, *plain = NULL;
        int r = block_load(s, fd, p, ents[0]->block, 0, &h, &tab, &plain, bytes_read);
        if (r == -ENOMEM)
                return r;
        char blockwhy[512] = "";
        if (r < 0)
                snprintf(blockwhy, sizeof blockwhy, "%s", store_error_detail());
        for (size_t i = 0; i < n; i++) {
                const struct pack_ent *e = ents[i];
                int k = r;
                const char *why = blockwhy;
                if (k == 0 && (uint64_t)e->off + e->len > h.plain_len) {
                        k = -EBADMSG;
                        why = "its index entry points past its block";
                }
                if (k == 0 && !s->skip_hash_check) {
                        struct store_hash got;
                        store_sha256(plain + e->off, e->len, &got);
                        if (!store_hash_eq(&got, &e->hash)) {
                                k = -EBADMSG;
                                why = "its content does not match its hash";
                        }
                }
                if (k < 0) {
                        char hex[STORE_HEX_LEN + 1];
                        store_hash_to_hex(&e->hash, hex);
                        store_fail(k, "object %s is corrupt (pack %s): %s", hex, p->name, why);
                }
                int x = fn(ud, e, k == 0 ? plain + e->off : NULL, k);
                if (x < 0)
                        return x;
        }
        return 0;
}

int pack_delta_base(struct store *s, struct pack *p, const struct pack_ent *e, struct store_hash *ret) {
        if (!e->delta)
                return 0;
        int fd = pack_fd(s, p);
        if (fd < 0)
                return fd;
        uint8_t b[BLOCK_HEADER + BLOCK_OBJ + STORE_HASH_LEN];
        struct blk_hdr h;
        if (pread_full(fd, b, sizeof b, e->block) != (ssize_t)sizeof b)
                return store_fail(-EBADMSG, "its block at %llu is cut short", (unsigned long long)e->block);
        int r = blk_hdr_parse(b, &h);
        if (r < 0)
                return r;
        if (h.codec != BLOCK_DELTA)
                return 0;
        memcpy(ret->b, b + BLOCK_HEADER + BLOCK_OBJ, STORE_HASH_LEN);
        return 1;
}

int obj_delta_base(struct store *s, const struct store_hash *h, struct store_hash *ret) {
        struct pack *p;
        struct pack_ent e;
        if (!packs_lookup(s, h, &p, &e))
                return -ENOENT;
        int r = pack_delta_base(s, p, &e, ret);
        pack_put(p);
        return r;
}

int pack_raw_block(struct store *s, struct pack *p, uint64_t block, void **ret, size_t *ret_len) {
        int fd = pack_fd(s, p);
        if (fd < 0)
                return fd;
        uint8_t hb[BLOCK_HEADER];
        if (pread_full(fd, hb, sizeof hb, block) != (ssize_t)sizeof hb)
                return -EIO;
        struct blk_hdr h;
        int r = blk_hdr_parse(hb, &h);
        if (r < 0)
                return r;
        if (block + h.size > p->data_end)
                return -EBADMSG;
        uint8_t *buf = malloc(h.size);
        if (!buf)
                return -ENOMEM;
        if (pread_full(fd, buf, h.size, block) != (ssize_t)h.size) {
                free(buf);
                return -EIO;
        }
        *ret = buf;
        *ret_len = h.size;
        return 0;
}

/* ---- writing ---- */

struct pw_pack {
        struct pw_pack *next;
        char tmp[96];
        char name[32];
        int fd;
        uint64_t off;                  /* next free byte (under the writer's mutex) */
        atomic_uint_least64_t synced;  /* handed to writeback up to here */
        struct pack_ent *e;
        size_t n, cap;
        bool sealed, published, loaded;
        bool delta;  /* holds a delta block: PACK_VERSION_DELTA */
};

struct small_meta {
        uint32_t len;
        uint8_t kind;
        struct store_hash hash;
};

struct small_block {
        uint8_t *buf;
        size_t len, cap;
        struct small_meta *m;
        size_t n;
};

struct pack_writer {
        struct store *s;
        char tag[48];
        unsigned seq;
        pthread_mutex_t mu;
        struct pw_pack *cur, *all;
        struct small_block sb;
        atomic_uint_least64_t bytes;
        int err;
};

int pw_new(struct store *s, const char *tag, struct pack_writer **ret) {
        struct pack_writer *w = calloc(1, sizeof *w);
        if (!w)
                return -ENOMEM;
        w->s = s;
        snprintf(w->tag, sizeof w->tag, "%s", tag);
        pthread_mutex_init(&w->mu, NULL);
        *ret = w;
        return 0;
}

struct pack_writer *pw_free(struct pack_writer *w) {
        if (!w)
                return NULL;
        while (w->all) {
                struct pw_pack *p = w->all;
                w->all = p->next;
                if (p->fd >= 0)
                        close(p->fd);
                if (!p->published)
                        unlinkat(w->s->packfd, p->tmp, 0);
                free(p->e);
                free(p);
        }
        free(w->sb.buf);
        free(w->sb.m);
        pthread_mutex_destroy(&w->mu);
        free(w);
        return NULL;
}

uint64_t pw_bytes(const struct pack_writer *w) { return atomic_load(&w->bytes); }

size_t pw_packs(const struct pack_writer *w) {
        size_t n = 0;
        for (struct pw_pack *p = w->all; p; p = p->next)
                n++;
        return n;
}

/* A new temp pack with its header. Writer mutex held. */
static int pw_start_pack(struct pack_writer *w) {
        uint64_t id = 0;
        int r = store_random(&id, sizeof id);
        if (r < 0)
                return store_fail(r, "cannot create a pack: getrandom: %s", strerror(-r));
        struct pw_pack *p = calloc(1, sizeof *p);
        if (!p)
                return -ENOMEM;
        snprintf(p->tmp, sizeof p->tmp, PACK_TEMP_PREFIX "%s-%u.pack", w->tag, w->seq++);
        p->fd = openat(w->s->packfd, p->tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
        if (p->fd < 0) {
                r = -errno;
                free(p);
                return store_fail(r, "cannot create a pack: %s", strerror(-r));
        }
        uint8_t h[PACK_HEADER] = { 0 };
        memcpy(h, PACK_MAGIC, 4);
        h[4] = PACK_VERSION;
        put_le64(h + 8, id);
        r = pwrite_full(p->fd, h, sizeof h, 0);
        if (r < 0) {
                close(p->fd);
                unlinkat(w->s->packfd, p->tmp, 0);
                free(p);
                return store_fail(r, "cannot write a pack: %s", strerror(-r));
        }
        p->off = PACK_HEADER;
        atomic_init(&p->synced, 0);
        p->next = w->all;
        w->all = p;
        w->cur = p;
        atomic_fetch_add(&w->bytes, PACK_HEADER);
        return 0;
}

/* Reserves room for a block of len bytes and records its objects' index entries. The
 * caller writes the block at *ret_off of (*ret)->fd. */
static int pw_reserve(struct pack_writer *w, size_t len, const struct blk_obj *v, const struct pack_ent *const *src,
                      size_t n, bool delta, struct pw_pack **ret, uint64_t *ret_off) {
        pthread_mutex_lock(&w->mu);
        int r = 0;
        if (!w->cur || (w->cur->off > PACK_HEADER && w->cur->off + len > PACK_TARGET) ||
            w->cur->n + n > PACK_MAX_OBJECTS)
                r = pw_start_pack(w);
        struct pw_pack *p = w->cur;
        /* r < 0 is failure, as the callers test it: any other r comes with *ret set. */
        if (r >= 0 && p->n + n > p->cap) {
                size_t nc = MAX(p->cap * 2, p->n + n + 64);
                struct pack_ent *ne = realloc(p->e, nc * sizeof *ne);
                if (!ne)
                        r = -ENOMEM;
                else {
                        p->e = ne;
                        p->cap = nc;
                }
        }
        if (r >= 0) {
                uint32_t o = 0;
                for (size_t i = 0; i < n; i++) {
                        struct pack_ent *e = &p->e[p->n++];
                        if (v) {
                                *e = (struct pack_ent){ .hash = v[i].hash, .block = p->off, .off = o, .len = v[i].len,
                                                        .kind = v[i].kind, .delta = delta };
                                o += v[i].len;
                        } else {
                                *e = *src[i];
                                e->block = p->off;
                        }
                        p->delta = p->delta || e->delta;
                }
                *ret = p;
                *ret_off = p->off;
                p->off += len;
        }
        pthread_mutex_unlock(&w->mu);
        return r;
}

static int pw_write(struct pack_writer *w, struct pw_pack *p, const struct iovec *iov, int niov, uint64_t off,
                    size_t len) {
        uint64_t at = off;
        for (int i = 0; i < niov; i++) {
                int r = pwrite_full(p->fd, iov[i].iov_base, iov[i].iov_len, at);
                if (r < 0)
                        return store_fail(r, "cannot write a pack: %s", strerror(-r));
                at += iov[i].iov_len;
        }
        atomic_fetch_add(&w->bytes, len);
        /* Start writeback as we go, so the fsync at commit has little left to do. */
        uint64_t end = off + len, s0 = atomic_load(&p->synced);
        if (end > s0 + SYNC_STEP && atomic_compare_exchange_strong(&p->synced, &s0, end))
                (void)sync_file_range(p->fd, (off_t)s0, (off_t)(end - s0), SYNC_FILE_RANGE_WRITE);
        return 0;
}

int pw_add_block(struct pack_writer *w, const struct blk_obj *v, size_t n, bool compress) {
        if (n == 0 || n > BLOCK_MAX_OBJECTS)
                return -EINVAL;
        uint64_t plain_len = 0;
        for (size_t i = 0; i < n; i++)
                plain_len += v[i].len;
        if (plain_len > STORE_MAX_OBJECT)
                return -E2BIG;
        _cleanup_free_ uint8_t *joined = NULL, *packed = NULL;
        const uint8_t *plain = v[0].data;
        bool contiguous = true; /* a run of a file's chunks, a shared block: already back to back */
        for (size_t i = 1; i < n && contiguous; i++)
                contiguous = (const uint8_t *)v[i].data == (const uint8_t *)v[i - 1].data + v[i - 1].len;
        if (!contiguous) {
                joined = malloc(plain_len ? plain_len : 1);
                if (!joined)
                        return -ENOMEM;
                size_t o = 0;
                for (size_t i = 0; i < n; i++) {
                        memcpy(joined + o, v[i].data, v[i].len);
                        o += v[i].len;
                }
                plain = joined;
        }
        uint8_t codec = BLOCK_RAW;
        size_t stored = plain_len;
        if (compress && plain_len >= 64) {
                size_t cap = z_bound(plain_len);
                packed = malloc(cap);
                if (!packed)
                        return -ENOMEM;
                size_t k;
                int r = z_compress(plain, plain_len, packed, cap, w->s->level, &k);
                if (r < 0)
                        return r;
                if (k && k + k / 64 < plain_len) {
                        codec = BLOCK_ZSTD;
                        stored = k;
                }
        }
        size_t hl = BLOCK_HEADER + n * BLOCK_OBJ;
        _cleanup_free_ uint8_t *hdr = malloc(hl);
        if (!hdr)
                return -ENOMEM;
        memcpy(hdr, BLOCK_MAGIC, 4);
        hdr[4] = codec;
        hdr[5] = 0;
        put_le16(hdr + 6, (uint16_t)n);
        put_le32(hdr + 8, (uint32_t)plain_len);
        put_le32(hdr + 12, (uint32_t)stored);
        for (size_t i = 0; i < n; i++) {
                put_le32(hdr + BLOCK_HEADER + i * BLOCK_OBJ, v[i].len);
                hdr[BLOCK_HEADER + i * BLOCK_OBJ + 4] = v[i].kind;
        }
        struct iovec iov[2] = { { hdr, hl }, { codec == BLOCK_ZSTD ? packed : (void *)plain, stored } };
        struct pw_pack *p;
        uint64_t off;
        int r = pw_reserve(w, hl + stored, v, NULL, n, false, &p, &off);
        if (r < 0)
                return r;
        return pw_write(w, p, iov, 2, off, hl + stored);
}

int pw_add_delta(struct pack_writer *w, const struct store_hash *h, const struct store_hash *base, const void *frame,
                 size_t frame_len, uint32_t plain_len) {
        if (frame_len == 0 || frame_len + DELTA_HEAD > z_bound(STORE_MAX_OBJECT) || plain_len > STORE_MAX_OBJECT)
                return -EINVAL;
        uint8_t hdr[BLOCK_HEADER + BLOCK_OBJ + DELTA_HEAD];
        memcpy(hdr, BLOCK_MAGIC, 4);
        hdr[4] = BLOCK_DELTA;
        hdr[5] = 0;
        put_le16(hdr + 6, 1);
        put_le32(hdr + 8, plain_len);
        put_le32(hdr + 12, (uint32_t)(DELTA_HEAD + frame_len));
        put_le32(hdr + BLOCK_HEADER, plain_len);
        hdr[BLOCK_HEADER + 4] = OBJ_CHUNK;
        memcpy(hdr + BLOCK_HEADER + BLOCK_OBJ, base->b, STORE_HASH_LEN);
        memcpy(hdr + BLOCK_HEADER + BLOCK_OBJ + STORE_HASH_LEN, h->b, STORE_HASH_LEN);
        struct iovec iov[2] = { { hdr, sizeof hdr }, { (void *)frame, frame_len } };
        struct blk_obj o = { .len = plain_len, .kind = OBJ_CHUNK, .hash = *h };
        struct pw_pack *p;
        uint64_t off;
        int r = pw_reserve(w, sizeof hdr + frame_len, &o, NULL, 1, true, &p, &off);
        if (r < 0)
                return r;
        return pw_write(w, p, iov, 2, off, sizeof hdr + frame_len);
}

int pw_add_raw_block(struct pack_writer *w, const void *blk, size_t len, const struct pack_ent *const *ents, size_t n) {
        struct pw_pack *p;
        uint64_t off;
        int r = pw_reserve(w, len, NULL, ents, n, false, &p, &off);
        if (r < 0)
                return r;
        struct iovec iov = { (void *)blk, len };
        return pw_write(w, p, &iov, 1, off, len);
}

static int small_flush(struct pack_writer *w, struct small_block *b) {
        if (!b->n)
                return 0;
        _cleanup_free_ struct blk_obj *v = calloc(b->n, sizeof *v);
        if (!v)
                return -ENOMEM;
        size_t o = 0;
        for (size_t i = 0; i < b->n; i++) {
                v[i] = (struct blk_obj){ .data = b->buf + o, .len = b->m[i].len, .kind = b->m[i].kind, .hash = b->m[i].hash };
                o += b->m[i].len;
        }
        int r = pw_add_block(w, v, b->n, true);
        b->n = b->len = 0;
        return r;
}

int pw_add_small(struct pack_writer *w, const void *data, uint32_t len, uint8_t kind, const struct store_hash *h) {
        struct small_block full = { 0 };
        pthread_mutex_lock(&w->mu);
        struct small_block *b = &w->sb;
        if (b->n && (b->len + len > BLOCK_TARGET || b->n == BLOCK_MAX_OBJECTS)) {
                full = *b; /* hand the full block to this thread; the next one starts empty */
                *b = (struct small_block){ 0 };
        }
        int r = 0;
        if (!b->buf) {
                b->cap = BLOCK_TARGET + BLOCK_SMALL;
                b->buf = malloc(b->cap);
                b->m = calloc(BLOCK_MAX_OBJECTS, sizeof *b->m);
                if (!b->buf || !b->m) {
                        free(b->buf);
                        free(b->m);
                        *b = (struct small_block){ 0 };
                        r = -ENOMEM;
                }
        }
        if (r == 0 && b->len + len > b->cap) {
                uint8_t *nb = realloc(b->buf, b->len + len);
                if (!nb)
                        r = -ENOMEM;
                else {
                        b->buf = nb;
                        b->cap = b->len + len;
                }
        }
        if (r == 0) {
                memcpy(b->buf + b->len, data, len);
                b->len += len;
                b->m[b->n++] = (struct small_meta){ .len = len, .kind = kind, .hash = *h };
        }
        pthread_mutex_unlock(&w->mu);
        if (full.n) {
                int k = small_flush(w, &full);
                if (r == 0)
                        r = k;
        }
        free(full.buf);
        free(full.m);
        return r;
}

int pw_seal(struct pack_writer *w) {
        pthread_mutex_lock(&w->mu);
        struct small_block b = w->sb;
        w->sb = (struct small_block){ 0 };
        pthread_mutex_unlock(&w->mu);
        int r = small_flush(w, &b);
        free(b.buf);
        free(b.m);
        if (r < 0)
                return r;
        for (struct pw_pack *p = w->all; p; p = p->next) {
                if (p->sealed)
                        continue;
                if (p->n)
                        qsort(p->e, p->n, sizeof *p->e, ent_cmp);
                size_t ilen = p->n * PACK_IDX_ENTRY;
                _cleanup_free_ uint8_t *idx = malloc(ilen + PACK_TRAILER);
                if (!idx)
                        return -ENOMEM;
                for (size_t i = 0; i < p->n; i++) {
                        uint8_t *q = idx + i * PACK_IDX_ENTRY;
                        memcpy(q, p->e[i].hash.b, STORE_HASH_LEN);
                        put_le64(q + 32, p->e[i].block | (uint64_t)p->e[i].kind << 56 | (p->e[i].delta ? IDX_DELTA : 0));
                        put_le32(q + 40, p->e[i].off);
                        put_le32(q + 44, p->e[i].len);
                }
                uint8_t *t = idx + ilen;
                memset(t, 0, PACK_TRAILER);
                memcpy(t, PACK_TRAILER_MAGIC, 4);
                t[4] = p->delta ? PACK_VERSION_DELTA : PACK_VERSION;
                put_le64(t + 8, p->off);
                put_le32(t + 16, (uint32_t)p->n);
                struct store_hash sum;
                store_sha256(idx, ilen, &sum);
                memcpy(t + 24, sum.b, STORE_HASH_LEN);
                memcpy(t + 56, PACK_END_MAGIC, 8);
                r = pwrite_full(p->fd, idx, ilen + PACK_TRAILER, p->off);
                if (r == 0 && p->delta)
                        r = pwrite_full(p->fd, &t[4], 1, 4); /* the header's version too */
                if (r == 0 && fsync(p->fd) < 0)
                        r = -errno;
                if (r < 0)
                        return store_fail(r, "cannot write a pack: %s", strerror(-r));
                atomic_fetch_add(&w->bytes, ilen + PACK_TRAILER);
                p->sealed = true;
        }
        return 0;
}

int pw_publish(struct pack_writer *w) {
        bool any = false;
        for (struct pw_pack *p = w->all; p; p = p->next) {
                if (p->published)
                        continue;
                if (!p->sealed)
                        return -EINVAL;
                for (int tries = 0;; tries++) {
                        uint64_t id = 0;
                        if (getrandom(&id, sizeof id, 0) != sizeof id)
                                id = (uint64_t)store_now_ns() * 0x9e3779b97f4a7c15ull;
                        snprintf(p->name, sizeof p->name, "%016llx.pack", (unsigned long long)id);
                        if (renameat2(w->s->packfd, p->tmp, w->s->packfd, p->name, RENAME_NOREPLACE) == 0)
                                break;
                        if (errno != EEXIST || tries > 8)
                                return store_fail(-errno, "cannot move pack %s into place: %m", p->name);
                }
                p->published = true;
                any = true;
        }
        if (any && fsync(w->s->packfd) < 0)
                return store_fail(-errno, "cannot flush packs/ to disk: %m");
        /* Make them visible to this handle now (others see them at their next refresh). */
        for (struct pw_pack *p = w->all; p; p = p->next) {
                if (p->loaded)
                        continue;
                p->loaded = true;
                struct pack *pk;
                int r = pack_load(w->s, p->name, &pk);
                if (r < 0)
                        return store_fail(r, "cannot load the pack just written (%s): %s", p->name, store_error_detail());
                pthread_rwlock_wrlock(&w->s->packs.lk);
                bool have = false;
                for (size_t i = 0; i < w->s->packs.n && !have; i++)
                        have = !strcmp(w->s->packs.v[i]->name, pk->name);
                r = have ? 0 : packset_add_locked(&w->s->packs, pk);
                pthread_rwlock_unlock(&w->s->packs.lk);
                if (have || r < 0)
                        pack_put(pk);
                if (r < 0)
                        return r;
        }
        return 0;
}

int packs_init(struct packset *ps) {
        pthread_rwlock_init(&ps->lk, NULL);
        struct bcache *c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        pthread_mutex_init(&c->mu, NULL);
        ps->bcache = c;
        return 0;
}

void packs_fini(struct packset *ps) {
        for (size_t i = 0; i < ps->n; i++)
                pack_put(ps->v[i]);
        free(ps->v);
        ps->v = NULL;
        ps->n = ps->cap = 0;
        pthread_rwlock_destroy(&ps->lk);
        struct bcache *c = ps->bcache;
        if (c) {
                for (unsigned i = 0; i < BCACHE_SLOTS; i++)
                        free(c->s[i].plain);
                pthread_mutex_destroy(&c->mu);
                free(c);
                ps->bcache = NULL;
        }
}

void packs_refresh_if_changed(struct store *s) { packs_maybe_refresh(s); }
