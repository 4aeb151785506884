/* Object files: a 16-byte header (magic, version, kind, codec, lengths) and the payload,
 * zstd-compressed when that saves space. Reading checks the header against the file size,
 * decompresses into exactly plain_len bytes and checks the SHA-256 against the name. */
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <zstd.h>

#include "store/store-internal.h"

/* One compression and one decompression context per thread, made on first use. */
static pthread_key_t zkey;
static pthread_once_t zonce = PTHREAD_ONCE_INIT;
struct zctx {
        ZSTD_CCtx *c;
        ZSTD_DCtx *d;
};
static void zctx_free(void *p) {
        struct zctx *z = p;
        ZSTD_freeCCtx(z->c);
        ZSTD_freeDCtx(z->d);
        free(z);
}
static void zkey_init(void) { (void)pthread_key_create(&zkey, zctx_free); }
static struct zctx *zctx_get(void) {
        pthread_once(&zonce, zkey_init);
        struct zctx *z = pthread_getspecific(zkey);
        if (z)
                return z;
        z = calloc(1, sizeof *z);
        if (!z)
                return NULL;
        z->c = ZSTD_createCCtx();
        z->d = ZSTD_createDCtx();
        if (!z->c || !z->d || pthread_setspecific(zkey, z) != 0) {
                zctx_free(z);
                return NULL;
        }
        return z;
}

int obj_header_parse(const uint8_t *p, size_t file_len, struct obj_header *ret) {
        if (file_len < OBJ_HEADER)
                return store_fail(-EBADMSG, "truncated (%zu bytes, shorter than the header)", file_len);
        if (memcmp(p, OBJ_MAGIC, 4))
                return store_fail(-EBADMSG, "not a store object (bad magic)");
        if (p[4] != OBJ_VERSION)
                return store_fail(-EBADMSG, "object format version %u is not supported", p[4]);
        struct obj_header h = { .kind = p[5], .codec = p[6], .plain_len = get_le32(p + 8), .stored_len = get_le32(p + 12) };
        if (h.kind >= _OBJ_KIND_MAX || h.codec > OBJ_CODEC_ZSTD || p[7])
                return store_fail(-EBADMSG, "invalid kind or codec in the object header");
        if (h.plain_len > STORE_MAX_OBJECT || h.stored_len > ZSTD_compressBound(STORE_MAX_OBJECT))
                return store_fail(-EBADMSG, "object header claims %u bytes (limit %u)", h.plain_len, STORE_MAX_OBJECT);
        if (h.codec == OBJ_CODEC_RAW && h.stored_len != h.plain_len)
                return store_fail(-EBADMSG, "raw object with differing lengths");
        if (file_len != (size_t)OBJ_HEADER + h.stored_len)
                return store_fail(-EBADMSG, "truncated or extended: %zu bytes, header says %u", file_len,
                                  OBJ_HEADER + h.stored_len);
        *ret = h;
        return 0;
}

static ssize_t read_full(int fd, void *buf, size_t n) {
        size_t done = 0;
        while (done < n) {
                ssize_t k = read(fd, (char *)buf + done, n - done);
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

int obj_read(struct store *s, const struct store_hash *h, int kind, void **ret, size_t *ret_len,
             uint64_t *bytes_read) {
        char rel[STORE_HEX_LEN + 4];
        store_obj_relpath(h, rel);
        _cleanup_close_ int fd = openat(s->objfd, rel, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0) {
                int r = -errno;
                if (r == -ENOENT)
                        return store_fail(r, "%s %s is missing", kind >= 0 ? obj_kind_name((enum obj_kind)kind) : "object",
                                          rel + 3);
                return store_fail(r, "object %s: %s", rel + 3, strerror(-r));
        }
        struct stat st;
        if (fstat(fd, &st) < 0)
                return store_fail(-errno, "object %s: %m", rel + 3);
        if (!S_ISREG(st.st_mode))
                return store_fail(-EBADMSG, "object %s is not a regular file", rel + 3);
        if ((uint64_t)st.st_size > OBJ_HEADER + (uint64_t)ZSTD_compressBound(STORE_MAX_OBJECT))
                return store_fail(-EBADMSG, "object %s is corrupt: %lld bytes, larger than any object", rel + 3,
                                  (long long)st.st_size);
        size_t flen = (size_t)st.st_size;
        _cleanup_free_ uint8_t *file = malloc(flen ? flen : 1);
        if (!file)
                return -ENOMEM;
        ssize_t k = read_full(fd, file, flen);
        if (k < 0)
                return store_fail((int)k, "object %s: read error: %s", rel + 3, strerror((int)-k));
        if (bytes_read)
                *bytes_read += (uint64_t)k;
        struct obj_header oh;
        int r = obj_header_parse(file, (size_t)k, &oh);
        if (r < 0) {
                char msg[512];
                snprintf(msg, sizeof msg, "object %s is corrupt: %s", rel + 3, store_error_detail());
                return store_fail(r, "%s", msg);
        }
        /* The header's kind is a hint only: identical bytes are one object whatever wrote them
         * first, and the decoders check their own magic. */
        uint8_t *plain = malloc((size_t)oh.plain_len + 1);
        if (!plain)
                return -ENOMEM;
        if (oh.codec == OBJ_CODEC_ZSTD) {
                struct zctx *z = zctx_get();
                if (!z) {
                        free(plain);
                        return -ENOMEM;
                }
                size_t n = ZSTD_decompressDCtx(z->d, plain, oh.plain_len, file + OBJ_HEADER, oh.stored_len);
                if (ZSTD_isError(n) || n != oh.plain_len) {
                        free(plain);
                        return store_fail(-EBADMSG, "object %s is corrupt: it does not decompress (%s)", rel + 3,
                                          ZSTD_isError(n) ? ZSTD_getErrorName(n) : "wrong length");
                }
        } else
                memcpy(plain, file + OBJ_HEADER, oh.plain_len);
        plain[oh.plain_len] = 0;
        if (!s->skip_hash_check) {
                struct store_hash got;
                store_sha256(plain, oh.plain_len, &got);
                if (!store_hash_eq(&got, h)) {
                        free(plain);
                        return store_fail(-EBADMSG, "object %s is corrupt: its content does not match its hash", rel + 3);
                }
        }
        *ret = plain;
        *ret_len = oh.plain_len;
        return 0;
}

int obj_encode(struct store *s, enum obj_kind kind, const void *plain, size_t len, void **ret, size_t *ret_len) {
        if (len > STORE_MAX_OBJECT)
                return -E2BIG;
        size_t bound = ZSTD_compressBound(len);
        uint8_t *out = malloc(OBJ_HEADER + MAX(bound, len));
        if (!out)
                return -ENOMEM;
        uint8_t codec = OBJ_CODEC_RAW;
        size_t stored = len;
        /* Tiny payloads never shrink enough to pay for a zstd frame; for big ones a probe
         * of the first 4 KiB spots data that is already compressed (media, archives) and
         * saves compressing it whole for nothing. */
        bool try_zstd = len >= 64;
        if (try_zstd && len >= 64 * 1024) {
                struct zctx *z = zctx_get();
                if (!z) {
                        free(out);
                        return -ENOMEM;
                }
                size_t n = ZSTD_compressCCtx(z->c, out + OBJ_HEADER, bound, plain, 4096, s->level);
                try_zstd = !ZSTD_isError(n) && n < 4096 - 4096 / 32;
        }
        if (try_zstd) {
                struct zctx *z = zctx_get();
                if (!z) {
                        free(out);
                        return -ENOMEM;
                }
                size_t n = ZSTD_compressCCtx(z->c, out + OBJ_HEADER, bound, plain, len, s->level);
                if (!ZSTD_isError(n) && n + n / 64 < len) {
                        codec = OBJ_CODEC_ZSTD;
                        stored = n;
                }
        }
        if (codec == OBJ_CODEC_RAW)
                memcpy(out + OBJ_HEADER, plain, len);
        memcpy(out, OBJ_MAGIC, 4);
        out[4] = OBJ_VERSION;
        out[5] = (uint8_t)kind;
        out[6] = codec;
        out[7] = 0;
        put_le32(out + 8, (uint32_t)len);
        put_le32(out + 12, (uint32_t)stored);
        *ret = out;
        *ret_len = OBJ_HEADER + stored;
        return 0;
}

int obj_exists(struct store *s, const struct store_hash *h) {
        char rel[STORE_HEX_LEN + 4];
        store_obj_relpath(h, rel);
        struct stat st;
        if (fstatat(s->objfd, rel, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return errno == ENOENT ? 0 : -errno;
        return S_ISREG(st.st_mode) && st.st_size >= OBJ_HEADER;
}

int tree_load(struct store *s, const struct store_hash *h, struct tree *ret, uint64_t *bytes_read) {
        _cleanup_free_ void *p = NULL;
        size_t n;
        int r = obj_read(s, h, OBJ_TREE, &p, &n, bytes_read);
        if (r < 0)
                return r;
        r = tree_decode(p, n, ret);
        if (r < 0) {
                char hex[STORE_HEX_LEN + 1], msg[512];
                store_hash_to_hex(h, hex);
                snprintf(msg, sizeof msg, "tree %s is corrupt: %s", hex, store_error_detail());
                return store_fail(r, "%s", msg);
        }
        return 0;
}

int snap_load(struct store *s, const struct store_hash *h, struct snap_record *ret) {
        _cleanup_free_ void *p = NULL;
        size_t n;
        int r = obj_read(s, h, OBJ_SNAPSHOT, &p, &n, NULL);
        if (r < 0)
                return r;
        r = snap_decode(p, n, ret);
        if (r < 0) {
                char hex[STORE_HEX_LEN + 1], msg[512];
                store_hash_to_hex(h, hex);
                snprintf(msg, sizeof msg, "snapshot record %s is corrupt: %s", hex, store_error_detail());
                return store_fail(r, "%s", msg);
        }
        ret->info.hash = *h;
        return 0;
}
