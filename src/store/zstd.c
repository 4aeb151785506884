/* The store's zstd: one compression and one decompression context per thread, made on
 * first use, the size bound callers allocate for, and the look at a payload's start that
 * says whether compressing it pays. The rest of the store uses zstd only through here. */
#include <pthread.h>
#include <zstd.h>

#include "store/store-internal.h"

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

size_t z_bound(size_t n) { return ZSTD_compressBound(n); }

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

/* Big payloads that are already compressed (media, archives) are spotted from their
 * first 4 KiB and stored raw without compressing them whole for nothing. */
bool z_worth_compressing(int level, const void *p, size_t len) {
        if (len < 64 * 1024)
                return true;
        uint8_t out[ZSTD_COMPRESSBOUND(4096)];
        size_t n;
        if (z_compress(p, 4096, out, sizeof out, level, &n) < 0)
                return true;
        return n && n < 4096 - 4096 / 32;
}
