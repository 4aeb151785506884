/* Objects: loading of decoded objects (trees, snapshot records). Where objects live and
 * how they are found is pack.c; how they are compressed is zstd.c. */
#include <string.h>

#include "store/store-internal.h"

/* r from decoding object h (what: its kind, for people), with the decoder's detail. */
static int corrupt(int r, const char *what, const struct store_hash *h) {
        char hex[STORE_HEX_LEN + 1], msg[512];
        store_hash_to_hex(h, hex);
        /* the detail is copied first: store_fail overwrites it */
        snprintf(msg, sizeof msg, "%s %s is corrupt: %s", what, hex, store_error_detail());
        return store_fail(r, "%s", msg);
}

int tree_load_op(struct store *s, const struct store_hash *h, uint64_t op, struct tree *ret, uint64_t *bytes_read) {
        _cleanup_free_ void *p = NULL;
        size_t n;
        int r = obj_read_op(s, h, OBJ_TREE, op, &p, &n, bytes_read);
        if (r < 0)
                return r;
        r = tree_decode(p, n, ret);
        return r < 0 ? corrupt(r, "tree", h) : 0;
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
        if (r < 0)
                return corrupt(r, "snapshot record", h);
        ret->info.hash = *h;
        return 0;
}
