/* Stat caches: for each snapshot and each directory it was captured from or materialized
 * into, the inode, ctime, mtime and size of every entry when the snapshot was made. The
 * next capture with that parent reads a file again only if one of them changed. A cache is
 * an optimization: a missing, foreign or damaged one means "read everything". */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "store/store-internal.h"

#define SC_MAGIC "SPSC"
#define SC_VERSION 1
#define SC_MAX_BYTES (512u << 20)
#define SC_REC_FIXED (8 + 8 + 4 + 8 + 4 + 8)
/* Timestamps come from a clock that ticks every few ms: a change within one tick of our
 * stat could leave ctime unchanged, so entries that recent are not trusted next time. */
#define SC_RACY_NS (20 * 1000000LL)

struct sc_ent {
        const char *path; /* points into data; not NUL-terminated */
        uint16_t len;
        struct scache_rec rec;
};

struct scache {
        uint8_t *data;
        struct sc_ent *ents;
        size_t n;
        uint32_t *index; /* open addressing, value = entry + 1 */
        size_t cap;
};

static uint64_t path_hash(const char *p, size_t n) {
        uint64_t h = UINT64_C(1469598103934665603);
        for (size_t i = 0; i < n; i++)
                h = (h ^ (uint8_t)p[i]) * UINT64_C(1099511628211);
        return h;
}

static void cache_name(const struct store_hash *snap, uint64_t dev, uint64_t ino, char out[128]) {
        char hex[STORE_HEX_LEN + 1];
        store_hash_to_hex(snap, hex);
        snprintf(out, 128, "%s.%llx.%llx", hex, (unsigned long long)dev, (unsigned long long)ino);
}

bool scache_racy(int64_t ctime_sec, uint32_t ctime_nsec, int64_t now_ns) {
        return ctime_sec * 1000000000LL + ctime_nsec >= now_ns - SC_RACY_NS;
}

int scache_add(struct scache_builder *w, const char *path, const struct scache_rec *r) {
        size_t pl = strlen(path);
        if (pl > UINT16_MAX)
                return 0; /* not cached: read again next time */
        uint8_t f[2 + SC_REC_FIXED];
        put_le16(f, (uint16_t)pl);
        int k = buf_append(&w->b, f, 2);
        if (k >= 0)
                k = buf_append(&w->b, path, pl);
        put_le64(f, r->ino);
        put_le64(f + 8, (uint64_t)r->ctime_sec);
        put_le32(f + 16, r->ctime_nsec);
        put_le64(f + 20, (uint64_t)r->mtime_sec);
        put_le32(f + 28, r->mtime_nsec);
        put_le64(f + 32, r->size);
        if (k >= 0)
                k = buf_append(&w->b, f, SC_REC_FIXED);
        if (k >= 0)
                w->n++;
        return k;
}

int scache_save(struct store *s, const struct store_hash *snap, uint64_t dev, uint64_t ino, struct scache_builder *w) {
        uint8_t h[32];
        memcpy(h, SC_MAGIC, 4);
        h[4] = SC_VERSION;
        /* the chunking, as log2 of the fixed size (0: content-defined); readers before it
         * saw 0 here, so their caches read as content-defined, which they were */
        h[5] = w->fixed_chunk ? (uint8_t)__builtin_ctz(w->fixed_chunk) : 0;
        h[6] = h[7] = 0;
        put_le64(h + 8, dev);
        put_le64(h + 16, ino);
        put_le64(h + 24, w->n);
        _cleanup_buf_ struct buf out = BUF_INIT(SC_MAX_BYTES);
        int r = buf_append(&out, h, sizeof h);
        if (r >= 0)
                r = buf_append(&out, w->b.data, w->b.len);
        if (r < 0)
                return r;
        struct store_hash sum;
        store_sha256(out.data, out.len, &sum);
        r = buf_append(&out, sum.b, sizeof sum.b);
        if (r < 0)
                return r;
        char name[128], tmp[160];
        cache_name(snap, dev, ino, name);
        snprintf(tmp, sizeof tmp, ".%s.%d.tmp", name, (int)gettid());
        _cleanup_close_ int fd = openat(s->cachefd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
                return -errno;
        /* No fsync: after a crash a lost cache only costs one full read. */
        if (write(fd, out.data, out.len) != (ssize_t)out.len || renameat(s->cachefd, tmp, s->cachefd, name) < 0) {
                r = errno ? -errno : -EIO;
                unlinkat(s->cachefd, tmp, 0);
                return r;
        }
        return 0;
}

int scache_load(struct store *s, const struct store_hash *snap, uint64_t dev, uint64_t ino, uint32_t fixed_chunk,
                struct scache **ret) {
        char name[128];
        cache_name(snap, dev, ino, name);
        *ret = NULL;
        _cleanup_close_ int fd = openat(s->cachefd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
                return errno == ENOENT ? 0 : -errno;
        struct stat st;
        if (fstat(fd, &st) < 0)
                return -errno;
        if (st.st_size < 64 || (uint64_t)st.st_size > SC_MAX_BYTES)
                return 0;
        size_t len = (size_t)st.st_size;
        struct scache *c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        c->data = malloc(len);
        if (!c->data || pread(fd, c->data, len, 0) != (ssize_t)len) {
                int r = c->data ? 0 : -ENOMEM;
                scache_free(c);
                return r;
        }
        struct store_hash sum;
        store_sha256(c->data, len - 32, &sum);
        const uint8_t *p = c->data;
        uint64_t n = get_le64(p + 24);
        if (memcmp(sum.b, p + len - 32, 32) || memcmp(p, SC_MAGIC, 4) || p[4] != SC_VERSION ||
            p[5] != (fixed_chunk ? __builtin_ctz(fixed_chunk) : 0) || get_le64(p + 8) != dev ||
            get_le64(p + 16) != ino || n > (len - 64) / (2 + SC_REC_FIXED)) {
                scache_free(c);
                return 0;
        }
        c->ents = calloc(n ? n : 1, sizeof *c->ents);
        c->cap = 16;
        while (c->cap < n * 2)
                c->cap *= 2;
        c->index = calloc(c->cap, sizeof *c->index);
        if (!c->ents || !c->index) {
                scache_free(c);
                return -ENOMEM;
        }
        size_t off = 32, end = len - 32;
        for (uint64_t i = 0; i < n; i++) {
                if (end - off < 2)
                        goto bad;
                uint16_t pl = get_le16(p + off);
                off += 2;
                if (end - off < (size_t)pl + SC_REC_FIXED)
                        goto bad;
                struct sc_ent *e = &c->ents[i];
                e->path = (const char *)p + off;
                e->len = pl;
                off += pl;
                e->rec.ino = get_le64(p + off);
                e->rec.ctime_sec = (int64_t)get_le64(p + off + 8);
                e->rec.ctime_nsec = get_le32(p + off + 16);
                e->rec.mtime_sec = (int64_t)get_le64(p + off + 20);
                e->rec.mtime_nsec = get_le32(p + off + 28);
                e->rec.size = get_le64(p + off + 32);
                off += SC_REC_FIXED;
                size_t j = path_hash(e->path, pl) & (c->cap - 1);
                while (c->index[j])
                        j = (j + 1) & (c->cap - 1);
                c->index[j] = (uint32_t)(i + 1);
        }
        c->n = n;
        *ret = c;
        return 0;
bad:
        scache_free(c);
        return 0;
}

const struct scache_rec *scache_find(const struct scache *c, const char *path) {
        if (!c)
                return NULL;
        size_t pl = strlen(path);
        size_t j = path_hash(path, pl) & (c->cap - 1);
        while (c->index[j]) {
                const struct sc_ent *e = &c->ents[c->index[j] - 1];
                if (e->len == pl && !memcmp(e->path, path, pl))
                        return &e->rec;
                j = (j + 1) & (c->cap - 1);
        }
        return NULL;
}

struct scache *scache_free(struct scache *c) {
        if (!c)
                return NULL;
        free(c->data);
        free(c->ents);
        free(c->index);
        free(c);
        return NULL;
}
