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

/* ---- object files ---- */
enum obj_kind { OBJ_CHUNK = 0, OBJ_TREE = 1, OBJ_SNAPSHOT = 2, OBJ_MEMORY = 3, _OBJ_KIND_MAX };
const char *obj_kind_name(enum obj_kind k);

#define OBJ_MAGIC "SPOB"
#define OBJ_VERSION 1
#define OBJ_HEADER 16
enum { OBJ_CODEC_RAW = 0, OBJ_CODEC_ZSTD = 1 };

struct obj_header {
        uint8_t kind, codec;
        uint32_t plain_len, stored_len;
};
int obj_header_parse(const uint8_t *p, size_t file_len, struct obj_header *ret);

/* Reads object h, checks header, size and hash; kind < 0 accepts any kind. *ret is a
 * malloc'd buffer of the plain bytes (NUL-terminated past *ret_len for convenience). */
int obj_read(struct store *s, const struct store_hash *h, int kind, void **ret, size_t *ret_len,
             uint64_t *bytes_read);
/* Builds the object file image (header + maybe-compressed payload) of plain. */
int obj_encode(struct store *s, enum obj_kind kind, const void *plain, size_t len, void **ret, size_t *ret_len);
/* 1 if present (a file of plausible size), 0 if absent, <0 error. */
int obj_exists(struct store *s, const struct store_hash *h);

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
int snap_load(struct store *s, const struct store_hash *h, struct snap_record *ret);

/* ---- content-defined chunking ---- */
/* Length of the next chunk of data[0..len); eof says no more bytes follow. */
size_t cdc_cut(const uint8_t *data, size_t len, bool eof);

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
struct store {
        char *dir;
        int dfd;      /* the store directory */
        int objfd;    /* objects/ */
        int tmpfd;    /* tmp/ */
        int snapfd;   /* snapshots/ (refs) */
        int cachefd;  /* cache/ (stat caches) */
        int level;
        struct pool *pool;
        bool skip_hash_check;  /* tests only: reach checks that the hash would catch first */
};

/* Shared/exclusive store lock with a turnstile so an exclusive waiter is not starved.
 * Returns a fd to close to release. */
int store_lock(struct store *s, bool exclusive);
int store_gc_gen(struct store *s, uint64_t *ret);

/* ---- write transaction: objects are written under temp names and renamed at commit ---- */
#define TXN_TEMP_PREFIX ".t-" /* objects/ab/.t-TXNID-HASH */
struct txn;
/* pins: snapshots whose objects this operation relies on (GC keeps them). */
int txn_begin(struct store *s, const struct store_hash *pins, size_t npins, struct txn **ret);
/* Stores plain as an object unless it exists; known = precomputed hash or NULL. Thread-safe. */
int txn_put(struct txn *t, enum obj_kind kind, const void *plain, size_t len, const struct store_hash *known,
            struct store_hash *ret);
/* Makes every object durable and visible, then writes the record and lists it. */
int txn_commit(struct txn *t, const struct snap_record *rec, struct store_op_stats *st, struct store_hash *ret);
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
/* NULL cache (returns 0 with *ret NULL) when there is none for this snapshot and root. */
int scache_load(struct store *s, const struct store_hash *snap, uint64_t dev, uint64_t ino, struct scache **ret);
const struct scache_rec *scache_find(const struct scache *c, const char *path);
struct scache *scache_free(struct scache *c);
/* Builder */
struct scache_builder {
        struct buf b;
        uint64_t n;
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
        unsigned depth;
        struct store_hash stack[STORE_MAX_DEPTH + 2];
};
int reach_object(struct reach *r, const struct store_hash *h, const char *path);

static inline void put_le16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static inline void put_le32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static inline void put_le64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static inline uint16_t get_le16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t get_le32(const uint8_t *p) {
        return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t get_le64(const uint8_t *p) { return (uint64_t)get_le32(p) | (uint64_t)get_le32(p + 4) << 32; }
