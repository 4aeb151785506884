/* Objects: zstd with per-thread contexts, and loading of decoded objects (trees, snapshot
 * records). Where objects live and how they are found is pack.c. */
#include <pthread.h>
#include <string.h>
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

int z_compress(const void *src, size_t n, void *dst, size_t cap, int level, size_t *ret_n) {
        struct zctx *z = zctx_get();
        if (!z)
                return -ENOMEM;
        size_t k = ZSTD_compressCCtx(z->c, dst, cap, src, n, level);
        *ret_n = ZSTD_isError(k) ? 0 : k;
        return 0;
}

int z_decompress(const void *src, size_t n, void *dst, size_t plain_len) {
        struct zctx *z = zctx_get();
        if (!z)
                return -ENOMEM;
        size_t k = ZSTD_decompressDCtx(z->d, dst, plain_len, src, n);
        if (ZSTD_isError(k) || k != plain_len)
                return store_fail(-EBADMSG, "zstd: %s", ZSTD_isError(k) ? ZSTD_getErrorName(k) : "wrong length");
        return 0;
}

int tree_load_op(struct store *s, const struct store_hash *h, uint64_t op, struct tree *ret, uint64_t *bytes_read) {
        _cleanup_free_ void *p = NULL;
        size_t n;
        int r = obj_read_op(s, h, OBJ_TREE, op, &p, &n, bytes_read);
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

int tree_load(struct store *s, const struct store_hash *h, struct tree *ret, uint64_t *bytes_read) {
        return tree_load_op(s, h, 0, ret, bytes_read);
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
