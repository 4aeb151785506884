/* Canonical encodings of trees, snapshot records and memory images, and their strict
 * decoders. Everything is little-endian and length-prefixed; a decoder checks every
 * length against both the input left and a named limit before it trusts it. */
#include <string.h>

#include "store/store-internal.h"

#define ENTRY_MIN_BYTES 40u /* smallest encoded entry: bounds the count a header may claim */

bool tree_name_valid(const char *name, size_t len) {
        if (len == 0 || len > STORE_MAX_NAME)
                return false;
        if ((len == 1 && name[0] == '.') || (len == 2 && name[0] == '.' && name[1] == '.'))
                return false;
        return !memchr(name, '/', len) && !memchr(name, 0, len);
}

static int name_cmp(const char *a, size_t al, const char *b, size_t bl) {
        int c = memcmp(a, b, MIN(al, bl));
        return c ? c : (al < bl ? -1 : al > bl ? 1 : 0);
}

/* ---- encoding ---- */

struct enc {
        struct buf *b;
        int err;
};

static void e_put(struct enc *e, const void *p, size_t n) {
        if (!e->err)
                e->err = buf_append(e->b, p, n);
}
static void e_u8(struct enc *e, uint8_t v) { e_put(e, &v, 1); }
static void e_u16(struct enc *e, uint16_t v) {
        uint8_t p[2];
        put_le16(p, v);
        e_put(e, p, 2);
}
static void e_u32(struct enc *e, uint32_t v) {
        uint8_t p[4];
        put_le32(p, v);
        e_put(e, p, 4);
}
static void e_u64(struct enc *e, uint64_t v) {
        uint8_t p[8];
        put_le64(p, v);
        e_put(e, p, 8);
}

static int entry_check(const struct t_entry *x, bool root) {
        size_t nl = strlen(x->name);
        if (root ? nl != 0 || x->type != T_DIR : !tree_name_valid(x->name, nl))
                return -EINVAL;
        if (x->type < T_REG || x->type > T_SOCK || (x->mode & ~07777u) || x->mtime_nsec >= 1000000000u)
                return -EINVAL;
        if (x->link && x->type != T_REG)
                return -EINVAL;
        if (x->nxattr > STORE_MAX_XATTRS)
                return -E2BIG;
        for (uint32_t i = 0; i < x->nxattr; i++) {
                size_t l = strlen(x->xattrs[i].name);
                if (l == 0 || l > STORE_MAX_XATTR_NAME || x->xattrs[i].vlen > STORE_MAX_XATTR_VALUE)
                        return -EINVAL;
                if (i > 0 && strcmp(x->xattrs[i - 1].name, x->xattrs[i].name) >= 0)
                        return -EINVAL;
        }
        if (x->type == T_REG) {
                if (x->size > STORE_MAX_FILE_SIZE)
                        return -EFBIG;
                uint64_t end = 0;
                for (uint32_t i = 0; i < x->nchunks; i++) {
                        const struct t_chunk *c = &x->chunks[i];
                        if (c->len == 0 || c->len > STORE_CHUNK_MAX || c->off < end || c->off + c->len > x->size)
                                return -EINVAL;
                        end = c->off + c->len;
                }
        }
        if (x->type == T_LNK) {
                size_t tl = x->target ? strlen(x->target) : 0;
                if (tl == 0 || tl > STORE_MAX_TARGET)
                        return -EINVAL;
        }
        return 0;
}

static void entry_put(struct enc *e, const struct t_entry *x) {
        size_t nl = strlen(x->name);
        e_u8(e, x->type);
        e_u16(e, (uint16_t)nl);
        e_put(e, x->name, nl);
        e_u32(e, x->mode);
        e_u32(e, x->uid);
        e_u32(e, x->gid);
        e_u64(e, (uint64_t)x->mtime_sec);
        e_u32(e, x->mtime_nsec);
        e_u64(e, x->link);
        e_u32(e, x->nxattr);
        for (uint32_t i = 0; i < x->nxattr; i++) {
                size_t l = strlen(x->xattrs[i].name);
                e_u16(e, (uint16_t)l);
                e_put(e, x->xattrs[i].name, l);
                e_u32(e, x->xattrs[i].vlen);
                if (x->xattrs[i].vlen)
                        e_put(e, x->xattrs[i].value, x->xattrs[i].vlen);
        }
        switch (x->type) {
        case T_REG:
                e_u64(e, x->size);
                e_u32(e, x->nchunks);
                for (uint32_t i = 0; i < x->nchunks; i++) {
                        e_u64(e, x->chunks[i].off);
                        e_u32(e, x->chunks[i].len);
                        e_put(e, x->chunks[i].hash.b, STORE_HASH_LEN);
                }
                break;
        case T_DIR:
                e_put(e, x->tree.b, STORE_HASH_LEN);
                break;
        case T_LNK: {
                size_t tl = strlen(x->target);
                e_u16(e, (uint16_t)tl);
                e_put(e, x->target, tl);
                break;
        }
        case T_CHR:
        case T_BLK:
                e_u32(e, x->major);
                e_u32(e, x->minor);
                break;
        default:
                break;
        }
}

static void header_put(struct enc *e, const char *magic) {
        e_put(e, magic, 4);
        e_u8(e, ENC_VERSION);
        e_u8(e, 0);
        e_u16(e, 0);
}

int tree_encode(const struct t_entry *e, size_t n, struct buf *b) {
        if (n > STORE_MAX_DIR_ENTRIES)
                return -E2BIG;
        for (size_t i = 0; i < n; i++) {
                int r = entry_check(&e[i], false);
                if (r < 0)
                        return r;
                if (i > 0 && name_cmp(e[i - 1].name, strlen(e[i - 1].name), e[i].name, strlen(e[i].name)) >= 0)
                        return -EINVAL;
        }
        struct enc en = { .b = b };
        header_put(&en, TREE_MAGIC);
        e_u32(&en, (uint32_t)n);
        for (size_t i = 0; i < n; i++)
                entry_put(&en, &e[i]);
        if (!en.err && b->len > STORE_MAX_OBJECT)
                en.err = -E2BIG;
        return en.err;
}

/* ---- decoding: pass one checks and counts, pass two fills the arena ---- */

struct dec {
        const uint8_t *p;
        size_t left;
};

static const uint8_t *d_take(struct dec *d, size_t n) {
        if (n > d->left)
                return NULL;
        const uint8_t *p = d->p;
        d->p += n;
        d->left -= n;
        return p;
}

#define D_GET(d, n, var)                                  \
        const uint8_t *var = d_take((d), (n));             \
        if (!var)                                          \
                return store_fail(-EBADMSG, "truncated")

struct arena_need {
        size_t chunks, xattrs, strbytes, values;
};

struct arena {
        struct t_chunk *chunks;
        struct t_xattr *xattrs;
        char *str;
        uint8_t *values;
};

static char *arena_str(struct arena *a, const uint8_t *p, size_t n) {
        char *s = a->str;
        memcpy(s, p, n);
        s[n] = 0;
        a->str += n + 1;
        return s;
}

/* Decodes one entry. With a == NULL only validates and adds to need. */
static int entry_get(struct dec *d, bool root, struct t_entry *x, struct arena_need *need, struct arena *a) {
        D_GET(d, 1, tp);
        uint8_t type = tp[0];
        if (type < T_REG || type > T_SOCK)
                return store_fail(-EBADMSG, "unknown entry type %u", type);
        D_GET(d, 2, nlp);
        uint16_t nl = get_le16(nlp);
        D_GET(d, nl, name);
        if (root ? nl != 0 || type != T_DIR : !tree_name_valid((const char *)name, nl))
                return store_fail(-EBADMSG, "invalid entry name \"%.*s\"", (int)MIN(nl, 64), (const char *)name);
        D_GET(d, 4 + 4 + 4 + 8 + 4 + 8 + 4, fixed);
        uint32_t mode = get_le32(fixed), nsec = get_le32(fixed + 20), nx = get_le32(fixed + 32);
        uint64_t link = get_le64(fixed + 24);
        if (mode & ~07777u)
                return store_fail(-EBADMSG, "entry \"%.*s\": invalid mode %o", (int)nl, (const char *)name, mode);
        if (nsec >= 1000000000u)
                return store_fail(-EBADMSG, "entry \"%.*s\": invalid mtime", (int)nl, (const char *)name);
        if (link && type != T_REG)
                return store_fail(-EBADMSG, "entry \"%.*s\": hard link on a non-file", (int)nl, (const char *)name);
        if (nx > STORE_MAX_XATTRS)
                return store_fail(-EBADMSG, "entry \"%.*s\": %u xattrs (limit %u)", (int)nl, (const char *)name, nx,
                                  STORE_MAX_XATTRS);
        if (a) {
                x->type = type;
                x->name = arena_str(a, name, nl);
                x->mode = mode;
                x->uid = get_le32(fixed + 4);
                x->gid = get_le32(fixed + 8);
                x->mtime_sec = (int64_t)get_le64(fixed + 12);
                x->mtime_nsec = nsec;
                x->link = link;
                x->nxattr = nx;
                x->xattrs = nx ? a->xattrs : NULL;
                a->xattrs += nx;
        } else {
                need->strbytes += nl + 1u;
                need->xattrs += nx;
        }
        const uint8_t *prev = NULL;
        uint16_t prevl = 0;
        for (uint32_t i = 0; i < nx; i++) {
                D_GET(d, 2, xlp);
                uint16_t xl = get_le16(xlp);
                D_GET(d, xl, xn);
                if (xl == 0 || xl > STORE_MAX_XATTR_NAME || memchr(xn, 0, xl))
                        return store_fail(-EBADMSG, "entry \"%.*s\": invalid xattr name", (int)nl, (const char *)name);
                if (prev && name_cmp((const char *)prev, prevl, (const char *)xn, xl) >= 0)
                        return store_fail(-EBADMSG, "entry \"%.*s\": xattrs not in order", (int)nl, (const char *)name);
                prev = xn;
                prevl = xl;
                D_GET(d, 4, vlp);
                uint32_t vl = get_le32(vlp);
                if (vl > STORE_MAX_XATTR_VALUE)
                        return store_fail(-EBADMSG, "entry \"%.*s\": xattr value of %u bytes (limit %u)", (int)nl,
                                          (const char *)name, vl, STORE_MAX_XATTR_VALUE);
                D_GET(d, vl, val);
                if (a) {
                        x->xattrs[i].name = arena_str(a, xn, xl);
                        x->xattrs[i].vlen = vl;
                        x->xattrs[i].value = vl ? a->values : NULL;
                        memcpy(a->values, val, vl);
                        a->values += vl;
                } else {
                        need->strbytes += xl + 1u;
                        need->values += vl;
                }
        }
        switch (type) {
        case T_REG: {
                D_GET(d, 12, rp);
                uint64_t size = get_le64(rp);
                uint32_t nc = get_le32(rp + 8);
                if (size > STORE_MAX_FILE_SIZE)
                        return store_fail(-EBADMSG, "entry \"%.*s\": size %llu over the limit", (int)nl,
                                          (const char *)name, (unsigned long long)size);
                /* A chunk covers at least one byte, so more chunks than bytes is impossible;
                 * the input-size check stops a tiny object from claiming a huge array. */
                if (nc > size || (size_t)nc > d->left / 44)
                        return store_fail(-EBADMSG, "entry \"%.*s\": chunk list longer than the file", (int)nl,
                                          (const char *)name);
                if (a) {
                        x->size = size;
                        x->nchunks = nc;
                        x->chunks = nc ? a->chunks : NULL;
                        a->chunks += nc;
                } else
                        need->chunks += nc;
                uint64_t end = 0;
                for (uint32_t i = 0; i < nc; i++) {
                        D_GET(d, 44, cp);
                        uint64_t off = get_le64(cp);
                        uint32_t len = get_le32(cp + 8);
                        if (len == 0 || len > STORE_CHUNK_MAX || off < end || off > size || len > size - off)
                                return store_fail(-EBADMSG,
                                                  "entry \"%.*s\": chunk %u (offset %llu, %u bytes) outside the file "
                                                  "or out of order",
                                                  (int)nl, (const char *)name, i, (unsigned long long)off, len);
                        end = off + len;
                        if (a) {
                                x->chunks[i].off = off;
                                x->chunks[i].len = len;
                                memcpy(x->chunks[i].hash.b, cp + 12, STORE_HASH_LEN);
                        }
                }
                break;
        }
        case T_DIR: {
                D_GET(d, STORE_HASH_LEN, hp);
                if (a)
                        memcpy(x->tree.b, hp, STORE_HASH_LEN);
                break;
        }
        case T_LNK: {
                D_GET(d, 2, tlp);
                uint16_t tl = get_le16(tlp);
                D_GET(d, tl, tgt);
                if (tl == 0 || tl > STORE_MAX_TARGET || memchr(tgt, 0, tl))
                        return store_fail(-EBADMSG, "entry \"%.*s\": invalid symlink target", (int)nl, (const char *)name);
                if (a)
                        x->target = arena_str(a, tgt, tl);
                else
                        need->strbytes += tl + 1u;
                break;
        }
        case T_CHR:
        case T_BLK: {
                D_GET(d, 8, dp);
                if (a) {
                        x->major = get_le32(dp);
                        x->minor = get_le32(dp + 4);
                }
                break;
        }
        default:
                break;
        }
        return 0;
}

static int header_get(struct dec *d, const char *magic, const char *what) {
        D_GET(d, 8, h);
        if (memcmp(h, magic, 4))
                return store_fail(-EBADMSG, "not a %s (bad magic)", what);
        if (h[4] != ENC_VERSION)
                return store_fail(-EBADMSG, "%s version %u is not supported (this build reads %u)", what, h[4],
                                  ENC_VERSION);
        if (h[5] || get_le16(h + 6))
                return store_fail(-EBADMSG, "%s: reserved header bytes are set", what);
        return 0;
}

static void *arena_alloc(const struct arena_need *need, size_t n_entries, struct t_entry **entries,
                         struct arena *a) {
        size_t sz_e = n_entries * sizeof(struct t_entry);
        size_t sz_c = need->chunks * sizeof(struct t_chunk);
        size_t sz_x = need->xattrs * sizeof(struct t_xattr);
        char *mem = calloc(1, sz_e + sz_c + sz_x + need->strbytes + need->values + 1);
        if (!mem)
                return NULL;
        *entries = (struct t_entry *)mem;
        a->chunks = (struct t_chunk *)(mem + sz_e);
        a->xattrs = (struct t_xattr *)(mem + sz_e + sz_c);
        a->str = mem + sz_e + sz_c + sz_x;
        a->values = (uint8_t *)(a->str + need->strbytes);
        return mem;
}

int tree_decode(const void *data, size_t len, struct tree *ret) {
        struct dec d = { data, len };
        int r = header_get(&d, TREE_MAGIC, "tree");
        if (r < 0)
                return r;
        D_GET(&d, 4, np);
        uint32_t n = get_le32(np);
        if (n > STORE_MAX_DIR_ENTRIES || n > d.left / ENTRY_MIN_BYTES)
                return store_fail(-EBADMSG, "tree claims %u entries, more than it can hold", n);
        struct arena_need need = { 0 };
        struct dec d1 = d;
        const uint8_t *prev = NULL;
        size_t prevl = 0;
        for (uint32_t i = 0; i < n; i++) {
                const uint8_t *start = d1.p;
                r = entry_get(&d1, false, NULL, &need, NULL);
                if (r < 0)
                        return r;
                const uint8_t *nm = start + 3;
                size_t nl = get_le16(start + 1);
                if (prev && name_cmp((const char *)prev, prevl, (const char *)nm, nl) >= 0)
                        return store_fail(-EBADMSG, "entries not in order or duplicated at \"%.*s\"", (int)nl,
                                          (const char *)nm);
                prev = nm;
                prevl = nl;
        }
        if (d1.left)
                return store_fail(-EBADMSG, "%zu trailing bytes after the last entry", d1.left);
        struct tree t = { .n = n };
        struct arena a;
        t.mem = arena_alloc(&need, n, &t.e, &a);
        if (!t.mem)
                return -ENOMEM;
        for (uint32_t i = 0; i < n; i++) {
                r = entry_get(&d, false, &t.e[i], NULL, &a);
                if (r < 0) { /* cannot happen after pass one; keep the check cheap and honest */
                        free(t.mem);
                        return r;
                }
        }
        *ret = t;
        return 0;
}

void tree_free(struct tree *t) {
        free(t->mem);
        *t = (struct tree){ 0 };
}

/* ---- snapshot records ---- */

int snap_encode(const struct snap_record *r, struct buf *b) {
        const struct store_snapshot_info *i = &r->info;
        size_t sl = strnlen(i->session, sizeof i->session), ll = strnlen(i->label, sizeof i->label);
        if (sl > STORE_MAX_SESSION || ll > STORE_MAX_LABEL || (unsigned)i->reason >= _STORE_REASON_MAX)
                return -EINVAL;
        int k = entry_check(&r->root, true);
        if (k < 0)
                return k;
        struct enc e = { .b = b };
        header_put(&e, SNAP_MAGIC);
        e_u8(&e, (uint8_t)i->reason);
        e_u8(&e, (uint8_t)((i->has_parent ? 1 : 0) | (i->has_memory ? 2 : 0)));
        e_u16(&e, 0);
        e_u64(&e, (uint64_t)i->time_ns);
        static const struct store_hash zero;
        e_put(&e, (i->has_parent ? &i->parent : &zero)->b, STORE_HASH_LEN);
        e_put(&e, (i->has_memory ? &i->memory : &zero)->b, STORE_HASH_LEN);
        e_u16(&e, (uint16_t)sl);
        e_put(&e, i->session, sl);
        e_u16(&e, (uint16_t)ll);
        e_put(&e, i->label, ll);
        e_u64(&e, i->files);
        e_u64(&e, i->bytes_logical);
        entry_put(&e, &r->root);
        return e.err;
}

int snap_decode(const void *data, size_t len, struct snap_record *ret) {
        struct dec d = { data, len };
        int r = header_get(&d, SNAP_MAGIC, "snapshot record");
        if (r < 0)
                return r;
        D_GET(&d, 4 + 8 + 2 * STORE_HASH_LEN, f);
        struct snap_record s = { 0 };
        if (f[0] >= _STORE_REASON_MAX || (f[1] & ~3u) || get_le16(f + 2))
                return store_fail(-EBADMSG, "snapshot record: invalid reason or flags");
        s.info.reason = (enum store_reason)f[0];
        s.info.has_parent = f[1] & 1;
        s.info.has_memory = f[1] & 2;
        s.info.time_ns = (int64_t)get_le64(f + 4);
        memcpy(s.info.parent.b, f + 12, STORE_HASH_LEN);
        memcpy(s.info.memory.b, f + 12 + STORE_HASH_LEN, STORE_HASH_LEN);
        /* The encoding is canonical: a hash without its flag is written as zeros, so any
         * other bytes there mean the record was not written by us. */
        static const uint8_t zero[STORE_HASH_LEN];
        if ((!s.info.has_parent && memcmp(s.info.parent.b, zero, STORE_HASH_LEN) != 0) ||
            (!s.info.has_memory && memcmp(s.info.memory.b, zero, STORE_HASH_LEN) != 0))
                return store_fail(-EBADMSG, "snapshot record: a hash is set but its flag is not");
        D_GET(&d, 2, slp);
        uint16_t sl = get_le16(slp);
        if (sl > STORE_MAX_SESSION)
                return store_fail(-EBADMSG, "snapshot record: session id of %u bytes (limit %u)", sl, STORE_MAX_SESSION);
        D_GET(&d, sl, ses);
        D_GET(&d, 2, llp);
        uint16_t ll = get_le16(llp);
        if (ll > STORE_MAX_LABEL)
                return store_fail(-EBADMSG, "snapshot record: label of %u bytes (limit %u)", ll, STORE_MAX_LABEL);
        D_GET(&d, ll, lab);
        if (memchr(ses, 0, sl) || memchr(lab, 0, ll))
                return store_fail(-EBADMSG, "snapshot record: NUL in session or label");
        memcpy(s.info.session, ses, sl);
        memcpy(s.info.label, lab, ll);
        D_GET(&d, 16, cnt);
        s.info.files = get_le64(cnt);
        s.info.bytes_logical = get_le64(cnt + 8);
        struct arena_need need = { 0 };
        struct dec d1 = d;
        r = entry_get(&d1, true, NULL, &need, NULL);
        if (r < 0)
                return r;
        if (d1.left)
                return store_fail(-EBADMSG, "snapshot record: %zu trailing bytes", d1.left);
        struct arena a;
        struct t_entry *dummy;
        /* room for one entry we don't use, so the arena layout code stays shared */
        s.mem = arena_alloc(&need, 1, &dummy, &a);
        if (!s.mem)
                return -ENOMEM;
        r = entry_get(&d, true, &s.root, NULL, &a);
        if (r < 0) {
                free(s.mem);
                return r;
        }
        s.info.root = s.root.tree;
        *ret = s;
        return 0;
}

void snap_record_free(struct snap_record *r) {
        free(r->mem);
        r->mem = NULL;
}

/* ---- memory images ---- */

int mem_encode(const struct mem_image *m, struct buf *b) {
        if (m->size > STORE_MAX_FILE_SIZE || m->chunk_size == 0 || m->chunk_size > STORE_CHUNK_MAX)
                return -EINVAL;
        struct enc e = { .b = b };
        header_put(&e, MEM_MAGIC);
        e_u64(&e, m->size);
        e_u32(&e, m->chunk_size);
        e_u32(&e, m->n);
        for (uint32_t i = 0; i < m->n; i++) {
                e_u64(&e, m->chunks[i].off);
                e_u32(&e, m->chunks[i].len);
                e_put(&e, m->chunks[i].hash.b, STORE_HASH_LEN);
        }
        if (!e.err && b->len > STORE_MAX_OBJECT)
                e.err = -E2BIG;
        return e.err;
}

int mem_decode(const void *data, size_t len, struct mem_image *ret) {
        struct dec d = { data, len };
        int r = header_get(&d, MEM_MAGIC, "memory image");
        if (r < 0)
                return r;
        D_GET(&d, 16, h);
        struct mem_image m = { .size = get_le64(h), .chunk_size = get_le32(h + 8), .n = get_le32(h + 12) };
        if (m.size > STORE_MAX_FILE_SIZE || m.chunk_size == 0 || m.chunk_size > STORE_CHUNK_MAX)
                return store_fail(-EBADMSG, "memory image: invalid size or chunk size");
        if ((size_t)m.n * 44 != d.left)
                return store_fail(-EBADMSG, "memory image: %u chunks do not match its %zu bytes", m.n, d.left);
        m.chunks = calloc(m.n ? m.n : 1, sizeof *m.chunks);
        if (!m.chunks)
                return -ENOMEM;
        uint64_t end = 0;
        for (uint32_t i = 0; i < m.n; i++) {
                const uint8_t *c = d_take(&d, 44);
                uint64_t off = get_le64(c);
                uint32_t cl = get_le32(c + 8);
                if (cl == 0 || cl > m.chunk_size || off % m.chunk_size || off < end || off > m.size ||
                    cl > m.size - off) {
                        free(m.chunks);
                        return store_fail(-EBADMSG, "memory image: chunk %u outside the image or out of order", i);
                }
                end = off + cl;
                m.chunks[i] = (struct t_chunk){ .off = off, .len = cl };
                memcpy(m.chunks[i].hash.b, c + 12, STORE_HASH_LEN);
        }
        *ret = m;
        return 0;
}
