/* Memory images: a process or VM memory dump cut at fixed offsets, so page N always lands
 * in the same chunk and an unchanged region hashes to the chunk already stored. All-zero
 * pieces and holes are stored as nothing. */
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>

#include "store/store-internal.h"

static bool all_zero(const uint8_t *p, size_t n) {
        static const uint8_t zero[4096];
        while (n) {
                size_t k = MIN(n, sizeof zero);
                if (memcmp(p, zero, k))
                        return false;
                p += k;
                n -= k;
        }
        return true;
}

int store_memory_put(struct store *s, int fd, uint64_t size, struct store_op_stats *stats, struct store_hash *ret_image) {
        if (size > STORE_MAX_FILE_SIZE)
                return store_fail(-EFBIG, "memory image of %llu bytes is over the limit", (unsigned long long)size);
        struct txn *t = NULL;
        int r = txn_begin(s, NULL, 0, &t);
        if (r < 0)
                return r;
        _cleanup_free_ uint8_t *buf = malloc(STORE_MEMORY_CHUNK);
        struct mem_image m = { .size = size, .chunk_size = STORE_MEMORY_CHUNK };
        size_t cap = 0;
        uint64_t bytes_read = 0;
        _cleanup_buf_ struct buf b = BUF_INIT(STORE_MAX_OBJECT);
        if (!buf) {
                r = -ENOMEM;
                goto out;
        }
        for (uint64_t off = 0; off < size; off += STORE_MEMORY_CHUNK) {
                size_t want = (size_t)MIN((uint64_t)STORE_MEMORY_CHUNK, size - off);
                off_t d = lseek(fd, (off_t)off, SEEK_DATA);
                if (d < 0 && errno == ENXIO)
                        break; /* the rest is a hole */
                if (d >= 0 && (uint64_t)d >= off + want) {
                        /* skip to the piece that holds data */
                        off = ((uint64_t)d / STORE_MEMORY_CHUNK) * STORE_MEMORY_CHUNK - STORE_MEMORY_CHUNK;
                        continue;
                }
                size_t got = 0;
                while (got < want) {
                        ssize_t k = pread(fd, buf + got, want - got, (off_t)(off + got));
                        if (k < 0 && errno == EINTR)
                                continue;
                        if (k < 0) {
                                r = store_fail(-errno, "memory image: read error at %llu: %m", (unsigned long long)off);
                                goto out;
                        }
                        if (k == 0)
                                break;
                        got += (size_t)k;
                }
                bytes_read += got;
                if (got < want)
                        memset(buf + got, 0, want - got);
                if (all_zero(buf, want))
                        continue;
                if ((r = ARRAY_RESERVE(m.chunks, cap, m.n + 1, 64)) < 0)
                        goto out;
                struct t_chunk *c = &m.chunks[m.n];
                c->off = off;
                c->len = (uint32_t)want;
                r = txn_put(t, OBJ_CHUNK, buf, want, NULL, &c->hash);
                if (r < 0)
                        goto out;
                m.n++;
        }
        r = mem_encode(&m, &b);
        if (r < 0) {
                r = store_fail(r, "cannot encode the memory image: %s", strerror(-r));
                goto out;
        }
        struct store_hash h;
        r = txn_put(t, OBJ_MEMORY, b.data, b.len, NULL, &h);
        if (r < 0)
                goto out;
        r = txn_commit_objects(t, stats);
        if (r == 0)
                *ret_image = h;
out:
        if (stats)
                stats->bytes_read += bytes_read;
        free(m.chunks);
        txn_free(t);
        return r;
}

int store_memory_get(struct store *s, const struct store_hash *image, int fd) {
        _cleanup_free_ void *p = NULL;
        size_t n;
        int r = obj_read(s, image, OBJ_MEMORY, &p, &n, NULL);
        if (r < 0)
                return r;
        struct mem_image m;
        r = mem_decode(p, n, &m);
        if (r < 0)
                return r;
        if (ftruncate(fd, 0) < 0 || ftruncate(fd, (off_t)m.size) < 0) {
                r = store_fail(-errno, "cannot size the memory image file: %m");
                goto out;
        }
        for (uint32_t i = 0; i < m.n; i++) {
                _cleanup_free_ void *data = NULL;
                size_t len;
                r = obj_read(s, &m.chunks[i].hash, OBJ_CHUNK, &data, &len, NULL);
                if (r < 0)
                        goto out;
                if (len != m.chunks[i].len) {
                        r = store_fail(-EBADMSG, "memory image: chunk %u holds %zu bytes, the image says %u", i, len,
                                       m.chunks[i].len);
                        goto out;
                }
                if (pwrite(fd, data, len, (off_t)m.chunks[i].off) != (ssize_t)len) {
                        r = store_fail(errno ? -errno : -EIO, "memory image: write error: %m");
                        goto out;
                }
        }
        r = 0;
out:
        free(m.chunks);
        return r;
}
