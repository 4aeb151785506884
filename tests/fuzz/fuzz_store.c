/* Fuzz target: the snapshot store's decoders (src/store), what a corrupted or hostile
 * store directory reaches: tree, snapshot-record and memory-image decoding (codec.c) and
 * pack files (pack.c: trailer, index, block headers and tables, zstd payloads, delta
 * blocks and their bases in the same pack (seeds: a delta, and a delta on a delta, which
 * the depth limit refuses), the index rebuilt from the blocks of a damaged pack, object
 * reads, whole-block reads).
 * The first byte picks the mode: 0 tree, 1 snapshot record, 2 memory image (the rest is
 * the object), 3 a pack file as is, 4 a pack whose trailer and index checksum the harness
 * computes (byte 1 = index entries, taken from the end of the input), so inputs get past
 * the SHA-256 to the index and block code.
 * Properties: no crash or leak; a decoded object encodes back to exactly its bytes (the
 * encodings are canonical, so a lenient decoder shows up as a difference); every object
 * a pack yields has the length its index claims and decodes safely as its kind. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "common/buf.h"
#include "fuzz.h"
#include "store/store-internal.h"

#define FUZZ_STORE_PACK "0000000000000001.pack"

static struct store *fuzz_store;
static char fuzz_dir[64];

static void remove_store(void) {
        fuzz_store = store_free(fuzz_store);
        if (fuzz_dir[0]) {
                char cmd[128];
                snprintf(cmd, sizeof cmd, "rm -rf '%s'", fuzz_dir);
                (void)!system(cmd);
        }
}

/* One store per process, in memory (tmpfs), removed at exit. */
static struct store *get_store(void) {
        if (fuzz_store)
                return fuzz_store;
        const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        snprintf(fuzz_dir, sizeof fuzz_dir, "%s/space-fuzz-store-XXXXXX", base);
        FUZZ_CHECK(mkdtemp(fuzz_dir) != NULL);
        char dir[96];
        snprintf(dir, sizeof dir, "%s/s", fuzz_dir);
        struct store_opts o = { STORE_OPTS_INIT, .create = true, .threads = 1 };
        FUZZ_CHECK(store_open(dir, &o, &fuzz_store) == 0);
        /* the objects' bytes must reach the decoders even when they don't match their hash */
        fuzz_store->skip_hash_check = true;
        atexit(remove_store);
        return fuzz_store;
}

/* Decodes data as kind; when it decodes, its encoding must be exactly data. */
static void decode_roundtrip(int kind, const uint8_t *data, size_t len) {
        struct buf b = BUF_INIT(STORE_MAX_OBJECT + 1);
        if (kind == OBJ_TREE) {
                struct tree t;
                if (tree_decode(data, len, &t) == 0) {
                        FUZZ_CHECK(t.n <= STORE_MAX_DIR_ENTRIES);
                        for (size_t i = 0; i < t.n; i++) {
                                FUZZ_CHECK(tree_name_valid(t.e[i].name, strlen(t.e[i].name)));
                                if (t.e[i].type == T_LNK)
                                        FUZZ_CHECK(strlen(t.e[i].target) <= STORE_MAX_TARGET);
                        }
                        FUZZ_CHECK(tree_encode(t.e, t.n, &b) == 0);
                        FUZZ_CHECK(b.len == len && memcmp(b.data, data, len) == 0);
                        tree_free(&t);
                }
        } else if (kind == OBJ_SNAPSHOT) {
                struct snap_record r;
                if (snap_decode(data, len, &r) == 0) {
                        FUZZ_CHECK(strlen(r.info.session) <= STORE_MAX_SESSION);
                        FUZZ_CHECK(strlen(r.info.label) <= STORE_MAX_LABEL);
                        FUZZ_CHECK(r.root.type == T_DIR && r.root.name[0] == '\0');
                        FUZZ_CHECK(snap_encode(&r, &b) == 0);
                        FUZZ_CHECK(b.len == len);
                        FUZZ_CHECK(memcmp(b.data, data, len) == 0);
                        snap_record_free(&r);
                }
        } else if (kind == OBJ_MEMORY) {
                struct mem_image m;
                if (mem_decode(data, len, &m) == 0) {
                        uint64_t end = 0;
                        for (uint32_t i = 0; i < m.n; i++) {
                                FUZZ_CHECK(m.chunks[i].off >= end && m.chunks[i].len > 0);
                                end = m.chunks[i].off + m.chunks[i].len;
                                FUZZ_CHECK(end <= m.size);
                        }
                        FUZZ_CHECK(mem_encode(&m, &b) == 0);
                        FUZZ_CHECK(b.len == len && memcmp(b.data, data, len) == 0);
                        free(m.chunks);
                }
        }
        buf_free(&b);
}

static void write_pack(struct store *s, const void *a, size_t an, const void *b, size_t bn) {
        int fd = openat(s->packfd, FUZZ_STORE_PACK, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        FUZZ_CHECK(fd >= 0);
        FUZZ_CHECK(write(fd, a, an) == (ssize_t)an);
        if (bn)
                FUZZ_CHECK(write(fd, b, bn) == (ssize_t)bn);
        close(fd);
}

struct block_visit {
        size_t objects;
};

static int on_block_obj(void *ud, const struct pack_ent *e, const void *data, int err) {
        struct block_visit *v = ud;
        v->objects++;
        FUZZ_CHECK((data != NULL) == (err == 0));
        if (data)
                decode_roundtrip(e->kind, data, e->len);
        return 0;
}

static int on_block(void *ud, struct pack *p, const struct pack_ent *const *ents, size_t n) {
        FUZZ_CHECK(n > 0);
        for (size_t i = 1; i < n; i++)
                FUZZ_CHECK(ents[i]->block == ents[0]->block);
        (void)pack_read_block(fuzz_store, p, ents, n, on_block_obj, ud, NULL);
        void *raw = NULL;
        size_t rawlen = 0;
        if (pack_raw_block(fuzz_store, p, ents[0]->block, &raw, &rawlen) == 0) {
                FUZZ_CHECK(rawlen >= BLOCK_HEADER && ents[0]->block + rawlen <= p->data_end);
                free(raw);
        }
        return 0;
}

/* Loads the pack now in packs/ and reads everything its index (given or rebuilt) lists:
 * object by object as a restore does, and block by block as verify and GC do. */
static void read_pack(struct store *s) {
        if (packs_refresh(s, true, NULL, NULL) < 0)
                return;
        struct pack **v;
        size_t n;
        FUZZ_CHECK(packs_snapshot(s, false, &v, &n) == 0);
        FUZZ_CHECK(n <= 1);
        uint64_t op = store_op_id();
        for (size_t i = 0; i < n; i++) {
                struct pack *p = v[i];
                FUZZ_CHECK(p->data_end >= PACK_HEADER && p->data_end <= p->size);
                for (size_t j = 0; j < p->n; j++) {
                        const struct pack_ent *e = &p->e[j];
                        if (j)
                                FUZZ_CHECK(memcmp(p->e[j - 1].hash.b, e->hash.b, STORE_HASH_LEN) < 0);
                        FUZZ_CHECK(e->kind < _OBJ_KIND_MAX && e->len <= STORE_MAX_OBJECT);
                        void *data = NULL;
                        size_t len = 0;
                        /* alternately through the per-operation block cache and without */
                        if (obj_read_op(s, &e->hash, -1, (j & 1) ? op : 0, &data, &len, NULL) == 0) {
                                FUZZ_CHECK(len == e->len);
                                FUZZ_CHECK(((const uint8_t *)data)[len] == 0);
                                decode_roundtrip(e->kind, data, len);
                                free(data);
                        }
                }
                struct block_visit bv = { 0 };
                (void)pack_for_each_block(p, on_block, &bv);
                FUZZ_CHECK(bv.objects <= p->n);
        }
        packs_release(v, n);
}

/* A pack file around the input: header, the input's blocks, its index entries and a
 * trailer with the right offsets and checksum. */
static void build_pack(struct store *s, const uint8_t *data, size_t size) {
        if (size < 1)
                return;
        size_t nidx = data[0];
        data++, size--;
        if (nidx * PACK_IDX_ENTRY > size)
                nidx = size / PACK_IDX_ENTRY;
        size_t blen = size - nidx * PACK_IDX_ENTRY;
        struct buf b = BUF_INIT(0);
        uint8_t hdr[PACK_HEADER] = { 'S', 'P', 'P', 'K', PACK_VERSION, 0, 0, 0, 1 };
        FUZZ_CHECK(buf_append(&b, hdr, sizeof hdr) == 0);
        FUZZ_CHECK(buf_append(&b, data, blen) == 0);
        uint64_t idx_off = b.len;
        FUZZ_CHECK(buf_append(&b, data + blen, nidx * PACK_IDX_ENTRY) == 0);
        uint8_t t[PACK_TRAILER] = { 0 };
        memcpy(t, PACK_TRAILER_MAGIC, 4);
        t[4] = PACK_VERSION;
        put_le64(t + 8, idx_off);
        put_le32(t + 16, (uint32_t)nidx);
        struct store_hash sum;
        store_sha256(data + blen, nidx * PACK_IDX_ENTRY, &sum);
        memcpy(t + 24, sum.b, STORE_HASH_LEN);
        memcpy(t + 56, PACK_END_MAGIC, 8);
        write_pack(s, b.data, b.len, t, sizeof t);
        buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (size < 1)
                return 0;
        unsigned mode = data[0] % 5;
        data++, size--;
        /* an exact-size copy, so a read past the end trips ASan */
        uint8_t *copy = malloc(size ? size : 1);
        FUZZ_CHECK(copy != NULL);
        memcpy(copy, data, size);
        switch (mode) {
        case 0:
                decode_roundtrip(OBJ_TREE, copy, size);
                break;
        case 1:
                decode_roundtrip(OBJ_SNAPSHOT, copy, size);
                break;
        case 2:
                decode_roundtrip(OBJ_MEMORY, copy, size);
                break;
        default: {
                struct store *s = get_store();
                (void)unlinkat(s->packfd, FUZZ_STORE_PACK, 0);
                (void)packs_refresh(s, true, NULL, NULL); /* forget the previous input's pack */
                if (mode == 3)
                        write_pack(s, copy, size, NULL, 0);
                else
                        build_pack(s, copy, size);
                read_pack(s);
                break;
        }
        }
        free(copy);
        return 0;
}
