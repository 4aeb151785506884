/* Internals shared by the store's source files (and its unit tests): object files,
 * encodings, the write transaction, locks, the thread pool and the hash set. */
#pragma once
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/buf.h"
#include "common/macros.h"
#include "store/store.h"

/* ---- errors: a thread-local detail message beside the negative errno ---- */
int store_fail(int r, const char *fmt, ...) _printf_(2, 3);
/* Copies another thread's message in (for results handed over from workers). */
void store_set_detail(const char *msg);

/* n random bytes from getrandom() (short reads and EINTR retried); -errno when there are none. */
int store_random(void *buf, size_t n);

/* ---- hashing ---- */
void store_sha256(const void *data, size_t len, struct store_hash *ret);
/* Path of an object relative to objects/: "ab/abcd…" */
void store_obj_relpath(const struct store_hash *h, char out[STORE_HEX_LEN + 4]);

/* ---- hash set (keys are hashes, so their first bytes are already uniform) ---- */
struct hset {
        struct store_hash *keys;
        uint8_t *vals;   /* one byte of payload per key; 0 = empty slot */
        size_t cap, n;
};
/* Inserts with value v (1..255); returns 1 if added, 0 if present (value left), <0 error. */
int hset_add(struct hset *s, const struct store_hash *h, uint8_t v);
/* Value, or 0 if absent. */
uint8_t hset_get(const struct hset *s, const struct store_hash *h);
void hset_free(struct hset *s);

/* ---- objects ---- */
enum obj_kind { OBJ_CHUNK = 0, OBJ_TREE = 1, OBJ_SNAPSHOT = 2, OBJ_MEMORY = 3, _OBJ_KIND_MAX };
const char *obj_kind_name(enum obj_kind k);

/* Reads object h (from whichever pack holds it), checks its hash; kind < 0 accepts any
 * kind (the kind stored beside an object is a hint: identical bytes are one object
 * whatever wrote them first). *ret is a malloc'd buffer of the plain bytes (NUL-terminated
 * past *ret_len for convenience). -ENOENT if no pack holds it, -EBADMSG if it is damaged. */
int obj_read(struct store *s, const struct store_hash *h, int kind, void **ret, size_t *ret_len,
             uint64_t *bytes_read);
/* The same, for an operation that reads many objects in order (materialize, a capture's
 * parent trees): op (from store_op_id()) lets each thread keep the block it decoded last,
 * so neighbours in one compressed block cost one decompression. */
int obj_read_op(struct store *s, const struct store_hash *h, int kind, uint64_t op, void **ret, size_t *ret_len,
                uint64_t *bytes_read);
uint64_t store_op_id(void);
/* Drops what the block cache holds for op. */
void store_op_end(struct store *s, uint64_t op);
/* 1 if a committed pack holds h, 0 if not, <0 error. refresh: look at packs/ again first
 * (packs other handles committed, packs a GC replaced). */
int obj_exists(struct store *s, const struct store_hash *h, bool refresh);
/* The plain length of h, from the index of the pack that holds it (nothing read); -ENOENT. */
int obj_size(struct store *s, const struct store_hash *h, uint32_t *ret_len);
/* Where h is stored (for tests and tools): the pack's file name, the block's offset and
 * its length on disk (header, table and payload). */
int obj_locate(struct store *s, const struct store_hash *h, char name[64], uint64_t *ret_block, uint64_t *ret_len);

/* ---- zstd (zstd.c): one context per thread ---- */
/* The most n plain bytes can take compressed: a buffer this large always fits. */
size_t z_bound(size_t n);
/* *ret_n = compressed size, or 0 if it did not fit in cap. */
int z_compress(const void *src, size_t n, void *dst, size_t cap, int level, size_t *ret_n);
int z_decompress(const void *src, size_t n, void *dst, size_t plain_len);
/* false for len bytes that look already compressed (their first 4 KiB barely shrink). */
bool z_worth_compressing(int level, const void *p, size_t len);

/* ---- packs: the files objects live in (pack.c; format in docs/store.md) ----
 *
 * file    = header (16: "SPPK", version, 3 zero, pack id u64) · blocks · index · trailer
 * block   = "SPBK", codec u8, 0, nobj u16, plain_len u32, stored_len u32,
 *           nobj × (len u32, kind u8), payload (the objects' plain bytes back to back,
 *           one zstd frame or raw)
 * index   = n × 48 sorted by hash: hash[32], block offset u64 (bits 56..63 the kind),
 *           offset in the block's plain bytes u32, length u32
 * trailer = "SPPT", version, 3 zero, index offset u64, n u32, 0 u32, SHA-256 of the
 *           index [32], "SPPKEND\n"
 * A pack is written under a temp name, fsynced and renamed: a committed pack is whole.
 * One with a bad trailer or index (a lying disk, a truncation) is "damaged": its index is
 * rebuilt from its blocks (each object re-hashed) up to the first bad block. */
struct packset;
#define PACK_MAGIC "SPPK"
#define PACK_TRAILER_MAGIC "SPPT"
#define PACK_END_MAGIC "SPPKEND\n"
#define BLOCK_MAGIC "SPBK"
#define PACK_VERSION 1
#define PACK_HEADER 16
#define PACK_TRAILER 64
#define PACK_IDX_ENTRY 48
#define BLOCK_HEADER 16
#define BLOCK_OBJ 5
#define PACK_MAX_OBJECTS (1u << 24)
#define PACK_MAX_SIZE (1ull << 40)
#define BLOCK_MAX_OBJECTS 4096u
#define BLOCK_TARGET (256u << 10)  /* plain bytes compressed together (zstd -1 does best near here) */
#define BLOCK_SMALL (32u << 10)    /* objects below this share blocks with their neighbours */
#define PACK_TARGET (64u << 20)    /* a writer starts a new pack past this size */
#define PACK_TEMP_PREFIX ".t-"     /* packs/.t-TXNID-N.pack */
enum { BLOCK_RAW = 0, BLOCK_ZSTD = 1, BLOCK_DELTA = 2 };
/* A delta block holds one chunk as the XOR of it and a base chunk of the same length:
 * payload = base hash [32] · the chunk's hash [32] · one zstd frame of (chunk XOR base).
 * The chunk keeps the name of its plain bytes; only how it is stored differs. A base is
 * always stored plain (chain depth STORE_DELTA_DEPTH = 1), so a read costs at most one
 * more object. Packs holding delta blocks carry version PACK_VERSION_DELTA (older readers
 * refuse them whole rather than calling them damaged), and their index entries flag
 * deltas (IDX_DELTA) so GC finds the bases of live deltas without reading every block. */
#define PACK_VERSION_DELTA 2
#define DELTA_HEAD 64
#define IDX_DELTA (UINT64_C(1) << 48)
#define STORE_DELTA_DEPTH 1
/* A delta is stored only when it is at most this fraction of the chunk compressed alone:
 * a delta costs a second object read on restore, so it must clearly pay. */
#define DELTA_MAX_SHARE 2 /* delta ≤ plain / 2 */

struct pack_ent {
        struct store_hash hash;
        uint64_t block;  /* offset of the block in the pack */
        uint32_t off;    /* offset in the block's plain bytes */
        uint32_t len;
        uint8_t kind;
        bool delta;      /* a delta block (IDX_DELTA) */
};

struct pack {
        char name[32];      /* "0123456789abcdef.pack" */
        uint64_t id;        /* the name's number: random, never reused */
        uint64_t size;      /* file size when loaded */
        uint64_t ino;
        uint64_t data_end;  /* blocks lie in [PACK_HEADER, data_end) */
        size_t n;
        struct pack_ent *e; /* sorted by hash, no duplicates */
        uint32_t fan[257];  /* e[fan[b]..fan[b+1]) start with byte b */
        char *damage;       /* why the index was rebuilt from the blocks, or NULL */
        pthread_mutex_t mu;
        int fd;             /* opened on first read; -1 when closed */
        atomic_int refs;
};
void pack_put(struct pack *p);
/* A reference to every loaded pack (after refresh when asked). Free with packs_release. */
int packs_snapshot(struct store *s, bool refresh, struct pack ***ret, size_t *ret_n);
void packs_release(struct pack **v, size_t n);
/* Reloads the list from packs/: new packs, packs gone; recheck also reloads packs whose
 * file changed (verify). Foreign files are reported through foreign (may be NULL). */
int packs_refresh(struct store *s, bool recheck, void (*foreign)(void *ud, const char *name, const char *why),
                  void *ud);
/* Reads the block at e->block of p, checks it against the index entries in ents (those of
 * one block), calls fn for each with its plain bytes (hash checked) or an error. For
 * verify and GC: no cache. */
typedef int (*pack_obj_fn)(void *ud, const struct pack_ent *e, const void *data, int err);
int pack_read_block(struct store *s, struct pack *p, const struct pack_ent *const *ents, size_t n, pack_obj_fn fn,
                    void *ud, uint64_t *bytes_read);
/* Index entries of p grouped by block, in file order: calls fn once per block. */
int pack_for_each_block(struct pack *p, int (*fn)(void *ud, struct pack *p, const struct pack_ent *const *ents, size_t n),
                        void *ud);
/* The base of a delta object: 1 and *ret set when e (of p) is stored as a delta, 0 when
 * it is stored plain, <0 when its block cannot be read. */
int pack_delta_base(struct store *s, struct pack *p, const struct pack_ent *e, struct store_hash *ret);
/* The same by hash, through whichever pack holds h; -ENOENT when none does. */
int obj_delta_base(struct store *s, const struct store_hash *h, struct store_hash *ret);
/* Copies a block as it is on disk (header through payload) into *ret. */
int pack_raw_block(struct store *s, struct pack *p, uint64_t block, void **ret, size_t *ret_len);
int packs_init(struct packset *ps);
void packs_fini(struct packset *ps);
/* A cheap stat of packs/; a full refresh only if it changed. */
void packs_refresh_if_changed(struct store *s);

/* Writing packs: objects go into blocks, blocks into one or more temp packs. */
struct pack_writer;
int pw_new(struct store *s, const char *tag, struct pack_writer **ret);
struct pack_writer *pw_free(struct pack_writer *w);  /* removes what was not committed */
/* Appends one block of objects (they must be new to this writer); thread-safe. */
struct blk_obj {
        const void *data;
        uint32_t len;
        uint8_t kind;
        struct store_hash hash;
};
int pw_add_block(struct pack_writer *w, const struct blk_obj *v, size_t n, bool compress);
/* Appends a delta block: chunk h (plain_len bytes) = base XOR the zstd frame's content. */
int pw_add_delta(struct pack_writer *w, const struct store_hash *h, const struct store_hash *base, const void *frame,
                 size_t frame_len, uint32_t plain_len);
/* Appends a block copied from another pack (GC). */
int pw_add_raw_block(struct pack_writer *w, const void *blk, size_t len, const struct pack_ent *const *ents, size_t n);
/* Adds a small object to the shared open block (flushed when full or at seal). */
int pw_add_small(struct pack_writer *w, const void *data, uint32_t len, uint8_t kind, const struct store_hash *h);
/* Writes indexes and trailers and makes the packs durable (no lock needed). */
int pw_seal(struct pack_writer *w);
/* Renames the sealed packs into place, fsyncs packs/ and adds them to the handle's list.
 * Call under the store lock. */
int pw_publish(struct pack_writer *w);
uint64_t pw_bytes(const struct pack_writer *w);
size_t pw_packs(const struct pack_writer *w);

/* ---- decoded objects ---- */
enum tree_type {
        T_REG = 1, T_DIR = 2, T_LNK = 3, T_CHR = 4, T_BLK = 5, T_FIFO = 6, T_SOCK = 7,
};
struct t_xattr {
        const char *name;     /* NUL-terminated */
        const uint8_t *value; /* may be NULL when vlen == 0 */
        uint32_t vlen;
};
struct t_chunk {
        uint64_t off;
        uint32_t len;
        struct store_hash hash;
};
struct t_entry {
        const char *name;     /* NUL-terminated; "" for a snapshot's root entry */
        uint8_t type;
        uint32_t mode, uid, gid;
        int64_t mtime_sec;
        uint32_t mtime_nsec;
        uint64_t link;        /* hard-link group, 0 = none (T_REG only) */
        uint32_t nxattr;
        struct t_xattr *xattrs;
        uint64_t size;        /* T_REG */
        uint32_t nchunks;     /* T_REG */
        struct t_chunk *chunks;
        struct store_hash tree;  /* T_DIR */
        const char *target;   /* T_LNK */
        uint32_t major, minor; /* T_CHR, T_BLK */
};
struct tree {
        size_t n;
        struct t_entry *e;
        void *mem;   /* one arena for everything above */
};
void tree_free(struct tree *t);

#define TREE_MAGIC "SPTR"
#define SNAP_MAGIC "SPSN"
#define MEM_MAGIC "SPMI"
#define ENC_VERSION 1

/* Encoding appends to b; entries must be sorted and valid or -EINVAL. */
int tree_encode(const struct t_entry *e, size_t n, struct buf *b);
/* Strict decoding: every length bounded, names valid and strictly ascending. */
int tree_decode(const void *data, size_t len, struct tree *ret);
bool tree_name_valid(const char *name, size_t len);

struct snap_record {
        struct store_snapshot_info info;  /* hash is not part of the encoding */
        struct t_entry root;              /* name "", T_DIR */
        void *mem;
};
int snap_encode(const struct snap_record *r, struct buf *b);
int snap_decode(const void *data, size_t len, struct snap_record *ret);
void snap_record_free(struct snap_record *r);

struct mem_image {
        uint64_t size;
        uint32_t chunk_size;
        uint32_t n;
        struct t_chunk *chunks;
};
int mem_encode(const struct mem_image *m, struct buf *b);
int mem_decode(const void *data, size_t len, struct mem_image *ret);

/* Loads and decodes (hash-checked). */
int tree_load(struct store *s, const struct store_hash *h, struct tree *ret, uint64_t *bytes_read);
int tree_load_op(struct store *s, const struct store_hash *h, uint64_t op, struct tree *ret, uint64_t *bytes_read);
int snap_load(struct store *s, const struct store_hash *h, struct snap_record *ret);
/* Two entries alike in everything but a directory's subtree hash (diff.c). */
bool tree_entry_same(const struct t_entry *a, const struct t_entry *b);

/* ---- overlayfs layers (overlay.c) ---- */
#define OVL_OPAQUE_XATTR "trusted.overlay.opaque"
/* A whiteout: a character device 0/0. */
bool ovl_whiteout(const struct t_entry *e);
/* A directory whose trusted.overlay.opaque is "y": it hides what lies below it. */
bool ovl_opaque(const struct t_entry *e);
/* e's xattrs with trusted.overlay.opaque set to "y", sorted; *ret is the caller's to free
 * (names and values point into e and a static). Returns how many. */
int ovl_with_opaque(const struct t_entry *e, struct t_xattr **ret);
/* Adds the regular files of e (and below it, for a directory) and their sizes. */
int ovl_count(struct store *s, const struct t_entry *e, uint64_t op, unsigned depth, uint64_t *files,
              uint64_t *bytes);

/* ---- content-defined chunking ---- */
/* Length of the next chunk of data[0..len); eof says no more bytes follow. */
size_t cdc_cut(const uint8_t *data, size_t len, bool eof);
/* Fixed-size chunking: length of the chunk at file offset pos, len bytes available (≥ 1):
 * up to the next multiple of size (a valid store_capture_opts.fixed_chunk). */
size_t fixed_cut(uint64_t pos, size_t len, uint32_t size);
/* 0 for 0 (content-defined) and valid fixed sizes, else -EINVAL. */
int fixed_chunk_check(uint32_t size);

/* ---- thread pool ---- */
struct pool;
struct pool_task {
        void (*fn)(struct pool_task *t);
        struct pool_task *next;
};
int pool_new(unsigned threads, struct pool **ret);
struct pool *pool_free(struct pool *p);
/* hi tasks never block; lo tasks may wait for memory budget (and help while waiting). */
void pool_submit(struct pool *p, struct pool_task *t, bool hi);
/* A lo task ahead of every queued one (work on the critical path). */
void pool_submit_first(struct pool *p, struct pool_task *t);
/* Runs queued tasks in the calling thread until *pending reaches zero or timeout_ms
 * passes (0 = no timeout); true when *pending is zero. */
bool pool_wait(struct pool *p, atomic_size_t *pending, unsigned timeout_ms);
/* Budget for bytes held by queued tasks: blocks (running hi tasks meanwhile) while over. */
void pool_budget_take(struct pool *p, size_t n);
void pool_budget_give(struct pool *p, size_t n);
/* Wakes waiters after a task finished (call after decrementing a pending counter). */
void pool_notify(struct pool *p);
unsigned pool_threads(const struct pool *p);

/* ---- the store handle ---- */
struct store_counters {
        atomic_uint_least64_t bytes_read, bytes_written, objects_written, objects_reused;
};
struct packset {
        pthread_rwlock_t lk;
        struct pack **v;
        size_t n, cap;
        atomic_uint nopen;  /* packs with an open fd */
        void *bcache;       /* decoded blocks of running operations (pack.c) */
        struct timespec seen_mtime;
};
struct store {
        char *dir;
        int dfd;      /* the store directory */
        int packfd;   /* packs/ */
        int tmpfd;    /* tmp/ */
        int snapfd;   /* snapshots/ (refs) */
        int cachefd;  /* cache/ (stat caches) */
        int level;
        struct pool *pool;
        struct packset packs;
        bool skip_hash_check;  /* tests only: reach checks that the hash would catch first */
};

/* Shared/exclusive store lock with a turnstile so an exclusive waiter is not starved.
 * Returns a fd to close to release. */
int store_lock(struct store *s, bool exclusive);
int store_gc_gen(struct store *s, uint64_t *ret);
/* Calls fn for every ref (snapshots/HASH: dfd is snapshots/, name the file's) until fn
 * returns < 0, which is returned. */
int refs_for_each(struct store *s, int (*fn)(void *ud, int dfd, const char *name, const struct store_hash *h),
                  void *ud);

/* ---- write transaction: objects go into temp packs, renamed into place at commit ---- */
struct txn;
/* pins: snapshots whose objects this operation relies on (GC keeps them). */
int txn_begin(struct store *s, const struct store_hash *pins, size_t npins, struct txn **ret);
/* Stores plain as an object unless it exists; known = precomputed hash or NULL. Thread-safe. */
int txn_put(struct txn *t, enum obj_kind kind, const void *plain, size_t len, const struct store_hash *known,
            struct store_hash *ret);
/* Stores the objects of v (a run of neighbours, e.g. consecutive chunks of one file) in
 * one block, those not stored yet; fills in each hash (unless hashed: set already) and
 * kind. Thread-safe. */
int txn_put_run(struct txn *t, enum obj_kind kind, struct blk_obj *v, size_t n, bool hashed);
/* Stores chunk data (hash h) as a delta against prev (the chunk at the same place in the
 * parent snapshot; its base if prev is itself a delta) when that is clearly smaller than
 * the chunk compressed alone. 1: stored (or stored already by another thread of this
 * transaction); 0: not done, store it the ordinary way (already stored, no usable base,
 * not worth it); <0 error. op: the caller's operation, for the block cache. */
int txn_put_delta(struct txn *t, const void *data, size_t len, const struct store_hash *h,
                  const struct store_hash *prev, uint64_t op);
/* Makes every object durable and visible, then writes the record and lists it. */
int txn_commit(struct txn *t, const struct snap_record *rec, struct store_op_stats *st, struct store_hash *ret);
/* The same for a record already encoded (len bytes whose SHA-256 is h: a pulled one). */
int txn_commit_record(struct txn *t, const void *rec, size_t len, const struct store_hash *h,
                      struct store_op_stats *st);
/* Objects only (memory images): durable and visible, no record. */
int txn_commit_objects(struct txn *t, struct store_op_stats *st);
/* Adds what the transaction wrote and reused to st. */
void txn_stats(struct txn *t, struct store_op_stats *st);
/* Freeing without commit drops everything written (and the pins). */
struct txn *txn_free(struct txn *t);
static inline void txn_freep(struct txn **t) { *t = txn_free(*t); }
/* Records h as reused although this transaction did not look it up itself (an attached
 * memory image): commit fails with -EAGAIN if a GC sweep removed it meanwhile. */
int txn_hit(struct txn *t, const struct store_hash *h);

/* ---- stat cache ---- */
struct scache;
struct scache_rec {
        uint64_t ino;
        int64_t ctime_sec, mtime_sec;
        uint32_t ctime_nsec, mtime_nsec;
        uint64_t size;
};
/* NULL cache (returns 0 with *ret NULL) when there is none for this snapshot and root, or
 * when it was written for another chunking (fixed_chunk, 0 = content-defined): a file
 * unchanged since then would keep the other chunking's boundaries. */
int scache_load(struct store *s, const struct store_hash *snap, uint64_t dev, uint64_t ino, uint32_t fixed_chunk,
                struct scache **ret);
const struct scache_rec *scache_find(const struct scache *c, const char *path);
struct scache *scache_free(struct scache *c);
/* Builder */
struct scache_builder {
        struct buf b;
        uint64_t n;
        uint32_t fixed_chunk;  /* the chunking of the snapshot's files (0: content-defined) */
};
int scache_add(struct scache_builder *w, const char *path, const struct scache_rec *r);
int scache_save(struct store *s, const struct store_hash *snap, uint64_t dev, uint64_t ino, struct scache_builder *w);
/* Whether a stat taken at now_ns may miss a later change with the same timestamps. */
bool scache_racy(int64_t ctime_sec, uint32_t ctime_nsec, int64_t now_ns);

/* ---- misc ---- */
int64_t store_now_ns(void);
int store_rm_rf_at(int dfd, const char *name);
/* Walks everything reachable from an object (a snapshot record, memory image or tree),
 * visiting each object once (seen). on_obj sees every newly reached object; on_err each
 * one that is missing or does not decode (detail in store_error_detail()); either
 * returning < 0 stops the walk with that value. Chunks are not read. */
struct reach {
        struct store *s;
        struct hset *seen;
        int (*on_obj)(void *ud, const struct store_hash *h, enum obj_kind kind, const char *path);
        int (*on_err)(void *ud, const struct store_hash *h, enum obj_kind kind, const char *path, int err);
        void *ud;
        uint64_t op;  /* store_op_id() for the block cache, or 0 */
        unsigned depth;
        struct store_hash stack[STORE_MAX_DEPTH + 2];
};
int reach_object(struct reach *r, const struct store_hash *h, const char *path);
/* Adds to seen the bases of the deltas in it (a delta cannot be read without its base):
 * after marking, so GC keeps them and verify does not call them unreachable. */
int reach_delta_bases(struct store *s, struct hset *seen);

static inline void put_le16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static inline void put_le32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static inline void put_le64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static inline uint16_t get_le16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t get_le32(const uint8_t *p) {
        return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t get_le64(const uint8_t *p) { return (uint64_t)get_le32(p) | (uint64_t)get_le32(p + 4) << 32; }
