/* Small pieces every store file uses: error details, SHA-256, hex names, the hash set,
 * clocks and recursive removal. */
#include <dirent.h>
#include <fcntl.h>
#include <stdarg.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <openssl/evp.h>

#include "common/text.h"
#include "common/fdio.h"
#include "store/store-internal.h"

static __thread char error_detail[1024];

int store_fail(int r, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(error_detail, sizeof error_detail, fmt, ap);
        va_end(ap);
        return r;
}

void store_set_detail(const char *msg) { snprintf(error_detail, sizeof error_detail, "%s", msg ? msg : ""); }

const char *store_error_detail(void) { return error_detail; }

int store_random(void *buf, size_t n) {
        for (size_t got = 0; got < n;) {
                ssize_t k = getrandom((uint8_t *)buf + got, n - got, 0);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                got += (size_t)k;
        }
        return 0;
}

static EVP_MD *sha256_md;
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;

/* Fetching once avoids OpenSSL 3's per-call implicit fetch (a lock) on every chunk. */
static void sha256_init(void) { sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL); }

void store_sha256(const void *data, size_t len, struct store_hash *ret) {
        unsigned int n = 0;
        pthread_once(&sha256_once, sha256_init);
        const EVP_MD *md = sha256_md ? sha256_md : EVP_sha256();
        if (!EVP_Digest(data, len, ret->b, &n, md, NULL) || n != STORE_HASH_LEN)
                abort(); /* only on OpenSSL misconfiguration: nothing sensible to continue with */
}

void store_hash_to_hex(const struct store_hash *h, char out[STORE_HEX_LEN + 1]) {
        static const char digits[] = "0123456789abcdef";
        for (size_t i = 0; i < STORE_HASH_LEN; i++) {
                out[2 * i] = digits[h->b[i] >> 4];
                out[2 * i + 1] = digits[h->b[i] & 15];
        }
        out[STORE_HEX_LEN] = 0;
}

int store_hash_from_hex(const char *s, struct store_hash *ret) {
        struct store_hash h;
        if (!s || strlen(s) != STORE_HEX_LEN)
                return -EINVAL;
        for (size_t i = 0; i < STORE_HASH_LEN; i++) {
                int a = text_hex_digit(s[2 * i]), b = text_hex_digit(s[2 * i + 1]);
                if (a < 0 || b < 0)
                        return -EINVAL;
                h.b[i] = (uint8_t)(a << 4 | b);
        }
        *ret = h;
        return 0;
}

bool store_hash_eq(const struct store_hash *a, const struct store_hash *b) {
        return memcmp(a->b, b->b, STORE_HASH_LEN) == 0;
}

void store_obj_relpath(const struct store_hash *h, char out[STORE_HEX_LEN + 4]) {
        char hex[STORE_HEX_LEN + 1];
        store_hash_to_hex(h, hex);
        out[0] = hex[0];
        out[1] = hex[1];
        out[2] = '/';
        memcpy(out + 3, hex, STORE_HEX_LEN + 1);
}

static size_t hset_slot(const struct store_hash *h, size_t cap) {
        uint64_t v;
        memcpy(&v, h->b, sizeof v);
        return (size_t)v & (cap - 1);
}

static int hset_grow(struct hset *s) {
        size_t ncap = s->cap ? s->cap * 2 : 1024;
        struct store_hash *keys = calloc(ncap, sizeof *keys);
        uint8_t *vals = calloc(ncap, 1);
        if (!keys || !vals) {
                free(keys);
                free(vals);
                return -ENOMEM;
        }
        for (size_t i = 0; i < s->cap; i++) {
                if (!s->vals[i])
                        continue;
                size_t j = hset_slot(&s->keys[i], ncap);
                while (vals[j])
                        j = (j + 1) & (ncap - 1);
                keys[j] = s->keys[i];
                vals[j] = s->vals[i];
        }
        free(s->keys);
        free(s->vals);
        s->keys = keys;
        s->vals = vals;
        s->cap = ncap;
        return 0;
}

int hset_add(struct hset *s, const struct store_hash *h, uint8_t v) {
        if (v == 0)
                return -EINVAL;
        if ((s->n + 1) * 4 > s->cap * 3) {
                int r = hset_grow(s);
                if (r < 0)
                        return r;
        }
        size_t j = hset_slot(h, s->cap);
        while (s->vals[j]) {
                if (store_hash_eq(&s->keys[j], h))
                        return 0;
                j = (j + 1) & (s->cap - 1);
        }
        s->keys[j] = *h;
        s->vals[j] = v;
        s->n++;
        return 1;
}

uint8_t hset_get(const struct hset *s, const struct store_hash *h) {
        if (!s->cap)
                return 0;
        size_t j = hset_slot(h, s->cap);
        while (s->vals[j]) {
                if (store_hash_eq(&s->keys[j], h))
                        return s->vals[j];
                j = (j + 1) & (s->cap - 1);
        }
        return 0;
}

void hset_free(struct hset *s) {
        free(s->keys);
        free(s->vals);
        *s = (struct hset){ 0 };
}

int64_t store_now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int store_rm_rf_at(int dfd, const char *name) {
        struct stat st;
        if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return errno == ENOENT ? 0 : -errno;
        if (!S_ISDIR(st.st_mode))
                return unlinkat(dfd, name, 0) < 0 && errno != ENOENT ? -errno : 0;
        int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        DIR *d;
        int r = fdio_fdopendir(fd, &d);
        if (r < 0)
                return r;
        struct dirent *de;
        while ((de = readdir(d))) {
                if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                        continue;
                int k = store_rm_rf_at(dirfd(d), de->d_name);
                if (k < 0 && r == 0)
                        r = k;
        }
        closedir(d);
        if (unlinkat(dfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT && r == 0)
                r = -errno;
        return r;
}

const char *store_reason_name(enum store_reason r) {
        static const char *const names[] = { "manual", "rolling", "pause", "fork" };
        return (unsigned)r < ELEMENTSOF(names) ? names[r] : "unknown";
}

int store_reason_from_name(const char *name, enum store_reason *ret) {
        for (int r = 0; r < _STORE_REASON_MAX; r++)
                if (name && !strcmp(name, store_reason_name((enum store_reason)r))) {
                        *ret = (enum store_reason)r;
                        return 0;
                }
        return -EINVAL;
}

const char *obj_kind_name(enum obj_kind k) {
        static const char *const names[] = { "chunk", "tree", "snapshot", "memory image" };
        return (unsigned)k < ELEMENTSOF(names) ? names[k] : "object";
}
