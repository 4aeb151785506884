/* The remote tier's S3 backend: each call of struct store_remote_ops is one call of the
 * S3 client (s3.h), which signs, retries and bounds it. One struct s3 (one libcurl
 * handle) per store_remote, so each worker thread of a push or pull clones its own. */
#include "store/remote-s3.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/macros.h"

struct remote_s3 {
        struct store_remote base; /* first: the store sees only this */
        struct s3 *s3;
};

static struct s3 *S(struct store_remote *r) { return ((struct remote_s3 *)r)->s3; }

static int rs3_put(struct store_remote *r, const char *key, const void *data, size_t n) {
        return s3_put(S(r), key, data, n);
}

static int rs3_get(struct store_remote *r, const char *key, size_t max, void **ret_data, size_t *ret_n) {
        return s3_get(S(r), key, max, ret_data, ret_n);
}

static int rs3_head(struct store_remote *r, const char *key, uint64_t *ret_size, int64_t *ret_mtime) {
        return s3_head_mtime(S(r), key, ret_size, ret_mtime);
}

struct list_ud {
        int (*fn)(void *ud, const char *key, uint64_t size, int64_t mtime);
        void *ud;
};

static int list_cb(const char *key, uint64_t size, int64_t mtime, void *ud) {
        struct list_ud *l = ud;
        return l->fn(l->ud, key, size, mtime);
}

static int rs3_list(struct store_remote *r, const char *prefix,
                    int (*fn)(void *ud, const char *key, uint64_t size, int64_t mtime), void *ud) {
        struct list_ud l = { fn, ud };
        return s3_list(S(r), prefix, 0, list_cb, &l);
}

static int rs3_del(struct store_remote *r, const char *key) { return s3_delete(S(r), key); }

static void rs3_free(struct store_remote *r) {
        struct remote_s3 *x = (struct remote_s3 *)r;
        s3_free(x->s3);
        free(x);
}

static const char *rs3_last_error(const struct store_remote *r) {
        return s3_last_error(((const struct remote_s3 *)r)->s3);
}

static int rs3_clone(struct store_remote *r, struct store_remote **ret) {
        struct remote_s3 *x = calloc(1, sizeof *x);
        if (!x)
                return -ENOMEM;
        x->base = *r; /* its ops and name */
        int e = s3_clone(S(r), &x->s3);
        if (e < 0) {
                free(x);
                return e;
        }
        *ret = &x->base;
        return 0;
}

static const struct store_remote_ops rs3_ops = {
        .put = rs3_put, .get = rs3_get, .head = rs3_head, .list = rs3_list, .del = rs3_del,
        .clone = rs3_clone, .free = rs3_free, .last_error = rs3_last_error,
};

int store_remote_s3_new(const struct s3_config *c, struct store_remote **ret) {
        if (!c || !c->endpoint || !c->region || !c->access_key || !c->secret_key || !c->bucket || !ret)
                return -EINVAL;
        struct remote_s3 *x = calloc(1, sizeof *x);
        if (!x)
                return -ENOMEM;
        x->base.ops = &rs3_ops;
        /* the name keys the known list: the same bucket whatever the endpoint's spelling ends with */
        size_t el = strlen(c->endpoint), bl = strlen(c->bucket);
        while (el > 0 && c->endpoint[el - 1] == '/')
                el--;
        if (el + bl + 2 > sizeof x->base.name) {
                rs3_free(&x->base);
                return -EINVAL;
        }
        memcpy(x->base.name, c->endpoint, el);
        x->base.name[el] = '/';
        memcpy(x->base.name + el + 1, c->bucket, bl + 1);
        int r = s3_new(c, &x->s3);
        if (r < 0) {
                rs3_free(&x->base);
                return r;
        }
        *ret = &x->base;
        return 0;
}
