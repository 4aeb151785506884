/* Overlayfs semantics on trees: what a whiteout and an opaque directory are in a tree, and
 * the bookkeeping shared by the capture of an upper layer over a base snapshot and the
 * materialization of a snapshot as an upper layer over a base (docs/store.md, "Layers"). */
#include <stdlib.h>
#include <string.h>

#include "store/store-internal.h"

bool ovl_whiteout(const struct t_entry *e) { return e->type == T_CHR && e->major == 0 && e->minor == 0; }

bool ovl_opaque(const struct t_entry *e) {
        if (e->type != T_DIR)
                return false;
        for (uint32_t i = 0; i < e->nxattr; i++)
                if (!strcmp(e->xattrs[i].name, OVL_OPAQUE_XATTR))
                        return e->xattrs[i].vlen == 1 && e->xattrs[i].value[0] == 'y';
        return false;
}

int ovl_with_opaque(const struct t_entry *e, struct t_xattr **ret) {
        struct t_xattr *v = calloc(e->nxattr + 1u, sizeof *v);
        if (!v)
                return -ENOMEM;
        static const uint8_t y = 'y';
        uint32_t k = 0;
        bool put = false;
        for (uint32_t i = 0; i < e->nxattr; i++) {
                int c = strcmp(e->xattrs[i].name, OVL_OPAQUE_XATTR);
                if (c > 0 && !put) {
                        v[k++] = (struct t_xattr){ .name = OVL_OPAQUE_XATTR, .value = &y, .vlen = 1 };
                        put = true;
                }
                if (c == 0) {
                        v[k++] = (struct t_xattr){ .name = OVL_OPAQUE_XATTR, .value = &y, .vlen = 1 };
                        put = true;
                } else
                        v[k++] = e->xattrs[i];
        }
        if (!put)
                v[k++] = (struct t_xattr){ .name = OVL_OPAQUE_XATTR, .value = &y, .vlen = 1 };
        *ret = v;
        return (int)k;
}

int ovl_count(struct store *s, const struct t_entry *e, uint64_t op, unsigned depth, uint64_t *files,
              uint64_t *bytes) {
        if (e->type == T_REG) {
                (*files)++;
                *bytes += e->size;
                return 0;
        }
        if (e->type != T_DIR)
                return 0;
        if (depth > STORE_MAX_DEPTH)
                return store_fail(-ELOOP, "trees nested deeper than %u", STORE_MAX_DEPTH);
        struct tree t;
        int r = tree_load_op(s, &e->tree, op, &t, NULL);
        if (r < 0)
                return r;
        for (size_t i = 0; i < t.n && r == 0; i++)
                r = ovl_count(s, &t.e[i], op, depth + 1, files, bytes);
        tree_free(&t);
        return r;
}
