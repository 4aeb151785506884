/* Reachability: the one walk that verify and GC share. It follows snapshot records to
 * their root tree and memory image, trees to their subtrees and chunks, and memory images
 * to their chunks. Parent links are not followed: a live snapshot keeps its own data, not
 * its ancestors. */
#include <stdio.h>
#include <string.h>

#include "store/store-internal.h"

static int seen_add(struct reach *r, const struct store_hash *h, enum obj_kind kind) {
        int k = hset_add(r->seen, h, (uint8_t)(kind + 1));
        return k; /* 1 new, 0 seen, <0 error */
}

static int report(struct reach *r, const struct store_hash *h, enum obj_kind kind, const char *path, int err) {
        return r->on_err ? r->on_err(r->ud, h, kind, path, err) : err;
}

static int visit(struct reach *r, const struct store_hash *h, enum obj_kind kind, const char *path) {
        int k = seen_add(r, h, kind);
        if (k <= 0)
                return k;
        if (r->on_obj) {
                int x = r->on_obj(r->ud, h, kind, path);
                if (x < 0)
                        return x;
        }
        return 1;
}

static int reach_tree(struct reach *r, const struct store_hash *h, const char *path) {
        for (unsigned i = 0; i < r->depth; i++)
                if (store_hash_eq(&r->stack[i], h)) {
                        char hex[STORE_HEX_LEN + 1];
                        store_hash_to_hex(h, hex);
                        store_fail(-ELOOP, "tree %s refers to itself (at %s)", hex, path);
                        return report(r, h, OBJ_TREE, path, -ELOOP);
                }
        if (r->depth > STORE_MAX_DEPTH) {
                store_fail(-ELOOP, "%s: trees nested deeper than %u", path, STORE_MAX_DEPTH);
                return report(r, h, OBJ_TREE, path, -ELOOP);
        }
        int k = visit(r, h, OBJ_TREE, path);
        if (k <= 0)
                return k;
        struct tree t;
        k = tree_load_op(r->s, h, r->op, &t, NULL);
        if (k < 0)
                return report(r, h, OBJ_TREE, path, k);
        r->stack[r->depth++] = *h;
        for (size_t i = 0; i < t.n && k >= 0; i++) {
                const struct t_entry *e = &t.e[i];
                _cleanup_free_ char *p = NULL;
                if (asprintf(&p, "%s%s%s", path, *path ? "/" : "", e->name) < 0) {
                        k = -ENOMEM;
                        break;
                }
                if (e->type == T_DIR)
                        k = reach_tree(r, &e->tree, p);
                else if (e->type == T_REG)
                        for (uint32_t c = 0; c < e->nchunks && k >= 0; c++)
                                k = visit(r, &e->chunks[c].hash, OBJ_CHUNK, p);
        }
        r->depth--;
        tree_free(&t);
        return k < 0 ? k : 0;
}

int reach_object(struct reach *r, const struct store_hash *h, const char *path) {
        _cleanup_free_ uint8_t *p = NULL;
        size_t n;
        if (hset_get(r->seen, h))
                return 0;
        int k = obj_read(r->s, h, -1, (void **)&p, &n, NULL);
        if (k < 0)
                return report(r, h, OBJ_SNAPSHOT, path, k);
        if (n >= 4 && !memcmp(p, TREE_MAGIC, 4))
                return reach_tree(r, h, path);
        if (n >= 4 && !memcmp(p, MEM_MAGIC, 4)) {
                k = visit(r, h, OBJ_MEMORY, path);
                if (k <= 0)
                        return k;
                struct mem_image m;
                k = mem_decode(p, n, &m);
                if (k < 0)
                        return report(r, h, OBJ_MEMORY, path, k);
                for (uint32_t i = 0; i < m.n && k >= 0; i++)
                        k = visit(r, &m.chunks[i].hash, OBJ_CHUNK, path);
                free(m.chunks);
                return k < 0 ? k : 0;
        }
        struct snap_record rec;
        k = snap_decode(p, n, &rec);
        if (k < 0) {
                char hex[STORE_HEX_LEN + 1], msg[600];
                store_hash_to_hex(h, hex);
                snprintf(msg, sizeof msg, "snapshot record %s is corrupt: %s", hex, store_error_detail());
                store_set_detail(msg);
                return report(r, h, OBJ_SNAPSHOT, path, k);
        }
        k = visit(r, h, OBJ_SNAPSHOT, path);
        if (k > 0 && rec.info.has_memory)
                k = reach_object(r, &rec.info.memory, path);
        if (k >= 0)
                k = reach_tree(r, &rec.root.tree, path);
        snap_record_free(&rec);
        return k < 0 ? k : 0;
}

/* A delta whose block cannot be read protects nothing (it is lost either way; verify
 * names it); a forged chain is followed until nothing new is added. */
int reach_delta_bases(struct store *s, struct hset *seen) {
        struct pack **packs;
        size_t np;
        int r = packs_snapshot(s, true, &packs, &np);
        if (r < 0)
                return r;
        for (bool more = true; more && r >= 0;) {
                more = false;
                for (size_t i = 0; i < np && r >= 0; i++)
                        for (size_t j = 0; j < packs[i]->n && r >= 0; j++) {
                                const struct pack_ent *e = &packs[i]->e[j];
                                struct store_hash base;
                                if (!e->delta || !hset_get(seen, &e->hash))
                                        continue;
                                int k = pack_delta_base(s, packs[i], e, &base);
                                if (k == -ENOMEM)
                                        r = k;
                                if (k <= 0)
                                        continue;
                                k = hset_add(seen, &base, OBJ_CHUNK + 1);
                                if (k < 0)
                                        r = k;
                                more = more || k > 0;
                        }
        }
        packs_release(packs, np);
        return r;
}
