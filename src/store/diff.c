/* diff: walks two snapshots' trees side by side in name order. Subtrees with the same hash
 * are skipped without loading, so the cost follows what changed. */
#include <stdio.h>
#include <string.h>

#include "store/store-internal.h"

struct dctx {
        struct store *s;
        store_diff_fn fn;
        void *ud;
};

static bool xattrs_equal(const struct t_entry *a, const struct t_entry *b) {
        if (a->nxattr != b->nxattr)
                return false;
        for (uint32_t i = 0; i < a->nxattr; i++)
                if (strcmp(a->xattrs[i].name, b->xattrs[i].name) || a->xattrs[i].vlen != b->xattrs[i].vlen ||
                    (a->xattrs[i].vlen && memcmp(a->xattrs[i].value, b->xattrs[i].value, a->xattrs[i].vlen)))
                        return false;
        return true;
}

bool tree_entry_same(const struct t_entry *a, const struct t_entry *b) {
        if (a->type != b->type || a->mode != b->mode || a->uid != b->uid || a->gid != b->gid ||
            a->mtime_sec != b->mtime_sec || a->mtime_nsec != b->mtime_nsec || !xattrs_equal(a, b))
                return false;
        switch (a->type) {
        case T_REG:
                if (a->size != b->size || a->nchunks != b->nchunks || (!a->link) != (!b->link))
                        return false;
                for (uint32_t i = 0; i < a->nchunks; i++)
                        if (a->chunks[i].off != b->chunks[i].off || a->chunks[i].len != b->chunks[i].len ||
                            !store_hash_eq(&a->chunks[i].hash, &b->chunks[i].hash))
                                return false;
                return true;
        case T_LNK:
                return !strcmp(a->target, b->target);
        case T_CHR:
        case T_BLK:
                return a->major == b->major && a->minor == b->minor;
        default:
                return true;
        }
}

static int emit(struct dctx *d, enum store_change c, const char *path) { return d->fn(d->ud, c, path); }

static char *join(const char *dir, const char *name) {
        char *p;
        return asprintf(&p, "%s%s%s", dir, *dir ? "/" : "", name) < 0 ? NULL : p;
}

/* Reports every entry below tree h as c. */
static int all_below(struct dctx *d, const struct store_hash *h, const char *path, enum store_change c, unsigned depth) {
        if (depth > STORE_MAX_DEPTH)
                return store_fail(-ELOOP, "%s: trees nested deeper than %u", path, STORE_MAX_DEPTH);
        struct tree t;
        int r = tree_load(d->s, h, &t, NULL);
        if (r < 0)
                return r;
        for (size_t i = 0; i < t.n && r >= 0; i++) {
                _cleanup_free_ char *p = join(path, t.e[i].name);
                if (!p) {
                        r = -ENOMEM;
                        break;
                }
                r = emit(d, c, p);
                if (r >= 0 && t.e[i].type == T_DIR)
                        r = all_below(d, &t.e[i].tree, p, c, depth + 1);
        }
        tree_free(&t);
        return r;
}

static int diff_tree(struct dctx *d, const struct store_hash *ha, const struct store_hash *hb, const char *path,
                     unsigned depth) {
        if (store_hash_eq(ha, hb))
                return 0;
        if (depth > STORE_MAX_DEPTH)
                return store_fail(-ELOOP, "%s: trees nested deeper than %u", path, STORE_MAX_DEPTH);
        struct tree a, b;
        int r = tree_load(d->s, ha, &a, NULL);
        if (r < 0)
                return r;
        r = tree_load(d->s, hb, &b, NULL);
        if (r < 0) {
                tree_free(&a);
                return r;
        }
        size_t i = 0, j = 0;
        while (r >= 0 && (i < a.n || j < b.n)) {
                int k = i >= a.n ? 1 : j >= b.n ? -1 : strcmp(a.e[i].name, b.e[j].name);
                const struct t_entry *ea = k <= 0 ? &a.e[i] : NULL, *eb = k >= 0 ? &b.e[j] : NULL;
                _cleanup_free_ char *p = join(path, (ea ? ea : eb)->name);
                if (!p) {
                        r = -ENOMEM;
                        break;
                }
                if (!eb) {
                        r = emit(d, STORE_REMOVED, p);
                        if (r >= 0 && ea->type == T_DIR)
                                r = all_below(d, &ea->tree, p, STORE_REMOVED, depth + 1);
                } else if (!ea) {
                        r = emit(d, STORE_ADDED, p);
                        if (r >= 0 && eb->type == T_DIR)
                                r = all_below(d, &eb->tree, p, STORE_ADDED, depth + 1);
                } else if (ea->type != eb->type) {
                        r = emit(d, STORE_MODIFIED, p);
                        if (r >= 0 && ea->type == T_DIR)
                                r = all_below(d, &ea->tree, p, STORE_REMOVED, depth + 1);
                        if (r >= 0 && eb->type == T_DIR)
                                r = all_below(d, &eb->tree, p, STORE_ADDED, depth + 1);
                } else {
                        if (!tree_entry_same(ea, eb))
                                r = emit(d, STORE_MODIFIED, p);
                        if (r >= 0 && ea->type == T_DIR)
                                r = diff_tree(d, &ea->tree, &eb->tree, p, depth + 1);
                }
                if (k <= 0)
                        i++;
                if (k >= 0)
                        j++;
        }
        tree_free(&a);
        tree_free(&b);
        return r;
}

int store_diff(struct store *s, const struct store_hash *a, const struct store_hash *b, store_diff_fn fn,
               void *userdata) {
        struct snap_record ra, rb;
        int r = snap_load(s, a, &ra);
        if (r < 0)
                return r;
        r = snap_load(s, b, &rb);
        if (r < 0) {
                snap_record_free(&ra);
                return r;
        }
        struct dctx d = { .s = s, .fn = fn, .ud = userdata };
        if (!tree_entry_same(&ra.root, &rb.root))
                r = emit(&d, STORE_MODIFIED, ".");
        if (r >= 0)
                r = diff_tree(&d, &ra.root.tree, &rb.root.tree, "", 0);
        snap_record_free(&ra);
        snap_record_free(&rb);
        return r < 0 ? r : 0;
}
